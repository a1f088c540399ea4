"""TD3 on the host (Fujimoto et al. 2018; CleanRL ``td3_continuous_action.py`` quality, Stable-Baselines3's
names) with AP-DRL's mixed precision: DDPG (host/algorithms/ddpg.py) with its three changes.

- **Clipped double-Q**: twin critics ``qf1`` and ``qf2`` (SB3's ``qf0`` / ``qf1``, CleanRL's ``qf1`` /
  ``qf2``), each with a target copy; both regress on one target ``y = r + gamma (1 - terminated)
  min(Q1'(s', a'), Q2'(s', a'))``, the loss is the sum of their two MSEs (one Adam over both critics, as
  SB3 and CleanRL).
- **Target policy smoothing**: ``a' = clip(mu'(s') + clip(N(0, target_policy_noise), -target_noise_clip,
  target_noise_clip) * action_scale, low, high)`` (noise in the actor's [-1, 1] space, drawn per sample
  from the run's Generator, so a resume reproduces it).
- **Delayed policy updates**: the actor steps on ``-mean Q1(s, mu(s))`` (critic 1 only) and the three
  target networks take their Polyak step every ``policy_frequency`` critic steps (SB3: ``policy_delay``).

Everything else is DDPG's and is inherited: acting (uniform until ``learning_starts``, then ``mu(s)`` +
Gaussian or OU noise), the replay buffer, one gradient step per environment step, the checkpoint and a
bit-for-bit resume, evaluation, the metrics. Hyperparameters (``TD3Args``): DDPG's fields with CleanRL
TD3's defaults plus ``target_policy_noise`` (0.2) and ``target_noise_clip`` (0.5); SB3's and CleanRL's
other names are aliases (``policy_delay`` and ``policy_frequency``, ``policy_noise``, ``noise_clip``); RL
Zoo's ``td3.yml`` entries load as published (``noise_type``, ``noise_std``, ``train_freq`` /
``gradient_steps`` 1).

Precision: as DDPG's. ``mixed``: one ``MixedPrecision`` per graph instance: ``actor``, ``qf1``, ``qf2``
(linked: one loss ``critic_loss``, one loss scale) and ``qf1@pi`` (critic 1 run on mu(s) for the actor's
gradient; linked with the actor, weights and master formats qf1's). A design whose PL / AIE formats are
fixed point (F-DDPG's ``fixed<32,8>``) trains with them and no loss scaling (fixed-point gradients
overflow by saturating, a loss scale would only saturate them). The whole-step gradient kernel of DDPG
(F-DDPG's ``ddpg_gradient``) computes one critic: TD3 has none, its nodes run layer by layer. The
smoothed target action is formed in the format of the target actor's last node.

Per-update metrics: DDPG's (``qf1_loss``, ``qf1_values``: critic 1's; ``critic_loss_scale`` covers both
critics) plus ``qf2_loss``, ``qf2_values``, ``critic_loss`` (their sum, SB3's name).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FixedFormat

from ..hyperparams import hp
from ..mixed import COUNTS, MixedPrecision
from ..phases import timed
from . import Algorithm, register_algorithm
from .base import adapt_network, param_views
from .ddpg import _TD3_ONLY, DDPG, DDPGArgs, batch_size, ddpg_graph, node_runs, soft_update

__all__ = ["TD3Args", "TD3", "resolve_hyperparams", "CRITICS"]

CRITICS = ("qf1", "qf2")


@dataclass
class TD3Args(DDPGArgs):
    """TD3's hyperparameters: CleanRL td3_continuous_action.py's defaults (the design's batch size); SB3's names
    as aliases."""

    algorithm = "TD3"
    aliases = {"policy_delay": "policy_frequency", "policy_noise": "target_policy_noise",
               "noise_clip": "target_noise_clip"}
    # RL Zoo's td3.yml: DDPG's table, with target policy smoothing honoured (its keys are our fields)
    sb3 = {k: v for k, v in DDPGArgs.sb3.items() if k not in _TD3_ONLY}
    policy_frequency: int = hp(2, "critic steps per actor step and target update (SB3: policy_delay)", low=1)
    target_policy_noise: float = hp(0.2, "target policy smoothing: noise std (x the action scale)", low=0.0)
    target_noise_clip: float = hp(0.5, "target policy smoothing: noise clipped to +-this (x the action scale)",
                                  low=0.0)


def resolve_hyperparams(design, overrides: dict | None = None, config: dict | None = None) -> dict:
    """TD3Args: CleanRL's defaults <- the design's hyperparameters (and batch) <- config <- overrides."""
    return TD3Args.resolve(design, overrides, config)


class TD3(DDPG):
    """One TD3 run (the constructor and interface: ``TrainerBase``; the loop: ``DDPG``)."""

    algorithm = "td3"
    networks = ("actor", *CRITICS)
    resolve_hyperparams = staticmethod(resolve_hyperparams)

    def _setup(self, design, nets: dict, assignment) -> None:
        # DDPG's setup with critic 1 as its critic: the env and network checks, the actor, the plan, the
        # optimizers, buffer and Generator; then critic 2 beside it
        q1 = nets[CRITICS[0]]
        self._q2_fresh = nets[CRITICS[1]]
        super()._setup(design, {"actor": nets["actor"], "critic": q1}, assignment)
        self._q2: list = []  # critic 2's (loss, mean Q) per step of the current update

    def _instances(self, design, actor, critic, kw):
        """(actor, critic, critic@pi) instances: DDPG's hook, here with twin critics (module docstring)."""
        q2 = self._q2_fresh
        if self.env_id != design.env_id or q2.input_shape != critic.input_shape:
            q2 = adapt_network(q2, self.obs_dim + self.act_dim, 1)
        if q2.input_shape != critic.input_shape or q2.output_shape != (1,):
            raise RlhlsError(f"network '{CRITICS[1]}' maps {q2.input_shape} -> {q2.output_shape}, expected "
                             f"{critic.input_shape} = concat(obs, action) -> (1,)")
        del self._q2_fresh
        self.qf2 = q2
        mp_c = MixedPrecision(design, critic, CRITICS[0], self.assignment, loss_node="critic_loss", **kw)
        self.mp_q2 = MixedPrecision(design, q2, CRITICS[1], self.assignment, loss_node="critic_loss", **kw)
        MixedPrecision.link(mp_c, self.mp_q2)  # one loss over both critics: one scale, one step
        mp_a = MixedPrecision(design, actor, "actor", self.assignment, loss_node="actor_loss", **kw)
        mp_pi = MixedPrecision(design, critic, f"{CRITICS[0]}@pi", self.assignment, loss_node="actor_loss",
                               target=False, update=False, master_of=mp_c, **kw)
        if any(isinstance(p.storage, FixedFormat) for p in mp_c.prec.values()):
            # fixed-point gradients: no loss scaling (a scaled gradient would saturate)
            for m in (mp_c, mp_a, mp_pi):
                m.scaler.enabled, m.scaler.scale = False, 1.0
        return mp_a, mp_c, mp_pi

    def _views(self) -> None:
        self.views_a = param_views("actor", self.actor)
        self.views_c = {**param_views(CRITICS[0], self.critic),
                        **param_views(CRITICS[1], self.qf2, masters=f"{CRITICS[1]}.")}

    def _targets(self) -> None:
        super()._targets()
        self.target_qf2 = copy.deepcopy(self.qf2)

    def _step_kernel(self):
        return None  # DDPG's whole-step kernel computes one critic (module docstring)

    def _smoothed(self, a2, unit) -> np.ndarray:
        """mu'(s') with clipped Gaussian noise, clipped to the box, in the target actor's last node's format."""
        hp = self.hp
        eps = self.rng.normal(0.0, 1.0, size=a2.shape) * hp["target_policy_noise"]
        eps = np.clip(eps, -hp["target_noise_clip"], hp["target_noise_clip"]) * self.action_scale
        F = self.mp_a.precision(unit).storage
        return F.quantize(np.clip(a2 + eps, self.low, self.high))

    def critic_step(self, s, s2, a, r, d, times: dict) -> dict:
        hp, B = self.hp, s.shape[0]
        mps = (self.mp_c, self.mp_q2)
        nets = ((self.critic, self.target_critic), (self.qf2, self.target_qf2))
        with timed(times, "target_forward"):
            a2, ua = self._act_fwd(s2, "tfwd", net=self.target_actor)
            a2 = self._smoothed(a2, ua)
            qts = []
            for mp, (_, tgt) in zip(mps, nets):
                x2, u0 = self._critic_input(mp, s2, a2, ua, "tfwd")
                qt, uq = mp.forward(x2, "tfwd", net=tgt, src=u0)
                qts.append(mp.to_loss(qt, uq)[:, 0])
        losses, qvs, gs = [], [], []
        with timed(times, "update_forward"):
            F = self.mp_c.precision(self.mp_c.loss_unit).storage  # the loss node computes in its unit's format
            y = F.quantize(r + hp["gamma"] * (1.0 - d) * np.minimum(qts[0], qts[1]))
            for mp in mps:
                qv, u = mp.forward(np.concatenate([s, a], axis=1), "fwd")
                qv = mp.to_loss(qv, u)[:, 0]
                delta = F.quantize(qv - y)
                with np.errstate(invalid="ignore", over="ignore"):
                    losses.append(float(np.mean(delta * delta)))
                    gs.append(F.quantize(2.0 * delta * (mp.loss_scale() / B))[:, None])
                qvs.append(float(np.mean(qv)))
        grads = {}
        with timed(times, "backprop"):
            for mp, (net, _), g, inst in zip(mps, nets, gs, CRITICS):
                mp.backward(g)
                grads.update({k: net[k.split(".")[1]].grads[k.rsplit(".", 1)[1]] for k in self.views_c
                              if k.startswith(inst + ".")})  # keys '<inst>.<layer>.<param>'
        with timed(times, "weight_update"):
            event = self.mp_c.apply(self.opt_c, self.views_c, grads)  # both critics (linked)
        self._q2.append((losses[1], qvs[1]))
        return {"qf1_loss": losses[0], "qf1_values": qvs[0], "event": event}

    def update_targets(self) -> None:
        super().update_targets()
        soft_update(self.qf2, self.target_qf2, self.hp["tau"])
        self._fp32_targets(self.target_qf2)

    def train_update(self, update: int, total_updates: int) -> dict:
        self._q2 = []
        row = super().train_update(update, total_updates)
        c = self.mp_q2.take_counts()
        for k in COUNTS:
            row[k] += c.get(k, 0)
        nan = float("nan")
        l2 = [x for x, _ in self._q2]
        row["qf2_loss"] = float(np.nanmean(l2)) if l2 and np.isfinite(l2).any() else nan
        row["qf2_values"] = float(np.mean([v for _, v in self._q2])) if self._q2 else nan
        row["critic_loss"] = row["qf1_loss"] + row["qf2_loss"]
        return row

    # -- checkpoint: DDPG's, with critic 1 under qf1 and critic 2 beside it
    def state_dict(self) -> dict:
        s = super().state_dict()
        s[CRITICS[0]], s[f"target_{CRITICS[0]}"] = s.pop("critic"), s.pop("target_critic")
        s[CRITICS[1]], s[f"target_{CRITICS[1]}"] = self.qf2.get_params(), self.target_qf2.get_params()
        s["mixed"] = {"actor": s["mixed"]["actor"], CRITICS[0]: s["mixed"]["critic"]}  # qf2 shares qf1's
        return s

    def load_state_dict(self, s: dict) -> None:
        d = dict(s)
        d["critic"], d["target_critic"] = d.pop(CRITICS[0]), d.pop(f"target_{CRITICS[0]}")
        d["mixed"] = {"actor": s["mixed"]["actor"], "critic": s["mixed"][CRITICS[0]]}
        self.qf2.set_params(d.pop(CRITICS[1]))
        self.target_qf2.set_params(d.pop(f"target_{CRITICS[1]}"))
        super().load_state_dict(d)


def td3_graph(bld, design, nets):
    """DDPG's training graph with twin critics (both on the smoothed target action, one loss) and the actor's
    gradient through critic 1 (``qf1@pi``)."""
    ddpg_graph(bld, design, nets, critics=CRITICS)


register_algorithm(Algorithm("td3", TD3, TD3Args, batch_size, resolve=resolve_hyperparams, actions=("continuous",),
                             graph=td3_graph, loss_flops=lambda n: 8 * n,
                             # one critic step per vector-env step from learning_starts on
                             grad_steps=lambda hp: 1.0 / hp.get("num_envs", 1), node_runs=node_runs,
                             summary="TD3 (CleanRL td3_continuous_action.py, SB3's names) with AP-DRL's mixed "
                                     "precision"))
