"""SAC on the host (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications": twin critics,
no value network, a learned entropy coefficient) as Stable-Baselines3's ``SAC``, at CleanRL
``sac_continuous_action.py`` quality, with AP-DRL's mixed precision.

Hyperparameters (``SACArgs``): SB3's names and defaults (learning_rate 3e-4, buffer_size 1e6,
learning_starts 100, batch_size 256 (the design's), tau 0.005, gamma 0.99, train_freq 1,
gradient_steps 1, ent_coef ``auto``, target_update_interval 1, target_entropy ``auto``); a design's
``hyperparams`` override them, then ``--config`` (RL Zoo's ``sac.yml`` entries as published) and ``--set``.
``use_sde`` (gSDE) is not supported: true is refused.

Policy (SB3's ``SquashedDiagGaussianDistribution``): the actor network maps s to 2 x dim(A) outputs,
the mean ``mu`` and ``log_std`` (SB3's two heads, one Dense here: the same function); log_std is clipped
to [-20, 2] (SB3's LOG_STD_MIN / MAX; CleanRL instead squashes it with tanh into [-5, 2]: SB3's is
followed, the benchmark compares with SB3); ``u = mu + exp(log_std) * eps``, eps ~ N(0, 1) from the
run's Generator; ``a = tanh(u)`` in [-1, 1] (what the critics read and the buffer stores, SB3's
"buffer action"); the environment receives ``a * action_scale + action_bias``. log pi(a|s) =
sum_j [-eps_j^2 / 2 - log_std_j - log(2 pi) / 2] - sum_j log(1 - a_j^2 + 1e-6) (SB3's epsilon; the
action box's scale is outside the policy, as SB3, not in the log-prob as CleanRL). Until
``learning_starts`` environment steps, actions are uniform in the box (SB3: ``action_space.sample()``;
here drawn from the run's Generator so a resume reproduces them). ``predict(deterministic=True)``:
``tanh(mu)`` scaled to the box.

One gradient step (SB3 ``SAC.train``; ``alpha`` = exp(log_alpha) as it was before this step's alpha update):
  critics: y = r + gamma (1 - terminated) (min(Q1'(s', a'), Q2'(s', a')) - alpha log pi(a'|s')), a' ~ pi(s')
  through the online actor, the targets Q1', Q2' Polyak copies; loss 0.5 (MSE(Q1(s, a), y) + MSE(Q2(s, a), y));
  actor: a_pi ~ pi(s) (reparameterized), loss mean(alpha log pi(a_pi|s) - min(Q1(s, a_pi), Q2(s, a_pi)))
  through the freshly updated critics (gradient of the min to the smaller one; ties to Q1, as torch.min);
  alpha (``ent_coef`` auto): loss -mean(log_alpha (log pi(a_pi|s) + target_entropy)), its own Adam,
  log_alpha starts at log(1) (``auto``) or log(x) (``auto_x``); a number is a fixed alpha.
  targets: ``tau`` Polyak step of both critics when the step's index within its round of
  ``gradient_steps`` is a multiple of ``target_update_interval`` (SB3 counts that index, not the
  global step). The actor, both critics (one Adam over both: Adam is elementwise, so two give the
  same) and alpha use ``learning_rate``, annealed linearly to 0 over the run (SB3's
  progress_remaining after each env step) when ``anneal_lr`` (RL Zoo's ``lin_<lr>``).
Training: every ``train_freq`` vector steps, once more than ``learning_starts`` env steps are done,
``gradient_steps`` gradient steps (-1: as many as env steps since the last round) on minibatches of
``batch_size`` drawn uniformly with replacement (host/algorithms/replay.py). ``terminated`` is the done
flag of the target; a truncated episode's s' is its final observation.

The reparameterized actor gradient in the layer language: dL/da_pi leaves ``qf1@pi.fc1.bwd`` /
``qf2@pi.fc1.bwd`` (``backward(need_input_grad=True, param_grads=False)``, the action columns, each
masked to where its Q is the minimum), then the ``policy_grad`` node (PS) adds the log-prob's own
terms and takes it through tanh and the sampling to d/d(mu, log_std), which the actor's backward
receives (``squash_backward``).

Training graph (``sac_graph``): ``actor@next.<layer>.fwd`` is the actor on s' (the online weights: SAC
keeps no target actor; the actor's update nodes feed it), ``next_sample`` squashes and samples a', the critics'
``tfwd`` on the target copies, ``critic_loss``, their backward and update; ``actor.<layer>.fwd`` on s,
``policy_sample``, ``alpha_loss``, ``qf1@pi`` / ``qf2@pi`` forward through the updated critics,
``actor_loss``, their input-gradient backward, ``policy_grad``, the actor's backward and update; the
critics' ``soft`` nodes. The five sampling and loss nodes compute on the PS in FP32 (their exp, log,
tanh; a plan putting one elsewhere is refused; the SAC designs pin them there).

Precision (``precision``): ``fp32`` = every node on the PS; ``mixed`` = each node in its unit's format
under a plan (host/mixed.py): one ``MixedPrecision`` per instance: ``actor`` (its fwd, bwd, upd),
``actor@next`` (the actor's weights on s', forward only), ``qf1`` / ``qf2`` (linked: one loss, one scale),
``qf1@pi`` / ``qf2@pi`` (the critics' weights again, ``update=False``) linked with ``actor``: one loss scale
and one step count over actor_loss -> critics@pi backward
-> policy_grad -> actor backward. A design whose PL format is fixed point (``formats['pl']``, and its PL
kernels' formats) trains in fixed point there, without loss scaling (as F-DDPG's gradient kernel).
Target weights are kept in FP32 after each Polyak step, like DDPG's. Acting runs on the PS in FP32.

Checkpoint: the three networks and the two target critics, the three Adams, log_alpha, the loss
scalers, the numpy Generator state, the global step, the replay buffer and the envs: a resumed run
equals an uninterrupted one bit for bit.

Per-update metrics: episodes, episodic_return / length, train_steps (gradient steps), qf1_loss, qf2_loss,
qf1_values, actor_loss, ent_coef (alpha, end of update), ent_coef_loss, entropy (mean -log pi of the
actor's samples), critic_loss_scale / actor_loss_scale, quantized, the mixed-precision counts,
critic_skipped, actor_skipped, and phase seconds ``t_<phase>`` for ``PHASES``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FixedFormat, parse_format
from rlhls.designs.graph import out_bytes

from ..envs import EpisodeTracker
from ..hyperparams import hp
from ..mixed import PRECISIONS, MixedPrecision, MixedPrecisionArgs, _fp32_inplace, count_columns, ps_forward
from ..optim import make_optimizer
from ..phases import timed
from ..rlzoo import schedule, train_freq, whole
from . import Algorithm, register_algorithm
from .base import TrainerBase, adapt_network, check_buffer_memory, check_memory, param_views, sample_bytes
from .ddpg import _Buffer, soft_update

__all__ = ["SACArgs", "batch_size", "PHASES", "LOG_STD_MIN", "LOG_STD_MAX", "resolve_hyperparams",
           "parse_ent_coef", "squash_sample", "squash_backward", "node_runs", "sac_graph", "SAC"]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SB3's clip of the actor's log_std
LOGP_EPS = 1e-6  # SB3's epsilon in log(1 - tanh(u)^2 + eps)
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
PS_NODES = ("next_sample", "critic_loss", "policy_sample", "alpha_loss", "actor_loss", "policy_grad")


def parse_ent_coef(v) -> tuple[float, bool]:
    """(initial alpha, learned) of ``ent_coef``: 'auto' (1.0, learned), 'auto_<x>' (x, learned) or a
    number >= 0 (fixed); None when it is none of these."""
    text = str(v).strip()
    learned = text.startswith("auto")
    if learned:
        text = text[5:] if text.startswith("auto_") else ("1.0" if text == "auto" else "")
    try:
        x = float(text)
    except ValueError:
        return None  # type: ignore[return-value]
    if not math.isfinite(x) or x < 0 or (learned and x <= 0):
        return None  # type: ignore[return-value]
    return x, learned


def _sb3_text(key):
    """ent_coef / target_entropy: 'auto...' or a number, kept as text (our field's type)."""
    def fn(v, ctx):
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ctx.error(key, f"{v!r}: expected 'auto' or a number")
        return {key: str(v)}
    return fn


def _sb3_lr(v, ctx):
    lr, annealed = schedule(ctx, "learning_rate", v)
    return {"learning_rate": lr, "anneal_lr": annealed}


def _sb3_gradient_steps(v, ctx):
    n = whole(ctx, "gradient_steps", v, low=-1)
    if n == 0:
        raise ctx.error("gradient_steps", "0: expected a whole number >= 1, or -1")
    return {"gradient_steps": n}


@dataclass
class SACArgs(MixedPrecisionArgs):
    """SAC's hyperparameters: Stable-Baselines3 SAC's names and defaults (the design's batch size)."""

    algorithm = "SAC"
    sb3 = {"learning_rate": _sb3_lr, "train_freq": lambda v, ctx: {"train_freq": train_freq(ctx, v)},
           "gradient_steps": _sb3_gradient_steps, "ent_coef": _sb3_text("ent_coef"),
           "target_entropy": _sb3_text("target_entropy")}
    num_envs: int = hp(1, "parallel sub-environments", low=1)
    learning_rate: float = hp(3e-4, "Adam step size of actor, critics and entropy coefficient", low=0.0)
    anneal_lr: bool = hp(False, "anneal the learning rate linearly to 0 over the run (RL Zoo's lin_<lr>)")
    buffer_size: int = hp(1_000_000, "replay buffer capacity in transitions", low=1)
    learning_starts: int = hp(100, "env steps of uniform random actions before learning", low=0)
    batch_size: int = hp(256, "minibatch size (default: the design's batch)", low=1)
    tau: float = hp(0.005, "target critics' Polyak rate", above=0.0, high=1.0)
    gamma: float = hp(0.99, "discount factor", low=0.0, high=1.0)
    train_freq: int = hp(1, "vector-env steps between training rounds", low=1)
    gradient_steps: int = hp(1, "gradient steps per training round (-1: as many as env steps in the round)",
                             low=-1)
    ent_coef: str = hp("auto", "entropy coefficient alpha: auto (learned from 1.0), auto_<x> (learned from x) or "
                       "a fixed number")
    target_entropy: str = hp("auto", "entropy target of the learned alpha: auto (-dim(A)) or a number")
    target_update_interval: int = hp(1, "gradient steps between target updates (SB3: index within a round)",
                                     low=1)
    use_sde: bool = hp(False, "generalized state-dependent exploration: not supported (true is refused)")
    adam_eps: float = hp(1e-8, "Adam epsilon", above=0.0)
    steps_per_update: int = hp(1000, "env steps per runner update (one metrics row and checkpoint)", low=1)
    precision: str = hp("fp32", "fp32 (all on the PS) or mixed (the plan's units)", choices=PRECISIONS)

    @classmethod
    def defaults_for(cls, design):
        return {"batch_size": int(design.batch_size)}

    def check(self, design):
        if self.use_sde:
            raise RlhlsError("SAC hyperparameter use_sde = True: generalized state-dependent exploration (gSDE) is "
                             "not supported")
        if self.gradient_steps == 0:
            raise RlhlsError("SAC hyperparameter gradient_steps = 0: expected >= 1, or -1 (as many as env steps)")
        if parse_ent_coef(self.ent_coef) is None:
            raise RlhlsError(f"SAC hyperparameter ent_coef = {self.ent_coef!r}: expected auto, auto_<initial value "
                             "> 0> or a number >= 0")
        if self.target_entropy != "auto":
            try:
                te = float(self.target_entropy)
            except ValueError:
                te = float("nan")
            if not math.isfinite(te):
                raise RlhlsError(f"SAC hyperparameter target_entropy = {self.target_entropy!r}: expected auto or a "
                                 "finite number")
        if self.buffer_size < self.num_envs:
            raise RlhlsError(f"SAC hyperparameters: buffer_size {self.buffer_size} is smaller than num_envs "
                             f"{self.num_envs}")
        if self.steps_per_update % self.num_envs:
            raise RlhlsError(f"SAC hyperparameters: steps_per_update {self.steps_per_update} is not a multiple "
                             f"of num_envs {self.num_envs}")
        check_buffer_memory(self.buffer_size, 4 * int(np.prod(design.obs_shape)) + 4 * int(design.action_dim)
                            + 8 + 4 + 4)
        check_memory(f"batch_size = {self.batch_size}", self.batch_size * sample_bytes(design), "a batch at least")


def batch_size(hp: dict) -> int:
    return hp["batch_size"]


def grad_steps(hp: dict) -> float:
    """Gradient steps per environment step (host/perf.py)."""
    n, f = hp.get("num_envs", 1), hp.get("train_freq", 1)
    g = hp.get("gradient_steps", 1)
    return (f * n if g == -1 else g) / (f * n)


PHASES = ("dnn_inference", "env_run", "storing_transitions", "sample", "target_forward", "update_forward",
          "backprop", "weight_update", "soft_update")


def resolve_hyperparams(design, overrides: dict | None = None, config: dict | None = None) -> dict:
    """SACArgs: SB3's defaults <- the design's hyperparameters (and batch) <- config <- overrides."""
    return SACArgs.resolve(design, overrides, config)


# -- the squashed Gaussian's log-prob node (PS, FP32 values) ------------------------------------------


def _q32(x) -> np.ndarray:
    return np.asarray(np.asarray(x, dtype=np.float64).astype(np.float32), dtype=np.float64)


def squash_sample(out, eps) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(a, log pi(a|s), cache) of the actor's outputs `out` (batch x 2A: mu, raw log_std) and the noise
    `eps` (batch x A): a = tanh(mu + exp(clip(log_std)) eps) and its log-prob with the tanh correction
    (module docstring). Each result rounded to FP32."""
    out, eps = np.asarray(out, dtype=np.float64), np.asarray(eps, dtype=np.float64)
    A = eps.shape[1]
    mu, raw = out[:, :A], out[:, A:]
    log_std = np.clip(raw, LOG_STD_MIN, LOG_STD_MAX)
    std = _q32(np.exp(log_std))
    a = _q32(np.tanh(_q32(mu + _q32(std * eps))))
    gauss = -0.5 * eps * eps - log_std - HALF_LOG_2PI
    logp = _q32(np.sum(gauss, axis=1) - np.sum(np.log(1.0 - a * a + LOGP_EPS), axis=1))
    return a, logp, (a, std, eps, raw)


def squash_backward(cache, g_a, g_logp) -> np.ndarray:
    """d/d(actor outputs) (batch x 2A) of a loss whose gradients are `g_a` w.r.t. the action a (batch x
    A, through whatever reads it) and `g_logp` w.r.t. log pi (batch): the reparameterization (eps fixed)
    through tanh, the sampling and the log_std clip (zero outside [-20, 2], as torch.clamp)."""
    a, std, eps, raw = cache
    g_logp = np.asarray(g_logp, dtype=np.float64)[:, None]
    ga = np.asarray(g_a, dtype=np.float64) + g_logp * (2.0 * a / (1.0 - a * a + LOGP_EPS))
    gu = ga * (1.0 - a * a)
    g_log_std = (gu * std * eps - g_logp) * ((raw >= LOG_STD_MIN) & (raw <= LOG_STD_MAX))
    return _q32(np.concatenate([gu, g_log_std], axis=1))


class SAC(TrainerBase):
    """One SAC run (the constructor and interface: ``TrainerBase``)."""

    algorithm = "sac"
    networks = ("actor", "qf1", "qf2")
    resolve_hyperparams = staticmethod(resolve_hyperparams)

    def _setup(self, design, nets: dict, assignment) -> None:
        hp = self.hp
        self._continuous_box("tanh-squashed policy")
        actor, q1, q2 = nets["actor"], nets["qf1"], nets["qf2"]
        if self.env_id != design.env_id:
            actor = adapt_network(actor, self.obs_dim, 2 * self.act_dim)
            q1 = adapt_network(q1, self.obs_dim + self.act_dim, 1)
            q2 = adapt_network(q2, self.obs_dim + self.act_dim, 1)
        if actor.input_shape != (self.obs_dim,) or actor.output_shape != (2 * self.act_dim,):
            raise RlhlsError(f"network 'actor' maps {actor.input_shape} -> {actor.output_shape} but SAC on "
                             f"'{self.env_id}' needs ({self.obs_dim},) -> ({2 * self.act_dim},) (mean and log_std "
                             "of each action)")
        if actor.layers[-1].kind != "Dense":
            raise RlhlsError(f"network 'actor' of '{design.name}' must end in a Dense layer (mean and log_std; "
                             f"the squashing is SAC's), not {actor.layers[-1].kind}")
        for name, q in (("qf1", q1), ("qf2", q2)):
            if q.input_shape != (self.obs_dim + self.act_dim,) or q.output_shape != (1,):
                raise RlhlsError(f"network '{name}' maps {q.input_shape} -> {q.output_shape}, expected "
                                 f"({self.obs_dim + self.act_dim},) = concat(obs, action) -> (1,)")
        self.actor, self.qf1, self.qf2 = actor, q1, q2
        self._take_plan(assignment, hp["batch_size"])
        if self.assignment is not None:
            off = [n for n in PS_NODES if self.assignment.get(n, "PS") != "PS"]
            if off:
                raise RlhlsError(f"plan: SAC's node '{off[0]}' on the {self.assignment[off[0]]}; its exp, log and "
                                 "tanh run on the PS in FP32")
        kw = self._scaling(ps_math=hp["ps_math"])
        mp = lambda net, inst, loss, **k: MixedPrecision(design, net, inst, self.assignment,  # noqa: E731
                                                         loss_node=loss, **kw, **k)
        self.mp_a = mp(actor, "actor", "actor_loss", target=False)
        # the actor on s': its weights, forward only (its backward's units: placeholders, never run)
        asg = self.assignment
        self.mp_n = MixedPrecision(design, actor, "actor@next", None if asg is None else
                                   {**asg, **{f"actor@next.{l.name}.bwd": "PS" for l in actor.layers}},
                                   loss_node="critic_loss", target=False, update=False, master_of=self.mp_a, **kw)
        self.mp_q1, self.mp_q2 = mp(q1, "qf1", "critic_loss"), mp(q2, "qf2", "critic_loss")
        MixedPrecision.link(self.mp_q1, self.mp_q2)  # one critic loss: one scale
        self.mp_p1 = mp(q1, "qf1@pi", "actor_loss", target=False, update=False, master_of=self.mp_q1)
        self.mp_p2 = mp(q2, "qf2@pi", "actor_loss", target=False, update=False, master_of=self.mp_q2)
        MixedPrecision.link(self.mp_a, self.mp_p1, self.mp_p2, self.mp_n)  # one actor loss over the whole path
        if isinstance(self.mp_a.prec["PL"].storage, FixedFormat):  # fixed-point gradients: no loss scaling
            for m in (self.mp_a, self.mp_q1):  # (the linked instances share these scalers)
                m.scaler.enabled, m.scaler.scale = False, 1.0
        self._views()
        self.mp_a.round_masters(self.views_a)
        self.mp_q1.round_masters(self.views_c)
        self.target_q1, self.target_q2 = copy.deepcopy(q1), copy.deepcopy(q2)
        lr, eps = hp["learning_rate"], hp["adam_eps"]
        self.opt_a, self.opt_c = make_optimizer("adam", lr, eps=eps), make_optimizer("adam", lr, eps=eps)
        alpha0, self.learn_alpha = parse_ent_coef(hp["ent_coef"])
        self.log_alpha = np.array([math.log(alpha0) if alpha0 > 0 else -np.inf], dtype=np.float32)
        self.opt_alpha = make_optimizer("adam", lr, eps=eps)
        te = hp["target_entropy"]
        self.target_entropy = float(-self.act_dim if te == "auto" else float(te))
        self.fp32 = parse_format("fp32")
        self.rb = _Buffer(hp["buffer_size"], (self.obs_dim,), self.envs.single_observation_space.dtype, self.act_dim)
        self.rng = np.random.default_rng(self.seed)
        self.steps_per_update = hp["steps_per_update"]
        self.global_step = 0  # vector steps taken
        self.obs = None
        self.tracker = EpisodeTracker(hp["num_envs"])

    def _views(self) -> None:
        self.views_a = param_views("actor", self.actor)
        # both critics behind one loss: qf2's parameters through the linked instance's layer keys
        self.views_c = {**param_views("qf1", self.qf1), **param_views("qf2", self.qf2, "qf2.")}

    # -- acting: PS, FP32
    def _policy_out(self, obs) -> np.ndarray:
        return ps_forward(self.actor, obs, self.hp["ps_math"])

    def _to_env(self, a) -> np.ndarray:
        env = self.fp32.quantize(np.asarray(a, dtype=np.float64) * self.action_scale + self.action_bias)
        return np.clip(env, self.low, self.high).astype(self.envs.single_action_space.dtype)

    def predict(self, obs, deterministic: bool = True, rng=None) -> np.ndarray:
        """tanh(mu(s)) scaled to the box; with ``deterministic=False`` sampled with `rng`'s noise."""
        out = self._policy_out(obs)
        if deterministic:
            a = self.fp32.quantize(np.tanh(out[:, :self.act_dim]))
        else:
            rng = rng if rng is not None else np.random.default_rng()
            a, _, _ = squash_sample(out, rng.standard_normal((out.shape[0], self.act_dim)))
        return self._to_env(a)

    @property
    def alpha(self) -> float:
        return float(np.exp(np.float64(self.log_alpha[0])))

    # -- one gradient step under the plan
    def _sample_node(self, mp, s):
        """The actor (`mp`: ``actor`` or ``actor@next``) on `s`, squashed and sampled on the PS -> (a, logp,
        cache)."""
        y, u = mp.forward(s, "fwd")
        out = mp.convert(y, u, "PS")
        eps = self.rng.standard_normal((s.shape[0], self.act_dim))
        return squash_sample(out, eps)

    @staticmethod
    def _critic_in(mp, s, a, phase):
        """concat(obs, action), both from the PS, as the critic's first node reads it -> (x, its unit)."""
        first = mp.unit_of(mp.net.layers[0].name, phase)
        return mp.convert(np.concatenate([s, a], axis=1), "PS", first), first

    def critic_step(self, s, s2, a, r, d, alpha: float, times: dict) -> dict:
        hp, B = self.hp, s.shape[0]
        m1, m2 = self.mp_q1, self.mp_q2
        with timed(times, "target_forward"):
            a2, logp2, _ = self._sample_node(self.mp_n, s2)
            qt = []
            for m, tgt in ((m1, self.target_q1), (m2, self.target_q2)):
                x, u0 = self._critic_in(m, s2, a2, "tfwd")
                q, uq = m.forward(x, "tfwd", net=tgt, src=u0)
                qt.append(m.to_loss(q, uq)[:, 0])
        with timed(times, "update_forward"):
            qs = []
            for m in (m1, m2):
                x, u0 = self._critic_in(m, s, a, "fwd")
                q, uq = m.forward(x, "fwd", src=u0)
                qs.append(m.to_loss(q, uq)[:, 0])
            F = self.fp32  # critic_loss on the PS
            y = F.quantize(r + hp["gamma"] * (1.0 - d) * F.quantize(np.minimum(qt[0], qt[1]) - alpha * logp2))
            scale = m1.loss_scale()
            with np.errstate(invalid="ignore", over="ignore"):
                deltas = [F.quantize(q - y) for q in qs]
                losses = [float(np.mean(dl * dl)) for dl in deltas]
                grads = [F.quantize(dl * (scale / B))[:, None] for dl in deltas]  # d 0.5 (MSE1 + MSE2) / dQ
        with timed(times, "backprop"):
            g: dict = {}
            for m, gq, net, inst in ((m1, grads[0], self.qf1, "qf1"), (m2, grads[1], self.qf2, "qf2")):
                m.backward(gq, "PS")
                g.update({k: net[layer.rsplit(".", 1)[-1]].grads[k.rsplit(".", 1)[1]]
                          for k, (layer, _) in self.views_c.items() if k.startswith(inst + ".")})
        with timed(times, "weight_update"):
            event = m1.apply(self.opt_c, self.views_c, g)
        return {"qf1_loss": losses[0], "qf2_loss": losses[1], "qf1_values": float(np.mean(qs[0])), "event": event}

    def actor_step(self, s, alpha: float, times: dict) -> dict:
        mp, B = self.mp_a, s.shape[0]
        F = self.fp32
        with timed(times, "update_forward"):
            a, logp, cache = self._sample_node(mp, s)
            qs = []
            for m in (self.mp_p1, self.mp_p2):
                x, u0 = self._critic_in(m, s, a, "fwd")
                q, uq = m.forward(x, "fwd", src=u0)
                qs.append(m.to_loss(q, uq)[:, 0])
            first = qs[0] <= qs[1]  # torch.min's gradient: to the smaller; ties to Q1
            loss = float(np.mean(alpha * logp - np.minimum(qs[0], qs[1])))
            scale = mp.loss_scale()
            g_q = F.quantize(np.full(B, -scale / B))
            g_q1, g_q2 = np.where(first, g_q, 0.0)[:, None], np.where(first, 0.0, g_q)[:, None]
        with timed(times, "backprop"):
            g_a = np.zeros((B, self.act_dim))
            for m, gq in ((self.mp_p1, g_q1), (self.mp_p2, g_q2)):
                dx = m.backward(gq, "PS", need_input_grad=True, param_grads=False)  # dQ/d(obs, a), scaled
                src = m.unit_of(m.net.layers[0].name, "bwd")
                g_a = g_a + m.convert(dx[:, self.obs_dim:], src, "PS", "grad")
            with np.errstate(invalid="ignore", over="ignore"):  # policy_grad (PS)
                g_out = squash_backward(cache, F.quantize(g_a), np.full(B, alpha * scale / B))
            mp.backward(g_out, "PS")
            grads = {k: self.actor[layer].grads[k.rsplit(".", 1)[1]] for k, (layer, _) in self.views_a.items()}
        with timed(times, "weight_update"):
            event = mp.apply(self.opt_a, self.views_a, grads)
        return {"actor_loss": loss, "logp": logp, "event": event}

    def alpha_step(self, logp) -> float:
        """One Adam step of log_alpha on -mean(log_alpha (logp + target_entropy)); returns the loss."""
        if not self.learn_alpha:
            return float("nan")
        loss = -float(self.log_alpha[0]) * float(np.mean(logp + self.target_entropy))
        g = np.array([-np.mean(logp + self.target_entropy)], dtype=np.float32)
        self.opt_alpha.step({"log_alpha": self.log_alpha}, {"log_alpha": g})
        return loss

    def update_targets(self) -> None:
        tau = self.hp["tau"]
        for net, tgt in ((self.qf1, self.target_q1), (self.qf2, self.target_q2)):
            soft_update(net, tgt, tau)
            for layer in tgt.layers:  # the soft node's FP32 (as DDPG's)
                for v in layer.params.values():
                    _fp32_inplace(v)

    def gradient_step(self, s, s2, a, r, d, times: dict, target: bool) -> dict:
        """One SAC gradient step on a minibatch (module docstring)."""
        alpha = self.alpha  # this step's losses: alpha before its update (SB3)
        k = self.mp_q1.steps
        c = self.critic_step(s, s2, a, r, d, alpha, times)
        self.mp_a.steps = k  # quantization delay counted in critic steps, for every instance
        st = self.actor_step(s, alpha, times)
        with timed(times, "weight_update"):
            alpha_loss = self.alpha_step(st["logp"])
        if target:
            with timed(times, "soft_update"):
                self.update_targets()
        return {**c, "actor_loss": st["actor_loss"], "event_a": st["event"], "ent_coef_loss": alpha_loss,
                "entropy": -float(np.mean(st["logp"]))}

    def _set_lr(self, total_steps: int) -> None:
        if self.hp["anneal_lr"]:  # SB3: progress_remaining after the env step, for all three optimizers
            frac = 1.0 - (self.global_step * self.hp["num_envs"]) / max(1, total_steps)
            for opt in (self.opt_a, self.opt_c, self.opt_alpha):
                opt.lr = self.hp["learning_rate"] * frac

    # -- one update = steps_per_update env steps
    def train_update(self, update: int, total_updates: int) -> dict:
        hp, times = self.hp, {p: 0.0 for p in PHASES}
        N = hp["num_envs"]
        total = total_updates * self.steps_per_update
        if self.obs is None:
            with timed(times, "env_run"):
                self.obs, _ = self.envs.reset()
        episodes: list = []
        rec: dict[str, list] = {k: [] for k in ("qf1_loss", "qf2_loss", "qf1_values", "actor_loss", "ent_coef_loss",
                                                "entropy")}
        n_steps = skip_c = skip_a = 0
        for _ in range(self.steps_per_update // N):
            g = self.global_step
            with timed(times, "dnn_inference"):
                if g * N < hp["learning_starts"]:
                    a = self.rng.uniform(-1.0, 1.0, size=(N, self.act_dim))
                else:
                    out = self._policy_out(self.obs)
                    a, _, _ = squash_sample(out, self.rng.standard_normal((N, self.act_dim)))
                a = a.astype(np.float32)
                actions = self._to_env(a)
            with timed(times, "env_run"):
                next_obs, r, term, trunc, infos = self.envs.step(actions)
                done = np.logical_or(term, trunc)
            with timed(times, "storing_transitions"):
                real_next = next_obs.copy()
                for i in np.flatnonzero(done):
                    real_next[i] = infos["final_obs"][i]
                self.rb.add(self.obs, real_next, a, r, term)
                for ret, length in self.tracker.step(np.asarray(r, dtype=np.float64), done):
                    episodes.append(((g + 1) * N, ret, length))
            self.obs = next_obs
            self.global_step += 1
            done_steps = self.global_step * N
            if self.global_step % hp["train_freq"] == 0 and done_steps > hp["learning_starts"]:
                n = hp["gradient_steps"] if hp["gradient_steps"] >= 0 else hp["train_freq"] * N
                self._set_lr(total)
                for j in range(n):
                    with timed(times, "sample"):
                        s, s2, ab, rew, d = self.rb.sample(self.rng, hp["batch_size"])
                        ab = ab.astype(np.float64)
                    st = self.gradient_step(s, s2, ab, rew, d, times, j % hp["target_update_interval"] == 0)
                    for key in rec:
                        rec[key].append(st[key])
                    skip_c += st["event"] in ("skip", "skip_shrink")
                    skip_a += st["event_a"] in ("skip", "skip_shrink")
                    n_steps += 1
        c: dict[str, int] = {}
        for m in (self.mp_q1, self.mp_q2, self.mp_a, self.mp_n, self.mp_p1, self.mp_p2):
            for k, v in m.take_counts().items():
                c[k] = c.get(k, 0) + v
        rets = [e[1] for e in episodes]
        nan = float("nan")

        def mean(xs):
            return float(np.nanmean(xs)) if xs and np.isfinite(xs).any() else nan

        row = {
            "episodes": len(episodes),
            "episodic_return": float(np.mean(rets)) if rets else nan,
            "episodic_length": float(np.mean([e[2] for e in episodes])) if rets else nan,
            "train_steps": n_steps, **{k: mean(v) for k, v in rec.items()}, "ent_coef": self.alpha,
            "critic_loss_scale": self.mp_q1.loss_scale(), "actor_loss_scale": self.mp_a.loss_scale(),
            "quantized": int(self.mp_q1.quantized),
            **count_columns(c), "critic_skipped": skip_c, "actor_skipped": skip_a,
        }
        row.update({f"t_{p}": times[p] for p in PHASES})
        row["_episodes"] = episodes
        return row

    # -- checkpoint
    def state_dict(self) -> dict:
        return {
            "actor": self.actor.get_params(), "qf1": self.qf1.get_params(), "qf2": self.qf2.get_params(),
            "target_qf1": self.target_q1.get_params(), "target_qf2": self.target_q2.get_params(),
            "opt_actor": self.opt_a.state_dict(), "opt_critic": self.opt_c.state_dict(),
            "opt_alpha": self.opt_alpha.state_dict(), "log_alpha": self.log_alpha.copy(),
            "mixed": {"actor": self.mp_a.state(), "critic": self.mp_q1.state()},
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "global_step": self.global_step, "assignment": self.assignment,
            "buffer": self.rb.save(self.run_dir) if self.run_dir else self.rb.state(),  # replay.py: files
            "env": self._env_state(),
        }

    def load_state_dict(self, s: dict) -> None:
        self._check_plan(s)
        for net, key in ((self.actor, "actor"), (self.qf1, "qf1"), (self.qf2, "qf2"), (self.target_q1, "target_qf1"),
                         (self.target_q2, "target_qf2")):
            net.set_params(s[key])
        self._views()
        self.opt_a.load_state_dict(s["opt_actor"])
        self.opt_c.load_state_dict(s["opt_critic"])
        self.opt_alpha.load_state_dict(s["opt_alpha"])
        self.log_alpha = np.array(s["log_alpha"], dtype=np.float32).reshape(1)
        for m, key in ((self.mp_a, "actor"), (self.mp_q1, "critic")):  # the linked ones share these
            m.load(s["mixed"][key])
        self.rng.bit_generator.state = s["rng"]
        self.global_step = int(s["global_step"])
        self.rb.load(s["buffer"], self.run_dir)
        self._load_env(s.get("env"))


def node_runs(node, hp: dict) -> float:
    """Runs of a training-graph node per gradient step: the critics' Polyak updates every
    ``target_update_interval`` steps, everything else once."""
    return 1.0 / hp["target_update_interval"] if node.phase == "soft" else 1.0


def sac_graph(bld, design, nets):
    """Its training graph (module docstring)."""
    actor, q1, q2 = nets["actor"], nets["qf1"], nets["qf2"]
    A, b, B = design.action_dim, bld.batch, bld.B
    out_b, act_b, col_b, qb = out_bytes(bld, actor), A * b * B, b * B, out_bytes(bld, q1)
    # the critics' target: the actor on s' (online weights), a' and its log-prob
    nxt = bld.loss("next_sample", [(bld.forward("actor@next", actor, "fwd"), out_b)], A)
    qt = [bld.forward(i, q, "tfwd", [(nxt, act_b)]) for i, q in (("qf1", q1), ("qf2", q2))]
    qv = [bld.forward(i, q, "fwd") for i, q in (("qf1", q1), ("qf2", q2))]
    closs = bld.loss("critic_loss", [(n, qb) for n in qv + qt] + [(nxt, col_b)], 1)
    upd = {}
    for i, q in (("qf1", q1), ("qf2", q2)):
        upd[i] = bld.update(i, q, bld.backward(i, q, "fwd", [(closs, qb)]), design.net(i).optimizer)
    # the actor: a ~ pi(s), alpha's loss, the loss through the freshly updated critics
    smp = bld.loss("policy_sample", [(bld.forward("actor", actor, "fwd"), out_b)], A)
    bld.loss("alpha_loss", [(smp, col_b)], 1)
    qp = [bld.forward(f"{i}@pi", q, "fwd", [(smp, act_b)], weight_sources=upd[i]) for i, q in (("qf1", q1),
                                                                                            ("qf2", q2))]
    aloss = bld.loss("actor_loss", [(n, qb) for n in qp] + [(smp, col_b)], 1)
    first = bld.compute_layers(q1)[0].name
    dq = [bld.backward(f"{i}@pi", q, "fwd", [(aloss, qb)], first_input_grad=True, weights=False,
                       input_grad_cols=A)[first] for i, q in (("qf1", q1), ("qf2", q2))]
    pgrad = bld.loss("policy_grad", [(n, act_b) for n in dq] + [(smp, out_b)], A)
    aupd = bld.update("actor", actor, bld.backward("actor", actor, "fwd", [(pgrad, out_b)]),
                      design.net("actor").optimizer)
    for layer in bld.compute_layers(actor):  # the next step's forward on s' reads the new weights too
        if layer.name in aupd:
            bld.carry(aupd[layer.name], f"actor@next.{layer.name}.fwd", layer.n_params * B)
    for i, q in (("qf1", q1), ("qf2", q2)):
        bld.soft(i, q, upd[i])


register_algorithm(Algorithm("sac", SAC, SACArgs, batch_size, resolve=resolve_hyperparams, actions=("continuous",),
                             graph=sac_graph, loss_flops=lambda n: 16 * n + 8, grad_steps=grad_steps,
                             node_runs=node_runs,
                             summary="SAC (Stable-Baselines3 SAC, CleanRL sac_continuous_action.py) with twin critics, "
                                     "learned entropy coefficient and AP-DRL's mixed precision"))
