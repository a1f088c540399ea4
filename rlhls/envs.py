"""Importing ``rlhls.envs`` registers every rlhls environment with gymnasium as ``rlhls/<Name>-v<k>``
(one module each in host/envs/, see rlhls.host.envs.registry)::

    import gymnasium as gym
    import rlhls.envs  # noqa: F401
    env = gym.make("rlhls/RoboticArm-v0")

(or ``gym.make("rlhls.envs:rlhls/RoboticArm-v0")``). ``IDS`` are the ids registered. The trainers
need no import: their ``make_env`` / ``make_vec_env`` register the environments themselves."""

from rlhls.host.envs import make_env, register_environments, register_module

__all__ = ["IDS", "make_env", "register_environments", "register_module"]

IDS: tuple[str, ...] = register_environments()
