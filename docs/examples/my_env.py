"""An environment of your own: a gymnasium environment registered under your id, checked with
gymnasium's check_env, and trained by a registered design through --env.

    python docs/examples/my_env.py OUT_DIR
"""

import sys

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from rlhls.cli import main


class Corridor(gym.Env):
    """Walk right along a corridor of `length` cells; reward 1 at the end, -0.01 per step.
    The observation has CartPole's shape (4,), so CartPole's designs train on it as they are."""

    def __init__(self, length: int = 8):
        self.length = length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)  # 0: left, 1: right

    def _obs(self):
        x = 2.0 * self.pos / self.length - 1.0
        return np.array([x, 1.0 - abs(x), 0.0, 0.0], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return self._obs(), {}

    def step(self, action):
        self.pos = min(self.length, max(0, self.pos + (1 if action == 1 else -1)))
        self.t += 1
        done = self.pos == self.length
        return self._obs(), 1.0 if done else -0.01, done, self.t >= 100, {}


gym.register("me/Corridor-v0", entry_point=Corridor, max_episode_steps=100)
check_env(gym.make("me/Corridor-v0").unwrapped)

out = sys.argv[1] if len(sys.argv) > 1 else "runs/corridor"
sys.exit(main(["train", "apdrl-dqn-cartpole", "--env", "me/Corridor-v0", "--steps", "1000", "--out", out,
               "--set", "learning_starts=100", "--quiet"]))
