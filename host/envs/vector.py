"""Gymnasium 1.x vector environments for the designs' env ids.

``make_env(env_id)`` builds one environment as rlhls trains on it: the rlhls environments
(host/envs/*.py, ``rlhls/...`` ids) registered first, Atari ids through CleanRL's wrapper stack
(host/envs/atari.py), any other id through ``gym.make``. ``make_vec_env(env_id, num_envs)`` builds
a ``SyncVectorEnv`` of ``make_env(env_id)`` copies in **SAME_STEP autoreset mode**: when a
sub-environment ends (terminated or truncated) in a step, that same step returns the first observation of the next
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

``ReplayableVecEnv`` (what PPO trains on): SAME_STEP semantics (an ended sub-env is reset in the
same step, its last observation in ``infos['final_obs']``) on a vector env in DISABLED autoreset
mode, so that *every* episode starts with an explicit seed, ``SeedSequence([seed, env index,
episode index])``, instead of gymnasium's unseeded autoreset (which draws from the env's own RNG,
state a replay could not rebuild without the whole history since the first reset). Per sub-env it
records the seed of the current episode and the actions taken since its reset; ``state()``
returns them (with the current observations) and ``restore(state)`` rebuilds the exact simulator
state, TimeLimit counter and RNG by resetting each sub-env with its seed and replaying its actions
(at most max_episode_steps per env; observations and rewards of the replay are discarded). Atari ids
get CleanRL's wrapper stack
(host/envs/atari.py); there a lost life ends the *episode* (terminated) but not the game
(``infos['game_over']`` False): the sub-env keeps its seed and action list and records the
position in ``life_resets``, and ``restore`` replays the whole game, calling a seedless ``reset()``
at those positions as the run did. This
needs envs that are deterministic given (seed, actions): MuJoCo and classic control are (tested
for InvertedPendulum-v5, Humanoid-v5, Pendulum-v1); ``restore`` checks that the replayed
observations equal the recorded ones and raises RlhlsError otherwise. An env without a time
limit keeps its whole episode's actions.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rlhls.core.errors import RlhlsError

__all__ = ["make_env", "make_vec_env", "pad_obs", "NextStepFilter", "EpisodeTracker", "ReplayableVecEnv",
           "space_info", "check_env_id", "action_kind", "normalize_obs", "rms_state", "rms_load"]


def _known(env_id: str) -> bool:
    """Register what `env_id` may need (rlhls's environments, ale-py's ids); True for an Atari id."""
    from .atari import is_atari
    from .registry import register_environments

    register_environments()
    if not isinstance(env_id, str):
        raise RlhlsError(f"environment id {env_id!r} is not a string")
    if not env_id.isprintable():  # a NUL or a newline would break the one-line message
        raise RlhlsError(f"unknown environment {env_id!r} (not registered with gymnasium)")
    try:
        atari = is_atari(env_id)
        gym.spec(env_id)
    except RlhlsError:
        raise
    except Exception:
        from rlhls.core.registry import did_you_mean

        near = did_you_mean(env_id, gym.registry)
        raise RlhlsError(f"unknown environment '{env_id}'{': ' + near if near else ''} "
                         "(not registered with gymnasium)") from None
    return atari


def check_env_id(env_id: str) -> None:
    """RlhlsError unless `env_id` is registered (rlhls's environments and ale-py's included)."""
    _known(env_id)


def action_kind(env_id: str) -> str:
    """'discrete' or 'continuous': the action space of one `env_id` environment (made and closed)."""
    env = make_env(env_id)
    try:
        space = env.action_space
    finally:
        env.close()
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box):
        return "continuous"
    raise RlhlsError(f"environment '{env_id}': action space {space} is not supported (expected Box or Discrete)")


def make_env(env_id: str, **kwargs):
    """One environment as rlhls trains on it (a sub-env of ``make_vec_env``)."""
    return _make_known(env_id, _known(env_id), **kwargs)


def _make_known(env_id: str, atari: bool, **kwargs):
    """``make_env`` once ``_known`` has registered what `env_id` needs (`atari`: its answer)."""
    if atari:  # CleanRL's Atari wrapper stack (host/envs/atari.py)
        from .atari import make_atari

        return make_atari(env_id, **kwargs)
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as e:
        raise RlhlsError(f"environment '{env_id}': {str(e).splitlines()[0]}") from None


def make_vec_env(env_id: str, num_envs: int, *, autoreset: str = "same_step", env_kwargs: dict | None = None):
    """SyncVectorEnv of `num_envs` copies of `env_id` (SAME_STEP autoreset unless asked otherwise:
    'next_step', or 'disabled' = the caller resets ended sub-envs)."""
    if num_envs < 1:
        raise RlhlsError(f"environment '{env_id}': num_envs {num_envs} must be >= 1")
    modes = {"same_step": AutoresetMode.SAME_STEP, "next_step": AutoresetMode.NEXT_STEP,
             "disabled": AutoresetMode.DISABLED}
    if autoreset not in modes:
        raise RlhlsError(f"autoreset '{autoreset}' is not one of {', '.join(modes)}")
    atari = _known(env_id)  # once for the sub-envs (it scans the environment modules and entry points)
    fns = [functools.partial(_make_known, env_id, atari, **dict(env_kwargs or {})) for _ in range(num_envs)]
    try:
        return SyncVectorEnv(fns, autoreset_mode=modes[autoreset])
    except gym.error.DependencyNotInstalled as e:
        raise RlhlsError(f"environment '{env_id}': {str(e).splitlines()[0]}") from None


def space_info(vec_env) -> dict:
    """{'obs_shape', 'kind': 'continuous'|'discrete', 'action_dim', 'low', 'high'} of one sub-env."""
    obs_space, act_space = vec_env.single_observation_space, vec_env.single_action_space
    if isinstance(act_space, gym.spaces.Box):
        return {"obs_shape": tuple(obs_space.shape), "kind": "continuous", "action_dim": int(np.prod(act_space.shape)),
                "low": np.asarray(act_space.low, dtype=np.float64),
                "high": np.asarray(act_space.high, dtype=np.float64)}
    if isinstance(act_space, gym.spaces.Discrete):
        return {"obs_shape": tuple(obs_space.shape), "kind": "discrete", "action_dim": int(act_space.n),
                "low": None, "high": None}
    raise RlhlsError(f"action space {act_space} is not supported (expected Box or Discrete)")


def normalize_obs(rms, raw, clip: float, update: bool) -> np.ndarray:
    """Observations normalized by running statistics (gymnasium's ``RunningMeanStd``, updated
    first when `update`) and clipped to +-clip, as gymnasium's NormalizeObservation (var + 1e-8)."""
    raw = np.asarray(raw, dtype=np.float64)
    if update:
        rms.update(raw)
    return np.clip((raw - rms.mean) / np.sqrt(rms.var + 1e-8), -clip, clip)


def rms_state(rms) -> dict:
    """A RunningMeanStd's state for a checkpoint (arrays copied)."""
    return {"mean": np.array(rms.mean, copy=True), "var": np.array(rms.var, copy=True), "count": float(rms.count)}


def rms_load(rms, s: dict) -> None:
    rms.mean, rms.var, rms.count = np.array(s["mean"]), np.array(s["var"]), float(s["count"])


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
    """Raw episodic return and length per sub-env; ``step`` returns the episodes that ended.

    With the vector env's ``infos`` (Atari, host/envs/atari.py) it adds ``infos['raw_reward']`` (the
    unclipped score) and ends an episode only where ``infos['game_over']`` (not at a lost life)."""

    def __init__(self, num_envs: int):
        self.ret = np.zeros(num_envs)
        self.len = np.zeros(num_envs, dtype=np.int64)

    def step(self, rewards, dones, infos=None) -> list[tuple[float, int]]:
        if infos is not None and "raw_reward" in infos:
            rewards = np.asarray(infos["raw_reward"], dtype=np.float64)
        if infos is not None and "game_over" in infos:
            dones = np.logical_and(dones, infos["game_over"])
        self.ret += rewards
        self.len += 1
        ended = [(float(self.ret[i]), int(self.len[i])) for i in np.flatnonzero(dones)]
        self.ret[dones] = 0.0
        self.len[dones] = 0
        return ended

    def reset(self):
        self.ret[:] = 0.0
        self.len[:] = 0


class ReplayableVecEnv:
    """Vector env with SAME_STEP semantics whose state is checkpointable (see the module docstring)."""

    def __init__(self, env_id: str, num_envs: int, seed: int, *, env_kwargs: dict | None = None):
        self.env_id, self.num_envs, self.seed = env_id, num_envs, int(seed)
        self.envs = make_vec_env(env_id, num_envs, autoreset="disabled", env_kwargs=env_kwargs)
        self.single_observation_space = self.envs.single_observation_space
        self.single_action_space = self.envs.single_action_space
        self.episodes = np.zeros(num_envs, dtype=np.int64)  # episodes started per sub-env
        self.seeds: list[int | None] = [None] * num_envs  # seed of each sub-env's current episode
        self.actions: list[list] = [[] for _ in range(num_envs)]  # actions since that reset
        self.life_resets: list[list[int]] = [[] for _ in range(num_envs)]  # Atari: resets within the game
        self.obs: np.ndarray | None = None  # the current observations (raw)

    def _new_seeds(self, mask) -> list[int | None]:
        out: list[int | None] = [None] * self.num_envs
        for i in map(int, np.flatnonzero(mask)):
            out[i] = int(np.random.SeedSequence([self.seed, int(i), int(self.episodes[i])]).generate_state(1)[0])
            self.episodes[i] += 1
            self.seeds[i] = out[i]
            self.actions[i] = []
            self.life_resets[i] = []
        return out

    def reset(self):
        """Start a fresh episode in every sub-env (the next seeds of each)."""
        obs, info = self.envs.reset(seed=self._new_seeds(np.ones(self.num_envs, dtype=bool)))
        self.obs = np.array(obs)
        return np.array(obs), info

    def step(self, actions):
        """gymnasium SAME_STEP step: ended sub-envs return their next episode's first observation;
        ``infos['final_obs'][i]`` is the last observation of sub-env i where ``infos['_final_obs'][i]``."""
        obs, rew, term, trunc, info = self.envs.step(actions)
        obs = np.array(obs)
        done = np.logical_or(term, trunc)
        # Atari lost life (host/envs/atari.py EpisodicLife): the episode ends, the game goes on; its
        # replay continues through a seedless reset() at this point
        cont = done & ~np.asarray(info["game_over"], dtype=bool) if "game_over" in info else np.zeros_like(done)
        acts = np.asarray(actions)
        for i in np.flatnonzero(~done | cont):
            self.actions[i].append(acts[i].copy())
        for i in np.flatnonzero(cont):
            self.life_resets[i].append(len(self.actions[i]))
        if done.any():
            info = dict(info, final_obs=obs.copy(), _final_obs=done.copy())
            first, _ = self.envs.reset(seed=self._new_seeds(done & ~cont), options={"reset_mask": done.copy()})
            obs[done] = np.asarray(first)[done]
        self.obs = obs.copy()
        return obs, rew, term, trunc, info

    def state(self) -> dict | None:
        if self.obs is None:
            return None
        return {"env_id": self.env_id, "episodes": self.episodes.copy(), "seeds": list(self.seeds),
                "actions": [np.array(a) for a in self.actions], "obs": self.obs.copy(),
                "life_resets": [list(r) for r in self.life_resets]}

    def restore(self, state: dict | None) -> None:
        """Rebuild the recorded state: reset each sub-env with its episode's seed, replay its actions."""
        if state is None:
            return
        if len(state["seeds"]) != self.num_envs or state["env_id"] != self.env_id:
            raise RlhlsError(f"checkpoint: environment state is for {len(state['seeds'])} x '{state['env_id']}', "
                             f"expected {self.num_envs} x '{self.env_id}'")
        obs, _ = self.envs.reset(seed=list(state["seeds"]))
        obs = np.array(obs)
        resets = state.get("life_resets") or [[] for _ in range(self.num_envs)]
        for i, (env, acts) in enumerate(zip(self.envs.envs, state["actions"])):
            at = set(resets[i])
            for k, a in enumerate(acts):
                o, _, te, tr, _ = env.step(a)
                if (te or tr) != (k + 1 in at):
                    raise RlhlsError(f"--resume: environment '{self.env_id}' is not deterministic: replaying "
                                     f"sub-env {i}'s recorded actions ended its episode at another step")
                if k + 1 in at:
                    o, _ = env.reset()  # lost life: the game goes on (no seed, as the run did)
                obs[i] = o
        if not np.array_equal(obs, state["obs"]):
            bad = [i for i in range(self.num_envs) if not np.array_equal(obs[i], state["obs"][i])]
            raise RlhlsError(f"--resume: environment '{self.env_id}' is not deterministic: replaying sub-env "
                             f"{bad[0]}'s {len(state['actions'][bad[0]])} recorded actions from seed "
                             f"{state['seeds'][bad[0]]} did not reproduce its observation")
        self.episodes = np.array(state["episodes"], dtype=np.int64)
        self.seeds = list(state["seeds"])
        self.actions = [list(a) for a in state["actions"]]
        self.life_resets = [list(r) for r in resets]
        self.obs = obs

    def close(self):
        self.envs.close()
