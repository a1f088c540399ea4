"""AP-DRL's precision modes of PPO's networks (seed 003 §IV-D): ``fp32`` and ``mixed``.

Precision (``precision`` hyperparameter): ``fp64`` (default; HEPPO designs) = the float64 numpy
path above, unchanged. ``fp32`` / ``mixed`` = AP-DRL (seed 003 §IV-D, as host/algorithms/a2c.py and
host/algorithms/dqn.py): one ``MixedPrecision`` per network (``policy``, ``value``); ``fp32`` runs every node
on the PS in FP32, ``mixed`` each node (``policy.<layer>.fwd/bwd/upd``, ``value.<layer>...``,
``loss``, ``gae``) in its unit's format under ``assignment`` (the plan; None = profile + ILP
in-process at the minibatch size). Acting (policy, V, V of truncated final observations, the
bootstrap V) runs on the PS in FP32 (Fig. 10); its log-probs and values reach the loss node
converted PS -> loss unit. The float GAE's outputs are rounded to the ``gae`` node's storage
format (the ``returns`` node for an A2C design's plan; PS if neither), HEPPO's uq<n> GAE keeps its
own. One dynamic loss scale serves both networks (one loss, as PyTorch's GradScaler;
``MixedPrecision.link``): the loss gradients of the policy output, V and log-std are scaled; a
non-finite gradient anywhere skips the whole minibatch step (weights and Adam untouched, scale
halved). Gradients are unscaled in FP32, clipped to the global norm (``apply(...,
max_grad_norm=)``), then Adam steps and weights are rounded to their master formats (BF16 for
AIE layers, else FP32). Extra metrics columns (fp32 / mixed): loss_scale, quantized,
skipped_steps, scale_shrinks, scale_grows, grad_overflows, conv_overflows; grad_norm is the mean
over the applied steps. The checkpoint adds the scaler state and the assignment (a checkpoint of
another precision or plan is refused). ``rlhls train`` runs a PPO design in fp32 / mixed when its
precision (the design's, ``--precision`` or ``--set precision=``) is not fp64, with the plan from
``--plan`` or the ILP at the minibatch size, recorded in config.json (host/train.py).
"""

from __future__ import annotations

import numpy as np

from rlhls.designs.formats import parse_format

from ..mixed import MixedPrecision, count_columns, ps_forward
from ..phases import timed

__all__ = ["MixedPPO"]


class MixedPPO:
    """The policy and value networks of one PPO run under a plan: one MixedPrecision each, linked
    (one loss: one loss scale, one step count); see the module docstring."""

    def __init__(self, ppo, design, scaling: dict):
        """``scaling``: MixedPrecision's keyword arguments (``TrainerBase._scaling``: loss scaling and
        the plan's kernels); the plan is ``ppo.assignment`` (``TrainerBase._take_plan``)."""
        self.ppo = ppo
        self.fp32 = parse_format("fp32")
        self.assignment = ppo.assignment
        self.mp_p = MixedPrecision(design, ppo.nets["policy"], "policy", self.assignment, **scaling)
        self.mp_v = MixedPrecision(design, ppo.nets["value"], "value", self.assignment, **scaling)
        MixedPrecision.link(self.mp_p, self.mp_v)  # the policy's instance applies the joint step
        # the plan's advantage node: 'gae' (a PPO graph), 'returns' (an A2C design's graph), else the PS
        gae = next((n for n in ("gae", "returns") if self.assignment and n in self.assignment), None)
        self.gae_unit = self.mp_p._unit(self.assignment, gae) if gae else "PS"
        self.make_views()
        self.mp_p.round_masters(self.views)

    def make_views(self) -> None:
        """{grad key: (master-format key, array)} for MixedPrecision.apply / round_masters (again
        after set_params replaced the arrays)."""
        pol, val = self.ppo.nets["policy"], self.ppo.nets["value"]
        v = {f"policy.{l.name}.{k}": (l.name, a) for l in pol.layers for k, a in l.params.items()}
        v.update({f"value.{l.name}.{k}": (f"value.{l.name}", a) for l in val.layers for k, a in l.params.items()})
        if self.ppo.log_std is not None:
            v["log_std"] = ("log_std", self.ppo.log_std)  # no layer: FP32 master (PS)
        self.views = v

    def act(self, net, x):
        """Acting on the PS in FP32 (AP-DRL Fig. 10)."""
        return ps_forward(net, x, self.ppo.hp["ps_math"])

    def round_gae(self, adv, rtg, times):
        """The float GAE node's outputs in its unit's storage format (PS during the delay)."""
        with timed(times, "gae_write"):
            fmt = self.mp_p.precision(self.gae_unit).storage
            return fmt.quantize(adv), fmt.quantize(rtg)

    def minibatch(self, obs, act, old_logp, old_val, adv, rtg, times, loss_fn):
        """Loss and (loss-scaled) gradients of one minibatch, every node in its unit's format."""
        mp, mv, ppo = self.mp_p, self.mp_v, self.ppo
        lu = mp.loss_unit if mp.quantized else "PS"
        gu = self.gae_unit if mp.quantized else "PS"
        with timed(times, "update_forward"):
            x = ppo._net_in(obs)
            out, pu = mp.forward(x, "fwd")
            out = mp.to_loss(out, pu)
            v, vu = mv.forward(x, "fwd")
            v = mv.to_loss(v, vu)[:, 0]
            adv, rtg = mp.convert(adv, gu, lu), mp.convert(rtg, gu, lu)
            old_logp, old_val = mp.convert(old_logp, "PS", lu), mp.convert(old_val, "PS", lu)
            F = mp.precision(lu).storage  # the loss node computes in its unit's format
            scale = mp.loss_scale()
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                loss, g_out, g_v, g_ls, stats = loss_fn(ppo._dist(out), v, act, old_logp, old_val, adv, rtg, ppo.hp,
                                                        ppo.clip)
                g_out, g_v = F.quantize(g_out * scale), F.quantize(g_v * scale)
        with timed(times, "backprop"):
            mp.backward(g_out)
            mv.backward(g_v[:, None])
            pol, val = ppo.nets["policy"], ppo.nets["value"]
            grads = {key: (pol if key.startswith("policy.") else val)[key.split(".")[1]].grads[key.rsplit(".", 1)[1]]
                     for key in self.views if key != "log_std"}
            if g_ls is not None:
                grads["log_std"] = self.fp32.quantize(g_ls * scale)
        return loss, grads, stats

    def step(self, opt, grads, max_grad_norm: float) -> float:
        """Unscale, check, clip, step (the PL's updates through the update kernel), round to the
        master formats; returns the norm before clipping."""
        self.mp_p.apply(opt, self.views, grads, max_grad_norm=max_grad_norm)
        return self.mp_p.grad_norm

    def columns(self) -> dict:
        """The loss-scaling columns of the update's metrics row (as DQN's and A2C's)."""
        c = self.mp_p.take_counts()
        for k, n in self.mp_v.take_counts().items():
            c[k] = c.get(k, 0) + n
        return {"loss_scale": self.mp_p.loss_scale(), "quantized": int(self.mp_p.quantized), **count_columns(c)}

    def state(self) -> dict:
        return self.mp_p.state()

    def load(self, s: dict) -> None:
        self.make_views()  # set_params may have replaced the arrays
        self.mp_p.load(s)  # scaler and step count are shared with mp_v (linked)
