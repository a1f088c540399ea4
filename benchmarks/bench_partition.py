"""Partition benchmark: ILP solve time and gap (CBC vs HiGHS) and makespan ratios vs the baselines.

1. Random layered DAGs (default 300 nodes) x PS/PL/AIE with design points, links, 4 PS cores,
   DSP/tile capacities; each solver at a time limit (default 60 s).
2. The AP-DRL designs (if `rlhls.partition.profile.profile_design` exists): their training graphs
   profiled on their device, and DDPG-LunarCont at batch 512 and 1024 (AP-DRL Fig. 14-15).
   One row per graph: nodes, ILP variables, CBC and HiGHS seconds (whole `solve`, median and
   slowest over --orders column orders: PuLP writes columns sorted by name, and the solvers' paths
   depend on that order, so order k > 0 renames the variables by a seeded shuffle), makespan,
   gap, HEFT / ILP; the issue's target is a proven optimum in < 1 s each. The load average is
   printed with it (the machine is shared).
Random DAGs: one row per solver with status, makespan, gap, seconds and every baseline / ILP.
3. Large graphs: random DAGs of --large nodes (default 300 and 1000; 4 PS cores, the
   VEK280's capacities) at each of --large-limits seconds (default 10 and 60), side by side: ours
   (the default for graphs above ``lns.LNS_NODES`` nodes, CBC sub-solves) with its wall and CPU
   seconds (solver children included), its bound and the bounds it had before (the LP alone, the LP
   with energy rows), OR-Tools CP-SAT (``pip install rlhls[cpsat]``; one worker, HEFT's plan as its
   hint, the same limit) with its plan and proven bound, and the relaxed model with energy rows as
   a MIP given the whole limit (HiGHS, one thread: a bound source, not a plan); HEFT beside them,
   the best of the bounds and ours' gap to it. One solve at a time.

    python benchmarks/bench_partition.py [--nodes 300] [--time-limit 60] [--orders 5] [--skip-random] [--skip-designs]
                                         [--large 300,1000] [--large-limits 10,60] [--skip-large]
                                         [--skip-mip-bound]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import time

from rlhls.partition.check import check_schedule
from rlhls.partition import ilp
from rlhls.partition.heft import Problem, heft
from rlhls.partition.ilp import solve
from rlhls.partition.profile_io import ProfileRow


def random_dag(n: int, seed: int):
    rng = random.Random(seed)
    width = max(2, int(n ** 0.5))
    names = [f"n{i}" for i in range(n)]
    edges = []
    for j in range(1, n):  # each node depends on 1-3 of the previous `width` nodes
        for i in rng.sample(range(max(0, j - width), j), min(j, rng.randint(1, 3))):
            edges.append((names[i], names[j], rng.randint(256, 65536)))
    rows = []
    for v in names:
        mm = rng.random() < 0.4
        flops = rng.uniform(1e4, 1e7)
        rows.append(ProfileRow(v, "PS", flops / 1.3e3, "0", {}))
        for pf in (1, 4, 16):
            rows.append(ProfileRow(v, "PL", 2.0 + flops / (300 * 2 * pf), f"pf{pf}", {"dsp": 5 * pf, "lut": 900 * pf}))
        if mm:
            for t in (1, 4):
                rows.append(ProfileRow(v, "AIE", 8.0 + flops / (1250 * 16 * t), f"t{t}", {"aie_tiles": t}))
    capacity = {("PL", "dsp"): 1728.0, ("PL", "lut"): 230400.0, ("AIE", "aie_tiles"): 64.0, ("PS", "cores"): 4}
    links = {("PS", "PL"): (1.0, 4800.0), ("PL", "PS"): (1.0, 4800.0), ("PL", "AIE"): (0.5, 5000.0),
             ("AIE", "PL"): (0.5, 5000.0), ("PS", "AIE"): (2.0, 2000.0), ("AIE", "PS"): (2.0, 2000.0)}
    return rows, edges, capacity, links


def _row(name, solver, plan, rows, edges, cap, links, wall):
    bad = check_schedule(plan, rows, edges, cap, links, plan.ps_cores)
    ratios = "  ".join(
        f"{k} {'n/a' if v is None else f'x{v / plan.makespan_us:.2f}'}" for k, v in plan.baselines.items()
    )
    print(f"{name:<24} {solver:<6} {plan.status:<22} {plan.makespan_us:>12.2f} {plan.gap:>7.2%} "
          f"{wall:>8.2f}  {ratios}{'  CHECK FAILED: ' + bad[0] if bad else ''}", flush=True)


def _header(title):
    print(f"\n{title}")
    print(f"{'instance':<24} {'solver':<6} {'status':<22} {'makespan_us':>12} {'gap':>7} {'seconds':>8}  baseline/ILP")


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (CBC, the HiGHS children)."""
    return sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
               for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def large(sizes, limits, solver="cbc", mip_bound=True) -> None:
    """Ours (LP rounding, packed start, LNS; bound: LP + energy rows, then that model as a MIP) and
    CP-SAT side by side on the same instances and limits, with HEFT and the bounds ours had before:
    the LP alone and the LP with energy rows (both at ours' makespan, not timed). ``mip_bound``:
    also the same MIP given the whole limit (HiGHS, one thread) as a bound source of its own."""
    from rlhls.partition import cpsat

    print(f"\nlarge random DAGs (seed 0), ours = {solver} sub-solves, CP-SAT = 1 worker from HEFT's plan; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'nodes':>5} {'limit s':>7} {'HEFT':>10} | {'ours':>10} {'gap':>7} {'HEFT/plan':>9} {'s':>5} {'cpu s':>5} "
          f"{'bound':>10} {'LP+energy':>10} {'LP bound':>10} | {'CP-SAT':>10} {'gap':>7} {'s':>5} {'bound':>10} | "
          f"{'MIP bound':>10} {'s':>5} | {'best bound':>10} {'ours gap':>8}  check")
    for n in sizes:
        rows, edges, cap, links = random_dag(n, 0)
        P = Problem(rows, edges, cap, links, None)
        h = heft(P)
        for limit in limits:
            bad = []
            t, c = time.perf_counter(), _cpu()
            plan = solve(rows, edges, cap, links, ps_cores=None, solver=solver, time_limit=limit)
            wall, cpu = time.perf_counter() - t, _cpu() - c
            bad += check_schedule(plan, rows, edges, cap, links, plan.ps_cores)
            # the bounds before the MIP at the same horizon (not timed)
            H = plan.makespan_us * (1 + 1e-9) + 1e-9
            lp = ilp._lp_relaxation(P, H, time.perf_counter() + 600)
            lp_bound = max(lp[0], ilp._lower_bound(P)) if lp else float("nan")
            lpe = ilp._lp_relaxation(P, H, time.perf_counter() + 600, energy=True)
            lpe_bound = max(lpe[0], ilp._lower_bound(P)) if lpe else float("nan")
            bounds = [plan.bound]
            cp = "not installed"
            if cpsat.available():
                t = time.perf_counter()
                sched, cb, _ = cpsat.solve_cpsat(P, h.makespan * (1 + 1e-9) + 1e-9, limit, hint=h)
                cw = time.perf_counter() - t
                bounds.append(cb)
                if sched is None:
                    cp = f"{'no plan':>10} {'':>7} {cw:>5.1f} {cb:>10.1f}"
                else:
                    sp = {"assignment": {v: o.unit for v, o in sched.option.items()},
                          "point": {v: o.point for v, o in sched.option.items()},
                          "start_us": sched.start, "makespan_us": sched.makespan}
                    bad += check_schedule(sp, rows, edges, cap, links, P.ps_cores)
                    cgap = (sched.makespan - cb) / sched.makespan
                    cp = f"{sched.makespan:>10.1f} {cgap:>7.2%} {cw:>5.1f} {cb:>10.1f}"
            mb = f"{'-':>10} {'':>5}"
            if mip_bound:
                t = time.perf_counter()
                m = ilp._lp_relaxation(P, H, t + limit, energy=True, mip=True)
                if m is not None:
                    bounds.append(m[0])
                    mb = f"{m[0]:>10.1f} {time.perf_counter() - t:>5.1f}"
            best = max(b for b in bounds if b is not None)
            print(f"{n:>5} {limit:>7g} {h.makespan:>10.1f} | {plan.makespan_us:>10.1f} {plan.gap:>7.2%} "
                  f"{'x' + format(h.makespan / plan.makespan_us, '.3f'):>9} {wall:>5.1f} {cpu:>5.1f} {plan.bound:>10.1f} "
                  f"{lpe_bound:>10.1f} {lp_bound:>10.1f} | {cp} | {mb} | {best:>10.1f} "
                  f"{(plan.makespan_us - best) / plan.makespan_us:>8.2%}  {'CHECK FAILED: ' + bad[0] if bad else 'ok'}",
                  flush=True)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=300)
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--orders", type=int, default=5, help="column orders per design and solver (median, max)")
    ap.add_argument("--skip-random", action="store_true")
    ap.add_argument("--skip-designs", action="store_true")
    ap.add_argument("--large", default="300,1000", help="node counts of the large-graph comparison")
    ap.add_argument("--large-limits", default="10,60", help="time limits (s) of the large-graph comparison")
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--skip-mip-bound", action="store_true",
                    help="large graphs: without the bound of the relaxed MIP given the whole limit")
    args = ap.parse_args()
    if not args.skip_large:
        large([int(n) for n in args.large.split(",")], [float(t) for t in args.large_limits.split(",")],
              mip_bound=not args.skip_mip_bound)
    if not args.skip_random:
        _header(f"random DAGs, {args.nodes} nodes, time limit {args.time_limit:g} s")
        for seed in range(args.instances):
            rows, edges, cap, links = random_dag(args.nodes, seed)
            for solver in ("cbc", "highs"):
                t = time.perf_counter()
                plan = solve(rows, edges, cap, links, ps_cores=None, solver=solver, time_limit=args.time_limit)
                _row(f"random{args.nodes}-s{seed}", solver, plan, rows, edges, cap, links, time.perf_counter() - t)
    if args.skip_designs:
        return
    try:
        from rlhls.partition.profile import device_capacity, device_links, profile_design
    except ImportError:
        print("\nAP-DRL designs: rlhls.partition.profile.profile_design not available; skipped")
        return
    from rlhls.designs.graph import build_graph
    from rlhls.designs.registry import design_names, get_design

    print(f"\nAP-DRL designs (their device), time limit {args.time_limit:g} s, {args.orders} column orders; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'design':<29} {'nodes':>5} {'vars':>5} {'CBC s med/max':>13} {'HiGHS s med/max':>15} {'makespan_us':>12} "
          f"{'gap':>7} {'HEFT/ILP':>8}  status")
    build = ilp._build
    order = [0]

    def shuffled_build(*a, **k):
        prob, var = build(*a, **k)
        if order[0]:
            rng = random.Random(order[0])
            for v in prob.variables():
                v.name = f"c{rng.randrange(10**6):06d}_{v.name}"
        return prob, var

    ilp._build = shuffled_build
    # every AP-DRL design at its batch, and DDPG-LunarCont's batch sweep of Fig. 14-15
    cases = [(d, None) for d in design_names() if d.startswith("apdrl")]
    cases += [("apdrl-ddpg-lunarcont", b) for b in (512, 1024)]
    for name, batch in cases:
        design = get_design(name)
        rows = profile_design(design, batch=batch)
        g = build_graph(design, batch)
        edges = g.all_edges()  # DAG edges + loop-carried weight edges
        cap, links = device_capacity(design.device), device_links(design.device)
        n = len({r.node for r in rows})
        # size of the model solve() solves first: HEFT's horizon, no PS pair rows
        P = Problem(rows, edges, cap, links, None)
        nvars = len(build(P, heft(P).makespan * (1 + 1e-9) + 1e-9, ps_pairs=False)[0].variables())
        secs, plans, notes, ref = {}, {}, [], None
        for k in range(args.orders):
            order[0] = k
            for solver in ("cbc", "highs"):
                t = time.perf_counter()
                plans[solver] = p = solve(rows, edges, cap, links, ps_cores=None, solver=solver,
                                          time_limit=args.time_limit)
                secs.setdefault(solver, []).append(time.perf_counter() - t)
                bad = check_schedule(p, rows, edges, cap, links, p.ps_cores)
                if bad:
                    notes.append(f"{solver} order {k} CHECK FAILED: {bad[0]}")
                if p.status != "Optimal":
                    notes.append(f"{solver} order {k} {p.status}")
                ref = p.makespan_us if ref is None else ref
                if abs(p.makespan_us - ref) > 1e-6 * max(1.0, ref):
                    notes.append(f"{solver} order {k} disagrees: {p.makespan_us:.4f} vs {ref:.4f}")
        order[0] = 0
        plan = plans["cbc"]
        heft_ms = plan.baselines.get("HEFT")
        ratio = "n/a" if heft_ms is None else f"x{heft_ms / plan.makespan_us:.2f}"
        label = name if batch is None else f"{name} b{batch}"
        med_max = {s: f"{statistics.median(t):.2f}/{max(t):.2f}" for s, t in secs.items()}
        print(f"{label:<29} {n:>5} {nvars:>5} {med_max['cbc']:>13} {med_max['highs']:>15} {plan.makespan_us:>12.2f} "
              f"{max(p.gap for p in plans.values()):>7.2%} {ratio:>8}  {'; '.join(notes) or 'Optimal'}", flush=True)


if __name__ == "__main__":
    main()
