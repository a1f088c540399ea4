"""Evaluation of a policy and trained policies in Python.

``evaluate(act, env_id, episodes=10, seed=0)`` is Stable-Baselines3's ``evaluate_policy``: the
deterministic policy ``act(obs batch) -> actions`` plays ``episodes`` whole episodes on one
environment of its own, made as the training run's are (``envs.ReplayableVecEnv``: the same
wrappers, Atari's included), and returns the mean and (population) standard deviation of the
episode returns and lengths. An episode is what the training record counts (``EpisodeTracker``):
for Atari one game over all lives with its unclipped score, as SB3 counts it through its
``Monitor`` below the Atari wrappers. Evaluation episode k of seed S starts from
``SeedSequence([S + 2**32, 0, k])``: training seeds are below 2**32, so no evaluation episode is
ever one a training run of any seed played, and an evaluation depends on the policy and S only
(not on when it runs). The trainers evaluate through ``TrainerBase.predict`` (deterministic: no
draw from the run's Generator, no normalization statistics updated, its own environment), so a
run with evaluation trains the same bits as one without.

``untrained(design, seed=0) -> Policy``: a design's policy before any training (its networks as
the trainer of that seed builds them: an ONNX network's are the file's), for ``rlhls eval DESIGN
--untrained``.

``load(folder) -> Policy``: the trained policy of a run folder (``rlhls train``'s, or an ``rlhls
run`` folder's ``train/``), rebuilt as the run built its trainer (design, hyperparameters, plan
and design points of config.json) and given the checkpoint's state, so ``Policy.predict`` runs the
trainer's own acting code: the same bits as the run's last policy, in the precision it trained.
"""

from __future__ import annotations

import os
import reprlib
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlhls.core.errors import RlhlsError

if TYPE_CHECKING:
    from rlhls.designs.design import Design

    from .algorithms.base import TrainerBase

__all__ = ["evaluate", "eval_seed", "Policy", "load", "untrained", "EVAL_SEED_OFFSET"]

EVAL_SEED_OFFSET = 2 ** 32  # above every training seed (check_seed: < 2**32)
GIF_FRAMES = 1000  # RL Zoo's record_video default length


def eval_seed(seed: int) -> int:
    """The environment seed evaluation of seed `seed` plays under (apart from every training seed)."""
    return int(seed) + EVAL_SEED_OFFSET


def evaluate(act, env_id: str, *, episodes: int = 10, seed: int = 0, frames: list | None = None,
             max_steps: int | None = None) -> dict:
    """`episodes` episodes of `act` on a fresh `env_id` environment (see the module docstring):
    {'mean_return', 'std_return', 'mean_length', 'std_length', 'episodes', 'seed', 'returns',
    'lengths'}. `frames` (a list) collects the ``rgb_array`` renders of the first episode, at most
    ``GIF_FRAMES`` (the env is made rendering); `max_steps` bounds the steps (None: until the
    episodes end)."""
    from .envs import EpisodeTracker, ReplayableVecEnv
    from .hyperparams import check_seed

    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise RlhlsError(f"evaluation episodes {episodes!r}: expected an integer >= 1")
    seed = check_seed(seed)
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                  or max_steps < 1):
        raise RlhlsError(f"evaluation max_steps {max_steps!r}: expected an integer >= 1 (None: whole episodes)")
    if frames is not None and not isinstance(frames, list):
        raise RlhlsError(f"evaluation frames {reprlib.repr(frames)}: expected a list (the renders go into it) or None")
    if not callable(act):
        raise RlhlsError(f"evaluate: act {reprlib.repr(act)} is not callable (act(observations) -> actions)")
    kwargs = {"render_mode": "rgb_array"} if frames is not None else None
    env = ReplayableVecEnv(env_id, 1, eval_seed(seed), env_kwargs=kwargs)
    try:
        tracker = EpisodeTracker(1)
        returns: list[float] = []
        lengths: list[int] = []
        obs, _ = env.reset()
        steps = 0
        while len(returns) < episodes and (max_steps is None or steps < max_steps):
            if frames is not None and not returns and len(frames) < GIF_FRAMES:
                frames.append(np.asarray(env.envs.envs[0].render()))
            obs, r, term, trunc, infos = env.step(act(obs))
            steps += 1
            for ret, length in tracker.step(np.asarray(r, dtype=np.float64), np.logical_or(term, trunc), infos):
                returns.append(ret)
                lengths.append(length)
    finally:
        env.close()
    rets, lens = np.array(returns, dtype=np.float64), np.array(lengths, dtype=np.float64)
    nan = float("nan")
    return {"mean_return": float(rets.mean()) if len(rets) else nan,
            "std_return": float(rets.std()) if len(rets) else nan,
            "mean_length": float(lens.mean()) if len(lens) else nan,
            "std_length": float(lens.std()) if len(lens) else nan,
            "episodes": len(rets), "seed": int(seed), "returns": [float(x) for x in rets],
            "lengths": [int(x) for x in lens]}


def renders_rgb(env_id: str) -> bool:
    """Whether `env_id` renders ``rgb_array`` frames (what a GIF needs), from its class's metadata."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    from .envs import check_env_id

    check_env_id(env_id)
    entry = gym.spec(env_id).entry_point
    try:
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception:
        return False
    return "rgb_array" in (getattr(creator, "metadata", None) or {}).get("render_modes", [])


def write_gif(frames: list, path, fps: float | None) -> None:
    """The frames as an animated GIF (Pillow), written atomically, with rlhls' mark (a comment:
    fileio.image_ours recognises it, so a later --gif replaces it without --force)."""
    import io

    from PIL import Image

    from rlhls.core.fileio import GIF_COMMENT, atomic_write_bytes

    if not frames:
        raise RlhlsError(f"--gif '{path}': the environment rendered no frame")
    # each frame its own 256 colours, fast octree without dithering: ~10 ms a 600x400 frame (Pillow's default ~60)
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)).quantize(256, method=Image.Quantize.FASTOCTREE,
                                                                      dither=Image.Dither.NONE) for f in frames]
    buf = io.BytesIO()
    # GIF delays are in 10 ms steps; 20 ms is the shortest viewers honour
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], loop=0, comment=GIF_COMMENT,
                   duration=max(20, int(round(1000.0 / fps / 10.0)) * 10) if fps else 40)
    atomic_write_bytes(path, buf.getvalue())


class Policy:
    """A run's trained policy with Stable-Baselines3's ``predict``. ``observation_space`` and
    ``action_space`` are the environment's; ``config`` the run's config.json; ``folder`` the run
    (None: a design's policy before training, ``untrained``)."""

    def __init__(self, trainer: TrainerBase, config: dict, folder: Path | None, seed: int = 0) -> None:
        self._trainer = trainer
        self.config, self.folder = config, folder
        self.env_id = trainer.env_id
        self.observation_space = trainer.envs.single_observation_space
        self.action_space = trainer.envs.single_action_space
        self._rng = np.random.default_rng(seed)  # deterministic=False draws; never the run's Generator

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """(action, state) as SB3's ``predict``: one observation gives one action, a batch
        (n, *observation shape) n actions; `state` and `episode_start` are returned / ignored
        (the policies here have no recurrent state). An observation is numbers (any numeric dtype: the
        policy casts them, as SB3), finite: anything else is one RlhlsError line."""
        if not isinstance(deterministic, (bool, np.bool_)):
            raise RlhlsError(f"predict: deterministic={reprlib.repr(deterministic)}: expected True or False")
        shape = tuple(self.observation_space.shape)
        try:
            obs = np.asarray(observation)
        except (ValueError, TypeError) as e:  # ragged nested lists
            raise RlhlsError(f"predict: observation {reprlib.repr(observation)} is not an array "
                             f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        if obs.dtype.kind not in "biuf":  # strings, objects, complex, dates
            raise RlhlsError(f"predict: observation of dtype {obs.dtype}; '{self.env_id}' observes numbers "
                             f"({self.observation_space.dtype})")
        one = obs.shape == shape
        if not one and not (obs.ndim == len(shape) + 1 and obs.shape[1:] == shape):
            raise RlhlsError(f"predict: observation of shape {obs.shape}; '{self.env_id}' observes {shape} "
                             f"(or a batch (n, {', '.join(map(str, shape))}))")
        if obs.dtype.kind == "f" and not np.isfinite(obs).all():
            at = tuple(int(i) for i in np.argwhere(~np.isfinite(obs))[0])
            which = "the observation" if one else f"observation {at[0]} of the batch"
            value = obs[at]
            raise RlhlsError(f"predict: {which} holds {value} at {list(at if one else at[1:])}: expected finite "
                             "numbers")
        if one:
            # SB3 squeezes the batch axis: a discrete action is a 0-d array, not a numpy scalar
            return np.asarray(self._trainer.predict(obs[None], deterministic, self._rng))[0, ...], state
        return self._trainer.predict(obs, deterministic, self._rng), state

    def evaluate(self, episodes: int = 10, seed: int | None = None, frames: list | None = None) -> dict:
        """The deterministic policy evaluated as the run evaluates it (seed: the run's by default)."""
        seed = self.config.get("seed", 0) if seed is None else seed
        return evaluate(lambda o: self._trainer.predict(o, True, None), self.env_id, episodes=episodes, seed=seed,
                        frames=frames)


def load(folder: str | os.PathLike[str], *, design: Design | str | None = None,
         log: str | os.PathLike[str] | None = None) -> Policy:
    """The trained policy of a run folder (see the module docstring). `design`: the design file
    (``FILE.py[:NAME]``) or Design of a run of a user's design file — a run folder never imports a
    file by itself; the file must be the one the run recorded (its sha256). `log`: a file that takes
    what the environments' libraries print while it is rebuilt (None: discarded)."""
    from rlhls.core.fileio import owned_file, path_arg, read_json
    from rlhls.core.procs import library_output

    from .algorithms import get_algorithm
    from .bound import bind_recorded
    from .checkpoint import load_checkpoint
    from .runfolder import CHECKPOINT, run_dir

    run = run_dir(path_arg(folder, "rlhls.load", "folder"))
    owned_file(run, "config.json")  # never read through a link out of the run folder
    try:
        cfg = read_json(run / "config.json")
    except FileNotFoundError:
        raise RlhlsError(f"run folder '{run}': config.json is missing") from None
    except (OSError, ValueError) as e:
        raise RlhlsError(f"run folder '{run}': config.json cannot be read as JSON ({e})") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("hyperparams"), dict) or not all(
            isinstance(cfg.get(k), str) for k in ("design", "algorithm", "env")):
        raise RlhlsError(f"run folder '{run}': config.json is not a run's config (design, algorithm, env, hyperparams)")
    path = run / CHECKPOINT
    try:
        ck = load_checkpoint(path)
    except RlhlsError:
        raise
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as e:
        raise RlhlsError(f"run folder '{run}': checkpoint cannot be read ({type(e).__name__})") from None
    if not isinstance(ck, dict) or not isinstance(ck.get("trainer"), dict):
        raise RlhlsError(f"run folder '{run}': '{path.name}' is not a run's checkpoint (missing its state)")
    if ck.get("design") != cfg["design"] or ck.get("algorithm") != cfg["algorithm"]:
        raise RlhlsError(f"run folder '{run}': the checkpoint is of {ck.get('design')!r} / {ck.get('algorithm')!r}, "
                         f"config.json of {cfg['design']!r} / {cfg['algorithm']!r}")
    bound = bind_recorded(cfg, given=design, where=f"run folder '{run}'")  # the run's design, as it trained
    alg, hp, design = bound.algorithm or get_algorithm(cfg["algorithm"]), bound.hyperparams, bound.design
    if isinstance(cfg.get("plan_points"), dict) and cfg.get("precision", "fp64") != "fp64":
        design = design.at_points(cfg["plan_points"])
    plan = cfg.get("plan") if hp.get("precision") == "mixed" else None
    if hp.get("precision") == "mixed" and not isinstance(plan, dict):
        raise RlhlsError(f"run folder '{run}': a mixed-precision run without its plan in config.json")
    with library_output(log):
        trainer = alg.trainer(design, env_id=cfg["env"], seed=int(cfg.get("seed", 0)), backend="emu",
                              hyperparams=hp, assignment=plan)
    try:
        # the policy needs no environment state: nothing is replayed; a replay buffer reads its files
        trainer.run_dir = run
        trainer.load_state_dict(dict(ck["trainer"], env=None))
    except RlhlsError:
        trainer.close()
        raise
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
        trainer.close()
        raise RlhlsError(f"run folder '{run}': checkpoint does not fit its config ({type(e).__name__}: {e})") from None
    trainer.close()  # the training environments: acting needs none
    return Policy(trainer, cfg, run)


def untrained(design: Design | str, *, seed: int = 0, log: str | os.PathLike[str] | None = None) -> Policy:
    """The policy of `design` (a registered name, ``FILE.py[:NAME]`` or a Design) before any training:
    its trainer as ``rlhls train DESIGN --seed SEED`` builds it (bound the same way), so its networks
    are that run's before its first update -- a network imported from ONNX holds the file's weights.
    ``config`` is the binding's record with the seed; ``folder`` is None."""
    from rlhls.core.procs import library_output

    from .bound import bind
    from .hyperparams import check_seed

    seed = check_seed(seed)
    bound = bind(design)
    if bound.algorithm is None:
        raise RlhlsError(f"design '{bound.design.name}': no trainer for algorithm '{bound.design.algorithm}' "
                         "(no policy to evaluate)")
    with library_output(log):
        trainer = bound.algorithm.trainer(bound.design, env_id=bound.env_id, seed=seed, backend="emu",
                                          hyperparams=bound.hyperparams, assignment=None)
    trainer.close()  # the training environments: acting needs none
    return Policy(trainer, {**bound.record(), "seed": seed}, None)
