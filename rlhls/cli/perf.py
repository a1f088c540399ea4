"""``rlhls perf``: the whole training run's modeled time on the device and its speed-ups
(``rlhls.host.perf``)."""

from __future__ import annotations

from .common import add_design, add_log_flags, bound, positive_float, positive_int, print_json, say, seed_int


def register(sub) -> None:
    s = sub.add_parser("perf", help="model a whole training run on the device: time per phase, speed-ups",
                       description="Model one whole training run of a design on its device: the host loop's "
                                   "phases measured here and scaled by the PS factor, the training graph on the "
                                   "plan's units (profile rows, device links); beside this machine's measured "
                                   "time and the baselines all-PS, PL-only (FIXAR-like) and AIE-only "
                                   "(CHARM-like). Writes perf.json, perf.txt and perf.png into --out.")
    add_design(s)
    s.add_argument("--plan", metavar="PLAN.json", help="a plan of this design (rlhls partition); default: solved now")
    s.add_argument("--device", help="device (rlhls devices; default: the design's)")
    s.add_argument("--steps", type=positive_int,
                   help="environment steps of the run (default: the design's total_timesteps, else 1e6)")
    s.add_argument("--ps-factor", type=positive_float, metavar="F",
                   help="how many times slower the device's PS core is than this machine's (default: "
                        "calibrated by an fp32 GEMM timed here against the PS core's peak)")
    s.add_argument("--run", metavar="RUN_FOLDER",
                   help="take the host phases from this run's metrics.csv (rlhls train / rlhls run) instead "
                        "of a short run here; a --backend board run's kernel times too (board_timings.csv)")
    s.add_argument("--time-limit", type=positive_float, default=60.0,
                   help="ILP solver time limit in s when the plan is solved here (default 60)")
    s.add_argument("--out", help="output folder (default runs/<design>-perf)")
    s.add_argument("--force", action="store_true", help="write into a non-empty folder rlhls did not write")
    s.add_argument("--seed", type=seed_int, default=0, help="seed of the short measuring run")
    add_log_flags(s, quiet="no progress output")
    s.add_argument("--json", action="store_true", help="print the model as JSON")
    s.set_defaults(func=cmd_perf)


def cmd_perf(args) -> int:
    from pathlib import Path

    from rlhls.core.errors import RlhlsError
    from rlhls.core.fileio import check_out
    from rlhls.designs.devices import get_device
    from rlhls.host.perf import PERF_FILES, bind_run, host_times, model_perf, read_run, write_perf
    from rlhls.partition.plan import load_plan

    log = say(args.quiet or args.json)
    if args.run and (args.sets or args.config):
        raise RlhlsError("--run models the run as it was bound: --set and --config do not apply to it")
    run = bound(args)  # the sizes rlhls build / train / run bind
    design = run.design
    device = get_device(args.device or design.device)
    out = Path(args.out or f"runs/{design.name}-perf")
    check_out(out, command="perf", force=args.force,
              ours=lambda d: all(p.name in PERF_FILES for p in d.iterdir()))
    plan = load_plan(args.plan) if args.plan else None
    host, rows = None, None
    if args.run:
        metrics, hp, design = read_run(args.run, run.given)
        host = host_times(metrics, design.algorithm, hp, f"run folder {args.run}")
        # the graph at the run's sizes (batch, rollout), as the run's phases were timed
        design = bind_run(design, hp)
        from rlhls.host.board import is_board_run, run_measured_rows

        if is_board_run(args.run):  # the board's kernel times in place of the model's rows they measured
            from rlhls.partition.profile import profile_design

            rows, _ = run_measured_rows(args.run, profile_design(design, device), design.name, given=run.given)
    perf = model_perf(design, device=device, plan=plan, rows=rows, host=host, factor=args.ps_factor, steps=args.steps,
                      seed=args.seed, say=log, time_limit=args.time_limit, band=True)
    write_perf(perf, out, force=args.force, bound=None if args.run else run.record())
    if args.json:
        print_json(perf.to_json())
    else:
        print(perf.text())
        print(f"-> {out}/perf.png, {out}/tornado.png")
    return 0
