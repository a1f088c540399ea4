"""DDPG on the host (CleanRL ``ddpg_continuous_action.py`` quality) with AP-DRL's mixed precision.

Algorithm (CleanRL; ``DDPGArgs`` are its hyperparameters, a design's ``hyperparams``
override them, then ``--set``): a deterministic actor ``mu(s) = tanh(...) * action_scale +
action_bias`` (scale / bias from the action box, CleanRL's registered buffers) and a critic
``Q(s, a)`` on ``concat(obs, action)``, each with a target copy. Until global step
``learning_starts`` actions are uniform in the box (CleanRL: ``action_space.sample()``; here
drawn from the run's Generator so a resume reproduces them); afterwards ``mu(s) + noise``,
clipped to the box. Noise (``noise``): ``gaussian`` (CleanRL) N(0, exploration_noise *
action_scale), or ``ou``: Ornstein-Uhlenbeck as Stable-Baselines3 / RL Zoo
(``x += theta (0 - x) dt + sigma sqrt(dt) N(0, 1)``, theta ``ou_theta`` 0.15, dt ``ou_dt`` 1e-2,
sigma = exploration_noise * action_scale; reset per sub-env at the end of its episode).
Gaussian noise is drawn per sub-env (CleanRL draws one vector for all sub-envs; the same with
one env). Replay buffer of ``buffer_size`` transitions (uniform, with replacement); from global
step ``learning_starts`` + 1 on, every step one minibatch of ``batch_size`` (the design's batch):
critic on MSE to ``r + gamma (1 - terminated) Q'(s', mu'(s'))``; every ``policy_frequency``
steps the actor on ``-mean Q(s, mu(s))`` through the freshly updated critic, then
``target <- tau * online + (1 - tau) * target`` for both networks. Two Adams (PyTorch defaults,
lr ``learning_rate``). CleanRL's ``noise_clip`` is not used by its DDPG (TD3's knob): ignored; so are an RL
Zoo TD3 entry's ``target_policy_noise`` / ``target_noise_clip`` (SB3's DDPG sets them to 0), with a warning
(TD3, host/algorithms/td3.py, is this trainer with them, twin critics and delayed targets).
Actions are float32 (the box's dtype) before the env sees them, so the buffer stores exactly
what was applied. Observations are not normalized (CleanRL). ``actor_learning_rate`` /
``critic_learning_rate`` give the two Adams their own step sizes (Lillicrap et al.: 1e-4 / 1e-3).
A design whose output layers are wider than the environment's actions (padded with zero nodes,
F-DDPG's model 2) trains the unpadded networks: padded outputs change nothing (seed 002 §V-A).

Whole-step gradient kernels (``Kernel.train_step == 'ddpg'``, F-DDPG's ``ddpg_gradient``): when the
plan puts the nodes such a kernel implements on its unit, each step's critic and actor gradients
come from one call of it through the run's backend (``emu``: its numpy model; ``csim``: its
compiled C++; the same bits), from the parameters before the step, as the seed's FPGA returns
them; the host then applies them with its optimizers (the seed keeps the optimizer on the CPU), no
loss scaling (fixed point has none), then the Polyak step. Per-layer operations (``layer_ops``)
cannot express such a kernel (one call crosses every network and the loss), hence this hook. The
kernel takes the actions as its tanh outputs: the action box must be [-1, 1].

Environment, updates, resume: as host/algorithms/dqn.py (``envs.ReplayableVecEnv``; ``infos['final_obs']``
is s' where an episode ended; ``terminated`` is the done flag). One update = ``steps_per_update``
env steps (default 1000). The checkpoint holds the four networks, both Adams, the loss
scalers, the numpy Generator state, the OU state, the global step, the replay buffer and the
envs (replayed on load): a resumed run equals an uninterrupted one bit for bit.

Precision (``precision``): ``fp32`` = every node on the PS; ``mixed`` = each training-graph node
in its unit's format under a plan (host/mixed.py), one ``MixedPrecision`` per graph instance:
``actor`` (loss node ``actor_loss``), ``critic`` (``critic_loss``) and ``critic@pi`` (the critic
run again on mu(s) for the actor's gradient; ``update=False, master_of=critic``: its weights are
the critic's, it has no target or update node). The critic's first node reads concat(obs from the
PS, action from the actor's last node), each converted to its format. dQ/da leaves
``critic@pi.fc1.bwd`` (``backward(need_input_grad=True)``), the action columns go to the actor's
last backward node, times action_scale (the output scaling belongs to the actor's last node).
``actor`` and ``critic@pi`` are linked (``MixedPrecision.link``): one loss scale covers the whole
path actor_loss -> critic@pi backward -> actor backward, enabled when any of those nodes is on
the PL. The quantization delay counts training iterations (critic steps) for all three.
Target weights live with the ``<net>.<layer>.soft`` node that averages them (PS or PL, never
the AIE: not a matrix multiply) and are kept in FP32 after each Polyak step, like the update
node's masters; an AIE target forward reads them converted to BF16. Rounding them to an AIE
layer's BF16 instead would lose every step: tau * (online - target) is far below BF16's spacing
(weights ~0.05: spacing ~2e-4). Acting runs on the PS in FP32 (Fig. 10).

Per-update metrics: episodes, episodic_return / length, train_steps (critic steps),
actor_steps, qf1_loss, actor_loss, qf1_values (mean Q(s, a) of the minibatches),
critic_loss_scale / actor_loss_scale (end of update), quantized, skipped_steps (critic +
actor), critic_skipped, actor_skipped, scale_shrinks, scale_grows, grad_overflows,
conv_overflows, and phase seconds ``t_<phase>`` for ``PHASES``.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import out_bytes

from ..envs import EpisodeTracker
from ..hyperparams import hp
from ..mixed import PRECISIONS, MixedPrecision, MixedPrecisionArgs, _fp32_inplace, count_columns, ps_forward
from ..optim import make_optimizer
from ..phases import timed
from ..rlzoo import train_freq, whole
from . import Algorithm, register_algorithm
from .base import TrainerBase, adapt_network, check_buffer_memory, check_memory, param_views, sample_bytes
from .replay import ReplayBuffer

log = logging.getLogger(__name__)

__all__ = ["DDPGArgs", "batch_size", "PHASES", "NOISES", "resolve_hyperparams", "soft_update", "node_runs", "DDPG"]

NOISES = ("gaussian", "ou")


def _sb3_noise(v, ctx):
    kinds = {"normal": "gaussian", "ornstein-uhlenbeck": "ou"}
    if v not in kinds:
        raise ctx.error("noise_type", f"{v!r}: ours are {' and '.join(kinds)}")
    return {"noise": kinds[v]}


def _sb3_once_per_step(key):
    """train_freq / gradient_steps: ours trains one gradient step per environment step."""
    def fn(v, ctx):
        n = train_freq(ctx, v) if key == "train_freq" else v
        if key == "gradient_steps" and v == -1:  # SB3: as many as the steps since the last training
            n = train_freq(ctx, ctx.entry.get("train_freq", 1)) * whole(ctx, "n_envs", ctx.given("n_envs", "num_envs"))
        if n != 1:
            raise ctx.error(key, f"{v!r}: ours takes one gradient step per environment step")
        return {}
    return fn


# TD3's keys (target policy smoothing) that SB3's DDPG sets to 0: a TD3 entry trains here as DDPG without them
_TD3_ONLY = ("target_policy_noise", "target_noise_clip")


def _sb3_td3_only(key):
    """A TD3-only key of an RL Zoo entry: ignored, said once for all of them (a warning naming them)."""
    def fn(v, ctx):
        given = [k for k in _TD3_ONLY if k in ctx.entry]
        if key == given[0]:
            log.warning("%s: %s ignored: TD3's target policy smoothing, which DDPG does not have", ctx.where,
                        ", ".join(f"{k}={ctx.entry[k]!r}" for k in given))
        return {}
    return fn


@dataclass
class DDPGArgs(MixedPrecisionArgs):
    """DDPG's hyperparameters: CleanRL ddpg_continuous_action.py's defaults (the design's batch size)."""

    algorithm = "DDPG"
    sb3 = {"noise_type": _sb3_noise, "noise_std": "exploration_noise", "policy_delay": "policy_frequency",
           "train_freq": _sb3_once_per_step("train_freq"), "gradient_steps": _sb3_once_per_step("gradient_steps"),
           **{k: _sb3_td3_only(k) for k in _TD3_ONLY}}
    num_envs: int = hp(1, "parallel sub-environments", low=1)
    learning_rate: float = hp(3e-4, "Adam step size of actor and critic", low=0.0)
    actor_learning_rate: float | None = hp(None, "the actor's step size (None: learning_rate)", low=0.0)
    critic_learning_rate: float | None = hp(None, "the critic's step size (None: learning_rate)", low=0.0)
    buffer_size: int = hp(1_000_000, "replay buffer capacity in transitions", low=1)
    gamma: float = hp(0.99, "discount factor", low=0.0, high=1.0)
    tau: float = hp(0.005, "target networks' Polyak rate", above=0.0, high=1.0)
    batch_size: int = hp(256, "minibatch size (default: the design's batch)", low=1)
    exploration_noise: float = hp(0.1, "exploration noise scale (x the action scale)", low=0.0)
    learning_starts: int = hp(25_000, "steps of uniform random actions before learning", low=0)
    policy_frequency: int = hp(2, "critic steps per actor step", low=1)
    noise: str = hp("gaussian", "exploration noise: gaussian (CleanRL) or ou (Ornstein-Uhlenbeck, RL Zoo)",
                    choices=NOISES)
    ou_theta: float = hp(0.15, "Ornstein-Uhlenbeck mean reversion", low=0.0)
    ou_dt: float = hp(1e-2, "Ornstein-Uhlenbeck time step", above=0.0)
    optimizer: str = hp("adam", "optimizer of actor and critic", choices=("adam", "rmsprop", "sgd"))
    adam_eps: float = hp(1e-8, "Adam epsilon", above=0.0)
    steps_per_update: int = hp(1000, "env steps per runner update (one metrics row and checkpoint)", low=1)
    precision: str = hp("fp32", "fp32 (all on the PS) or mixed (the plan's units)", choices=PRECISIONS)

    @classmethod
    def defaults_for(cls, design):
        return {"batch_size": int(design.batch_size)}

    def check(self, design):
        if self.buffer_size < self.num_envs:
            raise RlhlsError(f"{self.algorithm} hyperparameters: buffer_size {self.buffer_size} is smaller than "
                             f"num_envs {self.num_envs}")
        if self.steps_per_update % self.num_envs:
            raise RlhlsError(f"{self.algorithm} hyperparameters: steps_per_update {self.steps_per_update} is not a "
                             f"multiple of num_envs {self.num_envs}")
        # _Buffer per transition: float32 observation and actions, DQN's int64 action slot, reward and done
        check_buffer_memory(self.buffer_size, 4 * int(np.prod(design.obs_shape)) + 4 * int(design.action_dim)
                            + 8 + 4 + 4)
        check_memory(f"batch_size = {self.batch_size}", self.batch_size * sample_bytes(design), "a batch at least")


def batch_size(hp: dict) -> int:
    return hp["batch_size"]


PHASES = ("dnn_inference", "env_run", "storing_transitions", "sample", "target_forward", "update_forward",
          "backprop", "weight_update", "soft_update")


def resolve_hyperparams(design, overrides: dict | None = None, config: dict | None = None) -> dict:
    """DDPGArgs: CleanRL's defaults <- the design's hyperparameters (and batch) <- config <- overrides."""
    return DDPGArgs.resolve(design, overrides, config)


def soft_update(online, target, tau: float) -> None:
    """Polyak step of every target parameter, ``tau * online + (1 - tau) * target`` (in place:
    ``t *= 1 - tau; t += tau * a``, the same two products and sum, one temporary)."""
    for l, t in zip(online.layers, target.layers):
        for k, a in l.params.items():
            tp = t.params[k]
            tp *= 1.0 - tau
            tp += tau * a


class _Buffer(ReplayBuffer):
    """DQN's buffer with continuous actions (act_dim floats per transition, the box's float32)."""

    def __init__(self, capacity: int, obs_shape: tuple, obs_dtype, act_dim: int):
        super().__init__(capacity, obs_shape, obs_dtype)
        self.actions = np.zeros((self.capacity, act_dim), dtype=np.float32)


class DDPG(TrainerBase):
    """One DDPG run (the constructor and interface: ``TrainerBase``)."""

    algorithm = "ddpg"
    networks: tuple[str, ...] = ("actor", "critic")
    resolve_hyperparams = staticmethod(resolve_hyperparams)

    def _setup(self, design, nets: dict, assignment) -> None:
        hp = self.hp
        self._continuous_box("tanh actor")
        actor, critic = nets["actor"], nets["critic"]
        if self.env_id != design.env_id or actor.output_shape[0] > design.action_dim:

            actor = adapt_network(actor, self.obs_dim, self.act_dim)
            critic = adapt_network(critic, self.obs_dim + self.act_dim, 1)
        if actor.input_shape != (self.obs_dim,) or actor.output_shape != (self.act_dim,):
            raise RlhlsError(f"network 'actor' maps {actor.input_shape} -> {actor.output_shape} but "
                             f"'{self.env_id}' observes {self.obs_dim} values with {self.act_dim} actions")
        if critic.input_shape != (self.obs_dim + self.act_dim,) or critic.output_shape != (1,):
            raise RlhlsError(f"network 'critic' maps {critic.input_shape} -> {critic.output_shape}, expected "
                             f"({self.obs_dim + self.act_dim},) = concat(obs, action) -> (1,)")
        if actor.layers[-1].kind != "Tanh":
            raise RlhlsError(f"network 'actor' of '{design.name}' must end in Tanh (its output is scaled to the box)")
        self.actor, self.critic = actor, critic
        self._take_plan(assignment, hp["batch_size"])
        kw = self._scaling(ps_math=hp["ps_math"])
        self.mp_a, self.mp_c, self.mp_pi = self._instances(design, actor, critic, kw)
        MixedPrecision.link(self.mp_a, self.mp_pi)  # one loss: one scale over the whole actor path
        self._views()
        self.mp_a.round_masters(self.views_a)
        self.mp_c.round_masters(self.views_c)
        self._targets()
        opt_kw = {"eps": hp["adam_eps"]} if hp["optimizer"] == "adam" else {}
        lr_a, lr_c = (hp[k] if hp[k] is not None else hp["learning_rate"]
                      for k in ("actor_learning_rate", "critic_learning_rate"))
        self.opt_a = make_optimizer(hp["optimizer"], lr_a, **opt_kw)
        self.opt_c = make_optimizer(hp["optimizer"], lr_c, **opt_kw)
        self.step_kernel = self._step_kernel()
        self.fp32 = parse_format("fp32")
        self.rb = _Buffer(hp["buffer_size"], (self.obs_dim,), self.envs.single_observation_space.dtype, self.act_dim)
        self.rng = np.random.default_rng(self.seed)
        self.ou = np.zeros((hp["num_envs"], self.act_dim))
        self.steps_per_update = hp["steps_per_update"]
        self.global_step = 0
        self.obs = None
        self.tracker = EpisodeTracker(hp["num_envs"])

    def _instances(self, design, actor, critic, kw):
        """The (actor, critic, critic@pi) graph instances (module docstring); TD3 adds its second critic."""
        mp_c = MixedPrecision(design, critic, "critic", self.assignment, loss_node="critic_loss", **kw)
        mp_a = MixedPrecision(design, actor, "actor", self.assignment, loss_node="actor_loss", **kw)
        # critic@pi: the critic's weights run again on mu(s); no target forward, no update node
        mp_pi = MixedPrecision(design, critic, "critic@pi", self.assignment, loss_node="actor_loss",
                               target=False, update=False, master_of=mp_c, **kw)
        return mp_a, mp_c, mp_pi

    def _views(self) -> None:
        """The parameter views the optimizers step (again after a checkpoint's set_params)."""
        self.views_a, self.views_c = param_views("actor", self.actor), param_views("critic", self.critic)

    def _targets(self) -> None:
        self.target_actor, self.target_critic = copy.deepcopy(self.actor), copy.deepcopy(self.critic)

    def _step_kernel(self):
        """(kernel, parameters) of a whole-step gradient kernel the plan runs (module docstring), or None."""
        if self.kernels is None:
            return None
        from rlhls.designs.kernels import kernels_for

        ctx, found = self.kernels.ctx, {}
        for node in ctx.graph.nodes:
            unit = self.assignment[node.name]
            for k, p in kernels_for(node, ctx, unit) if unit != "PS" else ():
                if getattr(k, "train_step", None) == "ddpg":
                    found.setdefault(k.name, (k, p))
        if not found:
            return None
        k, p = next(iter(found.values()))
        taken = [n.name for n in ctx.graph.nodes if n.kind in k.implements and k.node_params(n, ctx) is not None]
        off = [n for n in taken if self.assignment[n] not in k.units]
        if off:
            raise RlhlsError(f"plan: kernel '{k.name}' computes DDPG's whole gradient step, but the plan puts "
                             f"'{off[0]}' on the {self.assignment[off[0]]} (expected {', '.join(k.units)})")
        if not (np.all(self.action_scale == 1.0) and np.all(self.action_bias == 0.0)):
            raise RlhlsError(f"environment '{self.env_id}': kernel '{k.name}' takes actions as its tanh outputs, "
                             f"in [-1, 1]; this action box is [{self.low}, {self.high}]")
        dense = [l for l in self.actor.layers if l.kind == "Dense"]
        p = dict(p, obs=self.obs_dim, act=self.act_dim, batch=self.hp["batch_size"], gamma=self.hp["gamma"],
                 hidden=[int(l.out_shape[0]) for l in dense[:-1]])
        for m in (self.mp_a, self.mp_c, self.mp_pi):  # fixed-point gradients: no loss scaling
            m.scaler.enabled, m.scaler.scale = False, 1.0
        return k, k.resolve(p)

    def kernel_step(self, s, s2, a, r, d, times: dict, actor: bool) -> dict:
        """One gradient step through the whole-step kernel (module docstring); applies the critic's
        gradients and, when `actor`, the actor's; then the caller's Polyak step."""
        from rlhls.designs.kernels.ddpg_gradient import pack, unpack

        k, p = self.step_kernel
        with timed(times, "backprop"):
            arrays = dict(s=s, a=a, r=r, s2=s2, done=d, actor=pack(self.actor), critic=pack(self.critic),
                          target_actor=pack(self.target_actor), target_critic=pack(self.target_critic))
            # emu: the model with the parameters resolved once (as PlanKernels.update)
            compiled = self.kernels is not None and self.kernels.compiled  # a step kernel is the plan's
            out = self.backend.call(k.name, p, **arrays) if compiled else k.model(p, **arrays)
        res: dict[str, float | str] = {"qf1_loss": float(np.mean((out["q"] - out["y"]) ** 2)),
                                       "qf1_values": float(np.mean(out["q"])),
                                       "actor_loss": -float(np.mean(out["qpi"]))}
        with timed(times, "weight_update"):
            for mp, opt, views, net, key in ((self.mp_c, self.opt_c, self.views_c, self.critic, "grad_critic"),
                                             (self.mp_a, self.opt_a, self.views_a, self.actor, "grad_actor")):
                if net is self.actor and not actor:
                    continue
                g = unpack(out[key], net)
                res["event_" + key] = mp.apply(opt, views, {v: g[layer][v.rsplit(".", 1)[1]]
                                                            for v, (layer, _) in views.items()})
        return res

    # -- acting: PS, FP32 (Fig. 10)
    def policy(self, obs) -> np.ndarray:
        """mu(s) in FP32, scaled to the action box (no noise)."""
        mu = ps_forward(self.actor, obs, self.hp["ps_math"])
        return self.fp32.quantize(mu * self.action_scale + self.action_bias)

    def predict(self, obs, deterministic: bool = True, rng=None) -> np.ndarray:
        """mu(s) (SB3's DDPG.predict adds no noise either way)."""
        return np.clip(self.policy(obs), self.low, self.high).astype(self.envs.single_action_space.dtype)

    def _noise(self, dones=None) -> np.ndarray:
        hp, N = self.hp, self.hp["num_envs"]
        sigma = hp["exploration_noise"] * self.action_scale
        if hp["noise"] == "gaussian":
            return self.rng.normal(0.0, 1.0, size=(N, self.act_dim)) * sigma
        dt = hp["ou_dt"]
        self.ou = self.ou - hp["ou_theta"] * self.ou * dt + sigma * np.sqrt(dt) * self.rng.normal(size=self.ou.shape)
        return self.ou.copy()

    # -- networks under the plan
    def _act_fwd(self, s, phase: str, net=None):
        """mu(s) through the actor ('fwd' or 'tfwd'), scaled in the last node's format -> (a, unit)."""
        y, u = self.mp_a.forward(s, phase, net=net)
        F = self.mp_a.precision(u).storage
        return F.quantize(y * self.action_scale + self.action_bias), u

    def _critic_input(self, mp, s, a, a_unit, phase):
        """concat(obs from the PS, action from the actor's last node) as the critic's first node
        reads it -> (x, that node's unit)."""
        first = mp.unit_of(self.critic.layers[0].name, phase)
        x = np.concatenate([mp.convert(s, "PS", first), mp.convert(a, a_unit, first)], axis=1)
        return x, first

    def critic_step(self, s, s2, a, r, d, times: dict) -> dict:
        hp, mp, B = self.hp, self.mp_c, s.shape[0]
        with timed(times, "target_forward"):
            a2, ua = self._act_fwd(s2, "tfwd", net=self.target_actor)
            x2, u0 = self._critic_input(mp, s2, a2, ua, "tfwd")
            qt, uq = mp.forward(x2, "tfwd", net=self.target_critic, src=u0)
            qt = mp.to_loss(qt, uq)[:, 0]
        with timed(times, "update_forward"):
            qv, u = mp.forward(np.concatenate([s, a], axis=1), "fwd")
            qv = mp.to_loss(qv, u)[:, 0]
            F = mp.precision(mp.loss_unit).storage  # the loss node computes in its unit's format
            y = F.quantize(r + hp["gamma"] * (1.0 - d) * qt)
            delta = F.quantize(qv - y)
            with np.errstate(invalid="ignore", over="ignore"):
                loss = float(np.mean(delta * delta))
                g = F.quantize(2.0 * delta * (mp.loss_scale() / B))[:, None]
        with timed(times, "backprop"):
            mp.backward(g)
            grads = {k: self.critic[layer].grads[k.rsplit(".", 1)[1]] for k, (layer, _) in self.views_c.items()}
        with timed(times, "weight_update"):
            event = mp.apply(self.opt_c, self.views_c, grads)
        return {"qf1_loss": loss, "qf1_values": float(np.mean(qv)), "event": event}

    def actor_step(self, s, times: dict) -> dict:
        mp, pi, B = self.mp_a, self.mp_pi, s.shape[0]
        with timed(times, "update_forward"):
            a, ua = self._act_fwd(s, "fwd")
            x, u0 = self._critic_input(pi, s, a, ua, "fwd")
            qpi, u = pi.forward(x, "fwd", src=u0)
            qpi = pi.to_loss(qpi, u)
            F = pi.precision(pi.loss_unit).storage
            loss = -float(np.mean(qpi))
            g = F.quantize(np.full((B, 1), -mp.loss_scale() / B))  # d(-mean Q)/dQ, scaled
        with timed(times, "backprop"):
            dx = pi.backward(g, need_input_grad=True, param_grads=False)  # dQ/d(obs, a), scaled
            src = pi.unit_of(self.critic.layers[0].name, "bwd")
            last = self.actor.layers[-1].name
            ul = mp.unit_of(last, "bwd")
            da = mp.convert(dx[:, self.obs_dim:], src, ul, "grad")
            with np.errstate(invalid="ignore", over="ignore"):
                da = mp.precision(ul).storage.quantize(da * self.action_scale)  # through a = scale * tanh + bias
            mp.backward(da, ul)
            grads = {k: self.actor[layer].grads[k.rsplit(".", 1)[1]] for k, (layer, _) in self.views_a.items()}
        with timed(times, "weight_update"):
            event = mp.apply(self.opt_a, self.views_a, grads)
        return {"actor_loss": loss, "event": event}

    def update_targets(self) -> None:
        tau = self.hp["tau"]
        for net, tgt in ((self.actor, self.target_actor), (self.critic, self.target_critic)):
            soft_update(net, tgt, tau)
            self._fp32_targets(tgt)

    @staticmethod
    def _fp32_targets(tgt) -> None:
        for layer in tgt.layers:  # the soft node's FP32 (module docstring)
            for v in layer.params.values():
                _fp32_inplace(v)

    # -- one update = steps_per_update env steps
    def train_update(self, update: int, total_updates: int) -> dict:
        hp, times = self.hp, {p: 0.0 for p in PHASES}
        N = hp["num_envs"]
        if self.obs is None:
            with timed(times, "env_run"):
                self.obs, _ = self.envs.reset()
        episodes, qf_losses, a_losses, qs = [], [], [], []
        n_critic = n_actor = skip_c = skip_a = 0
        for _ in range(self.steps_per_update // N):
            g = self.global_step
            with timed(times, "dnn_inference"):
                if g < hp["learning_starts"]:
                    actions = self.rng.uniform(self.low, self.high, size=(N, self.act_dim))
                else:
                    actions = np.clip(self.policy(self.obs) + self._noise(), self.low, self.high)
                actions = actions.astype(self.envs.single_action_space.dtype)
            with timed(times, "env_run"):
                next_obs, r, term, trunc, infos = self.envs.step(actions)
                done = np.logical_or(term, trunc)
            with timed(times, "storing_transitions"):
                real_next = next_obs.copy()
                for i in np.flatnonzero(done):
                    real_next[i] = infos["final_obs"][i]
                    self.ou[i] = 0.0  # SB3: the OU process restarts with the episode
                self.rb.add(self.obs, real_next, actions, r, term)
                for ret, length in self.tracker.step(np.asarray(r, dtype=np.float64), done):
                    episodes.append(((g + 1) * N, ret, length))
            self.obs = next_obs
            if g > hp["learning_starts"]:
                k = self.mp_c.steps  # quantization delay counted in training iterations, for all three
                with timed(times, "sample"):
                    s, s2, a, rew, d = self.rb.sample(self.rng, hp["batch_size"])
                    a = a.astype(np.float64)
                act = g % hp["policy_frequency"] == 0
                if self.step_kernel is not None and self.mp_c.quantized:  # one call, both gradients
                    if act:
                        self.mp_a.steps = k
                    st = self.kernel_step(s, s2, a, rew, d, times, act)
                    ev_c, ev_a = st["event_grad_critic"], st.get("event_grad_actor")
                else:
                    st = self.critic_step(s, s2, a, rew, d, times)
                    ev_c, ev_a = st["event"], None
                qf_losses.append(st["qf1_loss"])
                qs.append(st["qf1_values"])
                skip_c += ev_c in ("skip", "skip_shrink")
                n_critic += 1
                if act:
                    if ev_a is None:
                        self.mp_a.steps = k  # (linked: critic@pi too)
                        st = self.actor_step(s, times)
                        ev_a = st["event"]
                    a_losses.append(st["actor_loss"])
                    skip_a += ev_a in ("skip", "skip_shrink")
                    n_actor += 1
                    with timed(times, "soft_update"):
                        self.update_targets()
            self.global_step += 1
        c: dict[str, int] = {}
        for m in (self.mp_c, self.mp_a, self.mp_pi):
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
            "train_steps": n_critic, "actor_steps": n_actor,
            "qf1_loss": mean(qf_losses), "actor_loss": mean(a_losses), "qf1_values": mean(qs),
            "critic_loss_scale": self.mp_c.loss_scale(), "actor_loss_scale": self.mp_a.loss_scale(),
            "quantized": int(self.mp_c.quantized),
            **count_columns(c), "critic_skipped": skip_c, "actor_skipped": skip_a,
        }
        row.update({f"t_{p}": times[p] for p in PHASES})
        row["_episodes"] = episodes
        return row

    # -- checkpoint
    def state_dict(self) -> dict:
        return {
            "actor": self.actor.get_params(), "critic": self.critic.get_params(),
            "target_actor": self.target_actor.get_params(), "target_critic": self.target_critic.get_params(),
            "opt_actor": self.opt_a.state_dict(), "opt_critic": self.opt_c.state_dict(),
            "mixed": {"actor": self.mp_a.state(), "critic": self.mp_c.state()},
            "rng": copy.deepcopy(self.rng.bit_generator.state), "ou": self.ou.copy(),
            "global_step": self.global_step, "assignment": self.assignment,
            "buffer": self.rb.save(self.run_dir) if self.run_dir else self.rb.state(),  # replay.py: files
            "env": self._env_state(),
        }

    def load_state_dict(self, s: dict) -> None:
        self._check_plan(s)
        for net, key in ((self.actor, "actor"), (self.critic, "critic"), (self.target_actor, "target_actor"),
                         (self.target_critic, "target_critic")):
            net.set_params(s[key])
        self._views()
        self.opt_a.load_state_dict(s["opt_actor"])
        self.opt_c.load_state_dict(s["opt_critic"])
        for m, key in ((self.mp_a, "actor"), (self.mp_c, "critic")):  # critic@pi shares the actor's
            m.load(s["mixed"][key])
        self.rng.bit_generator.state = s["rng"]
        self.ou = np.array(s["ou"])
        self.global_step = int(s["global_step"])
        self.rb.load(s["buffer"], self.run_dir)
        self._load_env(s.get("env"))


def node_runs(node, hp: dict) -> float:
    """Runs of a training-graph node per critic step: the actor's step (its forward, the critic on its
    actions, its loss, backward and update) and the targets' Polyak updates every ``policy_frequency``
    critic steps; the critic's step and the target forwards every step."""
    actor = (node.phase == "soft" or node.instance == "actor_loss" or node.instance.endswith("@pi")
             or (node.instance == "actor" and node.phase != "tfwd"))
    return 1.0 / hp["policy_frequency"] if actor else 1.0


def ddpg_graph(bld, design, nets, critics=("critic",)):
    """Its training graph: the critics' update on the target actor and critics, then the actor's update through
    the freshly updated first critic (``<critic>@pi``), and the Polyak updates. ``critics``: TD3's twins
    (host/algorithms/td3.py) share one loss node and its target action."""
    actor = nets["actor"]
    act_bytes = design.action_dim * bld.batch * bld.B
    qb = out_bytes(bld, nets[critics[0]])
    # critic update: y = r + gamma Q'(s', mu'(s')) (TD3: min over the critics)
    a_t = bld.forward("actor", actor, "tfwd")
    outs = []
    for c in critics:
        q_t = bld.forward(c, nets[c], "tfwd", [(a_t, act_bytes)])
        q = bld.forward(c, nets[c], "fwd")
        outs += [(q, qb), (q_t, qb)]
    closs = bld.loss("critic_loss", outs, len(critics))
    cupd = {}
    for c in critics:
        cbwd = bld.backward(c, nets[c], "fwd", [(closs, qb)])
        cupd[c] = bld.update(c, nets[c], cbwd, design.net(c).optimizer)
    # actor update through the freshly updated critic: maximise Q(s, mu(s))
    critic, pi = nets[critics[0]], f"{critics[0]}@pi"
    a = bld.forward("actor", actor, "fwd")
    q_pi = bld.forward(pi, critic, "fwd", [(a, act_bytes)], weight_sources=cupd[critics[0]])
    aloss = bld.loss("actor_loss", [(q_pi, qb)], 1)
    cpi = bld.backward(pi, critic, "fwd", [(aloss, qb)], first_input_grad=True, weights=False,
                       input_grad_cols=design.action_dim)
    first_critic = bld.compute_layers(critic)[0].name
    abwd = bld.backward("actor", actor, "fwd", [(cpi[first_critic], act_bytes)])
    aupd = bld.update("actor", actor, abwd, design.net("actor").optimizer)
    for c in critics:
        bld.soft(c, nets[c], cupd[c])
    bld.soft("actor", actor, aupd)


register_algorithm(Algorithm("ddpg", DDPG, DDPGArgs, batch_size, resolve=resolve_hyperparams,
                             graph=ddpg_graph, loss_flops=lambda n: 8,
                             # one critic step per vector-env step from learning_starts on
                             grad_steps=lambda hp: 1.0 / hp.get("num_envs", 1), node_runs=node_runs,
                             summary="DDPG (CleanRL ddpg_continuous_action.py) with AP-DRL's mixed precision"))
