"""Where each piece runs: ``graph``, ``profile``, ``partition``."""

from __future__ import annotations

from pathlib import Path

from rlhls.core.errors import RlhlsError

from .common import MAX_REPEATS, add_design, add_hyperparams, at_most, bound, positive_int, print_json, say


def register(sub) -> None:
    s = sub.add_parser("graph", help="print the training graph of a design",
                       description="Print the DAG of one training step: per layer forward, target forward, backward "
                                   "and update nodes, plus loss/GAE nodes, with FLOPs and bytes.")
    add_design(s)
    s.add_argument("--batch", type=positive_int, default=None,
                   help="batch size (default: the run's, as its hyperparameters bind it)")
    s.add_argument("--json", action="store_true",
                   help='print {"nodes": [...], "edges": [...]}; loop-carried edges have "carry": true')
    s.add_argument("--csv", metavar="FILE",
                   help="write the edges as src,dst,bytes,carry (the partitioner's graph CSV)")
    s.add_argument("--force", action="store_true", help="replace a --csv file that rlhls did not write")
    s.set_defaults(func=cmd_graph)

    s = sub.add_parser("profile", help="profile every training-graph node on every unit",
                       description="Cost every training-graph node on every unit it may run on (the kernel that "
                                   "implements it, else the generic models) and write the profile CSV. --reports "
                                   "replaces the rows of the nodes a build's components implement with their Vitis "
                                   "reports; --compare prints a model profile against a calibrated one.")
    add_design(s, required=False)
    s.add_argument("--device", default=None, help="catalogue device (default: the design's)")
    s.add_argument("--batch", type=positive_int, default=None,
                   help="batch size (default: the run's, as its hyperparameters bind it)")
    s.add_argument("--reports", metavar="BUILD_DIR",
                   help="a folder of `rlhls build` with Vitis reports (csynth.xml, <top>_cosim.rpt) or aiesimulator "
                        "outputs: the nodes of each reported component take the report's latency and resources")
    s.add_argument("--measured", metavar="RUN",
                   help="a run of `rlhls train --backend board`: the PL nodes of its timed kernels take the board's "
                        "measured time per call (source 'measured-board')")
    s.add_argument("--measure-ps", action="store_true",
                   help="time each node's PS implementation (the emulator's PS code in the design's PS format) on "
                        "this machine; its PS row takes the median (source 'measured')")
    s.add_argument("--repeats", type=at_most(MAX_REPEATS), default=15,
                   help=f"timed calls per node with --measure-ps (default 15, at most {MAX_REPEATS})")
    s.add_argument("--compare", nargs=2, metavar=("MODEL.csv", "CALIBRATED.csv"),
                   help="print each calibrated row against the model's row of the same node, unit and point (else "
                        "the point nearest in parallelism, pf), with the error in %%; --out: the figure (PNG)")
    s.add_argument("--out", help="profile CSV to write (with --compare: the figure, PNG)")
    s.add_argument("--force", action="store_true", help="replace an --out file that rlhls did not write")
    s.add_argument("--json", action="store_true", help="print the rows as JSON")
    s.set_defaults(func=cmd_profile)

    s = sub.add_parser("report-read", help="read one Vitis HLS synthesis or co-simulation report",
                       description="Read a Vitis/Vivado HLS csynth.xml (classic or unified layout, 2018.3-2025.2) "
                                   "or a <top>_cosim.rpt and print what a profile takes from it: top, part, clocks, "
                                   "latency, interval and resources.")
    s.add_argument("file", metavar="FILE", help="csynth.xml, <top>_csynth.xml, <top>_cosim.rpt or an aiesimulator "
                                                "output (aiesimulator_output/data/<plio>.txt)")
    s.add_argument("--json", action="store_true", help="print JSON (null: 'undef' or an element the report lacks)")
    s.set_defaults(func=cmd_report_read)

    s = sub.add_parser("partition", help="solve the PS/PL/AIE partition (ILP) of a profile or a design",
                       description="Solve the PS/PL/AIE partition (ILP) of a profile (PROFILE.csv --graph GRAPH.csv), "
                                   "or of a design bound as every command binds it (DESIGN, with --set and --config: "
                                   "its "
                                   "graph and profile made here, as rlhls run makes them); write plan.json, plan.csv "
                                   "and gantt.png into --out.")
    s.add_argument("profile", metavar="PROFILE.csv|DESIGN",
                   help="profile CSV: node,unit,latency_us[,point][,lut,ff,dsp,bram36,uram,aie_tiles]; or a design "
                        "(rlhls designs) or design file ./FILE.py[:NAME]")
    s.add_argument("--graph", help="graph CSV: src,dst,bytes[,carry] (with a profile CSV)")
    add_hyperparams(s)
    src = s.add_mutually_exclusive_group()
    src.add_argument("--device", help="take capacities and links from this device of the catalogue")
    src.add_argument("--capacity", help="capacity CSV: unit,resource,capacity (PS cores as resource 'cores')")
    s.add_argument("--links", help="links CSV: src_unit,dst_unit,latency_us,bytes_per_us (overrides the device's)")
    s.add_argument("--solver", choices=("cbc", "highs"), default="cbc", help="MILP solver (default cbc)")
    s.add_argument("--time-limit", type=float, default=None, help="solver time limit in seconds")
    s.add_argument("--out", default="plan", help="output folder (default ./plan)")
    s.add_argument("--force", action="store_true",
                   help="write into a non-empty --out that rlhls did not write (no file of yours is deleted)")
    s.add_argument("--json", action="store_true", help="print the plan as JSON")
    s.set_defaults(func=cmd_partition)


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} "


def cmd_graph(args) -> int:
    from rlhls.core.fileio import atomic_write_text, check_file_out
    from rlhls.designs.graph import build_graph

    design = bound(args).design  # the sizes rlhls build / train / run bind
    if args.csv:
        check_file_out(args.csv, header="src,dst,bytes", force=args.force, what="--csv")
    g = build_graph(design, args.batch)
    if args.csv:
        atomic_write_text(args.csv, g.edges_csv(carry=True))
    if args.json:
        data = g.to_json()
        print_json({"nodes": data["nodes"], "edges": data["edges"]})
        return 0
    s = g.summary()
    print(f"training graph of {g.design} at batch {g.batch}: {s['nodes']} nodes, {s['edges']} edges, "
          f"{s['carry_edges']} loop-carried edges (weights to the next step)")
    print(f"{'node':<34} {'kind':<10} {'FLOPs':>12} {'bytes':>12}  mm")
    for n in g.nodes:
        mm = "yes" if n.mm else ""
        print(f"{n.name:<34} {n.kind:<10} {_si(n.flops) + 'FLOP':>12} {_si(n.bytes) + 'B':>12}  {mm}")
    print(f"matrix-multiply nodes: {s['mm_nodes']}, {_si(s['mm_flops'])}FLOPs in all "
          f"(smallest {_si(s['min_mm_flops'])}FLOPs, largest {_si(s['max_mm_flops'])}FLOPs); "
          f"all nodes {_si(s['flops'])}FLOPs")
    if args.csv:
        print(f"edges written to {args.csv}")
    return 0


def cmd_profile(args) -> int:
    from rlhls.core.fileio import check_file_out
    from rlhls.designs.devices import get_device
    from rlhls.designs.graph import build_graph
    from rlhls.partition.profile import profile_design

    if args.compare:
        return cmd_compare(args)
    if not args.design:
        raise RlhlsError("rlhls profile: a DESIGN is required (or --compare MODEL.csv CALIBRATED.csv)")
    if not args.out:
        raise RlhlsError("rlhls profile: --out profile.csv is required")
    design = bound(args).design  # the sizes rlhls build / train / run bind
    device = get_device(args.device if args.device else design.device)
    out = Path(args.out)
    if not out.absolute().parent.is_dir():
        raise RlhlsError(f"--out '{out}': folder '{out.parent}' does not exist")
    check_file_out(out, header="node,unit,latency_us", force=args.force)
    graph = build_graph(design, args.batch)
    rows = profile_design(design, device, graph=graph)
    notes = []
    if args.reports:
        from rlhls.flow.project import build_manifest
        from rlhls.partition.calibrate import calibrate

        build, manifest = build_manifest(args.reports)
        rows[:], notes = calibrate(rows, build, manifest, batch=graph.batch, graph=graph)
    if args.measured:
        from rlhls.host.board import run_measured_rows

        rows[:], more = run_measured_rows(args.measured, rows, design.name, given=bound(args).given)
        notes += more
    timings: dict = {}  # node -> its measured Timing
    if args.measure_ps:
        from rlhls.host.measure_ps import measure_ps, measured_rows

        timings, skipped = measure_ps(design, graph, repeats=args.repeats,
                                      progress=None if args.json else say())
        rows[:] = measured_rows(rows, timings)
        if skipped:
            notes.append(f"PS not timed (the algorithm's own code, on the model): {', '.join(skipped)}")
    rows.write_csv(out)
    if args.json:
        print_json([{"node": r.node, "unit": r.unit, "latency_us": r.latency_us, "point": r.point,
                     "resources": dict(r.resources), "cycles": r.cycles, "flops": r.flops, "source": r.source,
                     "provenance": r.provenance if r.source == "model" else None,
                     **({"spread": timings[r.node].to_json()} if r.source == "measured" else {})}
                    for r in rows])
    else:
        nodes = len({r.node for r in rows})
        units = sorted({r.unit for r in rows})
        src: dict[str, int] = {}
        for r in rows:
            src[r.source] = src.get(r.source, 0) + 1
        print(f"{design.name} on {device.id}: {len(rows)} rows for {nodes} nodes on {', '.join(units)} "
              f"({', '.join(f'{k} {v}' for k, v in src.items())}) -> {out}")
        if timings:
            print(f"  PS measured on this machine ({args.repeats} calls each): node, median, min-max, IQR (us)")
            for node, t in timings.items():
                print(f"    {node:<30} {t.median_us:>10.2f}  {t.min_us:.2f}-{t.max_us:.2f}  {t.iqr_us:.2f}")
        for n in notes:
            print(f"  note: {n}")
    return 0


def cmd_compare(args) -> int:
    import io

    from rlhls.core.fileio import PNG_METADATA, atomic_write_bytes, check_file_out, image_ours
    from rlhls.partition.calibrate import compare, compare_figure
    from rlhls.partition.profile_io import read_profile

    if args.design or args.reports or args.sets or args.config:
        raise RlhlsError("rlhls profile: --compare takes two profile CSVs, no DESIGN, --set, --config or --reports")
    if args.measured:
        raise RlhlsError("rlhls profile: --compare takes two profile CSVs, not --measured")
    fig_out = Path(args.out) if args.out else None
    if fig_out is not None:
        if fig_out.suffix.lower() != ".png":
            raise RlhlsError(f"--out '{fig_out}': with --compare, the figure's file ends in .png")
        if not fig_out.absolute().parent.is_dir():
            raise RlhlsError(f"--out '{fig_out}': folder '{fig_out.parent}' does not exist")
        if fig_out.is_dir():
            raise RlhlsError(f"--out '{fig_out}' is a folder; expected a .png file path")
        check_file_out(fig_out, ours=image_ours, force=args.force)  # a PNG of rlhls' own (its mark) is replaced
    model, cal = (read_profile(p) for p in args.compare)
    rows = compare(model, cal)
    if not rows:
        raise RlhlsError(f"{args.compare[1]}: every row's source is 'model'; nothing to compare (write it with "
                         "`rlhls profile DESIGN --reports BUILD_DIR`)")
    if fig_out is not None:
        buf = io.BytesIO()
        compare_figure(rows).savefig(buf, format="png", dpi=110, metadata=PNG_METADATA)
        atomic_write_bytes(fig_out, buf.getvalue())
    if args.json:
        print_json(rows)
        return 0

    def pct(x):
        return "-" if x is None else f"{x:+.1f}%"

    print(f"{'node':<28} {'unit':<4} {'source':<8} {'point':<14} {'model us':>10} {'report us':>10} {'error':>8}"
          f" {'lut err':>8} {'ff err':>8} {'dsp err':>8} {'bram36 err':>10}")
    for r in rows:
        pts = r["point"] if r["model_point"] in (None, r["point"]) else f"{r['model_point']}~{r['point']}"
        ml = "-" if r["model_latency_us"] is None else f"{r['model_latency_us']:.4g}"
        print(f"{r['node']:<28} {r['unit']:<4} {r['source']:<8} {pts:<14} {ml:>10} {r['latency_us']:>10.4g} "
              f"{pct(r['error_pct']):>8} {pct(r.get('lut_error_pct')):>8} {pct(r.get('ff_error_pct')):>8} "
              f"{pct(r.get('dsp_error_pct')):>8} {pct(r.get('bram36_error_pct')):>10}")
    errs = [abs(r["error_pct"]) for r in rows if r["error_pct"] is not None]
    if errs:
        print(f"{len(rows)} rows; latency error: mean |e| {sum(errs) / len(errs):.1f}%, max {max(errs):.1f}%"
              + (f"; figure {fig_out}" if fig_out else ""))
    return 0


def cmd_report_read(args) -> int:
    from rlhls.partition.reports import REPORT_RESOURCES, read_aiesim_output, read_cosim, read_csynth

    path = Path(args.file)
    if path.suffix == ".txt":
        d = read_aiesim_output(path).to_json()
    else:
        d = (read_cosim(path) if path.name.endswith(".rpt") else read_csynth(path)).to_json()
    if args.json:
        print_json(d)
        return 0
    if path.suffix == ".txt":
        rate = "-" if d["words_per_us"] is None else f"{d['words_per_us']:.4g} words/us"
        print(f"{d['plio']}: aiesimulator output, {d['words']} words in {d['stamps']} stamped bursts")
        print(f"  time      first {d['first_ns']:g} ns  last {d['last_ns']:g} ns  throughput {rate}")
        return 0

    def v(x):
        return "undef" if x is None else f"{x:g}" if isinstance(x, float) else str(x)

    if path.name.endswith(".rpt"):
        print(f"{d['top']}: co-simulation ({d['rtl']}) {d['status']}")
        print(f"  latency   min {v(d['latency_min_cycles'])}  avg {v(d['latency_avg_cycles'])}  "
              f"max {v(d['latency_max_cycles'])} cycles")
        print(f"  interval  min {v(d['interval_min'])}  max {v(d['interval_max'])} cycles")
        return 0
    print(f"{d['top']}: {d['tool']} {d['version'] or '?'} ({d['layout']} layout) for {d['part']}")
    print(f"  clock     target {v(d['target_clock_ns'])} ns  estimated {v(d['estimated_clock_ns'])} ns")
    print(f"  latency   best {v(d['latency_best_cycles'])}  worst {v(d['latency_worst_cycles'])} cycles")
    print(f"  interval  min {v(d['interval_min'])}  max {v(d['interval_max'])} cycles")
    print("  resources " + "  ".join(f"{k} {'-' if d[k] is None else d[k]}" for k in REPORT_RESOURCES))
    return 0


def cmd_partition(args) -> int:
    from rlhls.core.fileio import check_out
    from rlhls.partition.design_plan import device_inputs
    from rlhls.partition.ilp import solve
    from rlhls.partition.plan import plan_folder, write_plan
    from rlhls.partition.profile_io import check_inputs, read_capacity, read_graph, read_links, read_profile

    if args.time_limit is not None and not args.time_limit > 0:
        raise RlhlsError(f"--time-limit {args.time_limit:g} must be > 0 seconds")
    if not args.graph and not Path(args.profile).suffix.lower() == ".csv":  # a design, bound as every command does
        return _partition_design(args)
    if not args.graph or not (args.device or args.capacity):
        raise RlhlsError("rlhls partition: a profile CSV needs --graph GRAPH.csv and --device DEV or "
                         "--capacity CAP.csv")
    if args.sets or args.config:
        raise RlhlsError("rlhls partition: --set and --config bind a DESIGN; a profile CSV is costed already")
    check_out(Path(args.out), command="partition", force=args.force, ours=plan_folder)  # before the solve
    rows = read_profile(args.profile)
    edges = read_graph(args.graph)
    check_inputs(rows, edges, profile_name=str(args.profile), graph_name=str(args.graph))
    if args.device:
        capacity, links = device_inputs(args.device)
        source = f"device {args.device}"
    else:
        capacity, links = read_capacity(args.capacity), {}
        source = str(args.capacity)
    if args.links:
        links = read_links(args.links)
    cores = capacity.get(("PS", "cores"))
    plan = solve(rows, edges, capacity, links, ps_cores=int(cores) if cores else 1, solver=args.solver,
                 time_limit=args.time_limit, source=source)
    used = plan.record_sources(rows)
    out = write_plan(plan, Path(args.out), edges=edges, force=args.force)
    return _print_plan(args, plan, used, out)


def _partition_design(args) -> int:
    """rlhls partition DESIGN: the design's graph and profile made here, then the ILP (rlhls run's partition)."""
    from rlhls.core.fileio import check_out
    from rlhls.designs.devices import get_device
    from rlhls.designs.graph import build_graph
    from rlhls.partition.design_plan import partition_design
    from rlhls.partition.plan import plan_folder, write_plan
    from rlhls.partition.profile import profile_design

    if args.capacity or args.links:
        raise RlhlsError("rlhls partition DESIGN: --capacity and --links go with a profile CSV; a design takes its "
                         "device's (--device)")
    args.design = args.profile
    run = bound(args)
    device = get_device(args.device or run.design.device)
    check_out(Path(args.out), command="partition", force=args.force, ours=plan_folder)  # before the solve
    graph = build_graph(run.design)
    rows = profile_design(run.design, device, graph=graph)
    plan = partition_design(run.design, device, graph=graph, rows=rows, solver=args.solver,
                            time_limit=args.time_limit)
    used = plan.record_sources(rows)
    out = write_plan(plan, Path(args.out), edges=graph.all_edges(), force=args.force, bound=run.record())
    return _print_plan(args, plan, used, out)


def _print_plan(args, plan, used, out) -> int:
    if args.json:
        print_json(plan.to_json())
        return 0
    print(f"makespan {plan.makespan_us:.6g} us  status {plan.status}  gap {plan.gap:.2%}  "
          f"solver {plan.solver} {plan.solve_seconds:.2f} s  PS cores {plan.ps_cores}")
    print("  profile rows used: " + ", ".join(f"{k} {v}" for k, v in sorted(used.items())))
    for unit, u in plan.utilisation.items():
        res = "  ".join(f"{k} {v:.1%}" for k, v in u.items() if k not in ("busy", "nodes"))
        print(f"  {unit:<4} {u['nodes']:>3} nodes  busy {u['busy']:.1%}  {res}".rstrip())
    for name, v in plan.baselines.items():
        ratio = "" if v is None or plan.makespan_us <= 0 else f"  (x{v / plan.makespan_us:.2f})"
        print(f"  baseline {name:<8} {'n/a' if v is None else f'{v:.6g} us'}{ratio}")
    print(f"wrote {out / 'plan.json'}, {out / 'plan.csv'}, {out / 'gantt.png'}")
    return 0
