"""``rlhls experiment NAME``: the experiment registry and what every experiment shares.

An experiment is many runs (settings x seeds), each a run folder of its own, summarised in
tables and plots. One module per seed, ``host/experiments/<seed>.py``, registers its experiments
with ``register_experiment(name, run, summary, params)`` (``run(ExperimentOptions) -> exit code``;
``params``: the ``--param`` keys it takes with their defaults, any other key is refused):
host/experiments/heppo.py (heppo-table3, heppo-bits), host/experiments/apdrl.py (apdrl-table3,
apdrl-table4). Every such module is imported on first use (adding one needs no other edit).

Never clobbers: an existing non-empty ``--out`` must hold our ``experiment.json`` with the same
settings (then it is continued), else it is refused (``check_out``).

The runs run on the engine (host/engine.py, re-exported here: ``Run``, ``run_all``, ``map_runs``):
Ray tasks on a local Ray instance with the machine's cores, or ``--address`` a cluster; ``--jobs``
caps the runs at once (``--jobs 1`` without an address: one after another in this process).
``--resume`` continues the experiment in ``--out`` with the options it was started with (recorded
by ``write_record`` in ``experiment.json``): finished runs are kept, partial ones resume from their
checkpoints. Running the same command again does the same.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rlhls.designs.errors import RlhlsError
from rlhls.partition import fileio

from ..engine import Outcome, Run, failed_lines, map_runs, ray_session, run_all

__all__ = ["ExperimentOptions", "register_experiment", "experiment_names", "run_experiment", "check_out", "RECORD",
           "write_record", "run_runs", "Run", "Outcome", "run_all", "map_runs", "ray_session", "failed_lines"]

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
    jobs: int = 0                   # runs at once (0: the Ray cluster's CPUs; 1 without address: in-process)
    address: str | None = None      # a Ray cluster to join ("auto", "HOST:PORT"); None: a local instance
    resume: bool = False            # continue --out with its recorded options
    retries: int = 2                # tries again of a run whose worker died (each resumes its checkpoint)
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
        for m in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{m.name}")


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
    opts.out = opts.out or f"runs/{opts.name}"
    fileio.check_name(opts.out)
    if opts.resume:
        _resume_options(opts)
    if opts.address:  # before anything is written
        from ..engine import check_reachable

        check_reachable(opts.address)
    fresh = not Path(opts.out).exists()
    try:
        rc = exp.run(opts)
    except RlhlsError:
        # refused (a bad --set found by a run's own checks, a cluster that went away) before any run
        # trained: the folder this command created holds nothing of value and goes with it
        out = Path(opts.out)
        if fresh and out.is_dir() and not any(out.rglob("checkpoint.npz")):
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        raise
    from ..report import HTML_PAGE, write_html

    if Path(opts.out).is_dir() and write_html(opts.out, f"rlhls experiment {opts.name}") and not opts.quiet:
        print(f"rlhls: {Path(opts.out) / HTML_PAGE}: the tables and figures in one page", file=sys.stderr)
    return rc


# the options a resumed experiment takes from its record; the others (how to run) from the command
_HOW = ("name", "out", "jobs", "address", "resume", "retries", "quiet", "json", "report")


def _recorded(opts: ExperimentOptions) -> dict:
    from dataclasses import asdict

    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(opts).items() if k not in _HOW}


def write_record(out: Path, settings: dict, opts: ExperimentOptions) -> None:
    """experiment.json: the experiment's settings and the options it was started with (--resume)."""
    if fileio.read_record(out) is None:
        fileio.write_json(Path(out) / fileio.OWNER, {"command": "experiment", "files": []})
    fileio.write_json(Path(out) / RECORD, {**settings, "options": _recorded(opts)})


def _resume_options(opts: ExperimentOptions) -> None:
    """--resume: the recorded options; one the command also gives must agree with them."""
    out = Path(opts.out)  # run_experiment gave it its default
    try:
        rec = json.loads((out / RECORD).read_text())
    except FileNotFoundError:
        raise RlhlsError(f"--resume: '{out}' holds no experiment (no {RECORD}); start it without --resume") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise RlhlsError(f"--resume: '{out / RECORD}' cannot be read ({type(e).__name__})") from None
    if not isinstance(rec, dict):
        raise RlhlsError(f"--resume: '{out / RECORD}' is not an experiment's record (expected a JSON object)")
    old = rec.get("options")
    if not isinstance(old, dict):
        raise RlhlsError(f"--resume: '{out / RECORD}' records no options (an older experiment); repeat its "
                         "command instead")
    defaults = _recorded(ExperimentOptions(name=opts.name))
    given = _recorded(opts)
    for k, v in given.items():
        if k in old and v != defaults.get(k) and json.loads(json.dumps(v, default=str)) != old[k]:
            raise RlhlsError(f"--resume: '{out}' was started with {k} {old[k]!r}, not {v!r} (drop the option, or "
                             "choose another --out)")
    for k, v in old.items():
        if k in given:
            setattr(opts, k, tuple(tuple(x) if isinstance(x, list) else x for x in v) if k == "sizes" and v else v)
    opts.out = str(out)


def run_runs(opts: ExperimentOptions, runs: list, out=None, say=None) -> list:
    """The experiment's runs on the engine with the command's --jobs/--address/--retries/--quiet."""
    return run_all(runs, jobs=opts.jobs or None, address=opts.address, retries=opts.retries, say=say,
                   progress=not opts.quiet, out=out)


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
    fileio.check_out(out, command="experiment", ours=lambda d: (d / RECORD).is_file(), hint="choose another --out")
    if (out / RECORD).exists():
        try:
            old = json.loads((out / RECORD).read_text())
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise RlhlsError(f"--out '{out}': its {RECORD} cannot be read ({type(e).__name__})") from None
        if not isinstance(old, dict):
            raise RlhlsError(f"--out '{out}': its {RECORD} is not an experiment's record (expected a JSON object)")
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            raise RlhlsError(f"--out '{out}' holds experiment runs with a different {diff[0]} "
                             f"({old.get(diff[0])!r}, now {settings[diff[0]]!r}); choose another --out")
