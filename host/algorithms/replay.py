"""The off-policy algorithms' replay memory (DQN, DDPG): one circular buffer, checkpointed with
the run (its state is arrays and counters, checked when a checkpoint is loaded)."""

from __future__ import annotations

import numpy as np

from rlhls.designs.errors import RlhlsError

from .base import check_buffer_memory

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    """Circular buffer of (obs, next_obs, action, reward, terminated); uniform sampling with
    replacement. Each observation is stored once: a transition's next_obs is the obs of the same
    sub-env's following transition (``num_envs`` adds later), kept apart only where it differs
    (an episode's final observation, ``finals``) or does not exist yet (each sub-env's newest
    transition, ``tail``). ``sample`` returns exactly what storing both would."""

    def __init__(self, capacity: int, obs_shape: tuple, obs_dtype):
        self.capacity = int(capacity)
        check_buffer_memory(capacity, int(np.prod(obs_shape)) * np.dtype(obs_dtype).itemsize + 8 + 4 + 4)
        self.obs = np.zeros((capacity,) + tuple(obs_shape), dtype=obs_dtype)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.dones = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0
        self.num_envs = None  # fixed by the first add
        self.tail = None  # (num_envs, *obs_shape): next_obs of each sub-env's newest transition
        self.tail_pos = None  # its position (-1: none yet)
        self.finals: dict[int, np.ndarray] = {}  # position -> next_obs where the following obs differs

    def add(self, obs, next_obs, actions, rewards, dones) -> None:
        n = len(actions)
        if self.num_envs is None:
            if n > self.capacity:
                raise RlhlsError(f"replay buffer of {self.capacity} transitions is smaller than num_envs {n}")
            self.num_envs = n
            self.tail = np.zeros((n,) + self.obs.shape[1:], dtype=self.obs.dtype)
            self.tail_pos = np.full(n, -1, dtype=np.int64)
        elif n != self.num_envs:
            raise RlhlsError(f"replay buffer: {n} transitions added, expected one per sub-env ({self.num_envs})")
        for i in range(n):
            p, q = self.pos, self.tail_pos[i]
            if q >= 0 and not np.array_equal(self.tail[i], obs[i]):
                self.finals[q] = self.tail[i].copy()  # the episode ended: its follower starts another
            self.finals.pop(p, None)  # p's old transition is overwritten
            self.obs[p] = obs[i]
            self.actions[p], self.rewards[p], self.dones[p] = actions[i], rewards[i], dones[i]
            self.tail[i], self.tail_pos[i] = next_obs[i], p
            self.pos = (p + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)

    def next_obs_at(self, idx) -> np.ndarray:
        """next_obs of the transitions at positions `idx`."""
        idx = np.asarray(idx, dtype=np.int64)
        out = self.obs[(idx + (self.num_envs or 1)) % self.capacity]
        tails = {int(q): i for i, q in enumerate(self.tail_pos if self.tail_pos is not None else ())}
        for k, p in enumerate(idx.tolist()):
            if p in tails:
                out[k] = self.tail[tails[p]]
            elif p in self.finals:
                out[k] = self.finals[p]
        return out

    def sample(self, rng: np.random.Generator, n: int):
        idx = rng.integers(0, self.size, size=n)
        return (self.obs[idx].astype(np.float64), self.next_obs_at(idx).astype(np.float64), self.actions[idx],
                self.rewards[idx].astype(np.float64), self.dones[idx].astype(np.float64))

    def state(self) -> dict:
        n = self.size
        return {"capacity": self.capacity, "pos": self.pos, "size": n, "obs": self.obs[:n].copy(),
                "actions": self.actions[:n].copy(), "rewards": self.rewards[:n].copy(),
                "dones": self.dones[:n].copy(), "num_envs": self.num_envs,
                "tail": None if self.tail is None else self.tail.copy(),
                "tail_pos": None if self.tail_pos is None else self.tail_pos.copy(),
                "finals": {int(p): a.copy() for p, a in self.finals.items()}}

    def load(self, s: dict) -> None:
        if "finals" not in s:
            raise RlhlsError("checkpoint: replay buffer in the older two-copy format (start the run again)")
        if s["capacity"] != self.capacity or s["obs"].shape[1:] != self.obs.shape[1:]:
            raise RlhlsError(f"checkpoint: replay buffer of {s['capacity']} x {s['obs'].shape[1:]}, "
                             f"expected {self.capacity} x {self.obs.shape[1:]}")
        size, pos = s["size"], s["pos"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (size, pos)) \
                or not 0 <= size <= self.capacity or not 0 <= pos < self.capacity \
                or any(len(s[k]) != size for k in ("obs", "actions", "rewards", "dones")):
            raise RlhlsError(f"checkpoint: replay buffer position {pos!r} / size {size!r} do not fit its "
                             f"{self.capacity} transitions and {len(s['obs'])} stored")
        n = self.size = size
        self.pos = pos
        for k in ("obs", "actions", "rewards", "dones"):
            getattr(self, k)[:n] = s[k]
        self.num_envs = s["num_envs"]
        self.tail = None if s["tail"] is None else np.array(s["tail"])
        self.tail_pos = None if s["tail_pos"] is None else np.array(s["tail_pos"], dtype=np.int64)
        self.finals = {int(p): np.array(a) for p, a in s["finals"].items()}
