"""What every trainer of the package (dqn, ddpg, a2c, ppo, trpo) does alike: the constructor (check
the backend, resolve hyperparameters, build the design's networks and the replayable envs, then the
trainer's own ``_setup``), the partition plan for ``precision='mixed'`` (``assignment`` None there =
profile + ILP in-process at the given batch, ``mixed.default_plan``), the checkpoint's plan check and
env state, what the envs receive of an action, and the parameter views MixedPrecision updates. The
on-policy rollout loop is host/algorithms/rollout.py; the runner's trainer interface is in
host/runner.py."""

from __future__ import annotations

import numpy as np

from rlhls.core.errors import RlhlsError

from ..distributions import env_action
from ..envs import EpisodeTracker, ReplayableVecEnv, space_info
from ..mixed import default_plan

__all__ = ["TrainerBase", "param_views", "check_buffer_memory"]


def check_memory(what: str, need_bytes: int, holds: str = "it") -> None:
    """RlhlsError when `need_bytes` (at least what a hyperparameter's value makes the run hold) are
    more than this machine's memory: one line before anything is allocated or written, where numpy
    would fail with a bare MemoryError or the kernel kill the run later."""
    import os

    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        mem = None
    if need_bytes > (mem if mem else 2 ** 62):
        have = f"this machine's {mem / 2 ** 30:.1f} GiB" if mem else "what numpy can allocate"
        raise RlhlsError(f"hyperparameter {what}: {holds} needs {need_bytes / 2 ** 30:.3g} GiB, more than {have}")


def check_buffer_memory(capacity: int, bytes_per_transition: int) -> None:
    """RlhlsError when a replay buffer of `capacity` transitions would not fit in this machine's memory."""
    check_memory(f"buffer_size = {capacity}", int(capacity) * int(bytes_per_transition), "the replay buffer")


def sample_bytes(design) -> int:
    """A lower bound of the bytes one sample of a batch or rollout takes: its observation, next
    observation and action in float64, with a few scalars (reward, done, value, log-probability)."""
    import numpy as np

    return 8 * (2 * int(np.prod(design.obs_shape)) + int(getattr(design, "action_dim", 1) or 1) + 4)


def adapt_network(net, in_dim: int, out_dim: int):
    """The same layer stack for other input / output sizes (an --env override); `net` if they match."""
    if net.input_shape == (in_dim,) and net.output_shape == (out_dim,):
        return net
    if len(net.input_shape) != 1:
        raise RlhlsError(f"network '{net.name}' takes images {net.input_shape}; cannot adapt it to {in_dim} inputs")
    import copy

    from rlhls.designs.network import Network

    layers = [copy.copy(l) for l in net.layers]
    dense = [i for i, l in enumerate(layers) if l.kind == "Dense"]
    layers[dense[-1]].units = out_dim
    return Network(net.name, (in_dim,), layers, seed=net.seed, init=net.init)


def param_views(inst: str, net, masters: str = "") -> dict:
    """{grad key '<inst>.<layer>.<param>': (master key '<masters><layer>', array)} of a network, for
    MixedPrecision.apply / round_masters."""
    return {f"{inst}.{l.name}.{k}": (f"{masters}{l.name}", a) for l in net.layers for k, a in l.params.items()}


class TrainerBase:
    """One training run: ``train_update(update, total_updates) -> metrics row``; checkpointable state.

    ``assignment`` ({graph node: unit}) is the plan for ``precision='mixed'``; None there means
    profile + solve in-process (``mixed.default_plan``). A trainer names its ``algorithm``, the
    ``networks`` it needs and its ``resolve_hyperparams``, and builds itself in ``_setup``."""

    algorithm = ""
    networks: tuple = ()
    run_dir = None  # the run folder, set by the runner: a replay buffer keeps its transitions there
    obs: np.ndarray | None  # the current step's observations (None: the envs not reset yet)
    tracker: EpisodeTracker  # the open episodes' returns and lengths

    def __init__(self, design, *, env_id: str | None = None, seed: int = 0, backend: str = "emu",
                 hyperparams: dict | None = None, assignment: dict | None = None):
        self._setup(design, self._start(design, env_id, seed, backend, hyperparams), assignment)

    @staticmethod
    def resolve_hyperparams(design, overrides):
        raise NotImplementedError

    def _setup(self, design, nets: dict, assignment) -> None:
        raise NotImplementedError

    def _start(self, design, env_id, seed, backend, hyperparams) -> dict:
        """Set design, hp, env_id, seed, envs; return the design's fresh networks (``networks`` must be there)."""
        name = self.algorithm.upper()
        from ..backends import get_backend

        self.backend = get_backend(backend)  # cosim without Vitis fails here, before anything is written
        self.design = design
        self.hp = self.resolve_hyperparams(design, hyperparams)
        self.env_id = env_id or design.env_id
        self.seed = int(seed)
        nets = design.build_networks(self.seed)
        if any(n not in nets for n in self.networks):
            raise RlhlsError(f"design '{design.name}': {name} needs network(s) "
                             f"{', '.join(map(repr, self.networks))} (has {', '.join(nets)})")
        self.envs = ReplayableVecEnv(self.env_id, self.hp["num_envs"], self.seed)
        return nets

    # -- checkpoint pieces the trainers share
    def _check_plan(self, s: dict) -> None:
        if s.get("assignment") != self.assignment:
            raise RlhlsError("checkpoint: it was trained under another plan (assignment differs)")

    def _continuous_box(self, what: str) -> None:
        """Flat observations and a bounded continuous action box, or one line naming what `what` (the
        algorithm's tanh-squashed actor) needs; sets obs_dim, act_dim, low, high, action_scale / bias."""
        sp = space_info(self.envs)
        name = self.algorithm.upper()
        if sp["kind"] != "continuous" or len(sp["obs_shape"]) != 1:
            raise RlhlsError(f"environment '{self.env_id}': {name} needs flat observations and a continuous (Box) "
                             f"action space (has {sp['kind']} actions, observations {sp['obs_shape']})")
        low, high = sp["low"], sp["high"]
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise RlhlsError(f"environment '{self.env_id}': action box [{low}, {high}] is unbounded; "
                             f"{name}'s {what} needs finite bounds")
        self.obs_dim, self.act_dim = sp["obs_shape"][0], sp["action_dim"]
        self.low, self.high = low, high
        self.action_scale, self.action_bias = (high - low) / 2.0, (high + low) / 2.0

    def _env_state(self):
        """The running envs (replay record, current observations, open episodes' sums), or None before the
        first reset."""
        if self.obs is None:
            return None
        return {"replay": self.envs.state(), "obs": np.array(self.obs).copy(),
                "ep_ret": self.tracker.ret.copy(), "ep_len": self.tracker.len.copy()}

    def _load_env(self, env) -> None:
        if env is not None:
            self.envs.restore(env["replay"])
            self.obs = np.array(env["obs"])
            self.tracker.ret, self.tracker.len = np.array(env["ep_ret"]), np.array(env["ep_len"])

    def predict(self, obs, deterministic: bool = True, rng=None) -> np.ndarray:
        """The actions the envs receive for a batch of raw observations (as the envs return them):
        the deterministic policy (greedy, or the distribution's mean / mode) through the acting
        path training uses, or with ``deterministic=False`` sampled from ``rng`` (never the run's
        own Generator: evaluation leaves the training run's bits alone). A trainer without one is
        not evaluated."""
        raise RlhlsError(f"algorithm '{self.algorithm}': its trainer has no predict (no policy to evaluate)")

    def _env_action(self, a):
        """What the envs receive of sampled actions (continuous ones clipped to the action box)."""
        return env_action(a, self.space)

    def close(self):
        self.envs.close()

    def _take_plan(self, assignment, batch: int) -> None:
        """``self.assignment``: the plan for mixed precision (solved here when None), else None;
        ``self.kernels``: its PL and AIE nodes through the backend (backends.PlanKernels)."""
        from ..backends import PlanKernels

        mixed = self.hp["precision"] == "mixed"
        if mixed and assignment is None:
            assignment = default_plan(self.design, batch)
        self.assignment = dict(assignment) if mixed else None
        self.kernels = PlanKernels(self.design, batch, self.backend) if mixed else None

    def _scaling(self, **extra) -> dict:
        """MixedPrecision keyword arguments from the loss-scaling hyperparameters."""
        hp = self.hp
        return dict(loss_scale_init=hp["loss_scale_init"], growth_interval=hp["loss_scale_growth_interval"],
                    quantization_delay=hp["quantization_delay"], kernels=self.kernels, **extra)
