"""Training a design: ``train_design(design, ...) -> Run``, for every registered algorithm.

The design's algorithm comes from the registry (host/algorithms/__init__.py); its hyperparameters are
resolved and validated first (defaults <- design <- ``config`` (YAML) <- ``overrides``), then the
plan: with ``precision='mixed'`` every training-graph node computes in the format of the unit
the plan gives it (host/mixed.py) — the ``plan`` given (a Plan or {node: unit}, checked against
the design's graph at the algorithm's batch), the plan a resumed run recorded, or the design's
plan solved in-process (``partition.partition_design`` at the algorithm's batch: DQN's and DDPG's
batch size, A2C's num_envs x n_steps, PPO's minibatch). ``fp32`` runs every node on the PS;
``fp64`` is PPO's float64 HEPPO path (no plan).

The run folder (host/runner.py) defaults to ``runs/<design>-<env>-s<seed>[-e<experiment>]
[-<precision>]`` (PPO's fp64 path has no precision part). ``steps`` defaults to the design's
``total_timesteps`` (else 1e6) and is rounded up to whole updates, which the run says once (a
run shorter than DQN's / DDPG's ``steps_per_update`` is one update of its own length). What the
user should know (no gradient step will be taken, the rounding) is a warning on the
``rlhls.host`` loggers before training; ``say`` gets the progress messages.
Everything is checked before anything is written.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import reprlib
from dataclasses import dataclass, field
from pathlib import Path

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import folder_lock, path_arg
from rlhls.core.procs import library_output
from rlhls.designs.design import Design
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import design_record, recorded_design

from .algorithms import get_algorithm
from .backends import check_tools
from .bound import BoundRun, bind
from .hyperparams import check_seed
from .runfolder import check_folder, read_config
from .runner import train

__all__ = ["Run", "train_design", "default_out", "check_environment", "check_budget"]

log = logging.getLogger(__name__)

DEFAULT_STEPS = 1_000_000


@dataclass
class Run:
    """A finished (or resumed and finished) training run."""

    folder: Path
    config: dict
    metrics: list = field(default_factory=list)    # one dict per update
    episodes: list = field(default_factory=list)   # (env_step, return, length)
    updates: int = 0
    env_steps: int = 0
    notes: list = field(default_factory=list)      # what the user should know (rounded steps, no learning yet)
    evaluations: list = field(default_factory=list)  # eval.csv rows (host/evaluation.py)

    def to_json(self) -> dict:
        rets = [e[1] for e in self.episodes]
        w = min(1000, max(1, len(rets) // 10))
        return {"folder": str(self.folder), "design": self.config.get("design"), "updates": self.updates,
                "env_steps": self.env_steps, "episodes": len(rets),
                "final_return": (sum(rets[-w:]) / w) if rets else None,
                "eval": ({k: self.evaluations[-1][k] for k in ("env_steps", "mean_return", "std_return", "mean_length",
                                                               "episodes")} if self.evaluations else None),
                "notes": list(self.notes)}




def default_out(design, env_id: str, seed: int, hp: dict) -> str:
    parts = [f"{design.name}-{env_id.replace('/', '_')}-s{seed}"]
    if "experiment" in hp:
        parts.append(f"e{hp['experiment']}")
    if hp.get("precision") and hp["precision"] != "fp64":
        parts.append(hp["precision"])
    return "runs/" + "-".join(parts)


def train_design(design, *, out=None, steps: int | None = None, seed: int = 0, env_id: str | None = None,
                 backend: str = "emu", precision: str | None = None, plan=None, overrides: dict | None = None,
                 config: dict | None = None, resume: bool = False, progress: bool = True, say=None,
                 on_update=None, plan_time_limit: float | None = 60.0, log=None, xclbin=None,
                 xrt: str | None = None) -> Run:
    """Train `design` into the run folder `out`; see the module docstring. `design`: a BoundRun
    (host/bound.py: the run resolved once, as the Flow and the commands hand it down), or a Design
    or design name bound here with `overrides`, `config`, `env_id` and `precision`. `log`: a file
    that takes what libraries print while the trainer builds its environments (the ALE's banner).
    `xclbin`, `xrt`: the board backend's device binary and XRT (host/board.py)."""
    say = say or (lambda msg: None)
    if isinstance(design, BoundRun):
        if overrides or config or precision is not None or env_id not in (None, design.env_id):
            raise RlhlsError("train_design: a BoundRun carries its overrides, config, precision and environment "
                             "already (bind them into it)")
        bound = design
    else:
        if not isinstance(design, (str, Design)) or (isinstance(design, str) and "\0" in design):
            raise RlhlsError(f"train_design(design={reprlib.repr(design)}): expected a Design or a design name")
        for name, value in (("overrides", overrides), ("config", config)):
            if value is not None and not isinstance(value, dict):
                raise RlhlsError(f"{name}={value!r}: expected a dict of hyperparameters")
        bound = bind(design, overrides=overrides, config=config, env_id=env_id, precision=precision)
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1):
        raise RlhlsError(f"steps={steps!r}: expected a positive integer (None: the design's budget)")
    steps = None if steps is None else int(steps)
    if out is not None and (not isinstance(out, str) or out):  # "": the default folder
        out = path_arg(out, "train_design", "out")
    alg = bound.algorithm or get_algorithm(bound.design.algorithm)  # no trainer: one line
    seed = check_seed(seed)
    hp, env_id = bound.hyperparams, bound.env_id
    out = Path(out or default_out(bound.given, env_id, seed, hp))
    if resume:
        check_folder(out, resume)  # its checkpoint and config.json first, before a partition or import
        old = read_config(out / "config.json")
    else:
        old = {}
    recorded = old.get("hyperparams") if isinstance(old.get("hyperparams"), dict) else None
    if recorded is not None:  # a resume continues with the run's own values; those given must agree
        bound = bound.rebound({**recorded, **(bound.config or {}), **bound.overrides})
        hp = bound.hyperparams
    design = bound.design  # the run's values in its kernels, as the Flow builds them
    check_environment(design, alg, env_id, make=False)  # registered, and the backend's tools there:
    if backend == "board":
        from .board import check_board

        check_board(xclbin, xrt)
    else:
        if xclbin is not None:
            raise RlhlsError(f"--xclbin: only with --backend board (this run's backend is {backend})")
        check_tools(backend)  # before the lock (it makes --out's parents) and anything written
    # one writer per run folder: a second is refused in one line (an experiment's try holding it is this one)
    with folder_lock(out, reenter=True):
        return _train(design, alg, hp, out, steps=steps or bound.steps, seed=seed, env_id=env_id, backend=backend,
                      plan=plan, resume=resume, progress=progress, say=say, on_update=on_update,
                      plan_time_limit=plan_time_limit, log_file=log, board=(xclbin, xrt),
                      explicit=set(bound.overrides) | set(bound.config or {}),
                      recorded={**(_design_keys(design, out, old) if resume else
                                   {k: v for k, v in design_record(design).items() if k != "design"}),
                                **{k: v for k, v in bound.record().items() if k in ("batch", "kernels")}})


def _design_keys(design, out: Path, old: dict) -> dict:
    """A resumed run's record of its design beyond the name (design_file, design_resized): the run's
    own (its file may have moved), once the design given is the one it recorded (a design file's
    sha256); none that a run from before they were recorded lacks."""
    if "design_file" in old:
        recorded_design(design.name, old["design_file"], given=design, where=f"--resume: '{out}'")
    return {k: old[k] for k in ("design_file", "design_resized") if k in old}


def check_environment(design, alg, env_id: str, *, make: bool = True, log=None) -> None:
    """One line unless `env_id` is a registered environment with actions the algorithm takes (`make`:
    one environment made and closed to see them; `log`: where what its library prints goes)."""
    from .envs import action_kind, check_env_id

    check_env_id(env_id)
    if not make or len(alg.actions) != 1:
        return
    with library_output(log) if log is not None else contextlib.nullcontext():  # the ALE's banner
        kind = action_kind(env_id)
    if kind not in alg.actions:
        raise RlhlsError(f"environment '{env_id}' has {kind} actions; {design.algorithm.upper()} "
                         f"needs {alg.actions[0]} actions")


def check_budget(hp: dict, steps: int, explicit) -> None:
    """One line when a hyperparameter the user gave (`explicit`: their names) makes one update longer
    than the run's `steps` (else one update trains far past --steps)."""
    for key, unit in (("steps_per_update", 1), ("rollouts_per_update", hp.get("num_envs", 1) * hp.get("n_steps", 1))):
        if key in explicit and key in hp and hp[key] * unit > steps:
            raise RlhlsError(f"hyperparameter {key} = {hp[key]}: one update is {hp[key] * unit} environment steps, "
                             f"more than the run's {steps} (--steps)")


def _train(design, alg, hp, out: Path, *, steps, seed, env_id, backend, plan, resume, progress, say, on_update,
           plan_time_limit, log_file, explicit, recorded=None, board=(None, None)) -> Run:
    steps = int(steps or design.hyperparams.get("total_timesteps", DEFAULT_STEPS))
    n = hp.get("num_envs", 1)
    if "steps_per_update" in hp and "steps_per_update" not in explicit and not resume \
            and hp["steps_per_update"] > steps:
        hp = {**hp, "steps_per_update": -(-steps // n) * n}  # one update of the run's length, not one far past it
    check_budget(hp, steps, explicit)
    mixed = hp.get("precision") == "mixed"
    if plan is not None and not mixed:
        raise RlhlsError(f"--plan: only with --precision mixed (this run is {hp.get('precision', 'fp32')}: "
                         "no node follows a plan)")
    assignment, plan_src, points = None, None, None
    if mixed and plan is None:  # the partition below takes a while: what can fail fast fails first
        from .runfolder import check_folder

        check_folder(out, resume)
        check_environment(design, alg, env_id, log=log_file)
    if mixed:
        batch = alg.batch(hp)
        old = out / "config.json"
        if plan is not None:
            from rlhls.partition.plan import check_plan

            # recorded as content (the assignment), never as the path it was typed as: a resume from
            # another working directory, or of an rlhls run folder that re-reads its plan.json, is the same run
            assignment, plan_src = check_plan(plan, build_graph(design, batch)), "given"
            points = dict(plan.point) if getattr(plan, "point", None) else None
        elif resume and old.is_file():
            rec = read_config(old)
            if isinstance(rec.get("plan"), dict):  # the plan it trained under
                from rlhls.partition.plan import check_plan

                assignment = check_plan(rec["plan"], build_graph(design, batch), where=str(old))
                plan_src = rec.get("plan_source") if rec.get("plan_source") in ("ilp", "given") else "given"
                points = rec.get("plan_points") if isinstance(rec.get("plan_points"), dict) else None
        if assignment is None:
            from rlhls.partition.design_plan import partition_design

            say(f"partitioning {design.name} at batch {batch} (profile + ILP) for mixed precision ...")
            solved = partition_design(design, batch=batch, time_limit=plan_time_limit)
            assignment, plan_src, points = dict(solved.assignment), "ilp", dict(solved.point)
    # what a design file's or a resized design's run needs to load again (a run from before they
    # were recorded resumes without them)
    run_config = {"design": design.name, **(recorded or {}), "algorithm": design.algorithm, "env": env_id,
                  "seed": seed, "backend": backend, "hyperparams": hp}
    if hp.get("precision", "fp64") != "fp64":  # PPO's float64 HEPPO path follows no plan
        run_config.update(precision=hp["precision"], plan=assignment, plan_source=plan_src)
        if points:  # the PL kernels' design points, as the build renders them
            run_config["plan_points"] = points
            design = design.at_points(points)
    if "experiment" in hp:
        run_config["experiment"] = hp["experiment"]
    tag = "-".join(p for p in (f"e{hp['experiment']}" if "experiment" in hp else "",
                               hp.get("precision", "") if hp.get("precision") != "fp64" else "") if p)

    def capture():  # what the environments' libraries print (the ALE's banner, SUMO)
        return library_output(log_file) if log_file is not None else contextlib.nullcontext()

    runner = backend
    if backend == "board":  # the xclbin loaded once and its kernels checked, before anything is written
        from .board import BoardBackend

        runner = BoardBackend(board[0], design=design, batch=alg.batch(hp), assignment=assignment, points=points,
                              xrt=board[1])

    def make():
        with capture():
            return alg.trainer(design, env_id=env_id, seed=seed, backend=runner, hyperparams=hp,
                               assignment=assignment)

    notes = []  # said by the runner before the first update
    if hp.get("learning_starts", 0) >= steps:
        notes.append(f"{steps} steps do not pass learning_starts = {hp['learning_starts']}: this run takes no "
                     "gradient step (its returns are an untrained agent's)")
    res = train(make, run_config, out, steps=steps, resume=resume, progress=progress, on_update=on_update,
                title=f"{design.name} on {env_id} ({tag + ', ' if tag else ''}seed {seed})", notes=notes,
                eval_every=hp.get("eval_every", 0), eval_episodes=hp.get("eval_episodes", 0), capture=capture)
    if backend == "board":
        from .board import write_timings

        write_timings(res["out"], runner)
    return Run(Path(res["out"]), res["config"], res["metrics"], res["episodes"], res["updates"], res["env_steps"],
               notes, res["evaluations"])
