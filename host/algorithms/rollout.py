"""The on-policy rollout loop A2C, PPO and TRPO share: sample actions, step the replayable vector
env (``envs.ReplayableVecEnv``, SAME_STEP autoreset), bootstrap time-limit ends from V of
``infos['final_obs']``, store into one ``Rollout``, track episodes, time the phases
(dnn_inference, env_run, storing_trajectories; host/phases.py).

A trainer gives the loop what is its own: ``act(obs) -> (action, log-prob or None, V or None)``,
``observe(raw, update_stats)`` (its observation normalization and padding; None: the raw
observation), ``value(obs)`` (V of final observations and the bootstrap; None: the trainer values
the rollout afterwards from ``Rollout.finals``) and ``reward(r, terminated)`` (the rewards the loss
sees; None: the env's). Done codes: 0 continues, 1 terminated (next value 0), 2 truncated (next
value V(final observation), ``tval``), as ``gae.gae_reference`` and the GAE kernel take them;
terminated wins where both are set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..phases import timed

__all__ = ["Rollout", "collect_rollout", "start_envs", "episode_columns"]


@dataclass
class Rollout:
    """One rollout, arrays (T, N, ...) in step order."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray            # the rewards the loss sees (``reward`` hook)
    done: np.ndarray           # 0 / 1 / 2 codes
    val: np.ndarray            # V(s_t) at acting time (zeros when ``act`` gives none)
    logp: np.ndarray | None    # log pi(a_t|s_t) at acting time (None when ``act`` gives none)
    tval: np.ndarray           # V(final observation) where done = 2 (``value`` given)
    boot: np.ndarray | None    # V of the observations after the last step (``value`` given)
    finals: tuple              # (t indices, env indices, observed final observations) of the truncations
    episodes: list             # (env_step, return, length) of the episodes that ended

    @property
    def truncations(self) -> int:
        return int(np.sum(self.done == 2))

    def flat(self, name: str) -> np.ndarray:
        """An array with its (T, N) steps flattened to T * N rows."""
        a = getattr(self, name)
        return a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])


def start_envs(trainer, times: dict, observe: Callable | None = None) -> None:
    """Reset the trainer's envs before its first rollout (``trainer.obs`` None), timed as env_run."""
    if trainer.obs is None:
        with timed(times, "env_run"):
            raw, _ = trainer.envs.reset()
            trainer.obs = raw if observe is None else observe(raw, True)


def collect_rollout(trainer, steps: int, times: dict, step0: int, *, act: Callable, observe: Callable | None = None,
                    value: Callable | None = None, reward: Callable | None = None,
                    obs_dtype=np.float64) -> Rollout:
    """``steps`` x num_envs transitions from ``trainer.envs``, starting at ``trainer.obs`` and leaving
    it at the observations after the last step; episodes are counted by ``trainer.tracker`` and
    numbered by env steps from ``step0``."""
    envs, tracker, space = trainer.envs, trainer.tracker, trainer.space
    T, N = steps, envs.num_envs
    obs = trainer.obs
    continuous = space["kind"] == "continuous"
    b_obs = np.zeros((T, N) + tuple(obs.shape[1:]), dtype=obs_dtype)
    b_act = (np.zeros((T, N, space["action_dim"])) if continuous else np.zeros((T, N), dtype=np.int64))
    b_rew, b_val, b_logp, b_done, b_tval = (np.zeros((T, N)) for _ in range(5))
    has_logp = False
    f_t, f_i, f_obs = [], [], []
    episodes = []
    for t in range(T):
        with timed(times, "dnn_inference"):
            a, logp, v = act(obs)
        with timed(times, "env_run"):
            raw, r, term, trunc, infos = envs.step(trainer._env_action(a))
            term = np.asarray(term, dtype=bool)
            trunc = np.asarray(trunc, dtype=bool) & ~term
            r = np.asarray(r, dtype=np.float64)
            nxt = raw if observe is None else observe(raw, True)
            r_used = r if reward is None else reward(r, term)
        if trunc.any():  # SAME_STEP: the truncated episode's last observation is in infos
            with timed(times, "dnn_inference"):
                idx = np.flatnonzero(trunc)
                final = np.stack([np.asarray(infos["final_obs"][i]) for i in idx])
                final = final.astype(np.float64) if observe is None else observe(final, False)
                if value is not None:
                    b_tval[t, idx] = value(final)
                f_t += [t] * len(idx)
                f_i += list(idx)
                f_obs.append(final)
        with timed(times, "storing_trajectories"):
            b_obs[t], b_act[t], b_rew[t] = obs, a, r_used
            if v is not None:
                b_val[t] = v
            if logp is not None:
                b_logp[t], has_logp = logp, True
            b_done[t] = term * 1 + trunc * 2
            # Atari: the unclipped score, one episode per game (host/envs/atari.py)
            for ret, length in tracker.step(r, np.logical_or(term, trunc), infos):
                episodes.append((step0 + (t + 1) * N, ret, length))
        obs = nxt
    trainer.obs = obs
    boot = None
    if value is not None:
        with timed(times, "dnn_inference"):
            boot = value(obs)
    finals = (np.array(f_t, dtype=np.int64), np.array(f_i, dtype=np.int64),
              np.concatenate(f_obs) if f_obs else None)
    return Rollout(b_obs, b_act, b_rew, b_done, b_val, b_logp if has_logp else None, b_tval, boot, finals, episodes)


def episode_columns(episodes: list, truncations: int) -> dict:
    """The metrics row's first columns: episodes ended, truncations, their mean return and length."""
    rets = [e[1] for e in episodes]
    nan = float("nan")
    return {"episodes": len(episodes), "truncations": int(truncations),
            "episodic_return": float(np.mean(rets)) if rets else nan,
            "episodic_length": float(np.mean([e[2] for e in episodes])) if rets else nan}
