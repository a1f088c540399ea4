"""Gymnasium 1.x vector environments for the designs' env ids.

``make_vec_env(env_id, num_envs, obs_size=None)`` builds a ``SyncVectorEnv`` of
``gym.make(env_id)`` copies in **SAME_STEP autoreset mode**: when a sub-environment ends
(terminated or truncated) in a step, that same step returns the first observation of the next
episode and puts the last observation in ``infos['final_obs']``. Every returned step is then a
real transition, as CleanRL's loop expects (gymnasium 0.29 semantics). The gymnasium 1.x default,
NEXT_STEP, instead returns the reset observation one step *later* with reward 0 and
terminated = truncated = False; that step is not a transition. ``NextStepFilter`` is the helper
for code that is handed a NEXT_STEP env: it marks those steps so a rollout can drop them.

Observation padding: the CPP designs size their networks for the seed's gym-v1 observations
(Ant 111, Humanoid 376) while gymnasium v5 observes fewer (105, 348). ``pad_obs(obs, size)``
appends zeros at the end of the feature axis up to the network's input size (after observation
normalization; the padded inputs are constant 0, so their first-layer weights get zero gradient
and contribute nothing); an observation larger than the network input is an error.

``EpisodeTracker`` tracks per-env episodic return / length of the raw rewards (what the reward curve
shows, independent of any reward normalization).
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rlhls.designs.errors import RlhlsError

__all__ = ["make_vec_env", "pad_obs", "NextStepFilter", "EpisodeTracker", "space_info"]


def _make(env_id: str, kwargs: dict):
    return gym.make(env_id, **kwargs)


def make_vec_env(env_id: str, num_envs: int, *, autoreset: str = "same_step", env_kwargs: dict | None = None):
    """SyncVectorEnv of `num_envs` copies of `env_id` (SAME_STEP autoreset unless asked otherwise)."""
    if num_envs < 1:
        raise RlhlsError(f"environment '{env_id}': num_envs {num_envs} must be >= 1")
    mode = {"same_step": AutoresetMode.SAME_STEP, "next_step": AutoresetMode.NEXT_STEP}[autoreset]
    try:
        gym.spec(env_id)
    except Exception:
        raise RlhlsError(f"unknown environment '{env_id}' (not registered with gymnasium)") from None
    fns = [functools.partial(_make, env_id, dict(env_kwargs or {})) for _ in range(num_envs)]
    try:
        return SyncVectorEnv(fns, autoreset_mode=mode)
    except gym.error.DependencyNotInstalled as e:
        raise RlhlsError(f"environment '{env_id}': {str(e).splitlines()[0]}") from None


def space_info(vec_env) -> dict:
    """{'obs_shape', 'kind': 'continuous'|'discrete', 'action_dim', 'low', 'high'} of one sub-env."""
    obs_space, act_space = vec_env.single_observation_space, vec_env.single_action_space
    if isinstance(act_space, gym.spaces.Box):
        return {"obs_shape": tuple(obs_space.shape), "kind": "continuous", "action_dim": int(np.prod(act_space.shape)),
                "low": np.asarray(act_space.low, dtype=np.float64), "high": np.asarray(act_space.high, dtype=np.float64)}
    if isinstance(act_space, gym.spaces.Discrete):
        return {"obs_shape": tuple(obs_space.shape), "kind": "discrete", "action_dim": int(act_space.n),
                "low": None, "high": None}
    raise RlhlsError(f"action space {act_space} is not supported (expected Box or Discrete)")


def pad_obs(obs, size: int) -> np.ndarray:
    """Zero-pad the feature axis (last) of a batch of flat observations to `size`."""
    obs = np.asarray(obs, dtype=np.float64)
    have = obs.shape[-1]
    if have == size:
        return obs
    if have > size:
        raise RlhlsError(f"observation has {have} values but the network takes {size}")
    pad = np.zeros(obs.shape[:-1] + (size - have,))
    return np.concatenate([obs, pad], axis=-1)


class NextStepFilter:
    """For NEXT_STEP autoreset envs: ``valid(terms, truncs)`` returns the mask of sub-envs whose
    *current* step is a real transition (False right after a sub-env ended: that step only
    reset it, with reward 0), and remembers which envs end now."""

    def __init__(self, num_envs: int):
        self.pending = np.zeros(num_envs, dtype=bool)

    def valid(self, terminated, truncated) -> np.ndarray:
        ok = ~self.pending
        self.pending = np.logical_or(terminated, truncated) & ok
        return ok

    def reset(self):
        self.pending[:] = False


class EpisodeTracker:
    """Raw episodic return and length per sub-env; ``step`` returns the episodes that ended."""

    def __init__(self, num_envs: int):
        self.ret = np.zeros(num_envs)
        self.len = np.zeros(num_envs, dtype=np.int64)

    def step(self, rewards, dones) -> list[tuple[float, int]]:
        self.ret += rewards
        self.len += 1
        ended = [(float(self.ret[i]), int(self.len[i])) for i in np.flatnonzero(dones)]
        self.ret[dones] = 0.0
        self.len[dones] = 0
        return ended

    def reset(self):
        self.ret[:] = 0.0
        self.len[:] = 0
