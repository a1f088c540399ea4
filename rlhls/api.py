"""``rlhls.Flow``: one design through graph -> profile -> partition -> build (+ checks) -> train
-> report, in memory.

    import rlhls
    flow = rlhls.Flow("apdrl-dqn-cartpole", out="runs/nb")
    plan = flow.partition()             # Plan: .assignment, .makespan_us, .status, .gantt() -> Figure
    build = flow.build(csim=True)       # .components [{name, kernel, unit, csim}], .passed
    run = flow.train(steps=20_000)      # .metrics (one dict per update), .folder
    perf = flow.perf()                  # Perf: the whole run on the device, .variants, .speedups, .text()
    flow.report()                       # report.md and report.html in out/

Each step computes what it needs from the steps before it (once), returns an object
(TrainingGraph, Profile, Plan, BuildResult, Run) and writes its files once into ``out``, never
reading them back: ``graph.csv``, ``profile.csv``, ``plan/`` (plan.json, plan.csv, gantt.png),
``build/`` (Vitis HLS components, ``aie/``, manifest.json), ``train/`` (the run folder), ``perf/``
(perf.json, perf.txt, perf.png: the modeled run on the device),
``report.md`` with ``phases.png`` and ``csim.png``, ``report.html`` (the same page with every
figure embedded), and ``run.json`` (the record of every step).
What libraries print (hls4ml, the ALE, solvers) goes to ``flow.log`` unless ``verbose``.

The plan is solved at the design's batch (the accelerator it sizes); a mixed-precision run
trains under it. ``reports=BUILD_DIR`` (a build with Vitis reports or aiesimulator outputs)
calibrates the profile (``partition.calibrate``): the plan is solved on the calibrated rows and
records their sources. ``demo=True`` (``rlhls run`` without ``--full``) takes the design's
demonstration budget (``Design.demo``: steps and hyperparameters that finish in minutes on 2 cores).

``resume=True`` continues a flow folder (``run.json``): the graph and profile are recomputed,
a finished partition is taken from its plan.json, the build is redone (its C simulations come
from the cache) and training continues from its checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import os
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager, TypeVar

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import (
    OWNER,
    atomic_write_text,
    check_name,
    check_out,
    folder_command,
    folder_lock,
    make_dirs,
    owned_file,
    path_arg,
    read_json,
    write_json,
)
from rlhls.core.procs import library_output
from rlhls.designs.design import Design
from rlhls.designs.devices import get_device
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import design_record, recorded_design

if TYPE_CHECKING:
    from rlhls.designs.graph import TrainingGraph
    from rlhls.flow.build import BuildResult
    from rlhls.host.algorithms import Algorithm
    from rlhls.host.bound import BoundRun
    from rlhls.host.perf import Perf
    from rlhls.host.train import Run
    from rlhls.partition.plan import Plan
    from rlhls.partition.profile import Profile

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

__all__ = ["Flow", "RECORD", "STAGES"]

RECORD = "run.json"
_KEPT = ("stages", "failures", "notes")  # what a resumed flow takes from its run.json and adds to


class Flow:
    """The design flow of one design, step by step or all at once (``run``); see the module docstring.

    Parameters (each checked before anything is written; a bad one is one ``RlhlsError`` line):

    - ``design``: a registered design name (``rlhls designs``), a ``Design``, or a ``BoundRun``
      (``rlhls.host.bound.bind``: bound already, with its overrides, config, precision and environment).
    - ``out``: the flow folder (default ``runs/<design>-<timestamp>``); a new, empty or own folder.
    - ``device``: a device name (``rlhls devices``; default the design's own device).
    - ``seed``: the training seed (an integer >= 0).
    - ``env_id``: a gymnasium environment id instead of the design's.
    - ``backend``: what runs the plan's PL and AIE nodes while training: ``'emu'`` (the numpy
      models, default), ``'csim'`` (the compiled C++) or ``'cosim'`` (Vitis).
    - ``precision``: ``'fp64'``, ``'fp32'`` or ``'mixed'`` (each node in its plan unit's format);
      default the design's.
    - ``overrides``: ``{hyperparameter: value}`` (as ``--set``), over the design's and ``config``.
    - ``config``: ``{hyperparameter: value}`` read from a config file (as ``--config``).
    - ``demo``: True (default) takes the design's demonstration budget and settings; False its
      own hyperparameters and ``total_timesteps``.
    - ``resume``: continue the flow in ``out`` (its ``run.json``), keeping the record of the
      stages it ran before.
    - ``verbose``: show what libraries print (else it goes to ``flow.log``); ``quiet``: no progress.
    - ``solver``, ``time_limit``: the ILP solver (default ``'cbc'``) and its limit in seconds.
    - ``reports``: a build folder with Vitis reports or aiesimulator outputs that calibrate the profile.
    - ``xclbin``: ``backend='board'``'s device binary (docs/guide/board.md).
    """

    def __init__(self, design: str | Design | BoundRun, out: str | os.PathLike[str] | None = None, *,
                 device: str | None = None,
                 seed: int = 0, env_id: str | None = None, backend: str = "emu", precision: str | None = None,
                 overrides: dict | None = None, config: dict | None = None, demo: bool = True, resume: bool = False,
                 verbose: bool = False, quiet: bool = False, solver: str = "cbc", time_limit: float | None = 60.0,
                 reports: str | os.PathLike[str] | None = None, xclbin: str | os.PathLike[str] | None = None) -> None:
        from rlhls.host.backends import BACKENDS
        from rlhls.host.bound import BoundRun, bind
        from rlhls.host.hyperparams import check_seed

        if isinstance(design, BoundRun):  # bound already (the command line binds before it builds the Flow)
            if overrides or config or precision is not None or env_id not in (None, design.env_id):
                raise RlhlsError("Flow: a BoundRun carries its overrides, config, precision and environment already")
            bound = design
        else:
            for name, value, kind in (("overrides", overrides, dict), ("config", config, dict),
                                      ("env_id", env_id, str), ("precision", precision, str)):
                if value is not None and not isinstance(value, kind):
                    hint = " (read a YAML file with rlhls.host.hyperparams.read_config)" if name == "config" else ""
                    raise RlhlsError(f"Flow({name}={value!r}): expected a {kind.__name__}{hint}")
            if isinstance(design, str) and "\0" in design:
                raise RlhlsError(f"Flow(design={design!r}): a design name or file cannot hold a NUL character")
            if not isinstance(design, (str, Design)):
                raise RlhlsError(f"Flow(design={design!r}): expected a design name (rlhls designs) or a Design")
            # every hyperparameter is checked before anything is written
            bound = bind(design, overrides=overrides, config=config, env_id=env_id, precision=precision, demo=demo)
        self.bound = bound
        if device is not None and not isinstance(device, str):
            raise RlhlsError(f"Flow(device={device!r}): expected a device name (rlhls devices)")
        self.device = get_device(device or bound.design.device)
        self.seed = check_seed(seed)
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise RlhlsError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        if not isinstance(solver, str):
            raise RlhlsError(f"Flow(solver={solver!r}): expected a str")
        _check_solver(solver)
        time_limit = _check_time_limit(time_limit)
        if out is not None and (not isinstance(out, str) or out):  # "": the default folder
            out = path_arg(out, "Flow", "out")
        self.reports: tuple[Path, dict] | None = None  # (build folder, its manifest)
        if reports is not None:  # a build's tool reports calibrate the profile
            from rlhls.flow.project import build_manifest

            self.reports = build_manifest(path_arg(reports, "Flow", "reports"))
        self.backend, self.env_id, self.verbose, self.quiet = backend, bound.env_id, verbose, quiet
        self.solver, self.time_limit = solver, time_limit
        # one design for the build and the training: the run's hyperparameters in the design's kernels
        self.design, self.algorithm, self.hyperparams = bound.design, bound.algorithm, bound.hyperparams
        self.overrides, self.config, self.default_steps = bound.overrides, bound.config, bound.steps
        if self.algorithm:
            named = None if bound.env_id == bound.design.env_id else bound.env_id  # one made to see its actions
            _check_training(self.design, self.algorithm, named, backend, verbose, xclbin)  # before anything is written
        self.xclbin = xclbin
        self.out = Path(out or f"runs/{self.design.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}").absolute()
        self.resume = resume
        self._check_out()
        self._lock = folder_lock(self.out)  # one writer: another process or Flow is refused in one line
        try:
            self._check_out()  # again, holding it: another process may have started the run meanwhile
            self._console = os.fdopen(os.dup(2), "w", buffering=1)  # progress stays on the console
            self._graph: TrainingGraph | None = None
            self._profile: Profile | None = None
            self._plan: Plan | None = None
            self._build: BuildResult | None = None
            self._run: Run | None = None
            self._perf: Perf | None = None
            self.record = {**design_record(self.design), "seed_file": self.design.seed_file,
                           "seed_title": self.design.seed_title, "algorithm": self.design.algorithm,
                           "device": self.device.id, "batch": self.design.batch_size,
                           "env": bound.env_id, "backend": backend, "seed": self.seed,
                           "precision": self.hyperparams.get("precision"), "demo": bound.demo,
                           "overrides": {k: str(v) for k, v in self.overrides.items()}, "stages": [], "failures": [],
                           "notes": [], "ok": True, "passed": False, "binding": bound.record()}
            if self.hyperparams.get("experiment") is not None and self.design.seed_figures.get("phase_shares"):
                self.record["experiment_text"] = f"experiment {self.hyperparams['experiment']} of HEPPO-GAE Table III"
            if self.design.seed_figures.get("phase_shares"):
                self.record["seed_phase_shares"] = self.design.seed_figures["phase_shares"]
            self._old = self._old_record() if resume else {}
            if self._old:  # the record of the stages run before stays; a stage run again replaces its entry
                self.record = {**self._old, **{k: v for k, v in self.record.items() if k not in _KEPT}}
                self.record.update({k: list(self._old.get(k) or []) for k in _KEPT})
                self.record["stages"] = [s for s in self.record["stages"] if isinstance(s, dict) and "stage" in s]
                self._verdict()
        except BaseException:  # the folder is free again at once, not when the traceback goes
            self._lock.close()
            raise

    def close(self) -> None:
        """Release the output folder (another process, or another Flow, may then write it); the end
        of the process, or of the object, does the same. Until then a second Flow into the same
        folder is refused in one line."""
        self._lock.close()

    # -- files
    def _check_out(self) -> None:
        check_name(self.out)
        rec = self.out / RECORD
        if self.out.is_dir():  # read on --resume, appended or written into by the stages: the folder's own, no link
            owned_file(self.out, RECORD)
            owned_file(self.out, "flow.log", write=True)
            for sub in ("plan", "build", "train", "perf"):
                owned_file(self.out, sub, write=True, dir=True)
        if self.resume:
            if not rec.is_file():
                raise RlhlsError(f"--resume: '{self.out}' has no {RECORD} (not a folder written by rlhls run)")
            owner = folder_command(self.out)
            if owner not in (None, "run"):
                raise RlhlsError(f"--resume: '{self.out}' is a folder of 'rlhls {owner}', not of 'rlhls run'")
            return
        if rec.is_file():
            raise RlhlsError(f"--out '{self.out}' holds a run already: pass --resume to continue it, or choose "
                             "another --out")
        check_out(self.out, command="run", ours=lambda d: (d / RECORD).is_file(), hint="choose another --out")

    def _old_record(self) -> dict:
        try:
            old = read_json(self.out / RECORD)
        except (OSError, ValueError):
            raise RlhlsError(f"--resume: '{self.out / RECORD}' is not a run record (not JSON)") from None
        if not isinstance(old, dict) or not isinstance(old.get("stages", []), list):
            raise RlhlsError(f"--resume: '{self.out / RECORD}' is not a run record (expected a JSON object)")
        for k in ("design", "env", "backend", "seed", "demo", "overrides"):
            if old.get(k) != self.record.get(k):
                raise RlhlsError(f"--resume: '{self.out}' was run with {_change(k, old.get(k), self.record.get(k))}")
        if "design_file" in old:  # a design file's run: the file given must be the one it ran
            recorded_design(self.design.name, old["design_file"], given=self.design, where=f"--resume: '{self.out}'")
        return old

    def _ensure_out(self) -> None:
        if not (self.out / OWNER).is_file():
            make_dirs(self.out)
            write_json(self.out / OWNER, {"command": "run", "files": []})
        self._save()

    def _save(self) -> None:
        write_json(self.out / RECORD, self.record)

    def say(self, msg: str) -> None:
        if not self.quiet:
            if _log.hasHandlers():
                _log.info(msg)
            else:  # no logging set up: the console (fd 2 is the flow.log while libraries run)
                print(msg, file=self._console, flush=True)

    def _libraries(self) -> ContextManager[None]:
        return library_output(None if self.verbose else self.out / "flow.log", fds=() if self.verbose else (1, 2))

    def _stage(self, name: str, output: str, fn: Callable[[], tuple[_T, str]]) -> _T:
        self._ensure_out()
        key = name.split(" --")[0]  # 'build --csim' replaces an earlier 'build'
        rec = self.record
        for old in [s for s in rec["stages"] if s["stage"].split(" --")[0] == key]:  # a stage run again
            rec["stages"].remove(old)
            for f in old.get("failures", []):
                if f in rec["failures"]:
                    rec["failures"].remove(f)
        n0 = len(rec["failures"])
        self.say(f"[{len(rec['stages']) + 1}] {name} ...")
        t0 = time.perf_counter()
        try:
            result, status = fn()
        except BaseException as e:  # the record says the stage failed, then the error goes on
            msg = str(e) if isinstance(e, RlhlsError) else ("interrupted" if isinstance(e, KeyboardInterrupt)
                                                            else f"{type(e).__name__}: {e}")
            rec["failures"].append(f"{name}: {msg}")
            rec["stages"].append({"stage": name, "seconds": time.perf_counter() - t0, "status": "failed",
                                  "output": output, "error": msg, "failures": rec["failures"][n0:]})
            self._verdict()
            with contextlib.suppress(RlhlsError):
                self._save()
            raise
        dt = time.perf_counter() - t0
        rec["stages"].append({"stage": name, "seconds": dt, "status": status, "output": output,
                              "failures": rec["failures"][n0:]})
        self.say(f"    {name}: {status} ({dt:.1f} s)")
        self._verdict()
        self._save()
        return result

    def _check_budget(self, steps: int | None) -> None:
        """One update within the run's steps, before a stage runs (host.train.check_budget)."""
        from rlhls.host.train import check_budget

        check_budget(self.hyperparams, steps or self.default_steps, set(self.overrides) | set(self.config or {}))

    def _verdict(self) -> None:
        """``ok``: nothing failed; ``passed``: checks ran (``checks``, from the build) and none failed."""
        self.record["ok"] = not self.record["failures"]
        self.record["passed"] = self.record["ok"] and (self.record.get("build") or {}).get("checks", 0) > 0

    # -- the steps
    def graph(self) -> TrainingGraph:
        """The TrainingGraph of one step at the design's batch (``graph.csv``)."""
        if self._graph is None:
            def step():
                g = build_graph(self.design)
                atomic_write_text(self.out / "graph.csv", g.edges_csv(carry=True))
                s = g.summary()
                self.record["graph"] = {k: s[k] for k in ("nodes", "edges", "mm_nodes", "flops")}
                return g, f"{s['nodes']} nodes, {s['edges']} edges"
            self._graph = self._stage("training graph", "graph.csv", step)
        return self._graph

    def profile(self) -> Profile:
        """Every node on every unit it may run on (a Profile of ProfileRows; ``profile.csv``)."""
        if self._profile is None:
            from rlhls.partition.profile import profile_design

            graph = self.graph()

            def step():
                rows = profile_design(self.design, self.device, graph=graph)
                if self.reports is not None:
                    from rlhls.partition.calibrate import calibrate

                    rows[:], notes = calibrate(rows, self.reports[0], self.reports[1], batch=graph.batch, graph=graph)
                    self.record["notes"] += [n for n in notes if n not in self.record["notes"]]
                rows.write_csv(self.out / "profile.csv")
                src = {}
                for r in rows:
                    src[r.source] = src.get(r.source, 0) + 1
                return rows, f"{len(rows)} rows ({', '.join(f'{k} {v}' for k, v in src.items())})"
            self._profile = self._stage("profile", "profile.csv", step)
        return self._profile

    def partition(self, *, solver: str | None = None, time_limit: float | None = None) -> Plan:
        """The Plan (ILP; ``plan/``): a resumed flow takes the plan it solved. ``solver`` and
        ``time_limit`` (seconds) replace the flow's for this solve."""
        if solver is not None:
            _check_solver(solver)
        time_limit = _check_time_limit(time_limit)
        if self._plan is None:
            from rlhls.partition.design_plan import partition_design
            from rlhls.partition.plan import load_plan, write_plan

            graph, rows = self.graph(), self.profile()

            def step():
                done = any(isinstance(s, dict) and s.get("stage") == "partition" for s in self._old.get("stages", []))
                if done and (self.out / "plan" / "plan.json").is_file():
                    plan = load_plan(self.out / "plan")
                else:
                    with self._libraries():
                        plan = partition_design(self.design, self.device, graph=graph, rows=rows,
                                                solver=solver or self.solver,
                                                time_limit=time_limit if time_limit is not None else self.time_limit)
                    write_plan(plan, self.out / "plan", edges=graph.all_edges(), bound=self.bound.record())
                own = {}
                for node, unit in rows.own.items():
                    kernels = ", ".join(k.name for k, _ in _kernels(self.design, graph, node, unit))
                    own.setdefault(kernels, []).append(node)
                self.record["plan"] = {"makespan_us": plan.makespan_us, "status": plan.status, "gap": plan.gap,
                                       "solve_seconds": plan.solve_seconds, "units": plan.units,
                                       "baselines": dict(plan.baselines), "own_units": own}
                return plan, (f"makespan {plan.makespan_us:.6g} us ({plan.status}); "
                              + ", ".join(f"{u} {n}" for u, n in plan.units.items()))
            self._plan = self._stage("partition", "plan/", step)
        return self._plan

    def build(self, *, csim: bool = True, synth: bool = False, cosim: bool = False, hls4ml: bool | None = None,
              part: str | None = None, platform: str | None = None, link: bool = False, target: str = "hw",
              common_image: str | os.PathLike[str] | None = None, board: bool = False) -> BuildResult:
        """The plan's components in ``build/`` with their checks (BuildResult), as ``rlhls build``.

        - ``csim``: C-simulate every PL component and AIE kernel against its reference (default True).
        - ``synth``: run Vitis HLS synthesis on each component (``--synth``); ``cosim``: C/RTL
          co-simulation, synthesis first (``--cosim``). Both need Vitis on PATH: without it one
          ``RlhlsError`` line before anything is written.
        - ``hls4ml``: forward layers as hls4ml projects or as rlhls' own dense kernels; default hls4ml, but
          rlhls' kernels for a build that links or goes to a board (``platform``, ``board``): the board
          backend calls the training loop's layers one by one, which an hls4ml network does not offer.
        - ``part``: the AMD part number (default the device's; synth and cosim need a real one).
        - ``platform``: a Vitis platform (.xpfm or name): the link and package commands in the build's
          ``Makefile``; ``link`` runs them (v++ on PATH; ``target`` hw / hw_emu, ``common_image`` for an
          embedded platform); ``board``: ``build/board/``, what to copy to the board (``rlhls build --board``).

        ``BuildResult.passed`` (and ``passed`` in run.json) is True only when checks ran and every
        one passed; ``ok`` when none failed."""
        from rlhls.flow import vitis as V
        from rlhls.flow.build import build_design, resolve_part
        from rlhls.flow.link import check_request, link_request

        req = link_request(platform, run=link, target=target, common_image=common_image, board=board)
        if hls4ml is None:
            hls4ml = req is None
        if synth or cosim or req is not None:  # Vitis and a real part, before any stage writes
            tools = V.find_tools()
            real, _ = resolve_part(self.design, part, need_real=synth or cosim or platform is not None)
            if req is not None:
                check_request(req, part=real, tools=tools)
            V.select_flow(tools, synth=synth or link, cosim=cosim)
        plan, graph = self.partition(), self.graph()

        def step():
            b = self.record["build"] = {"components": [], "aie": [], "host": [], "notes": [], "part": "",
                                        "checks": 0}
            rows = self.record["csim"] = []
            with self._libraries():
                res = build_design(self.design, self.out / "build", plan=plan, graph=graph, csim=csim, synth=synth,
                                   bound=self.bound.record(),
                                   cosim=cosim, part=part, hls4ml=hls4ml, progress=lambda m: self.say(f"    {m}"),
                                   link=req)
            b.update(components=[c.name for c in res.components], aie=list(res.aie["nodes"]), host=list(res.host),
                     part=res.part, unmapped=dict(res.unmapped), notes=list(res.warnings), checks=res.checks,
                     vitis=[{"name": c.name, **s} for c in res.components for s in c.vitis])
            for c in res.components:
                cs = c.csim or {}
                rows.append({"name": c.name, "kernel": c.kernel, "unit": c.unit, "nodes": list(c.nodes),
                             "passed": cs.get("passed"), "seconds": cs.get("seconds"), "cached": cs.get("cached"),
                             "detail": cs.get("detail", "")})
            for a in res.aie.get("csim") or []:
                rows.append({"name": a["kernel"], "kernel": "mm_aie", "unit": "AIE", "nodes": [a["node"]],
                             "passed": a["passed"], "seconds": a.get("seconds"), "cached": a.get("cached"),
                             "detail": a.get("detail", "")})
            for r in rows:
                if csim and not r["passed"]:
                    self.record["failures"].append(f"check {r['name']}: {r['detail'] or 'not run'}")
            for v in b["vitis"]:
                if not v["passed"]:
                    self.record["failures"].append(f"{v['step']} {v['name']}: exit {v['returncode']} (log {v['log']})")
            if res.link is not None:
                b["link"] = {k: res.link.get(k) for k in ("platform", "target", "makefile", "results", "board")}
                for r in res.link.get("results", []):
                    if not r["passed"]:
                        why = r.get("detail") or f"exit {r['returncode']}"
                        self.record["failures"].append(f"{r['step']}: {why} (log {r['log']})")
            checks = (f", {res.checks} check(s) {'pass' if res.ok else 'FAIL'}" if res.checks
                      else ", no check run")
            return res, f"{len(res.components)} PL component(s), {len(res.aie['nodes'])} AIE node(s){checks}"
        flags = [f for f, on in (("--csim", csim), ("--synth", synth and not cosim), ("--cosim", cosim),
                                 ("--link", link), ("--board", board)) if on]
        self._build = self._stage(" ".join(["build", *flags]), "build/", step)
        return self._build

    def train(self, *, steps: int | None = None, backend: str | None = None) -> Run:
        """Train on the host in ``train/`` (Run); continues its checkpoint when there is one.

        - ``steps``: environment steps (default the budget of ``demo``: the design's demonstration
          or its ``total_timesteps``), rounded up to whole updates.
        - ``backend``: this run's backend instead of the flow's (``'emu'``, ``'csim'``, ``'cosim'``)."""
        from rlhls.host.figures import phase_totals, phases_figure, save_png
        from rlhls.host.runfolder import CHECKPOINT
        from rlhls.host.train import train_design

        if self.algorithm is None:
            raise RlhlsError(f"design '{self.design.name}': algorithm '{self.design.algorithm}' has no trainer yet")
        steps = _check_steps(steps)
        self._check_budget(steps)
        if backend is not None and backend != "board":
            from rlhls.host.backends import check_tools

            check_tools(backend)
        plan = self.partition() if self.hyperparams.get("precision") == "mixed" else None
        run_dir = self.out / "train"

        def step():
            run = train_design(self.bound, out=run_dir, steps=steps or self.default_steps, seed=self.seed,
                               backend=backend or self.backend, plan=plan,
                               xclbin=self.xclbin if (backend or self.backend) == "board" else None,
                               resume=(run_dir / CHECKPOINT).is_file(), progress=not self.quiet,
                               say=lambda m: self.say(f"    {m}"),
                               log=None if self.verbose else self.out / "flow.log")
            self.record["train"] = {**run.to_json(), "phases": phase_totals(run.metrics), "notes": run.notes}
            save_png(phases_figure(run.metrics, f"{self.design.name}: time per phase",
                                   self.record.get("seed_phase_shares")), self.out / "phases.png")
            return run, f"{run.updates} updates, {run.env_steps} steps"
        self._run = self._stage("train", "train/", step)
        return self._run

    def perf(self, *, steps: int | None = None, ps_factor: float | None = None) -> Perf:
        """The whole training run modeled on the device (host.perf.Perf; ``perf/``): host phases from
        this flow's training run when it has one, else from a short run here; the plan's graph.
        ``steps``: the run length modeled (default the design's); ``ps_factor``: how many times
        slower the device's PS core is than this machine's (default ``host.perf.ps_factor``)."""
        steps = _check_steps(steps)
        if isinstance(ps_factor, numbers.Real) and not isinstance(ps_factor, bool):
            ps_factor = float(ps_factor)  # numpy's numbers too; model_perf checks the value
        if self._perf is None:
            from rlhls.host.figures import save_png
            from rlhls.host.perf import host_times, model_perf, perf_figure, write_perf

            graph, rows, plan = self.graph(), self.profile(), self.partition()

            def step():
                host = None
                if self._run is not None and self._run.metrics:
                    hp = self._run.config.get("hyperparams", self.hyperparams)
                    with contextlib.suppress(RlhlsError):  # no gradient step timed yet: a short run here
                        host = host_times(self._run.metrics, self.design.algorithm, hp,
                                          f"this flow's run ({self.out / 'train'})")
                p = model_perf(self.design, device=self.device, plan=plan, rows=rows, graph=graph, host=host,
                               factor=ps_factor, steps=steps, seed=self.seed)
                write_perf(p, self.out / "perf", bound=self.bound.record())
                self.record["perf"] = p.to_json()
                save_png(perf_figure(p), self.out / "perf.png")
                return p, f"plan {p.total_s:.4g} s for {p.steps:,} steps (PS factor {p.ps_factor:.3g})"
            self._perf = self._stage("perf", "perf/", step)
        return self._perf

    def report(self) -> Path:
        """report.md (with csim.png) and report.html (the same, self-contained: figures embedded)
        from what the flow did so far, a resumed flow's earlier stages included."""
        from rlhls.host.figures import csim_figure, save_png, write_html
        from rlhls.host.report import write_report

        def step():
            save_png(csim_figure(self.record.get("csim", []), f"{self.design.name}: checks"), self.out / "csim.png")
            write_report(self.out / "report.md", self.record)
            return self.out / "report.md", "ok"
        path = self._stage("report", "report.md, report.html", step)
        write_report(path, self.record)  # again, with the report stage's own time
        write_html(self.out, title=f"rlhls run: {self.design.name}")
        return path

    def run(self, *, steps: int | None = None, until: str = "report") -> dict:
        """The stages in order (``STAGES``; ``rlhls run``), stopped after ``until``: build with C
        simulation, train ``steps`` (as ``train``), perf, report; returns the record (run.json).
        ``until='build'`` is ``rlhls build`` over the same bound run, ``'partition'`` the plan only."""
        if until not in STAGES:
            raise RlhlsError(f"--until {until!r}: expected one of {', '.join(STAGES)}")
        order = STAGES[:STAGES.index(until) + 1]
        if self.algorithm is None and "train" in order:
            raise RlhlsError(f"design '{self.design.name}': algorithm '{self.design.algorithm}' has no trainer yet; "
                             "rlhls graph / profile / partition / build work for it (--until build)")
        steps = _check_steps(steps)
        if "train" in order:
            self._check_budget(steps)
        run = {"graph": self.graph, "profile": self.profile, "partition": self.partition,
               "build": lambda: self.build(csim=True), "train": lambda: self.train(steps=steps), "perf": self.perf,
               "report": self.report}
        for stage in order:
            run[stage]()
        return self.record


# The flow's stages in order: each method computes what it needs of the stages before it, once per
# Flow; ``run(until=...)`` stops after one (``rlhls run --until``).
STAGES = ("graph", "profile", "partition", "build", "train", "perf", "report")


def _check_steps(steps: object) -> int | None:
    """`steps`: None (the default budget) or a positive integer (numpy's too, as an int), checked
    before any stage runs."""
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1):
        raise RlhlsError(f"steps={steps!r}: expected a positive integer (None: the design's budget)")
    return None if steps is None else int(steps)


def _check_solver(solver: object) -> None:
    from rlhls.partition.ilp import SOLVERS

    if not isinstance(solver, str) or solver not in SOLVERS:
        raise RlhlsError(f"--solver {solver!r}: expected one of {', '.join(SOLVERS)}")


def _check_time_limit(time_limit: object) -> float | None:
    """The ILP's time limit in seconds: None or a number > 0 (numpy's too, as a float)."""
    if time_limit is not None and (isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real)
                                   or not 0 < float(time_limit) < math.inf):
        raise RlhlsError(f"--time-limit {time_limit!r}: expected a number of seconds > 0 (None: no limit)")
    return None if time_limit is None else float(time_limit)


def _change(key: str, was: object, now: object) -> str:
    """'env 'A', now 'B'', or of the overrides the first --set that differs: 'no --set gamma, now --set
    gamma=0.5' (never two whole mappings)."""
    if key == "overrides" and isinstance(was, dict) and isinstance(now, dict):
        sub = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))[0]

        def given(d):
            return f"--set {sub}={d[sub]}" if sub in d else f"no --set {sub}"
        return f"{given(was)}, now {given(now)}"
    return f"{key} {was!r}, now {now!r}"


def _check_training(design: Design, algorithm: Algorithm, env_id: str | None, backend: str, verbose: bool,
                    xclbin=None) -> None:
    """The environment training takes (one made to see its actions where the user named it) and the
    backend's tools, before the first stage writes: graph, profile, plan and build of a run that
    cannot train would hold its --out."""
    from rlhls.host.backends import check_tools
    from rlhls.host.train import check_environment

    check_environment(design, algorithm, env_id or design.env_id, make=env_id is not None,
                      log=None if verbose else os.devnull)
    if backend == "board":
        from rlhls.host.board import check_board

        check_board(xclbin)
    else:
        check_tools(backend)


def _kernels(design: Design, graph: TrainingGraph, node: str, unit: str) -> list:
    from rlhls.designs.kernels import KernelContext, kernels_for

    return kernels_for(graph.node(node), KernelContext(design, graph), unit)
