"""`rlhls run DESIGN`: the whole flow in one command.

    rlhls run DESIGN [--steps N] [--out DIR] [--seed S] [--backend emu|csim] [--full]
                     [--set key=value ...] [--resume] [--quiet]

training graph -> profile -> ILP partition -> build of the plan's PL part with C simulation ->
training on the host -> report. The run folder (default ``runs/<design>-<YYYYmmdd-HHMMSS>``):

    graph.csv  profile.csv  plan/{plan.json,plan.csv,gantt.png}  build/ (rlhls build + csim)
    kernels/<name>/ (csim of design kernels the build does not map yet, e.g. gae)
    train/ (rlhls train run folder)  phases.png  csim.png  report.md  run.json

Library calls, not subprocesses: ``build_graph``, ``profile_design``, ``solve`` + ``write_plan``,
``build_design(..., csim=True)``, ``render_kernel`` + ``run_csim``, ``runner.train``.

Budget. Without ``--full`` the rollout is a demonstration one: ``DEMO_OVERRIDES`` (8 envs x 256
steps, 8 minibatches) and ``--steps`` default ``DEMO_STEPS``, so heppo-ppo finishes in a few
minutes on 2 cores. ``--full`` keeps the design's rollout (heppo-ppo: the seed's 64 x 1024) and
defaults ``--steps`` to 1e6. ``--set`` overrides either.

Never clobbers: an existing non-empty --out is refused unless it is one of ours (``run.json``)
and ``--resume`` is given; then the quick stages are redone (csim builds come from the cache)
and training continues from its checkpoint. Every file is written atomically. Exit 0 when every C simulation passed, 1 when one
failed (the report names it), 2 for bad input.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path

from rlhls.designs.errors import RlhlsError

__all__ = ["add_run_arguments", "run_run", "run_pipeline", "DEMO_OVERRIDES", "DEMO_STEPS"]

DEMO_OVERRIDES = {"num_envs": 8, "num_steps": 256, "num_minibatches": 8}
DEMO_STEPS = 8192
FULL_STEPS = 1_000_000
RECORD = "run.json"


def add_run_arguments(parser) -> None:
    from rlhls.partition.cli_profile import positive_int

    parser.add_argument("design", help="design name (rlhls designs)")
    parser.add_argument("--steps", type=positive_int,
                        help=f"environment steps (default {DEMO_STEPS}; with --full {FULL_STEPS})")
    parser.add_argument("--out", help="run folder (default runs/<design>-<timestamp>)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env", help="gymnasium env id (default: the design's)")
    parser.add_argument("--backend", choices=("emu", "csim"), default="emu",
                        help="what runs the GAE kernel during training (default emu)")
    parser.add_argument("--full", action="store_true",
                        help="the design's own rollout size (heppo-ppo: 64 x 1024) instead of the demo's 8 x 256")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override a training hyperparameter (repeatable)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="ILP solver time limit in s (default 60)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def _say(quiet: bool):
    if quiet:
        return lambda msg: None
    return lambda msg: print(msg, file=sys.stderr, flush=True)


def _check_out(out: Path, resume: bool) -> None:
    if out.exists() and not out.is_dir():
        raise RlhlsError(f"--out '{out}' exists and is not a folder")
    if resume:
        if not (out / RECORD).exists():
            raise RlhlsError(f"--resume: '{out}' has no {RECORD} (not a folder written by rlhls run)")
    elif out.is_dir() and any(out.iterdir()):
        hint = "pass --resume to continue it" if (out / RECORD).exists() else "it was not written by rlhls run"
        raise RlhlsError(f"--out '{out}' is not empty ({hint}); choose another --out")


def run_pipeline(design_name: str, out, *, steps: int | None = None, seed: int = 0, env: str | None = None,
                 backend: str = "emu", full: bool = False, overrides: dict | None = None,
                 time_limit: float | None = 60.0, resume: bool = False, quiet: bool = False) -> dict:
    """Run the flow into `out`; returns the record (also written to run.json)."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import get_design
    from rlhls.flow.build import build_design
    from rlhls.partition.cli_partition import device_inputs
    from rlhls.partition.ilp import solve
    from rlhls.partition.plan import write_plan
    from rlhls.partition.profile import profile_design
    from rlhls.partition.profile_io import read_graph, write_profile

    from .ppo import PPO, resolve_hyperparams
    from .report import phase_totals, plot_csim, plot_phases, write_report
    from .runner import atomic_write_text, read_metrics, rolling_window, train

    say = _say(quiet)
    design = get_design(design_name)
    if design.algorithm != "ppo":
        raise RlhlsError(f"design '{design.name}' uses {design.algorithm.upper()}; rlhls run trains PPO designs so far")
    ov = {} if full else dict(DEMO_OVERRIDES)
    ov.update(overrides or {})
    hp = resolve_hyperparams(design, ov)  # bad --set fails before anything is written
    steps = steps or (FULL_STEPS if full else DEMO_STEPS)
    if time_limit is not None and not time_limit > 0:
        raise RlhlsError(f"--time-limit {time_limit:g} must be > 0 seconds")
    out = Path(out).resolve()  # absolute: the build's hls4ml step changes directory
    _check_out(out, resume)
    out.mkdir(parents=True, exist_ok=True)
    device = get_device(design.device)
    env_id = env or design.env_id
    rec = {"design": design.name, "seed_title": design.seed_title, "device": device.id, "batch": design.batch_size,
           "env": env_id, "experiment": hp["experiment"], "backend": backend, "seed": seed, "steps": steps,
           "full": full, "overrides": {k: str(v) for k, v in ov.items()}, "stages": [], "failures": [], "ok": True}
    if resume:
        old = json.loads((out / RECORD).read_text())
        for k in ("design", "env", "experiment", "backend", "seed", "full", "overrides"):
            if old.get(k) != rec[k]:
                raise RlhlsError(f"--resume: '{out}' was run with a different {k} ({old.get(k)!r}, now {rec[k]!r})")
    atomic_write_text(out / RECORD, json.dumps(rec, indent=1) + "\n")

    def stage(name, output, fn):
        say(f"[{len(rec['stages']) + 1}/6] {name} ...")
        t0 = time.perf_counter()
        status = fn() or "ok"
        dt = time.perf_counter() - t0
        rec["stages"].append({"stage": name, "seconds": dt, "status": status, "output": output})
        say(f"[{len(rec['stages'])}/6] {name}: {status} ({dt:.1f} s)")

    # 1. training graph
    graph = build_graph(design)

    def do_graph():
        atomic_write_text(out / "graph.csv", graph.edges_csv(carry=True))
        s = graph.summary()
        rec["graph"] = {k: s[k] for k in ("nodes", "edges", "mm_nodes", "flops")}
        return f"{s['nodes']} nodes, {s['edges']} edges"
    stage("training graph", "graph.csv", do_graph)

    # 2. profile
    rows = []

    def do_profile():
        rows.extend(profile_design(design, device, None))
        write_profile(rows, out / "profile.csv")
        return f"{len(rows)} rows"
    stage("profile", "profile.csv", do_profile)

    # 3. partition
    def do_partition():
        edges = read_graph(out / "graph.csv")
        capacity, links = device_inputs(device.id)
        cores = capacity.get(("PS", "cores"))
        plan = solve(rows, edges, capacity, links, ps_cores=int(cores) if cores else 1, time_limit=time_limit,
                     source=f"device {device.id}")
        write_plan(plan, out / "plan", rows, edges)
        units = {}
        for u in plan.assignment.values():
            units[u] = units.get(u, 0) + 1
        rec["plan"] = {"makespan_us": plan.makespan_us, "status": plan.status, "gap": plan.gap,
                       "solve_seconds": plan.solve_seconds, "units": units, "baselines": dict(plan.baselines),
                       "assignment": dict(plan.assignment)}
        return f"makespan {plan.makespan_us:.6g} us ({plan.status}); " + ", ".join(f"{u} {n}" for u, n in units.items())
    stage("partition", "plan/", do_partition)

    # 4. build of the plan's PL part + csim of every component
    csim_rows = rec["csim"] = []

    def do_build():
        b = rec["build"] = {"components": [], "aie": [], "host": [], "notes": [], "part": ""}
        try:
            from rlhls.partition.plan import load_plan
            res = build_design(design, out / "build", plan=load_plan(out / "plan" / "plan.json"), csim=True,
                               progress=lambda m: say(f"    {m}"))
        except RlhlsError as e:
            b["error"] = str(e)
            rec["failures"].append(f"build: {e}")
            return "FAILED"
        b.update(components=[c.name for c in res.components], aie=list(res.aie["nodes"]), host=list(res.host),
                 part=res.part, unmapped=dict(res.unmapped))
        b["notes"] += list(res.warnings)
        for c in res.components:
            cs = c.csim or {}
            csim_rows.append({"name": c.name, "kernel": c.kernel, "nodes": list(c.nodes),
                              "passed": cs.get("passed"), "seconds": cs.get("seconds"), "cached": cs.get("cached"),
                              "detail": cs.get("detail", "")})
            if not cs.get("passed"):
                rec["failures"].append(f"csim {c.name}: {cs.get('detail', 'not run')}")
        return f"{len(res.components)} PL component(s), csim {'pass' if res.csim_passed else 'FAIL'}"
    stage("build --csim", "build/", do_build)

    plot_csim(csim_rows, out / "csim.png", f"{design.name}: kernel C simulation")

    # 6. training
    run_dir = out / "train"

    def do_train():
        config = {"design": design.name, "algorithm": design.algorithm, "env": env_id, "seed": seed,
                  "backend": backend, "experiment": hp["experiment"], "hyperparams": hp}
        res = train(lambda: PPO(design, env_id=env_id, seed=seed, backend=backend, hyperparams=ov), config, run_dir,
                    steps=steps, resume=(run_dir / "checkpoint.pkl").exists(), progress=not quiet,
                    title=f"{design.name} on {env_id} (exp {hp['experiment']}, seed {seed})")
        metrics = read_metrics(run_dir / "metrics.csv")
        import csv
        with open(run_dir / "episodes.csv", newline="") as f:
            eps = [float(r["return"]) for r in csv.DictReader(f)]
        w = rolling_window(len(eps))
        rec["train"] = {"updates": res["updates"], "env_steps": res["env_steps"], "episodes": len(eps),
                        "final_return": sum(eps[-w:]) / w if eps else float("nan"),
                        "rollout": f"{hp['num_envs']} envs x {hp['num_steps']} steps per update",
                        "phases": phase_totals(metrics)}
        plot_phases(metrics, out / "phases.png", f"{design.name}: per-phase time")
        return f"{res['updates']} updates, {res['env_steps']} steps"
    stage("train", "train/", do_train)

    # 7. report
    rec["ok"] = not rec["failures"]

    def do_report():
        write_report(out / "report.md", rec)
        return "ok"
    stage("report", "report.md", do_report)
    write_report(out / "report.md", rec)  # again, with the report stage's own time
    atomic_write_text(out / RECORD, json.dumps(rec, indent=1, default=str) + "\n")
    return rec


def run_run(args) -> int:
    from .cli_train import _overrides

    args.num_envs = args.num_steps = args.experiment = None  # cli_train._overrides reads them
    out = args.out or f"runs/{args.design}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    t0 = time.perf_counter()
    rec = run_pipeline(args.design, out, steps=args.steps, seed=args.seed, env=args.env, backend=args.backend,
                       full=args.full, overrides=_overrides(args), time_limit=args.time_limit, resume=args.resume,
                       quiet=args.quiet)
    print(f"{rec['design']}: {'ok' if rec['ok'] else 'FAILED'} in {time.perf_counter() - t0:.0f} s -> "
          f"{Path(out) / 'report.md'}")
    for f in rec["failures"]:
        print(f"  {f}")
    return 0 if rec["ok"] else 1
