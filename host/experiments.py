"""``rlhls experiment NAME``: the experiment registry and what every experiment shares.

An experiment is many runs (settings x seeds), each a run folder of its own, summarised in
tables and plots. One module per seed, ``host/<seed>_experiments.py``, registers its experiments
with ``register_experiment(name, run, summary, params)`` (``run(ExperimentOptions) -> exit code``;
``params``: the ``--param`` keys it takes with their defaults, any other key is refused):
host/heppo_experiments.py (heppo-table3, heppo-bits), host/apdrl_experiments.py (apdrl-table3,
apdrl-table4). Every such module is imported on first use (adding one needs no other edit).

Never clobbers: an existing non-empty ``--out`` must hold our ``experiment.json`` with the same
settings (then it is continued), else it is refused (``check_out``).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rlhls.designs.errors import RlhlsError
from rlhls.partition import fileio

__all__ = ["ExperimentOptions", "register_experiment", "experiment_names", "run_experiment", "check_out", "RECORD"]

RECORD = "experiment.json"


@dataclass
class ExperimentOptions:
    """What ``rlhls experiment NAME`` takes (the command line fills it; Python callers too)."""

    name: str
    design: list | None = None      # the designs it runs (each experiment says which it takes)
    steps: int | None = None        # environment steps per run (default: the experiment's demonstration)
    seeds: int | None = None        # seeds 0..K-1
    env: str | None = None          # environment id (default: the design's)
    out: str | None = None          # experiment folder (default runs/<name>)
    jobs: int = 1                   # runs at once
    backend: str = "emu"
    full: bool = False              # the design's own settings instead of the demonstration's
    overrides: dict = field(default_factory=dict)  # hyperparameters of every run
    sizes: tuple | None = None      # apdrl-table4: hidden sizes
    repeats: int = 3                # apdrl-table4: host timing repeats
    report: bool = False            # apdrl-table3: summarize the folders as they stand
    quiet: bool = False
    json: bool = False              # print the summary rows as JSON (stdout) instead of text
    params: dict = field(default_factory=dict)  # an experiment's own settings (--param KEY=VALUE)


@dataclass(frozen=True)
class Experiment:
    name: str
    run: Callable
    summary: str = ""
    params: dict = field(default_factory=dict)  # --param KEY -> default (the experiment checks values)


EXPERIMENTS: dict[str, Experiment] = {}
_loaded = False


def register_experiment(name: str, run: Callable, summary: str = "", params: dict | None = None) -> None:
    EXPERIMENTS[name] = Experiment(name, run, summary, dict(params or {}))


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import rlhls.host

        for m in pkgutil.iter_modules(rlhls.host.__path__):
            if m.name.endswith("_experiments"):
                importlib.import_module(f"rlhls.host.{m.name}")


def experiment_names() -> list[str]:
    _load()
    return list(EXPERIMENTS)


def run_experiment(opts: ExperimentOptions) -> int:
    _load()
    if opts.name not in EXPERIMENTS:
        raise RlhlsError(f"experiment {opts.name!r}: unknown (expected one of {', '.join(EXPERIMENTS)})")
    exp = EXPERIMENTS[opts.name]
    unknown = sorted(set(opts.params or {}) - set(exp.params))
    if unknown:
        known = f"known: {', '.join(exp.params)}" if exp.params else "it takes no --param"
        raise RlhlsError(f"--param {unknown[0]}: unknown for {opts.name} ({known})")
    return exp.run(opts)


def param(opts: ExperimentOptions, key: str, default, kind=int, low=None):
    """``--param KEY`` as ``kind`` (at least ``low`` where given), else ``default``; one clear line
    on a bad value."""
    v = opts.params.get(key, default)
    try:
        x = kind(v)
    except (TypeError, ValueError):
        raise RlhlsError(f"--param {key}={v!r}: expected {'an integer' if kind is int else kind.__name__}") from None
    if low is not None and x < low:
        raise RlhlsError(f"--param {key}={v!r}: expected >= {low}")
    return x


def finished_steps(run: Path) -> int:
    """Environment steps a run folder's metrics.csv has reached (0 without one): what a resumed
    experiment skips or continues."""
    import csv

    try:
        with open(Path(run) / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        return int(rows[-1]["env_steps"]) if rows else 0
    except (OSError, KeyError, ValueError):
        return 0


def check_out(out: Path, settings: dict) -> None:
    """Refuse an --out that is a file, holds files rlhls did not write, or runs of other settings."""
    fileio.check_out(out, ours=lambda d: (d / RECORD).is_file(), hint="choose another --out")
    if (out / RECORD).exists():
        old = json.loads((out / RECORD).read_text())
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            raise RlhlsError(f"--out '{out}' holds experiment runs with a different {diff[0]} "
                             f"({old.get(diff[0])!r}, now {settings[diff[0]]!r}); choose another --out")
