"""A2C on the host (Stable-Baselines3 ``A2C`` semantics) with AP-DRL's hardware-aware mixed precision.

Algorithm (SB3 ``stable_baselines3/a2c/a2c.py`` + ``common/on_policy_algorithm.py``; ``A2CArgs``
are SB3's A2C defaults, a design's ``hyperparams`` override them, then ``--set``): ``num_envs``
sub-envs run ``n_steps`` steps (the rollout, batch = n_steps x num_envs); returns and advantages
by GAE(gamma, ``gae_lambda``) over the rollout (SB3 ``compute_returns_and_advantage``; with SB3's
default lambda = 1 this is the n-step return ``R_t = r_t + gamma r_{t+1} + ... + gamma^k V(s_{t+k})``
cut at episode ends), ``advantage = R - V`` with V the rollout's values, no advantage
normalization (SB3 ``normalize_advantage=False``). One gradient step per rollout on

    loss = -mean(A * log pi(a|s)) + ent_coef * (-mean(entropy)) + vf_coef * mean((R - V(s))^2)

(SB3: the value loss is ``F.mse_loss`` -- no 0.5 factor, unlike PPO/CleanRL), one global grad-norm
clip at ``max_grad_norm`` over actor, critic and log-std, then the optimizer. The learning rate
is constant (SB3's default schedule) unless ``anneal_lr``: then it falls linearly to 0 over the run
as RL Zoo's ``lin_<lr>`` schedules, set once per rollout from SB3's progress_remaining
``1 - steps / total_steps`` counted after the rollout (the last rollout's step has lr 0).

Optimizer (``optimizer``): ``rmsprop`` (SB3's default ``use_rms_prop=True``) is
``torch.optim.RMSprop(alpha=rmsprop_alpha, eps=rmsprop_eps)``, i.e. PyTorch's eps placement
``p -= lr g / (sqrt(v) + eps)`` with v initialised to 0 -- what SB3's A2C uses (it passes
``th.optim.RMSprop``). The TF / SB2 placement ``g / sqrt(v + eps)`` with v initialised to 1
(``sb2_compat.RMSpropTFLike``, used by some RL Zoo Atari configs) is not implemented.
``adam`` = ``torch.optim.Adam(eps=adam_eps)`` with SB3's ActorCriticPolicy eps 1e-5
(``use_rms_prop=False``).

Policy: the design's ``policy`` network gives the Gaussian mean (continuous) or the Categorical
logits / softmax probabilities (discrete); continuous actions add a state-independent ``log_std``
(init ``log_std_init`` = 0, SB3). The sampled (unclipped) action is what log-probs use; the env
receives it clipped to the action box (SB3 ``collect_rollouts``). Observations and rewards are
not normalized (SB3's default; RL Zoo's MuJoCo configs wrap VecNormalize, not done here).

Episode ends: ``envs.ReplayableVecEnv`` (SAME_STEP autoreset). A termination cuts the return
(next value 0); a truncation (time limit) bootstraps with V(final observation) -- SB3 adds
``gamma * V(terminal_observation)`` to that step's reward, which is the same recurrence as
``gae.gae_reference`` with done code 2. ``dones``: 0 continue / 1 terminated / 2 truncated.

Updates and resume: one runner update = ``rollouts_per_update`` rollouts (default 25 = 1000 env
steps with 8 x 5; one metrics row and one checkpoint each; SB3 logs every 100 rollouts). The
checkpoint holds both networks, log-std, the optimizer, the loss scaler, the numpy Generator, the
envs (seed + actions since each sub-env's reset, replayed on load) and the running episode
returns: a resumed run equals an uninterrupted one bit for bit.

Precision (``precision``, ``--precision``; as ``host/algorithms/dqn.py``): ``fp32`` = every node on the PS;
``mixed`` = each training-graph node (``policy.<layer>.fwd/bwd/upd``, ``value.<layer>.fwd/bwd/upd``,
``returns``, ``loss``) in its unit's format under a plan (``--plan`` or profile + ILP in-process),
see ``host/mixed.py``. Acting (policy mean, V, and V of truncated final observations) runs on the
PS in FP32 (AP-DRL Fig. 10). The ``returns`` node's recurrence is computed in float64 and its
outputs (advantages, returns) rounded once to its unit's storage format. One dynamic loss scale
serves both networks (one loss, as PyTorch's GradScaler): the loss gradient of the policy output,
the value output and log-std is scaled; any non-finite gradient anywhere skips the whole step.
Gradients are unscaled in FP32, then clipped, then applied. ``log_std`` is a PS/FP32 parameter.

Shared trunk (any design whose ``policy`` / ``value`` NetSpec takes ``input_from`` another network,
e.g. seed 004's conv + fc trunk under a softmax head and a linear value head): the trunk runs
once per forward and feeds both heads; its own graph instance (``<trunk>.<layer>.fwd/bwd/upd``)
has its own MixedPrecision, linked to the heads' (one loss scale, one step). The heads'
backward then also computes the gradient of their input; the two are converted to the unit of
the trunk's last backward node and added there (one rounding to its storage format: the graph's
join of both heads' gradients) before the trunk's backward. The trunk's parameters are
optimized, clipped and checkpointed with the heads'. Acting runs the trunk on the PS too.

Per-update metrics: episodes, episodic_return / length, truncations, rollouts, policy_loss, value_loss,
entropy, grad_norm (before clipping), explained_variance, std (mean exp(log_std)), learning_rate,
loss_scale, quantized, skipped_steps, scale_shrinks, scale_grows, grad_overflows, conv_overflows,
and phase seconds ``t_<phase>`` for ``PHASES``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import RETURNS_FLOPS, actor_critic

from ..distributions import Categorical, DiagGaussian, policy_distribution
from ..envs import EpisodeTracker, space_info
from ..gae import gae_reference
from ..hyperparams import hp
from ..mixed import PRECISIONS, MixedPrecision, MixedPrecisionArgs, count_columns, ps_forward
from ..optim import make_optimizer
from ..phases import timed
from ..rlzoo import schedule
from . import Algorithm, register_algorithm
from .base import TrainerBase, adapt_network, check_memory, param_views, sample_bytes
from .rollout import collect_rollout, episode_columns, start_envs

__all__ = ["A2CArgs", "batch_size", "PHASES", "resolve_hyperparams", "a2c_loss", "A2C"]

OPTIMIZERS = ("rmsprop", "adam")


def _sb3_lr(v, ctx):
    lr, annealed = schedule(ctx, "learning_rate", v)
    return {"learning_rate": lr, "anneal_lr": annealed}


def _sb3_rms_prop(v, ctx):
    if not isinstance(v, bool):
        raise ctx.error("use_rms_prop", f"{v!r}: expected true or false")
    return {"optimizer": "rmsprop" if v else "adam"}


@dataclass
class A2CArgs(MixedPrecisionArgs):
    """A2C's hyperparameters: Stable-Baselines3's A2C defaults."""

    algorithm = "A2C"
    aliases = {"num_steps": "n_steps"}  # the rollout length under PPO's name (--num-steps)
    sb3 = {"learning_rate": _sb3_lr, "use_rms_prop": _sb3_rms_prop, "rms_prop_eps": "rmsprop_eps"}
    num_envs: int = hp(8, "parallel sub-environments", low=1)
    n_steps: int = hp(5, "steps per sub-environment per rollout (batch = num_envs x n_steps)", low=1)
    learning_rate: float = hp(7e-4, "step size", low=0.0)
    gamma: float = hp(0.99, "discount factor", low=0.0, high=1.0)
    gae_lambda: float = hp(1.0, "GAE lambda (1: n-step returns)", low=0.0, high=1.0)
    ent_coef: float = hp(0.0, "entropy bonus coefficient", low=0.0)
    vf_coef: float = hp(0.5, "value loss coefficient", low=0.0)
    max_grad_norm: float = hp(0.5, "global gradient-norm clip", above=0.0)
    optimizer: str = hp("rmsprop", "rmsprop (SB3's default) or adam", choices=OPTIMIZERS)
    rmsprop_alpha: float = hp(0.99, "RMSprop decay", low=0.0, below=1.0)
    rmsprop_eps: float = hp(1e-5, "RMSprop epsilon", above=0.0)
    adam_eps: float = hp(1e-5, "Adam epsilon", above=0.0)
    anneal_lr: bool = hp(False, "anneal the learning rate linearly to 0 (RL Zoo's lin_ schedules)")
    normalize_advantage: bool = hp(False, "normalize advantages per rollout")
    log_std_init: float = hp(0.0, "initial log standard deviation of the Gaussian policy")
    rollouts_per_update: int = hp(25, "rollouts per runner update (one metrics row and checkpoint)", low=1)
    precision: str = hp("fp32", "fp32 (all on the PS) or mixed (the plan's units)", choices=PRECISIONS)

    def check(self, design):
        super().check(design)
        check_memory(f"num_envs x n_steps = {self.num_envs} x {self.n_steps}",
                     self.num_envs * self.n_steps * sample_bytes(design), "the rollout at least")


def batch_size(hp: dict) -> int:
    return hp["num_envs"] * hp["n_steps"]


PHASES = ("dnn_inference", "env_run", "storing_trajectories", "returns", "update_forward", "backprop",
          "weight_update")


def resolve_hyperparams(design, overrides: dict | None = None, config: dict | None = None) -> dict:
    """A2CArgs: SB3's A2C defaults <- the design's hyperparameters <- config <- overrides."""
    return A2CArgs.resolve(design, overrides, config)


def a2c_loss(out, values, actions, advantages, returns, *, log_std=None, softmax: bool = False,
             ent_coef: float = 0.0, vf_coef: float = 0.5):
    """SB3's A2C loss of one batch and its gradients w.r.t. what the networks produced.

    ``out`` (B, A): policy output (Gaussian mean with ``log_std``; else logits, or probabilities
    when ``softmax``); ``values`` (B,). Returns (loss, stats, d_out (B, A), d_values (B,),
    d_log_std (A,) or None), in float64, unscaled."""
    B = out.shape[0]
    adv = np.asarray(advantages, dtype=np.float64)
    dist: DiagGaussian | Categorical
    if log_std is not None:
        dist = DiagGaussian(out, log_std)
    else:
        dist = Categorical(probs=out) if softmax else Categorical(logits=out)
    logp = dist.log_prob(actions)
    ent = dist.entropy()
    diff = values - returns
    pg_loss = -float(np.mean(adv * logp))
    v_loss = float(np.mean(diff * diff))
    ent_loss = -float(np.mean(ent))
    loss = pg_loss + ent_coef * ent_loss + vf_coef * v_loss
    g_logp = -adv / B
    g_ls = None
    if isinstance(dist, DiagGaussian):
        d_mean, d_ls = dist.d_log_prob(actions)
        g_out = g_logp[:, None] * d_mean
        g_ls = np.sum(g_logp[:, None] * d_ls, axis=0) - ent_coef * dist.d_entropy_log_std()
    else:
        g_out = g_logp[:, None] * dist.d_log_prob(actions) - (ent_coef / B) * dist.d_entropy()
    g_v = vf_coef * 2.0 * diff / B
    return loss, {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": -ent_loss}, g_out, g_v, g_ls


class A2C(TrainerBase):
    """One A2C run (the constructor and interface: ``TrainerBase``)."""

    algorithm = "a2c"
    networks = ("policy", "value")
    resolve_hyperparams = staticmethod(resolve_hyperparams)

    def _setup(self, design, nets: dict, assignment) -> None:
        hp = self.hp
        self.space = sp = space_info(self.envs)
        pol, val = nets["policy"], nets["value"]
        # a head's trunk: the design network it takes its input from (None: the observation)
        self.trunk_of = {h: design.net(h).input_from for h in self.networks}
        self.trunks = {t: nets[t] for t in dict.fromkeys(self.trunk_of.values()) if t is not None}
        if self.env_id != design.env_id and len(sp["obs_shape"]) == 1 and not self.trunks:
            pol = adapt_network(pol, sp["obs_shape"][0], sp["action_dim"])
            val = adapt_network(val, sp["obs_shape"][0], 1)
        for net in self.trunks.values():
            if tuple(net.input_shape) != tuple(sp["obs_shape"]):
                raise RlhlsError(f"network '{net.name}' takes {net.input_shape} but '{self.env_id}' observes "
                                 f"{sp['obs_shape']}")
        for head, net, want in (("policy", pol, (sp["action_dim"],)), ("value", val, (1,))):
            t = self.trunk_of[head]
            need = tuple(sp["obs_shape"]) if t is None else tuple(self.trunks[t].output_shape)
            if tuple(net.input_shape) != need or net.output_shape != want:
                raise RlhlsError(f"network '{net.name}' maps {net.input_shape} -> {net.output_shape} but "
                                 f"'{self.env_id}'{'' if t is None else f' through {t!r}'} needs {need} -> {want}")
        self.pol, self.val = pol, val
        self.heads = {"policy": pol, "value": val}
        self.softmax_out = pol.layers[-1].kind == "Softmax"
        self.log_std = (np.full(sp["action_dim"], float(hp["log_std_init"])) if sp["kind"] == "continuous" else None)
        self._take_plan(assignment, hp["num_envs"] * hp["n_steps"])
        kw = self._scaling(target=False, ps_math=hp["ps_math"])  # no target copy
        self.mp_p = MixedPrecision(design, pol, "policy", self.assignment, **kw)
        self.mp_v = MixedPrecision(design, val, "value", self.assignment, **kw)
        self.mp_t = {t: MixedPrecision(design, net, t, self.assignment, **kw) for t, net in self.trunks.items()}
        # one loss -> one loss scale and one step count for all networks (PyTorch GradScaler);
        # the policy's MixedPrecision applies the joint step (linked: it knows the other layers)
        MixedPrecision.link(self.mp_p, self.mp_v, *self.mp_t.values())
        self.returns_unit = self.mp_p._unit(self.assignment, "returns")
        self._make_views()
        self.mp_p.round_masters(self.views)
        if hp["optimizer"] == "rmsprop":
            opt = make_optimizer("rmsprop", hp["learning_rate"], alpha=hp["rmsprop_alpha"], eps=hp["rmsprop_eps"])
        else:
            opt = make_optimizer("adam", hp["learning_rate"], eps=hp["adam_eps"])
        self.opt = opt
        self.fp32 = parse_format("fp32")
        self.rng = np.random.default_rng(self.seed)
        self.steps_per_update = hp["num_envs"] * hp["n_steps"] * hp["rollouts_per_update"]
        self.rollouts = 0  # gradient steps so far (SB3's n_updates)
        self.obs = None  # raw observations of the current step (None: envs not reset yet)
        self.tracker = EpisodeTracker(hp["num_envs"])

    def _make_views(self):
        """{grad key: (master-format key, array)} for MixedPrecision.apply / round_masters."""
        v = {**param_views("policy", self.pol), **param_views("value", self.val, masters="value.")}
        for t, net in self.trunks.items():
            v.update(param_views(t, net, masters=f"{t}."))
        if self.log_std is not None:
            v["log_std"] = ("log_std", self.log_std)  # no layer: FP32 master (PS)
        self.views = v

    # -- acting: PS, FP32 (Fig. 10)
    def _dist(self, out):
        return policy_distribution(out, self.log_std, self.softmax_out)

    def _ps_forward(self, obs, heads=("policy", "value")) -> list:
        """The heads' outputs on the PS (FP32), each trunk run once."""
        pm = self.hp["ps_math"]
        feats = {t: ps_forward(net, obs, pm) for t, net in self.trunks.items()}
        return [ps_forward(self.heads[h], obs if self.trunk_of[h] is None else feats[self.trunk_of[h]], pm)
                for h in heads]

    # -- the rollout loop's hooks (host/algorithms/rollout.py)
    def _rollout_act(self, obs):
        out, v = self._ps_forward(obs)
        return self._dist(out).sample(self.rng), None, v[:, 0]

    def _value(self, obs):
        return self._ps_forward(obs, ("value",))[0][:, 0]

    def predict(self, obs, deterministic: bool = True, rng=None) -> np.ndarray:
        dist = self._dist(self._ps_forward(np.asarray(obs), ("policy",))[0])
        return self._env_action(dist.mode() if deterministic else dist.sample(rng))

    # -- one rollout's returns + one gradient step
    def returns(self, rew, val, done, tval, boot, times: dict):
        """The ``returns`` node: (advantages, returns), (T, N), in its unit's storage format."""
        hp = self.hp
        with timed(times, "returns"):
            adv, ret = gae_reference(rew, val, done, boot, hp["gamma"], hp["gae_lambda"], tval)
            fmt = self.mp_p.precision(self.returns_unit).storage
            return fmt.quantize(adv), fmt.quantize(ret)

    def train_step(self, obs, act, adv, ret, times: dict) -> dict:
        """One gradient step on a flattened rollout; returns losses, grad norm and the scaler event."""
        hp, mp, mv = self.hp, self.mp_p, self.mp_v
        loss_unit = mp.loss_unit if mp.quantized else "PS"
        ru = self.returns_unit if mp.quantized else "PS"
        with timed(times, "update_forward"):
            feats = {t: m.forward(obs, "fwd") for t, m in self.mp_t.items()}  # (output, its unit)
            x, src = (obs, "PS") if self.trunk_of["policy"] is None else feats[self.trunk_of["policy"]]
            out, pu = mp.forward(x, "fwd", src=src)
            out = mp.to_loss(out, pu)
            x, src = (obs, "PS") if self.trunk_of["value"] is None else feats[self.trunk_of["value"]]
            v, vu = mv.forward(x, "fwd", src=src)
            v = mv.to_loss(v, vu)[:, 0]
            adv, ret = mp.convert(adv, ru, loss_unit), mp.convert(ret, ru, loss_unit)
            if hp["normalize_advantage"] and adv.size > 1:
                adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
            F = mp.precision(loss_unit).storage  # the loss node computes in its unit's format
            scale = mp.loss_scale()
            with np.errstate(invalid="ignore", over="ignore"):
                _, stats, g_out, g_v, g_ls = a2c_loss(out, v, act, adv, ret, log_std=self.log_std,
                                                      softmax=self.softmax_out, ent_coef=hp["ent_coef"],
                                                      vf_coef=hp["vf_coef"])
                g_out, g_v = F.quantize(g_out * scale), F.quantize(g_v * scale)
        with timed(times, "backprop"):
            dx = {"policy": mp.backward(g_out, need_input_grad=self.trunk_of["policy"] is not None),
                  "value": mv.backward(g_v[:, None], need_input_grad=self.trunk_of["value"] is not None)}
            self._trunk_backward(dx)
            nets = {**self.heads, **self.trunks}
            grads = {key: nets[key.split(".")[0]][key.split(".")[1]].grads[key.rsplit(".", 1)[1]]
                     for key in self.views if key != "log_std"}
            if g_ls is not None:
                grads["log_std"] = self.fp32.quantize(g_ls * scale)
        with timed(times, "weight_update"):
            event = mp.apply(self.opt, self.views, grads, max_grad_norm=hp["max_grad_norm"])
        return {**stats, "grad_norm": mp.grad_norm, "event": event}

    def _trunk_backward(self, dx: dict) -> None:
        """Each trunk's backward from the sum of its heads' input gradients, added on the unit of
        the trunk's last backward node (in its storage format)."""
        mps = {"policy": self.mp_p, "value": self.mp_v}
        for t, mt in self.mp_t.items():
            u = mt.unit_of(self.trunks[t].layers[-1].name, "bwd")
            parts = [mt.convert(dx[h], mps[h].unit_of(self.heads[h].layers[0].name, "bwd"), u, "grad")
                     for h in self.networks if self.trunk_of[h] == t]
            d = parts[0]
            if len(parts) > 1:
                with np.errstate(over="ignore", invalid="ignore"):
                    d = mt.precision(u).storage.quantize(np.sum(parts, axis=0))
            mt.backward(d, src=u)

    # -- one runner update = rollouts_per_update rollouts
    def train_update(self, update: int, total_updates: int) -> dict:
        hp, times = self.hp, {p: 0.0 for p in PHASES}
        T, N = hp["n_steps"], hp["num_envs"]
        start_envs(self, times)
        episodes, ev, truncs = [], [], 0
        acc: dict[str, list[float]] = {k: [] for k in ("policy_loss", "value_loss", "entropy", "grad_norm")}
        for _ in range(hp["rollouts_per_update"]):
            ro = collect_rollout(self, T, times, self.rollouts * T * N, act=self._rollout_act, value=self._value)
            episodes += ro.episodes
            truncs += ro.truncations
            adv, ret = self.returns(ro.rew, ro.val, ro.done, ro.tval, ro.boot, times)
            if hp["anneal_lr"]:
                total = total_updates * hp["rollouts_per_update"]
                self.opt.lr = max(0.0, 1.0 - (self.rollouts + 1) / total) * hp["learning_rate"]
            st = self.train_step(ro.flat("obs"), ro.flat("act"), adv.reshape(-1), ret.reshape(-1), times)
            self.rollouts += 1
            for k in acc:
                acc[k].append(st[k])
            y, var_y = ret.reshape(-1), np.var(ret)
            ev.append(float("nan") if var_y == 0 else float(1 - np.var(y - ro.val.reshape(-1)) / var_y))
        c = self.mp_p.take_counts()
        for m in (self.mp_v, *self.mp_t.values()):
            for k, n in m.take_counts().items():
                c[k] = c.get(k, 0) + n
        nan = float("nan")

        def mean(xs):
            xs = np.asarray(xs, dtype=np.float64)
            return float(np.mean(xs[np.isfinite(xs)])) if np.isfinite(xs).any() else nan

        row = {
            **episode_columns(episodes, truncs),
            "rollouts": self.rollouts, "learning_rate": self.opt.lr,
            **{k: mean(v) for k, v in acc.items()},
            "explained_variance": mean(ev),
            "std": nan if self.log_std is None else float(np.mean(np.exp(self.log_std))),
            "loss_scale": self.mp_p.loss_scale(), "quantized": int(self.mp_p.quantized),
            **count_columns(c),
        }
        row.update({f"t_{p}": times[p] for p in PHASES})
        row["_episodes"] = episodes
        return row

    # -- checkpoint
    def state_dict(self) -> dict:
        return {
            "policy": self.pol.get_params(), "value": self.val.get_params(),
            "trunks": {t: net.get_params() for t, net in self.trunks.items()},
            "log_std": None if self.log_std is None else self.log_std.copy(),
            "opt": self.opt.state_dict(), "mixed": self.mp_p.state(), "assignment": self.assignment,
            "rng": copy.deepcopy(self.rng.bit_generator.state), "rollouts": self.rollouts,
            "env": self._env_state(),
        }

    def load_state_dict(self, s: dict) -> None:
        self._check_plan(s)
        self.pol.set_params(s["policy"])
        self.val.set_params(s["value"])
        for t, params in s.get("trunks", {}).items():
            self.trunks[t].set_params(params)
        if s["log_std"] is not None:
            self.log_std = np.array(s["log_std"])
        self._make_views()
        self.opt.load_state_dict(s["opt"])
        self.mp_p.load(s["mixed"])  # scaler and step count are shared with mp_v
        self.rng.bit_generator.state = s["rng"]
        self.rollouts = int(s["rollouts"])
        self._load_env(s.get("env"))


def a2c_graph(bld, design, nets):
    """Its training graph: the n-step returns, the policy and value heads (on a shared trunk where the design has
    one), one loss, backward, updates."""
    ret = bld.node("returns", "returns", "returns", RETURNS_FLOPS * bld.batch, 3 * bld.batch * bld.B)
    actor_critic(bld, design, nets, ret, bld.batch * bld.B)


register_algorithm(Algorithm("a2c", A2C, A2CArgs, batch_size, resolve=resolve_hyperparams,
                             graph=a2c_graph,
                             grad_steps=lambda hp: 1.0 / (hp["n_steps"] * hp["num_envs"]),
                             summary="A2C (Stable-Baselines3) with AP-DRL's mixed precision"))
