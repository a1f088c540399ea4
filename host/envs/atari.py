"""Atari (ALE) environments as CleanRL's ``dqn_atari.py`` / ``ppo_atari.py`` build them, on
gymnasium 1.x wrappers.

Requirements: ``ale-py >= 0.9`` (ships the ROMs; ``gymnasium[atari]``) and OpenCV
(``opencv-python-headless``; gymnasium's ``AtariPreprocessing`` resizes with ``cv2``). A missing
one is an RlhlsError naming the package.

``make_atari(env_id)`` for a ``*NoFrameskip-v4`` id (ALE: frameskip 1, sticky actions off,
108 000 frames at most per game) stacks, innermost first:

1. ``AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True,
   terminal_on_life_loss=False)``: 0-30 random no-ops on a true reset, the action repeated 4
   frames with the max of the last two, 84x84 grey uint8 (CleanRL's NoopResetEnv +
   MaxAndSkipEnv + ResizeObservation + GrayScaleObservation).
2. ``EpisodicLife`` (CleanRL's / SB3's ``EpisodicLifeEnv``, chosen over gymnasium's
   ``terminal_on_life_loss``, which ends the *game* at the first lost life): a lost life returns
   ``terminated=True`` (the learner bootstraps nothing past it) but the game goes on; the
   following seedless ``reset()`` takes one no-op step instead of restarting. A reset with a
   seed always starts a fresh game (``reset(seed=s)`` is deterministic, as gymnasium asks).
   Every step sets ``info['game_over']`` (the real end: ALE terminal or its frame limit).
3. ``FireReset`` where the game's action meanings include FIRE (Breakout; not MsPacman): after
   every reset (game or life) press FIRE then action 2, as SB3's ``FireResetEnv``.
4. ``ClipReward``: the reward is ``sign(r)`` for learning; ``info['raw_reward']`` keeps the game
   score so the *recorded* episodic return is unclipped.
5. ``FrameStackObservation(4)``: observations ``uint8 (4, 84, 84)``, the stack refilled with
   the first frame on every reset.

Every wrapper records its constructor arguments (gymnasium's ``RecordConstructorArgs``), so
``env.spec`` lists the whole stack in ``additional_wrappers`` and ``env.spec.make()`` (or
``gym.make(env.spec)``) rebuilds it: same wrappers, same seeded rollouts.

``EpisodeTracker.step(rewards, dones, infos)`` (host/envs/vector.py) uses ``raw_reward`` and
``game_over``: an episode in metrics.csv / episodes.csv is one game (all lives), its return the
sum of raw scores, its length in agent steps (4 frames each; CleanRL's RecordEpisodeStatistics,
below the frame skip, counts frames).

Resume: ``ReplayableVecEnv`` (host/envs/vector.py) keeps, per sub-env, the game's seed and every
action since the game began, with the positions of life resets; ``restore`` replays the game
(calling ``reset()`` without a seed at each life reset, as the run did), at most 27 000 agent
steps per sub-env.
ALE is deterministic given (seed, actions) with sticky actions off (v4 ids).

Replay memory (DQN-Breakout's design asks CleanRL's ``buffer_size`` 1 000 000): host/algorithms/dqn.py's
``ReplayBuffer`` stores each uint8 (4, 84, 84) observation once (a transition's next observation
is the following transition's observation, kept apart only at episode ends), 28 224 B per
transition, so 1M transitions would take 28 GB against the machine's 24 GiB. DQN caps an Atari
buffer at ``ATARI_BUFFER_CAP`` (200 000 transitions, 5.6 GB) unless ``buffer_size`` is set
explicitly. ``replay_bytes`` / ``max_buffer_size`` give the sizes (``next_obs=True``: a buffer
that stores both copies, as CleanRL's does).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rlhls.core.errors import RlhlsError

__all__ = ["is_atari", "make_atari", "EpisodicLife", "FireReset", "ClipReward", "replay_bytes",
           "max_buffer_size", "ATARI_BUFFER_CAP", "FRAME_STACK", "SCREEN"]

FRAME_STACK = 4
SCREEN = 84
ATARI_BUFFER_CAP = 200_000
_ALE_ENTRY = "ale_py.env:AtariEnv"


def _register_ale() -> bool:
    """Register ALE's ids with gymnasium (ale-py >= 1 needs it); False when ale-py is missing."""
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True


def is_atari(env_id: str) -> bool:
    """True for an ALE id (registering ale-py's ids first if the id is not known yet)."""
    try:
        spec = gym.spec(env_id)
    except Exception:
        if not _register_ale():
            if "NoFrameskip" in env_id or env_id.startswith("ALE/"):
                raise RlhlsError(f"environment '{env_id}': ale-py is not installed "
                                 "(pip install 'gymnasium[atari]', ale-py >= 0.9 ships the ROMs)") from None
            return False
        try:
            spec = gym.spec(env_id)
        except Exception:
            return False
    return str(spec.entry_point) == _ALE_ENTRY


class EpisodicLife(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Lost life -> terminated, game continues (one no-op step on the next seedless reset); sets
    ``info['game_over']``. A seeded reset starts a fresh game."""

    def __init__(self, env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.lives = 0
        self.real_done = True

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.real_done = bool(term or trunc)
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            term = True
        self.lives = lives
        info["game_over"] = self.real_done
        return obs, r, term, trunc, info

    def reset(self, **kwargs):
        # a seed asks for that seed's game; without one (ReplayableVecEnv after a lost life) the game goes on
        if self.real_done or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:  # lost a life: continue the game from where it is
            obs, _, term, trunc, info = self.env.step(0)
            if term or trunc:
                obs, info = self.env.reset(**kwargs)
        self.real_done = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Press FIRE (then action 2) after every reset: games that wait for it to start."""

    def __init__(self, env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        meanings = env.unwrapped.get_action_meanings()
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise RlhlsError(f"FireReset: action 1 of {env.spec.id if env.spec else env} is not FIRE")

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        obs, _, term, trunc, info = self.env.step(1)
        if term or trunc:
            self.env.reset(**kwargs)
        obs, _, term, trunc, info = self.env.step(2)
        if term or trunc:
            obs, info = self.env.reset(**kwargs)
        return obs, info


class ClipReward(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """sign(reward) for learning; the game score in ``info['raw_reward']``."""

    def __init__(self, env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        info["raw_reward"] = float(r)
        return obs, float(np.sign(r)), term, trunc, info


def make_atari(env_id: str, *, terminal_on_life_loss: bool = True, clip_rewards: bool = True,
               frame_stack: int = FRAME_STACK, noop_max: int = 30, frame_skip: int = 4, **make_kwargs):
    """One CleanRL-style Atari env (see the module docstring)."""
    if not is_atari(env_id):
        raise RlhlsError(f"environment '{env_id}' is not an ALE (Atari) environment")
    if "NoFrameskip" not in env_id and frame_skip > 1:
        raise RlhlsError(f"environment '{env_id}': use a NoFrameskip-v4 id (the preprocessing skips frames itself)")
    try:
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError:
        raise RlhlsError(f"environment '{env_id}': OpenCV is not installed "
                         "(pip install opencv-python-headless)") from None
    env = gym.make(env_id, **make_kwargs)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=frame_skip, screen_size=SCREEN,
                                          grayscale_obs=True, terminal_on_life_loss=False)
    if terminal_on_life_loss:
        env = EpisodicLife(env)
    # gymnasium types `unwrapped` as a plain Env; here it is ale_py's AtariEnv
    if "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireReset(env)
    if clip_rewards:
        env = ClipReward(env)
    return gym.wrappers.FrameStackObservation(env, frame_stack)


def replay_bytes(buffer_size: int, obs_shape=(FRAME_STACK, SCREEN, SCREEN), *, next_obs: bool = False) -> int:
    """Bytes of a uint8 replay buffer of `buffer_size` transitions (obs, and next_obs if stored)."""
    per = int(np.prod(obs_shape)) * (2 if next_obs else 1) + 8 + 4 + 4  # + action, reward, done
    return int(buffer_size) * per


def max_buffer_size(mem_bytes: int, obs_shape=(FRAME_STACK, SCREEN, SCREEN), *, next_obs: bool = False) -> int:
    """Most transitions that fit in `mem_bytes`."""
    return int(mem_bytes) // replay_bytes(1, obs_shape, next_obs=next_obs)
