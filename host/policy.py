"""A run's trained policy as hardware: ``export_run_policy(design, run, out)`` (``rlhls build DESIGN
--weights RUN``) finds the policy network in the run folder's checkpoint (``flow.build.policy_network``),
takes the states to check it on -- the run's evaluation record ``policy_states.npz`` ('states', and
'actions' where they are the exported network's own outputs, F-DDPG's fixed-point actor), else
``RANDOM_STATES`` states of the run's environment under seeded random actions -- and emits the HLS
project (``flow.build.export_policy``; with ``csim`` its C simulation against the emulator and the
recorded actions). An ``rlhls run`` folder stands for its ``train/`` run.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import owned_file, read_json
from rlhls.designs.registry import get_design, recorded_design

from .checkpoint import load_checkpoint
from .runfolder import CHECKPOINT, run_dir

__all__ = ["export_run_policy", "run_folder", "recorded_states", "POLICY_STATES", "RANDOM_STATES"]

POLICY_STATES = "policy_states.npz"
RANDOM_STATES = 64


def run_folder(design, run) -> tuple[Path, dict, object]:
    """(the training run folder, its config.json, the run's design) of ``run`` for ``design`` (a
    run of it, or of it resized by an RL Zoo net_arch); RlhlsError naming what is missing or another
    design's run."""
    run = run_dir(run, "--weights")
    owned_file(run, "config.json")  # never read through a link out of the run folder
    try:
        cfg = read_json(run / "config.json")
    except FileNotFoundError:
        cfg = {}  # the checkpoint names its design too
    except (OSError, ValueError) as e:
        raise RlhlsError(f"--weights '{run}': config.json cannot be read as JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise RlhlsError(f"--weights '{run}': config.json is not a run's config (expected a JSON object)")
    resized = cfg.get("design_resized")
    base = resized.get("from") if isinstance(resized, dict) else None
    if cfg.get("design", design.name) not in (design.name, None) and base != design.name:
        raise RlhlsError(f"--weights '{run}': a run of design '{cfg['design']}', not '{design.name}'")
    if "design_file" in cfg or resized is not None:  # the file given the run's; the design resized as the run's
        design = recorded_design(cfg["design"], cfg.get("design_file"), given=design, resized=resized,
                                 where=f"--weights '{run}'")
    return run, cfg, design


def recorded_states(run: Path, env_id: str) -> tuple:
    """(states, their recorded outputs or None, where they come from): the run's evaluation record,
    else states of ``env_id`` under seeded random actions."""
    rec = Path(run) / POLICY_STATES
    if rec.is_file():
        try:
            with np.load(rec, allow_pickle=False) as z:
                states = np.asarray(z["states"], dtype=np.float64)
                actions = np.asarray(z["actions"], dtype=np.float64) if "actions" in z else None
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as e:
            raise RlhlsError(f"--weights: '{rec}' is not a policy-states record ({type(e).__name__}: "
                             f"{str(e)[:100]})") from None
        if states.ndim < 2 or not len(states) or (actions is not None and len(actions) != len(states)):
            raise RlhlsError(f"--weights: '{rec}' holds states of shape {states.shape} and actions of shape "
                             f"{None if actions is None else actions.shape}: expected (N >= 1, ...) each")
        return states, actions, str(rec)
    from .envs import make_env

    env = make_env(env_id)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    seen = []
    for i in range(RANDOM_STATES):
        seen.append(np.asarray(obs, dtype=np.float64))
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            obs, _ = env.reset(seed=i + 1)
    env.close()
    return np.stack(seen), None, f"{RANDOM_STATES} states of {env_id} under seeded random actions"


def export_run_policy(design, run, out, *, part=None, clock_ns=None, force=False, csim=True,
                      progress=None) -> dict:
    """The manifest of the exported project (module docstring), with ``states_from``."""
    from rlhls.flow.build import export_policy, policy_network

    if isinstance(design, str):
        design = get_design(design)
    run, cfg, design = run_folder(design, run)
    ck = load_checkpoint(run / CHECKPOINT)
    if not isinstance(ck, dict) or not isinstance(ck.get("trainer"), dict):
        raise RlhlsError(f"--weights '{run}': {CHECKPOINT} holds no trainer state")
    if ck.get("design") != design.name:
        raise RlhlsError(f"--weights '{run}': its checkpoint is of design {ck.get('design')!r}, not '{design.name}'")
    try:
        net = policy_network(design, ck["trainer"])
    except RlhlsError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise RlhlsError(f"--weights '{run}': its checkpoint's weights do not fit design '{design.name}''s policy "
                         f"network ({type(e).__name__}: {str(e)[:120]})") from None
    bad = next((f"{l.name}.{k}" for l in net.layers for k, a in l.params.items()
                if not np.issubdtype(np.asarray(a).dtype, np.floating) or not np.all(np.isfinite(a))), None)
    if bad is not None:
        raise RlhlsError(f"--weights '{run}': weight '{bad}' of its policy is not finite (NaN or infinite: the "
                         "training diverged) or not floating point; nothing to export")
    states, expected, where = recorded_states(run, cfg.get("env") or design.env_id)
    if states.shape[1:] != tuple(net.input_shape):
        raise RlhlsError(f"--weights '{run}': its network '{net.name}' takes inputs of shape {tuple(net.input_shape)}, "
                         f"the states ({where}) have {states.shape[1:]}: a checkpoint of another design or environment")
    m = export_policy(design, net, out, states, expected=expected, run=run, part=part, clock_ns=clock_ns,
                      force=force, csim=csim, progress=progress)
    m["states_from"] = where
    return m
