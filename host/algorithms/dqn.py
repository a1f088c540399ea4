"""DQN on the host (CleanRL ``dqn.py`` quality) with AP-DRL's hardware-aware mixed precision.

Algorithm (CleanRL ``dqn.py``; ``DQNArgs`` are its hyperparameters, a design's
``hyperparams`` override them, then ``--set``): one online Q network and a target copy; an
epsilon-greedy policy whose epsilon falls linearly from ``start_e`` to ``end_e`` over
``exploration_fraction`` of the run (CleanRL's ``total_timesteps`` is the run length: here the
run's ``--steps``; one random draw decides for all sub-envs, as CleanRL); a uniform replay buffer
of ``buffer_size`` transitions (sampled with replacement, as SB3's ReplayBuffer); from global
step ``learning_starts`` on, every ``train_frequency`` steps ``gradient_steps`` minibatches of ``batch_size``
(the design's batch) with TD target ``r + gamma * max_a Q_target(s', a) * (1 - terminated)``
and the design's ``loss``, Adam (PyTorch defaults, eps 1e-8); every ``target_network_frequency`` steps
``target <- tau * online + (1 - tau) * target`` (tau = 1: hard copy).

Loss: ``mse`` (default; all AP-DRL DQN designs) is what CleanRL's ``dqn.py`` and ``dqn_atari.py``
use (``F.mse_loss``); ``huber`` (``--set loss=huber``) is PyTorch's ``smooth_l1_loss`` with beta 1,
what Stable-Baselines3's DQN uses and what the Nature DQN's clipping of the TD error to [-1, 1]
amounts to -- and what the AP-DRL issue names. We keep CleanRL's MSE because, measured with
CleanRL's other hyperparameters, Huber makes Q diverge on CartPole (Q ~ 1e4 by 50k steps, return
stuck near 10-20): the only failure signal, a termination, is a rare large TD error whose pull
the Huber loss caps at 1, so Q fits the *median* target and ignores terminations (on a synthetic
chain with true value 16.8 it climbs past 44 while MSE settles at 17.5).

Environment: ``envs.ReplayableVecEnv`` (gymnasium 1.x, SAME_STEP autoreset semantics): a step that
ends an episode returns the next episode's first observation and the last one in
``infos['final_obs']``; the buffer stores that final observation as s' (CleanRL's
``real_next_obs``) and ``terminated`` (not truncated) as the done flag, so time-limit ends
bootstrap. Observations are not normalized (CleanRL).

Atari (DQN-Breakout; host/envs/atari.py: CleanRL's wrappers, rewards clipped to their sign for
learning): observations stay uint8 (4 x 84 x 84 frame stacks) in the replay buffer and the Q
network reads ``x / 255`` in acting and training (CleanRL's ``q_network(x / 255.0)``; raw 0-255
pixels make the FP16 gradients of PL layers overflow). The recorded episodic return / length
(``EpisodeTracker`` with the env infos) is the unclipped game score over all lives, one episode
per game. Replay memory: ``ReplayBuffer`` stores each observation once (a transition's s' is the
same sub-env's following s, kept apart only at episode ends), 28 KB per Atari transition; the
design's CleanRL ``buffer_size`` of 1 000 000 would still take 28 GB, so for an Atari env the
buffer is capped at ``atari.ATARI_BUFFER_CAP`` (200 000 transitions, 5.6 GB) unless
``--set buffer_size=N`` asks for a size explicitly (config.json records the size used).

Updates and resume: one update = ``steps_per_update`` env steps (default 1000; a multiple of
``num_envs``), so the runner checkpoints every 1000 steps. The checkpoint holds online and target
parameters, Adam, the loss scaler, the numpy Generator state, the global step, the replay buffer
(its transitions appended to the run folder's ``replay/`` files, host/algorithms/replay.py) and the envs
(each sub-env's episode seed and actions since its reset, replayed on
``load_state_dict``; the running episode return / length): a resumed run equals an
uninterrupted one bit for bit.

Precision (``precision`` hyperparameter, ``--precision``): ``fp32`` = every node on the PS
(AP-DRL's non-quantized baseline); ``mixed`` = each training-graph node (``q.<layer>.fwd``,
``q.<layer>.tfwd``, ``loss``, ``q.<layer>.bwd``, ``q.<layer>.upd``) in its unit's format under a
plan (``--plan`` or profile + ILP in-process), see ``host/mixed.py``. Acting runs on the PS in
FP32 (Fig. 10).

Per-update metrics: episodes, episodic_return / length (mean of the episodes that ended),
epsilon, train_steps, td_loss, q_values (mean Q(s, a) of the minibatches), loss_scale (at the
end of the update), quantized (0 during the quantization delay), skipped_steps, scale_shrinks,
scale_grows, grad_overflows (non-finite gradient elements), conv_overflows (finite values that
overflowed a unit-boundary conversion), and phase seconds ``t_<phase>`` for ``PHASES``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import out_bytes

from ..envs import EpisodeTracker, space_info
from ..envs.atari import ATARI_BUFFER_CAP, is_atari
from ..hyperparams import hp
from ..mixed import PRECISIONS, MixedPrecision, MixedPrecisionArgs, count_columns, ps_forward
from ..optim import make_optimizer
from ..phases import timed
from ..rlzoo import train_freq, whole
from . import Algorithm, register_algorithm
from .base import TrainerBase, adapt_network, check_buffer_memory, check_memory, param_views, sample_bytes
from .replay import ReplayBuffer

__all__ = ["DQNArgs", "batch_size", "PHASES", "resolve_hyperparams", "linear_schedule", "DQN"]

LOSSES = ("huber", "mse")


def _sb3_gradient_steps(v, ctx):
    if v == -1:  # SB3: as many as the environment steps of a training period
        freq = train_freq(ctx, ctx.given("train_freq", "train_frequency"))
        return {"gradient_steps": freq * whole(ctx, "n_envs", ctx.given("n_envs", "num_envs"))}
    return {"gradient_steps": whole(ctx, "gradient_steps", v)}


def _sb3_target_update(v, ctx):  # SB3 counts environment steps over all sub-envs, ours vector steps
    n = whole(ctx, "n_envs", ctx.given("n_envs", "num_envs"))
    return {"target_network_frequency": max(whole(ctx, "target_update_interval", v) // n, 1)}


@dataclass
class DQNArgs(MixedPrecisionArgs):
    """DQN's hyperparameters: CleanRL dqn.py's defaults (the design's batch size)."""

    algorithm = "DQN"
    sb3 = {"target_update_interval": _sb3_target_update,
           "train_freq": lambda v, ctx: {"train_frequency": train_freq(ctx, v)}, "gradient_steps": _sb3_gradient_steps,
           "exploration_initial_eps": "start_e", "exploration_final_eps": "end_e"}
    num_envs: int = hp(1, "parallel sub-environments", low=1)
    learning_rate: float = hp(2.5e-4, "Adam step size", low=0.0)
    buffer_size: int = hp(10_000, "replay buffer capacity in transitions (Atari: capped, see the docstring)", low=1)
    gamma: float = hp(0.99, "discount factor", low=0.0, high=1.0)
    tau: float = hp(1.0, "target network update rate (1: hard copy)", above=0.0, high=1.0)
    target_network_frequency: int = hp(500, "steps between target network updates", low=1)
    batch_size: int = hp(128, "minibatch size (default: the design's batch)", low=1)
    start_e: float = hp(1.0, "initial exploration epsilon", low=0.0, high=1.0)
    end_e: float = hp(0.05, "final exploration epsilon", low=0.0, high=1.0)
    exploration_fraction: float = hp(0.5, "fraction of the run over which epsilon falls", above=0.0, high=1.0)
    learning_starts: int = hp(10_000, "steps before the first gradient step", low=0)
    train_frequency: int = hp(10, "steps between training steps", low=1)
    gradient_steps: int = hp(1, "gradient steps per training step (SB3 / RL Zoo gradient_steps)", low=1)
    loss: str = hp("mse", "TD loss: mse (CleanRL) or huber (Stable-Baselines3)", choices=LOSSES)
    optimizer: str = hp("adam", "optimizer", choices=("adam", "rmsprop", "sgd"))
    adam_eps: float = hp(1e-8, "Adam epsilon", above=0.0)
    steps_per_update: int = hp(1000, "env steps per runner update (one metrics row and checkpoint)", low=1)
    precision: str = hp("fp32", "fp32 (all on the PS) or mixed (the plan's units)", choices=PRECISIONS)

    @classmethod
    def defaults_for(cls, design):
        return {"batch_size": int(design.batch_size)}

    def check(self, design):
        if self.buffer_size < self.num_envs:
            raise RlhlsError(f"DQN hyperparameters: buffer_size {self.buffer_size} is smaller than num_envs "
                             f"{self.num_envs}")
        if self.steps_per_update % self.num_envs:
            raise RlhlsError(f"DQN hyperparameters: steps_per_update {self.steps_per_update} is not a multiple of "
                             f"num_envs {self.num_envs}")
        # a byte per input value at least (Atari frames; the buffer checks its real size when made)
        check_buffer_memory(self.buffer_size, int(np.prod(design.obs_shape)) + 16)
        check_memory(f"batch_size = {self.batch_size}", self.batch_size * sample_bytes(design), "a batch at least")


def batch_size(hp: dict) -> int:
    return hp["batch_size"]


PHASES = ("dnn_inference", "env_run", "storing_transitions", "sample", "target_forward", "update_forward",
          "backprop", "weight_update")


def resolve_hyperparams(design, overrides: dict | None = None, config: dict | None = None) -> dict:
    """DQNArgs: CleanRL dqn.py's defaults <- the design's hyperparameters (and batch) <- config <- overrides."""
    if is_atari(design.env_id) and "buffer_size" not in {**(config or {}), **(overrides or {})}:
        # capped before the checks (see the module docstring): the design's 1M would not fit
        cap = min(int(design.hyperparams.get("buffer_size", DQNArgs.buffer_size)), ATARI_BUFFER_CAP)
        config = {**(config or {}), "buffer_size": cap}
    return DQNArgs.resolve(design, overrides, config)


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    """CleanRL's linear_schedule."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


class DQN(TrainerBase):
    """One DQN run (the constructor and interface: ``TrainerBase``)."""

    algorithm = "dqn"
    networks = ("q",)
    resolve_hyperparams = staticmethod(resolve_hyperparams)

    def _setup(self, design, nets: dict, assignment) -> None:
        hp = self.hp
        sp = space_info(self.envs)
        if sp["kind"] != "discrete":
            raise RlhlsError(f"environment '{self.env_id}' has a continuous action space; DQN needs discrete actions")
        q = nets["q"]
        if self.env_id != design.env_id and len(sp["obs_shape"]) == 1:

            q = adapt_network(q, sp["obs_shape"][0], sp["action_dim"])
        if tuple(q.input_shape) != tuple(sp["obs_shape"]) or q.output_shape != (sp["action_dim"],):
            raise RlhlsError(f"network 'q' maps {q.input_shape} -> {q.output_shape} but '{self.env_id}' observes "
                             f"{sp['obs_shape']} with {sp['action_dim']} actions")
        self.q, self.n_actions = q, sp["action_dim"]
        self._take_plan(assignment, hp["batch_size"])
        self.mp = MixedPrecision(design, q, "q", self.assignment, **self._scaling(ps_math=hp["ps_math"]))
        self.views = param_views("q", q)
        self.mp.round_masters(self.views)
        self.target = copy.deepcopy(q)
        self.opt = make_optimizer(hp["optimizer"], hp["learning_rate"],
                                  **({"eps": hp["adam_eps"]} if hp["optimizer"] == "adam" else {}))
        self.fp32 = parse_format("fp32")
        self.loss_fmt = lambda: self.mp.precision(self.mp.loss_unit).storage
        obs_dtype = self.envs.single_observation_space.dtype
        self.rb = ReplayBuffer(hp["buffer_size"], sp["obs_shape"], obs_dtype)  # uint8 frames stay uint8
        # uint8 frames: the network reads x / 255 (CleanRL dqn_atari; raw pixels overflow FP16 gradients)
        self.frames = np.dtype(obs_dtype) == np.uint8
        self.rng = np.random.default_rng(self.seed)
        self.steps_per_update = hp["steps_per_update"]
        self.global_step = 0  # CleanRL's global_step: vector-env iterations so far
        self.obs = None  # raw observations of the current step (None: envs not reset yet)
        self.tracker = EpisodeTracker(hp["num_envs"])

    def _net_in(self, obs) -> np.ndarray:
        """What the Q network reads: float64, uint8 frames scaled by 1/255."""
        x = np.asarray(obs, dtype=np.float64)
        return x / 255.0 if self.frames else x

    # -- acting: PS, FP32 (Fig. 10)
    def q_values(self, obs) -> np.ndarray:
        return ps_forward(self.q, self._net_in(obs), self.hp["ps_math"])

    def predict(self, obs, deterministic: bool = True, rng=None) -> np.ndarray:
        a = np.argmax(self.q_values(obs), axis=1)
        if not deterministic:  # SB3's DQN.predict: epsilon-greedy at the run's final epsilon
            explore = rng.random(len(a)) < self.hp["end_e"]
            a = np.where(explore, rng.integers(0, self.n_actions, size=len(a)), a)
        return a

    # -- one gradient step
    def train_step(self, s, s2, a, r, d, times: dict) -> dict:
        """One minibatch (observations as stored: raw frames for Atari)."""
        hp, mp, B = self.hp, self.mp, s.shape[0]
        s, s2 = self._net_in(s), self._net_in(s2)
        with timed(times, "target_forward"):
            tq, tu = mp.forward(s2, "tfwd", net=self.target)
            tq = mp.to_loss(tq, tu)
        with timed(times, "update_forward"):
            qv, qu = mp.forward(s, "fwd")
            qv = mp.to_loss(qv, qu)
            F = self.loss_fmt()  # the loss node computes in its unit's format
            rows = np.arange(B)
            td = F.quantize(r + hp["gamma"] * tq.max(axis=1) * (1.0 - d))
            q_sa = qv[rows, a]
            delta = F.quantize(q_sa - td)
            with np.errstate(invalid="ignore", over="ignore"):
                if hp["loss"] == "huber":
                    ad = np.abs(delta)
                    loss = float(np.mean(np.where(ad < 1.0, 0.5 * delta * delta, ad - 0.5)))
                    dl = np.clip(delta, -1.0, 1.0)
                else:
                    loss = float(np.mean(delta * delta))
                    dl = 2.0 * delta
                g = np.zeros_like(qv)
                g[rows, a] = F.quantize(dl * (mp.loss_scale() / B))
        with timed(times, "backprop"):
            mp.backward(g)
            grads = {key: self.q[layer].grads[key.rsplit(".", 1)[1]] for key, (layer, _) in self.views.items()}
        with timed(times, "weight_update"):
            event = mp.apply(self.opt, self.views, grads)
        return {"td_loss": loss, "q_values": float(np.mean(q_sa)), "event": event}

    def update_target(self) -> None:
        tau = self.hp["tau"]
        for l, t in zip(self.q.layers, self.target.layers):
            for k, a in l.params.items():
                t.params[k] = a.copy() if tau == 1.0 else tau * a + (1.0 - tau) * t.params[k]
        if tau != 1.0:
            self.mp.round_masters({f"t.{l.name}.{k}": (l.name, a) for l in self.target.layers
                                   for k, a in l.params.items()})

    # -- one update = steps_per_update env steps
    def train_update(self, update: int, total_updates: int) -> dict:
        hp, times = self.hp, {p: 0.0 for p in PHASES}
        N = hp["num_envs"]
        iters = self.steps_per_update // N
        duration = hp["exploration_fraction"] * total_updates * iters
        if self.obs is None:
            with timed(times, "env_run"):
                self.obs, _ = self.envs.reset()
        episodes, losses, qs, n_train = [], [], [], 0
        eps = hp["start_e"]
        for _ in range(iters):
            g = self.global_step
            eps = linear_schedule(hp["start_e"], hp["end_e"], duration, g)
            with timed(times, "dnn_inference"):
                if self.rng.random() < eps:
                    actions = self.rng.integers(0, self.n_actions, size=N)
                else:
                    actions = np.argmax(self.q_values(self.obs), axis=1)
            with timed(times, "env_run"):
                next_obs, r, term, trunc, infos = self.envs.step(actions)
                done = np.logical_or(term, trunc)
            with timed(times, "storing_transitions"):
                real_next = next_obs.copy()
                for i in np.flatnonzero(done):
                    real_next[i] = infos["final_obs"][i]
                self.rb.add(self.obs, real_next, actions, r, term)
                # Atari: the unclipped score, one episode per game (host/envs/atari.py)
                for ret, length in self.tracker.step(np.asarray(r, dtype=np.float64), done, infos):
                    episodes.append(((g + 1) * N, ret, length))
            self.obs = next_obs
            if g > hp["learning_starts"]:
                for _ in range(hp["gradient_steps"] if g % hp["train_frequency"] == 0 else 0):
                    with timed(times, "sample"):
                        batch = self.rb.sample(self.rng, hp["batch_size"])
                    st = self.train_step(*batch, times)
                    losses.append(st["td_loss"])
                    qs.append(st["q_values"])
                    n_train += 1
                if g % hp["target_network_frequency"] == 0:
                    with timed(times, "weight_update"):
                        self.update_target()
            self.global_step += 1
        c = self.mp.take_counts()
        rets = [e[1] for e in episodes]
        nan = float("nan")
        row = {
            "episodes": len(episodes),
            "episodic_return": float(np.mean(rets)) if rets else nan,
            "episodic_length": float(np.mean([e[2] for e in episodes])) if rets else nan,
            "epsilon": float(eps), "train_steps": n_train,
            "td_loss": float(np.nanmean(losses)) if losses and np.isfinite(losses).any() else nan,
            "q_values": float(np.nanmean(qs)) if qs and np.isfinite(qs).any() else nan,
            "loss_scale": self.mp.loss_scale(), "quantized": int(self.mp.quantized),
            **count_columns(c),
        }
        row.update({f"t_{p}": times[p] for p in PHASES})
        row["_episodes"] = episodes
        return row

    # -- checkpoint
    def state_dict(self) -> dict:
        return {
            "params": self.q.get_params(), "target": self.target.get_params(), "opt": self.opt.state_dict(),
            "mixed": self.mp.state(), "rng": copy.deepcopy(self.rng.bit_generator.state),
            "global_step": self.global_step, "assignment": self.assignment,
            "buffer": self.rb.save(self.run_dir) if self.run_dir else self.rb.state(),  # replay.py: files
            "env": self._env_state(),
        }

    def load_state_dict(self, s: dict) -> None:
        self._check_plan(s)
        self.q.set_params(s["params"])
        self.target.set_params(s["target"])
        self.views = param_views("q", self.q)
        self.opt.load_state_dict(s["opt"])
        self.mp.load(s["mixed"])
        self.rng.bit_generator.state = s["rng"]
        self.global_step = int(s["global_step"])
        self.rb.load(s["buffer"], self.run_dir)
        self._load_env(s.get("env"))


def dqn_graph(bld, design, nets):
    """Its training graph: the Q network forward, its target forward, the TD loss, backward, update."""
    q = nets["q"]
    last = bld.forward("q", q, "fwd")
    tlast = bld.forward("q", q, "tfwd")
    nb = out_bytes(bld, q)
    loss = bld.loss("loss", [(last, nb), (tlast, nb)], design.action_dim)
    bwd = bld.backward("q", q, "fwd", [(loss, nb)])
    bld.update("q", q, bwd, design.net("q").optimizer)


register_algorithm(Algorithm("dqn", DQN, DQNArgs, batch_size, resolve=resolve_hyperparams,
                             graph=dqn_graph, loss_flops=lambda n: 2 * n + 8,
                             # train_frequency counts vector-env steps (num_envs environment steps each)
                             grad_steps=lambda hp: hp.get("gradient_steps", 1) / (hp["train_frequency"]
                                                                                   * hp.get("num_envs", 1)),
                             actions=("discrete",),
                             summary="DQN (CleanRL dqn.py / dqn_atari.py) with AP-DRL's mixed precision"))
