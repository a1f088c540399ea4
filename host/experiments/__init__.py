"""``rlhls experiment NAME``: the experiment registry and the one skeleton every experiment runs on.

An experiment is many runs (configurations x seeds), each a run folder of its own (or a part of a
sweep), summarised in tables and figures. A seed's module ``host/experiments/<seed>.py`` supplies
only its configurations, its per-run function and its summary, and registers them once::

    register_experiment(Experiment("heppo-table3", "HEPPO-GAE Table III ...",
                                   options=(*TRAINS, *RUNS, "design", "env"),
                                   runs=configurations, run=train_run, summarize=summary))

* ``options``: the options it takes, by name from ``COMMON`` (``TRAINS``, ``RUNS``: the groups of
  the experiments that train, that run on the engine) or its own ``Option(...)``; ``params``: the
  ``--param KEY`` keys it takes with their defaults. ``rlhls experiment NAME --help`` lists exactly
  these (the CLI builds one subparser per experiment from the registry) and any other option is
  refused, on the command line (argparse, exit 2) and from Python (``run_experiment``).
* ``runs(ctx) -> [Run]``: checks the options, makes the output folder (``ctx.start(settings)``:
  refuses a foreign ``--out``, records ``experiment.json``) and returns the runs
  (``ctx.run(id, folder, **kwargs)``: a Run of its ``run``); none where it only summarises.
* ``run(**kwargs)``: one run, in a Ray worker or in this process (``--jobs 1``); a training run is
  ``train_run`` (in process through ``host.train.train_design``, resuming its checkpoint), given
  ``ctx.config(design)``'s config (``--config``: a mapping, or the design's RL Zoo entry, resolved
  as ``rlhls train --config`` does) and ``ctx.steps(config, default)``'s budget.
* ``summarize(ctx, outcomes) -> Summary(rows, lines, files)``: writes the summary files and figures;
  the skeleton prints the lines (or the rows as JSON with ``--json``) and the exit code.

The skeleton owns the rest: the output folder (``check_out``, ``write_record``, ``--resume`` with the
recorded options), the runs on the engine (host/engine.py: Ray tasks, ``--jobs``, ``--address``,
``--retries``), progress and one ``say`` (stderr, silent with ``--quiet``), the episode and metrics
readers of a run folder (``episodes``, ``finished_steps``), the plans (``solve_plan``) and the
design a worker re-loads (``design_ref``: a user's design file travels as its path).

Registration: the package's own modules are discovered (every module of this package), installed
packages add experiments through the entry point group ``rlhls.experiments``, a user calls
``register_experiment``.

Never clobbers: an existing non-empty ``--out`` must hold our ``experiment.json`` with the same
settings (then it is continued), else it is refused (``check_out``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from rlhls.core import fileio
from rlhls.core.errors import RlhlsError
from rlhls.core.procs import inform
from rlhls.core.registry import Registry

from ..engine import Outcome, Run, failed_lines, map_runs, ray_session, run_all

log = logging.getLogger(__name__)

__all__ = ["ExperimentOptions", "Experiment", "Option", "option", "Summary", "Context", "register_experiment",
           "experiment_names", "get_experiment", "run_experiment", "check_out", "RECORD", "write_record", "COMMON",
           "TRAINS", "RUNS", "Run", "Outcome", "run_all", "map_runs", "ray_session", "failed_lines", "train_run",
           "solve_plan", "design_ref", "param", "count", "MAX_RETRIES", "read_object", "choose_jobs"]

RECORD = "experiment.json"
CONFIG_KEYS = ("file", "data")  # a --config as recorded: its path (for messages) and the mapping it held
MAX_RETRIES = 100  # Ray takes a 32-bit count; a run that dies a hundred times will not finish


@dataclass
class ExperimentOptions:
    """What ``rlhls experiment NAME`` takes (the command line fills it; Python callers too). An
    experiment takes the fields of the options it declares; another field given is refused."""

    name: str
    design: list | None = None      # the designs it runs (each experiment says which it takes)
    steps: int | None = None        # environment steps per run (default: the experiment's demonstration)
    seeds: int | None = None        # seeds 0..K-1
    env: str | None = None          # environment id (default: the design's)
    out: str | None = None          # experiment folder (default runs/<name>)
    jobs: int = 0                   # runs at once (0: what pays, choose_jobs; 1 without address: in-process)
    address: str | None = None      # a Ray cluster to join ("auto", "HOST:PORT"); None: a local instance
    resume: bool = False            # continue --out with its recorded options
    retries: int = 2                # tries again of a run whose worker died (each resumes its checkpoint)
    backend: str = "emu"
    full: bool = False              # the design's own settings instead of the demonstration's
    overrides: dict = field(default_factory=dict)  # hyperparameters of every run (--set)
    config: str | dict | None = None  # --config FILE.yaml: its path (run_experiment reads it: CONFIG_KEYS)
    sizes: tuple | None = None      # apdrl-table4: hidden sizes
    repeats: int = 3                # apdrl-table4, cpp-table2: timing repeats
    report: bool = False            # apdrl-table3: summarize the folders as they stand
    quiet: bool = False
    verbose: bool = False           # debug messages too (the CLI's log level)
    json: bool = False              # print the summary rows as JSON (stdout) instead of text
    params: dict = field(default_factory=dict)  # its own settings (--param KEY=VALUE, its own options)


def count(text, low: int = 1, high: int | None = None) -> int:
    """An integer option's value, checked (one line naming the value otherwise)."""
    try:
        n = int(text)
    except (TypeError, ValueError):
        raise RlhlsError(f"'{text}' is not an integer") from None
    if n < low or (high is not None and n > high):
        raise RlhlsError(f"expected an integer {low}..{high}, got {text!r}" if high is not None else
                         f"{n} must be >= {low}")
    return n


def _retries(text) -> int:
    return count(text, 0, MAX_RETRIES)


_FIELDS = {f.name for f in fields(ExperimentOptions)}


@dataclass(frozen=True)
class Option:
    """One command-line option: ``argparse.add_argument(*flags, **kwargs)``; ``dest`` is the
    ExperimentOptions field it fills (a ``type`` raises RlhlsError on a bad value)."""

    dest: str
    flags: tuple
    kwargs: dict = field(default_factory=dict)


def option(flag: str, dest: str | None = None, **kw) -> Option:
    return Option(dest or flag.lstrip("-").replace("-", "_"), (flag,), kw)


# the options the skeleton knows; an experiment names those it takes (or declares its own under the same dest)
COMMON = {o.dest: o for o in (
    option("--design", action="append", default=None, help="a design to run (repeatable where it takes several)"),
    option("--steps", type=count, default=None, help="environment steps per run (default: the demonstration's)"),
    option("--seeds", type=count, default=None, help="seeds 0..K-1 (default: the experiment's)"),
    option("--env", default=None, help="gymnasium env id (default: the design's)"),
    option("--jobs", type=count, default=0,
           help="runs at once, each a Ray task (1 without --address: one after another in this process, no Ray; "
                "default: one process on a machine of <= 2 cores or for runs too short to pay Ray's start, else "
                "every CPU; the choice is said and recorded)"),
    option("--address", default=None, metavar="ADDR",
           help="join the Ray cluster at ADDR ('auto': the one 'ray start --head' started on this node, or "
                "HOST:PORT) instead of starting a local Ray instance; --out must be a folder every node sees"),
    option("--retries", type=_retries, default=2, metavar="N",
           help="times a run whose worker died is tried again, from its checkpoint (default 2); past that it is "
                "recorded as failed"),
    option("--backend", choices=("emu", "csim"), default="emu", help="kernel backend (default emu)"),
    option("--full", action="store_true", help="the seed's own budget and settings instead of the demonstration"),
    Option("overrides", ("--set", "--config")),  # the CLI's --set KEY=VALUE / --config FILE.yaml
)}
ALWAYS = (
    option("--out", default=None, help="experiment folder (default runs/<name>)"),
    option("--resume", action="store_true",
           help="continue the experiment in --out with the options it was started with: finished runs are kept, "
                "partial ones resume from their checkpoints"),
    option("--quiet", action="store_true", help="no progress output"),
    option("--verbose", action="store_true", help="debug messages too"),
    option("--json", action="store_true", help="print the summary rows as JSON at the end"),
)
TRAINS = ("steps", "seeds", "backend", "full", "overrides")  # an experiment that trains
RUNS = ("jobs", "address", "retries")                       # an experiment whose runs go to the engine


@dataclass
class Summary:
    """What an experiment's summarize returns: its rows (``--json``), the lines to print, its files."""

    rows: list
    lines: list = field(default_factory=list)
    files: list = field(default_factory=list)


@dataclass(frozen=True)
class Experiment:
    name: str
    summary: str
    runs: Callable[[Context], list[Run]]  # its configurations
    summarize: Callable[[Context, list[Outcome]], Summary]
    run: Callable | None = None     # the per-run function (picklable: a module-level function)
    options: tuple = ()             # COMMON names and its own Options
    params: dict = field(default_factory=dict)  # --param KEY -> default (the experiment checks values)

    def all_options(self) -> list:
        """Its options in order: those it names, then the skeleton's own."""
        out = []
        for o in self.options:
            if isinstance(o, str):
                if o not in COMMON:
                    raise RlhlsError(f"experiment {self.name}: unknown common option {o!r} "
                                     f"(known: {', '.join(COMMON)})")
                o = COMMON[o]
            out.append(o)
        if self.params:
            out.append(option("--param", dest="params", action="append", default=[], metavar="KEY=VALUE",
                              help="a setting of the experiment: " + ", ".join(f"{k} (default {v})"
                                                                               for k, v in self.params.items())))
        return out + list(ALWAYS)

    def own_keys(self) -> set:
        """Dests of its own options that are no ExperimentOptions field: their values go to ``params``."""
        return {o.dest for o in self.all_options()} - _FIELDS - {"params"}


# every module of this package registers its experiments; installed packages add theirs (rlhls.experiments)
EXPERIMENTS: Registry[Experiment] = Registry("experiment", package=__name__, group="rlhls.experiments")


def register_experiment(exp: Experiment, *, replace: bool = False) -> Experiment:
    if not isinstance(exp, Experiment) or not exp.name:
        raise RlhlsError(f"register_experiment: {exp!r} is not a named Experiment")
    old = EXPERIMENTS.get(exp.name)
    if old is not None and not replace and old is not exp:
        raise RlhlsError(f"register_experiment: an experiment named {exp.name!r} is registered already "
                         "(pass replace=True to replace it)")
    exp.all_options()  # its common options exist
    EXPERIMENTS[exp.name] = exp
    return exp


EXPERIMENTS.add = register_experiment


def unregister_experiment(name: str) -> None:
    EXPERIMENTS.pop(name, None)


def experiment_names() -> list[str]:
    return EXPERIMENTS.names()


def get_experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise EXPERIMENTS.unknown(name)
    return EXPERIMENTS[name]


def _say(opts: ExperimentOptions):
    return (lambda m: None) if opts.quiet else (lambda m: inform(log, m))


@dataclass
class Context:
    """What an experiment's hooks see: its options, folder, say, and what its runs hook keeps for
    its summary (``data``)."""

    exp: Experiment
    opts: ExperimentOptions
    out: Path
    say: Callable
    data: dict = field(default_factory=dict)
    configs: dict = field(default_factory=dict)  # design name -> its --config values (Context.config)
    failed: list = field(default_factory=list)  # markdown lines naming failed runs (for the summary files)

    def start(self, settings: dict, record: dict | None = None) -> Path:
        """Refuse a foreign --out (``check_out`` of `settings`), make it, record the experiment.
        The designs' --config values (``config``, called before) are settings too: other values
        are other runs."""
        if self.opts.config and not self.configs:  # never silently train without the file given
            raise RlhlsError(f"--config: experiment {self.exp.name} takes no design's values from it (its runs "
                             "never ask ctx.config); give --set")
        if self.configs:
            settings = {**settings, "config": _plain(self.configs)}
        check_out(self.out, settings)
        fileio.make_dirs(self.out)
        write_record(self.out, {**settings, **(record or {})}, self.opts)
        return self.out

    def config(self, design, env: str | None = None) -> tuple:
        """(design, config) of --config for `design` on `env` (default its own), as ``rlhls train
        --config`` takes them (hyperparams.config_of: the mapping, or the design's RL Zoo entry):
        the design its net_arch resizes, and the config a run passes to train_run (its run keys
        too: plain data, a worker applies it again). (design, None) without --config. The values
        go into experiment.json's settings (``start``)."""
        from ..hyperparams import apply_config, config_of

        if not self.opts.config:
            return design, None
        c = self.opts.config
        assert isinstance(c, dict)  # run_experiment read the file: {"data", "file"}
        config = config_of(c["data"], c["file"], design, env)
        self.configs[design.name] = config
        return apply_config(design, config)[0], config

    def steps(self, config: dict | None, default: int) -> int:
        """A run's budget: --steps, else its --config's (RL Zoo's n_timesteps), else `default` (the
        experiment's: its demonstration's, or with --full the seed's)."""
        return int(self.opts.steps or (config or {}).get("total_timesteps") or default)

    def run(self, id: str, folder=None, *, steps: int | None = None, finished=None, **kwargs) -> Run:
        """A run of the experiment's per-run function with `kwargs` (and `steps`, where given)."""
        kw = kwargs if steps is None else {**kwargs, "steps": steps}
        return Run(id, folder, fn=self.exp.run, kwargs=kw, steps=steps, finished=finished)

    def value(self, dest: str):
        """The value of one of the experiment's own options (in ``params``), else its default."""
        if dest in self.opts.params:
            return self.opts.params[dest]
        return next(o.kwargs.get("default") for o in self.exp.all_options() if o.dest == dest)


def _check_taken(exp: Experiment, opts: ExperimentOptions) -> None:
    """A field of an option the experiment does not declare, given from Python, is refused."""
    taken = {o.dest for o in exp.all_options()} | {"name", "params"}
    if "overrides" in taken:  # the one option --set / --config
        taken.add("config")
    default = ExperimentOptions(name=opts.name)
    for f in fields(ExperimentOptions):
        if f.name not in taken and getattr(opts, f.name) != getattr(default, f.name):
            flag = {"overrides": "--set"}.get(f.name, f"--{f.name}")
            raise RlhlsError(f"{flag}: not an option of experiment {exp.name} ('rlhls experiment {exp.name} --help' "
                             "lists its options)")
    unknown = sorted(set(opts.params or {}) - set(exp.params) - exp.own_keys())
    if unknown and not exp.params:
        raise RlhlsError(f"--param {unknown[0]}: unknown for {exp.name} (it takes no --param)")
    if unknown:
        raise RlhlsError(f"--param {unknown[0]}: unknown for {exp.name} (known: {', '.join(exp.params)})")


def run_experiment(opts: ExperimentOptions) -> int:
    exp = get_experiment(opts.name)
    _check_taken(exp, opts)
    opts.out = opts.out or f"runs/{opts.name}"
    fileio.check_name(opts.out)
    opts.config = _read_config(opts.config)
    if opts.resume:
        _resume_options(opts)
    if opts.address:  # before anything is written
        from ..engine import check_reachable

        check_reachable(opts.address)
    out = Path(opts.out)
    fresh = not out.exists()
    ctx = Context(exp, opts, out, _say(opts))
    t0 = time.perf_counter()
    try:
        runs = list(exp.runs(ctx) or ())
        jobs = None
        if runs:
            jobs, why = choose_jobs(runs, opts.jobs, opts.address)
            ctx.say(f"{opts.name}: {why}")
            _record_engine(out, jobs, why)
        outcomes = run_all(runs, jobs=jobs, address=opts.address, retries=opts.retries, say=ctx.say,
                           progress=not opts.quiet, out=out if out.is_dir() else None) if runs else []
        ctx.failed = failed_lines(outcomes)
        summary = exp.summarize(ctx, outcomes)
    except RlhlsError:
        # refused (a bad --set found by a run's own checks, a cluster that went away) before any run
        # trained: the folder this command created holds nothing of value and goes with it
        if fresh and out.is_dir() and not any(out.rglob("checkpoint.npz")):
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        raise
    bad = sum(not o.ok for o in outcomes)
    if opts.json:
        print(json.dumps(summary.rows, indent=2, default=str))
    else:
        for line in summary.lines:
            print(line)
        if summary.files:
            what = f"{len(runs)} run(s)" if runs else opts.name
            print(f"{what} in {time.perf_counter() - t0:.0f} s -> {', '.join(str(f) for f in summary.files)}")
        if bad:
            print(f"{bad} run(s) failed (their errors: {out / 'runs.csv'}); --resume retries them")
    from ..figures import HTML_PAGE, write_html

    if out.is_dir() and write_html(out, f"rlhls experiment {opts.name}") and not opts.quiet:
        inform(log, f"{out / HTML_PAGE}: the tables and figures in one page")
    return 1 if bad else 0


RAY_START_S = 10.0  # a local Ray instance's start and stop, measured on a 2-core machine: 8-10 s
# assumed: one environment step of a training run with its updates, low end of a 1-300 ms range
# (fp32 MLP runs 1-5 ms; mixed DDPG 3-8 steps/s and PPO MsPacman 12 steps/s measured on a loaded 2-core
# machine, docs/benchmarks/); the low end keeps an experiment in one process only when it is surely short
STEP_S = 0.02


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use (a container's share)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def choose_jobs(runs: list, jobs: int = 0, address: str | None = None, cores: int | None = None) -> tuple:
    """(jobs for ``run_all``, one line saying how the runs go). ``--jobs`` and ``--address`` are
    obeyed; by default the runs go one after another in this process (no Ray start, 8-10 s) on a
    machine of <= 2 cores (two workers on two cores measured 0.9-1.9x the time of one process),
    for one run to do, or when their estimated serial time (environment steps x ``STEP_S``) is
    under 3 x ``RAY_START_S``; else on a local Ray instance with every core."""
    if address:
        return (jobs or None), f"Ray tasks on the cluster at {address}" + (f", {jobs} at once" if jobs else "")
    if jobs == 1:
        return 1, "one run after another in this process (--jobs 1)"
    if jobs:
        return jobs, f"Ray tasks, {jobs} at once (--jobs {jobs})"
    cores = cores or _cores()
    todo = [r for r in runs if not r.is_finished()]
    if cores <= 2:
        return 1, (f"one run after another in this process ({cores} CPU core(s): Ray's workers would not pay for "
                   "its start; --jobs N runs N at once)")
    if len(todo) <= 1:
        return 1, f"{len(todo)} run(s) to do, in this process (no Ray start)"
    steps = [r.steps for r in todo]
    if all(steps):
        est = sum(steps) * STEP_S
        if est < 3 * RAY_START_S:
            return 1, (f"one run after another in this process (about {est:.0f} s of runs, too short to pay Ray's "
                       f"{RAY_START_S:.0f} s start; --jobs N runs N at once)")
    return None, f"Ray tasks, {min(cores, len(todo))} at once ({cores} CPU cores, {len(todo)} run(s) to do)"


def _record_engine(out: Path, jobs, why: str) -> None:
    """The engine chosen, in experiment.json (beside the settings: a resume may choose another)."""
    path = Path(out) / RECORD
    if not path.is_file():
        return
    rec = read_object(path)
    if rec:
        fileio.write_json(path, {**rec, "engine": {"jobs": jobs or "all CPUs", "how": why}})


# the options a resumed experiment takes from its record; the others (how to run) from the command
_HOW = ("name", "out", "jobs", "address", "resume", "retries", "quiet", "verbose", "json", "report")


def _recorded(opts: ExperimentOptions) -> dict:
    from dataclasses import asdict

    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(opts).items() if k not in _HOW}


def _plain(value):
    """`value` as JSON gives it back (tuples as lists, text keys): what a record compares."""
    return json.loads(json.dumps(value, default=str))


def _read_config(value):
    """--config as recorded (CONFIG_KEYS): a path is read once, here, before anything is written;
    a resumed experiment's record is taken as it is (the file is not read again)."""
    from ..hyperparams import load_config

    if value is None or value == "":
        return None
    if isinstance(value, dict) and set(value) == set(CONFIG_KEYS) and isinstance(value["data"], dict):
        return value
    if not isinstance(value, (str, Path)):
        raise RlhlsError(f"config={value!r}: expected the path of a YAML file")
    return {"file": str(value), "data": _plain(load_config(value))}


def write_record(out: Path, settings: dict, opts: ExperimentOptions) -> None:
    """experiment.json: the experiment's settings and the options it was started with (--resume),
    with the sha256 of each design file among its designs (``design_files``: a resume imports a file
    only when the user gives it again, and only the file it ran)."""
    if fileio.read_record(out) is None:
        fileio.write_json(Path(out) / fileio.OWNER, {"command": "experiment", "files": []})
    extra = {"design_files": _design_files(opts.design)} if _design_files(opts.design) else {}
    fileio.write_json(Path(out) / RECORD, {**settings, "options": _recorded(opts), **extra})


def _design_files(specs) -> dict:
    """{spec: sha256} of the design files among `specs` (the user named them: get_design imports each once)."""
    from rlhls.designs.registry import get_design, is_file_spec

    return {s: get_design(s).origin["sha256"] for s in specs or () if isinstance(s, str) and is_file_spec(s)}


def _option_kinds() -> dict:
    """{ExperimentOptions field: the JSON types a record may hold for it} (tuples are lists in JSON)."""
    import types
    import typing

    kinds = {}
    for name, hint in typing.get_type_hints(ExperimentOptions).items():
        args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        kinds[name] = tuple({tuple: list, type(None): type(None)}.get(a, a) for a in args)
    return kinds


def _check_recorded(old: dict, where: Path) -> None:
    """Each recorded option of the type its field takes (a hand-edited record is one line, not a
    TypeError deep in an experiment); the designs as a list of names."""
    kinds = _option_kinds()
    for k, v in old.items():
        want = kinds.get(k)
        if want is None:
            continue  # an option of a newer or older rlhls: the given options decide
        ok = isinstance(v, want) and not (isinstance(v, bool) and bool not in want)
        if ok and k == "design" and v is not None:
            ok = all(isinstance(x, str) and x for x in v)
        if ok and k == "sizes" and v is not None:
            ok = all(isinstance(x, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in x) for x in v)
        if not ok:
            names = " or ".join("null" if t is type(None) else t.__name__ for t in want)
            raise RlhlsError(f"--resume: '{where}' records option {k!r} as {_plain_short(v)}, expected {names} "
                             "(a damaged or hand-edited record; repeat the experiment's command without --resume)")


def _plain_short(v, limit: int = 60) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_design_files(out: Path, rec: dict, given) -> None:
    """A resumed experiment of a user's design file imports it only when this command gives it
    (--design), and only when its sha256 is the recorded one."""
    from rlhls.designs.registry import get_design, is_file_spec

    files = rec.get("design_files") or {}
    if not isinstance(files, dict) or not all(isinstance(h, str) for h in files.values()):
        raise RlhlsError(f"--resume: '{out / RECORD}' records design_files that are not {{file: sha256}}")
    for spec in (rec.get("options") or {}).get("design") or ():
        if not is_file_spec(spec):
            continue
        if not given or spec not in given:
            raise RlhlsError(f"--resume: '{out}' runs the design file '{spec}': give it again (--design {spec}); "
                             "an experiment folder never makes rlhls import a file by itself")
        want, have = files.get(spec), get_design(spec).origin["sha256"]
        if want is None:
            raise RlhlsError(f"--resume: '{out / RECORD}' records no sha256 of the design file '{spec}' (a damaged "
                             "record; start the experiment again in another --out)")
        if have != want:
            raise RlhlsError(f"--resume: '{out}' ran the design file '{spec}' of sha256 {want}; it now has sha256 "
                             f"{have} (give the file the experiment ran, or choose another --out)")


def _resume_options(opts: ExperimentOptions) -> None:
    """--resume: the recorded options; one the command also gives must agree with them."""
    assert opts.out is not None  # run_experiment gave it its default
    out = Path(opts.out)
    try:
        rec = fileio.read_json(out / RECORD)
    except FileNotFoundError:
        raise RlhlsError(f"--resume: '{out}' holds no experiment (no {RECORD}); start it without --resume") from None
    except (OSError, ValueError) as e:
        raise RlhlsError(f"--resume: '{out / RECORD}' cannot be read ({e})") from None
    if not isinstance(rec, dict):
        raise RlhlsError(f"--resume: '{out / RECORD}' is not an experiment's record (expected a JSON object)")
    old = rec.get("options")
    if not isinstance(old, dict):
        raise RlhlsError(f"--resume: '{out / RECORD}' records no options (an older experiment); repeat its "
                         "command instead")
    _check_recorded(old, out / RECORD)
    _check_design_files(out, rec, opts.design)
    defaults = _recorded(ExperimentOptions(name=opts.name))
    given = _recorded(opts)
    for k, v in given.items():
        if k == "config" and v and k in old:  # a file's contents: one line names what differs
            if not isinstance(old[k], dict) or not isinstance(old[k].get("data"), dict):
                raise RlhlsError(f"--resume: '{out}' was started without --config (drop it, or choose another --out)")
            was = old[k]["data"]
            diff = sorted(key for key in set(v["data"]) | set(was) if v["data"].get(key) != was.get(key))
            if diff:
                raise RlhlsError(f"--resume: '{out}' was started with --config '{old[k].get('file')}'; "
                                 f"'{v['file']}' differs in {diff[0]!r} (drop --config, or choose another --out)")
        elif k in old and v != defaults.get(k) and _plain(v) != old[k]:
            raise RlhlsError(f"--resume: '{out}' was started with {_resumed_change(k, old[k], _plain(v))} (drop the "
                             "option, or choose another --out)")
    for k, v in old.items():
        if k in given:
            setattr(opts, k, tuple(tuple(x) if isinstance(x, list) else x for x in v) if k == "sizes" and v else v)
    opts.out = str(out)


def _resumed_change(k: str, was, now) -> str:
    """'steps 16, not 64'; of --set and --param the first entry that differs ('no --set gamma, not --set
    gamma=0.5'), never two whole mappings."""
    flag = {"overrides": "--set", "params": "--param"}.get(k)
    if flag and isinstance(was, dict) and isinstance(now, dict):
        sub = sorted(key for key in set(was) | set(now) if was.get(key) != now.get(key))[0]

        def given(d):
            return f"{flag} {sub}={d[sub]}" if sub in d else f"no {flag} {sub}"
        return f"{given(was)}, not {given(now)}"
    name, was, now = _first_difference(k, was, now)
    return f"{name} {was!r}, not {now!r}"


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


def check_out(out: Path, settings: dict) -> None:
    """Refuse an --out that is a file, holds files rlhls did not write, or runs of other settings."""
    fileio.check_out(out, command="experiment", ours=lambda d: (d / RECORD).is_file(), hint="choose another --out")
    if (out / RECORD).exists():
        try:
            old = fileio.read_json(out / RECORD)
        except (OSError, ValueError) as e:
            raise RlhlsError(f"--out '{out}': its {RECORD} cannot be read ({e})") from None
        if not isinstance(old, dict):
            raise RlhlsError(f"--out '{out}': its {RECORD} is not an experiment's record (expected a JSON object)")
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            what, was, now = _first_difference(diff[0], old.get(diff[0]), settings[diff[0]])
            raise RlhlsError(f"--out '{out}' holds experiment runs with a different {what} "
                             f"({was!r}, now {now!r}); choose another --out")


def _first_difference(name: str, old, new) -> tuple:
    """(name, old, new) of the first value that differs, inside mappings (a design's --config
    values): one line names it, not two whole mappings."""
    while isinstance(old, dict) and isinstance(new, dict):
        key = next((k for k in sorted(set(old) | set(new), key=str) if old.get(k) != new.get(k)), None)
        if key is None:
            break
        name, old, new = f"{name} {key}", old.get(key), new.get(key)
    return name, old, new


# ----------------------------------------------------------------------------- records in its folder

def read_object(path, default=None) -> dict:
    """A JSON object the experiment wrote in its folder (a run's config.json, a part's record), read
    as a file someone may have edited: one line naming it when it is not one (or `default`, where
    given, for a file that is missing or not an object)."""
    try:
        data = fileio.read_json(path)
    except FileNotFoundError:
        if default is not None:
            return default
        raise RlhlsError(f"'{path}' is missing (a damaged experiment folder)") from None
    except (OSError, ValueError) as e:
        if default is not None:
            return default
        raise RlhlsError(f"'{path}' cannot be read ({e}): a damaged experiment folder") from None
    if not isinstance(data, dict):
        if default is not None:
            return default
        raise RlhlsError(f"'{path}' is not a JSON object (a damaged experiment folder)")
    return data


# ----------------------------------------------------------------------------- designs, plans, training

def design_ref(design) -> str:
    """What names `design` in a worker process: its registered name, or ``/abs/path.py:NAME`` for a
    design from a user's file (the worker imports the file again)."""
    from rlhls.designs.registry import design_spec

    return design_spec(design)


def solve_plan(design, *, folder=None, batch: int | None = None, time_limit: float = 60.0):
    """The design's plan (profile + ILP at `batch`, default the design's) -- the one place the
    experiments solve plans. With `folder`: kept there as plan.json (read back when it is there)."""
    from rlhls.partition.design_plan import partition_design
    from rlhls.partition.plan import load_plan, write_plan

    if folder is not None and (Path(folder) / "plan.json").exists():
        return load_plan(Path(folder) / "plan.json")
    from rlhls.designs.graph import build_graph

    graph = build_graph(design, batch)
    plan = partition_design(design, graph=graph, batch=batch, time_limit=time_limit)
    if folder is not None:
        write_plan(plan, Path(folder), edges=graph.all_edges())
    return plan


def train_run(design: str, out: str | Path, steps: int, seed: int = 0, env: str | None = None, backend: str = "emu",
              precision: str | None = None, plan=None, overrides: dict | None = None, config: dict | None = None,
              on_update=None) -> dict:
    """One training run in this process (host.train.train_design), resuming the folder's checkpoint
    when it has one: an experiment's per-run function, or what its own calls. `design`: a
    ``design_ref``; `plan`: a plan.json path or {node: unit}; `config`: its --config values
    (``Context.config``: the design's entry, resizing it here too), below `overrides`."""
    import os

    from rlhls.designs.registry import get_design
    from rlhls.partition.plan import load_plan

    from ..runfolder import CHECKPOINT
    from ..train import train_design

    folder = Path(out)
    t0 = time.perf_counter()
    run = train_design(get_design(design), out=folder, steps=steps, seed=seed, env_id=env, backend=backend,
                       precision=precision, plan=load_plan(plan) if isinstance(plan, (str, Path)) else plan,
                       overrides=dict(overrides or {}), config=dict(config) if config else None,
                       resume=(folder / CHECKPOINT).exists(), progress=False,
                       on_update=on_update, log=os.devnull)
    return {"env_steps": run.env_steps, "seconds": time.perf_counter() - t0, "seed": seed}

