"""Environments: the vector-env plumbing the trainers use (``vector``), CleanRL's Atari wrapper
stack (``atari``), and rlhls's own gymnasium environments, one module each (``registry``
registers them as ``rlhls/<Name>-v<k>``; ``import rlhls.envs`` or any ``make_env`` /
``make_vec_env`` does it)."""

from .registry import ENVIRONMENT_IDS, environment_modules, register_environments, register_module
from .vector import (
    EpisodeTracker,
    NextStepFilter,
    ReplayableVecEnv,
    action_kind,
    check_env_id,
    make_env,
    make_vec_env,
    normalize_obs,
    pad_obs,
    rms_load,
    rms_state,
    space_info,
)

__all__ = ["make_env", "make_vec_env", "pad_obs", "NextStepFilter", "EpisodeTracker", "ReplayableVecEnv",
           "space_info", "check_env_id", "action_kind", "normalize_obs", "rms_state", "rms_load",
           "register_environments", "register_module", "environment_modules", "ENVIRONMENT_IDS"]
