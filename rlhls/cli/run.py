"""The whole flow: ``run`` (``rlhls.Flow`` from the command line)."""

from __future__ import annotations

import time

from .common import add_design, add_log_flags, bound, positive_int, print_json, seed_int

# the Flow's stages (rlhls.api.STAGES), named here without importing the API at start-up
STAGES = ("graph", "profile", "partition", "build", "train", "perf", "report")


def register(sub) -> None:
    s = sub.add_parser("run", help="the whole flow: graph, profile, partition, build --csim, train, report",
                       description="The whole flow of one design (any registered algorithm): training graph -> "
                                   "profile -> ILP partition -> build with C simulation of every component -> "
                                   "training -> report.md and report.html (self-contained, figures embedded), in "
                                   "one run folder. Without --full a demonstration budget that finishes in minutes. "
                                   "Exit 0 when every check passed, 1 when one failed (the report names it), 2 for "
                                   "bad input.")
    add_design(s)
    s.add_argument("--steps", type=positive_int,
                   help="environment steps (default: the design's demonstration budget; with --full its "
                        "total_timesteps, else 1e6)")
    s.add_argument("--out", help="run folder (default runs/<design>-<timestamp>)")
    s.add_argument("--seed", type=seed_int, default=0)
    s.add_argument("--env", help="gymnasium env id (default: the design's)")
    s.add_argument("--backend", choices=("emu", "csim"), default="emu",
                   help="what runs the plan's PL and AIE nodes in training (default emu)")
    s.add_argument("--full", action="store_true",
                   help="the design's own hyperparameters instead of the demonstration's")
    s.add_argument("--until", choices=STAGES,
                   default="report", help="stop after this stage (default: every stage; build: what rlhls build "
                                          "makes, over the same bound run)")
    s.add_argument("--time-limit", type=float, default=60.0, help="ILP solver time limit in s (default 60)")
    s.add_argument("--reports", metavar="BUILD_DIR",
                   help="a build folder with Vitis HLS reports (csynth.xml, cosim.rpt) or aiesimulator outputs: "
                        "the nodes they cover are profiled from them, the rest from the models (rlhls profile "
                        "--reports)")
    s.add_argument("--resume", action="store_true", help="continue the run in --out")
    add_log_flags(s, quiet="no progress output", verbose="show what hls4ml, the ALE and the solvers print")
    s.add_argument("--json", action="store_true", help="print the run's record as JSON at the end")
    s.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from rlhls.api import Flow
    t0 = time.perf_counter()
    flow = Flow(bound(args, demo=not args.full), args.out, seed=args.seed, backend=args.backend,
                resume=args.resume, verbose=args.verbose, quiet=args.quiet or args.json, time_limit=args.time_limit,
                reports=args.reports)
    try:
        rec = flow.run(steps=args.steps, until=args.until)
    finally:
        flow.close()  # the folder is free when the command returns (main() may be called again)
    if args.json:
        print_json(rec)
    else:
        where = (f"{flow.out / 'report.md'} (and report.html)" if args.until == "report"
                 else f"{flow.out} (stopped after {args.until})")
        print(f"{rec['design']}: {'ok' if rec['ok'] else 'FAILED'} in {time.perf_counter() - t0:.0f} s -> {where}")
        for f in rec["failures"]:
            print(f"  {f}")
    return 0 if rec["ok"] else 1
