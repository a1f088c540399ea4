"""The off-policy algorithms' replay memory (DQN, DDPG): one circular buffer, checkpointed with
the run (its state is arrays and counters, checked when a checkpoint is loaded).

In a run folder (``save(folder)`` / ``load(state, folder)``) the transitions are not in the
checkpoint: every transition ever added has a global index g (at ring position ``g % capacity``),
and transition g is row ``g - k * chunk`` of ``replay/transitions-<k>.bin`` (k = g // chunk,
``chunk`` = capacity / 8 rounded up), raw records of (obs, action, reward, done). An episode's
final observation (``finals``) is a row (g, obs) of ``replay/finals-<k>.bin``. A save appends the
rows added since the last one and returns the small state the checkpoint keeps: ``added`` (rows
of the transition files that count) and ``finals_rows`` per chunk, with the newest transition's
next observations (``tail``). Rows past those counts (a save the kill interrupted before the
checkpoint was replaced) are ignored on load and cut by the next save; a chunk whose transitions
all fell out of the ring is deleted once no checkpoint on disk names it. The chunks are files of the
run folder itself: a ``replay`` that is a symbolic link, or a chunk that is one (or has another hard
link), is refused (host/checkpoint.py ``write_at`` / ``read_rows``), never followed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import owned_file

from ..checkpoint import read_rows, write_at
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
        self.added = 0  # transitions ever added: the next one's global index
        self.chunk = max(1, -(-self.capacity // 8))  # rows per replay file: the ring and at most 1/8 more on disk
        self._saved = 0  # `added` at the last save into a run folder
        self._finals_rows: dict[int, int] = {}  # chunk -> rows of its finals file that count
        self._new_finals: list[int] = []  # global indices whose final observation came since the last save
        self.num_envs: int | None = None  # fixed by the first add
        self.tail: np.ndarray | None = None  # (num_envs, *obs_shape): next_obs of each sub-env's newest transition
        self.tail_pos: np.ndarray | None = None  # its position (-1: none yet)
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
        tail, tail_pos = self.tail, self.tail_pos
        if tail is None or tail_pos is None:
            raise RlhlsError(f"replay buffer: {n} sub-envs but no newest transitions of theirs (a damaged state)")
        for i in range(n):
            p, q = self.pos, tail_pos[i]
            if q >= 0 and not np.array_equal(tail[i], obs[i]):
                self.finals[q] = tail[i].copy()  # the episode ended: its follower starts another
                self._new_finals.append(self.added - n)  # sub-env i's previous transition
            self.finals.pop(p, None)  # p's old transition is overwritten
            self.obs[p] = obs[i]
            self.actions[p], self.rewards[p], self.dones[p] = actions[i], rewards[i], dones[i]
            tail[i], tail_pos[i] = next_obs[i], p
            self.pos = (p + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)
            self.added += 1

    def next_obs_at(self, idx) -> np.ndarray:
        """next_obs of the transitions at positions `idx`."""
        idx = np.asarray(idx, dtype=np.int64)
        out = self.obs[(idx + (self.num_envs or 1)) % self.capacity]
        tails = {int(q): i for i, q in enumerate(self.tail_pos if self.tail_pos is not None else ())}
        for k, p in enumerate(idx.tolist()):
            if p in tails and self.tail is not None:
                out[k] = self.tail[tails[p]]
            elif p in self.finals:
                out[k] = self.finals[p]
        return out

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                np.ndarray]:
        """n transitions drawn uniformly: (obs, next_obs, actions, rewards, dones)."""
        idx = rng.integers(0, self.size, size=n)
        return (self.obs[idx].astype(np.float64), self.next_obs_at(idx).astype(np.float64), self.actions[idx],
                self.rewards[idx].astype(np.float64), self.dones[idx].astype(np.float64))

    # -- in memory (no run folder): everything in the state
    def state(self) -> dict:
        n = self.size
        return {"capacity": self.capacity, "pos": self.pos, "size": n, "added": self.added,
                "obs": self.obs[:n].copy(), "actions": self.actions[:n].copy(), "rewards": self.rewards[:n].copy(),
                "dones": self.dones[:n].copy(), "num_envs": self.num_envs,
                "tail": None if self.tail is None else self.tail.copy(),
                "tail_pos": None if self.tail_pos is None else self.tail_pos.copy(),
                "finals": {int(p): a.copy() for p, a in self.finals.items()}}

    def load(self, s: dict, folder=None) -> None:
        if "files" in s:
            return self._load_files(s, Path(folder) if folder is not None else None)
        if "finals" not in s or "added" not in s:
            raise RlhlsError("checkpoint: replay buffer in an older format (start the run again)")
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
        self._load_small(s)
        self.finals = {int(p): np.array(a) for p, a in s["finals"].items()}
        first = self.added - self.size  # a save into a folder then writes every final of the ring
        self._saved, self._finals_rows = first, {}
        self._new_finals = sorted(first + (p - first) % self.capacity for p in self.finals)

    def _load_small(self, s: dict) -> None:
        self.added = self._saved = s["added"]
        self.num_envs = s["num_envs"]
        self.tail = None if s["tail"] is None else np.array(s["tail"])
        self.tail_pos = None if s["tail_pos"] is None else np.array(s["tail_pos"], dtype=np.int64)
        self._new_finals = []

    # -- in a run folder: the transitions in append-only files, the counts in the state
    def _rows(self):
        """Record dtypes of the transition and finals files."""
        o = (self.obs.dtype, self.obs.shape[1:])
        return (np.dtype([("obs", *o), ("action", self.actions.dtype, self.actions.shape[1:]),
                          ("reward", self.rewards.dtype), ("done", self.dones.dtype)]),
                np.dtype([("index", np.int64), ("obs", *o)]))

    def _live(self, added: int) -> range:
        """Chunks holding transitions still in the ring after `added` transitions."""
        return range(max(0, added - self.capacity) // self.chunk, -(-added // self.chunk))

    def save(self, folder) -> dict:
        """Append what came since the last save to `folder`/replay and return the checkpoint's state."""
        d = owned_file(folder, "replay", write=True, dir=True)  # a link there would lead the chunks out
        d.mkdir(exist_ok=True)
        old, new = self._live(self._saved), self._live(self.added)
        for p in d.iterdir():  # named by neither the checkpoint on disk nor the one to come
            m = re.fullmatch(r"(transitions|finals)-(\d+)\.bin", p.name)
            if m and (int(m[2]) < old.start or int(m[2]) >= new.stop):
                p.unlink()
        tdt, fdt = self._rows()
        first = self.added - self.size  # oldest global index still in the ring
        for k in range(self._saved // self.chunk, new.stop):
            lo, hi = max(self._saved, k * self.chunk), min(self.added, (k + 1) * self.chunk)
            if hi <= first or lo >= hi:
                continue  # all overwritten before this save: never read back
            rec = np.zeros(hi - lo, dtype=tdt)  # rows overwritten already stay zero (dead)
            live = np.arange(max(lo, first), hi)
            at, pos = live - lo, live % self.capacity
            rec["obs"][at], rec["action"][at] = self.obs[pos], self.actions[pos]
            rec["reward"][at], rec["done"][at] = self.rewards[pos], self.dones[pos]
            write_at(d / f"transitions-{k}.bin", (lo - k * self.chunk) * tdt.itemsize, rec.tobytes(), folder=folder)
        by_chunk: dict[int, list] = {}
        for g in self._new_finals:
            if g >= first and g % self.capacity in self.finals:
                by_chunk.setdefault(g // self.chunk, []).append(g)
        self._finals_rows = {k: n for k, n in self._finals_rows.items() if k in new}
        for k, gs in sorted(by_chunk.items()):
            rec = np.zeros(len(gs), dtype=fdt)
            rec["index"] = gs
            rec["obs"] = [self.finals[g % self.capacity] for g in gs]
            n = self._finals_rows.get(k, 0)
            write_at(d / f"finals-{k}.bin", n * fdt.itemsize, rec.tobytes(), folder=folder)
            self._finals_rows[k] = n + len(gs)
        self._saved, self._new_finals = self.added, []
        return {"files": "replay", "capacity": self.capacity, "chunk": self.chunk, "added": self.added,
                "obs": [self.obs.dtype.str, list(self.obs.shape[1:])],
                "action": [self.actions.dtype.str, list(self.actions.shape[1:])],
                "finals_rows": {int(k): int(n) for k, n in self._finals_rows.items()}, "num_envs": self.num_envs,
                "tail": None if self.tail is None else self.tail.copy(),
                "tail_pos": None if self.tail_pos is None else self.tail_pos.copy()}

    def _load_files(self, s: dict, folder) -> None:
        mine = {"capacity": self.capacity, "chunk": self.chunk, "obs": [self.obs.dtype.str, list(self.obs.shape[1:])],
                "action": [self.actions.dtype.str, list(self.actions.shape[1:])]}
        if folder is None:
            raise RlhlsError("checkpoint: its replay buffer is in the run folder's files, and no folder was given")
        if any(s.get(k) != v for k, v in mine.items()):
            raise RlhlsError(f"checkpoint: replay buffer of {_short(s, mine)}, expected {mine}")
        added, rows = s["added"], s["finals_rows"]
        if not isinstance(added, int) or isinstance(added, bool) or not 0 <= added < 2 ** 62 \
                or not isinstance(rows, dict) or any(not isinstance(n, int) or n < 0 for n in rows.values()) \
                or not set(rows) <= set(self._live(added)):
            raise RlhlsError(f"checkpoint: replay buffer counts are damaged (added {added!r}, finals rows {rows!r})")
        d = folder / "replay"
        tdt, fdt = self._rows()
        self.size = min(added, self.capacity)
        self.pos = added % self.capacity
        first = added - self.size
        self.finals = {}
        for k in self._live(added):
            lo, hi = max(first, k * self.chunk), min(added, (k + 1) * self.chunk)
            for a in range(lo, hi, 4096):  # a bounded read at a time
                b = min(hi, a + 4096)
                rec = read_rows(d / f"transitions-{k}.bin", tdt, b - a, start=a - k * self.chunk, folder=folder)
                p = np.arange(a, b) % self.capacity
                self.obs[p], self.actions[p], self.rewards[p], self.dones[p] = \
                    rec["obs"], rec["action"], rec["reward"], rec["done"]
            fin = read_rows(d / f"finals-{k}.bin", fdt, rows[k], folder=folder) if rows.get(k) else np.zeros(0, fdt)
            for g, o in zip(fin["index"].tolist(), fin["obs"]):
                if first <= g < added:  # else overwritten since
                    self.finals[g % self.capacity] = o.copy()
        self._finals_rows = dict(rows)
        self._load_small(s)


def _short(s: dict, mine: dict) -> dict:
    return {k: s.get(k) for k in mine}
