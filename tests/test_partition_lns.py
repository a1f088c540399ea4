"""Large graphs: the LNS around an incumbent (partition/lns.py), the LP rounding start
(partition/relax.py) and `solve`'s choice between the whole model and that path."""

from __future__ import annotations

import random
import time

import pytest

from rlhls.partition import ilp, lns
from rlhls.partition.check import check_schedule
from rlhls.partition.heft import Problem, heft, semi_active
from rlhls.partition.ilp import solve
from rlhls.partition.profile_io import ProfileRow
from rlhls.partition.relax import list_schedule, round_options
from procs_util import cpu_seconds


def layered_dag(n: int, seed: int, ps_cores: int = 2):
    """A random layered DAG like benchmarks/bench_partition.py's, scaled down: PS, three PL
    points, AIE for some nodes, links, capacities that bind."""
    rng = random.Random(seed)
    width = max(2, int(n ** 0.5))
    names = [f"n{i}" for i in range(n)]
    edges = []
    for j in range(1, n):
        for i in rng.sample(range(max(0, j - width), j), min(j, rng.randint(1, 3))):
            edges.append((names[i], names[j], rng.randint(256, 65536)))
    rows = []
    for v in names:
        flops = rng.uniform(1e4, 1e7)
        rows.append(ProfileRow(v, "PS", flops / 1.3e3, "0", {}))
        for pf in (1, 4, 16):
            rows.append(ProfileRow(v, "PL", 2.0 + flops / (600 * pf), f"pf{pf}", {"lut": 900 * pf}))
        if rng.random() < 0.4:
            for t in (1, 4):
                rows.append(ProfileRow(v, "AIE", 8.0 + flops / (20000 * t), f"t{t}", {"aie_tiles": t}))
    capacity = {("PL", "lut"): 900.0 * n // 3, ("AIE", "aie_tiles"): float(max(4, n // 8))}
    links = {("PS", "PL"): (1.0, 4800.0), ("PL", "PS"): (1.0, 4800.0), ("PL", "AIE"): (0.5, 5000.0),
             ("AIE", "PL"): (0.5, 5000.0), ("PS", "AIE"): (2.0, 2000.0), ("AIE", "PS"): (2.0, 2000.0)}
    return rows, edges, capacity, links, ps_cores


def as_plan(s):
    return {"assignment": {v: o.unit for v, o in s.option.items()}, "point": {v: o.point for v, o in s.option.items()},
            "start_us": s.start, "makespan_us": s.makespan}


def cbc(end):
    return ilp._solver("cbc", end)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lns_improves_a_poor_start_and_keeps_it_valid(seed):
    rows, edges, cap, links, C = layered_dag(40, seed)
    P = Problem(rows, edges, cap, links, C)
    start = heft(P, units=("PS",))  # valid for the whole problem, and far from good
    log = []
    out = lns.improve(P, start, time.perf_counter() + 60, cbc, seed=seed, max_iters=8, log=log)
    assert check_schedule(as_plan(out), rows, edges, cap, links, C) == []
    assert out.makespan < start.makespan * 0.9
    # the log is the sequence of kept makespans, each below the one before
    assert [m for _, m in log] == sorted((m for _, m in log), reverse=True) and log[-1][1] == out.makespan


def test_lns_is_never_worse_than_its_start_and_repeats_for_a_seed():
    rows, edges, cap, links, C = layered_dag(40, 5)
    P = Problem(rows, edges, cap, links, C)
    start = heft(P)
    runs = [lns.improve(P, start, time.perf_counter() + 120, cbc, seed=3, max_iters=4, slice_s=60) for _ in range(2)]
    for out in runs:
        assert out.makespan <= start.makespan * (1 + 1e-12)
        assert check_schedule(as_plan(out), rows, edges, cap, links, C) == []
    assert runs[0].makespan < start.makespan  # the search did move (HEFT is not optimal here)
    assert runs[0].makespan == runs[1].makespan and runs[0].option == runs[1].option


def test_sub_model_holds_the_incumbent():
    # the incumbent, window and donors as they are, is a point of every sub-model: its optimum is
    # never above the incumbent's longest path through the window
    rows, edges, cap, links, C = layered_dag(40, 1)
    P = Problem(rows, edges, cap, links, C)
    s = heft(P)
    order = sorted(P.nodes, key=lambda v: (s.start[v], P.index[v]))
    q = lns._tails(P, s)
    rng = random.Random(0)
    for lo in (0, 10, 25):
        window = order[lo:lo + 10]
        donors = lns._donors(P, s, set(window), rng, 10)
        prob, var = lns._sub_model(P, s, window, donors, order, q)
        prob.solve(cbc(time.perf_counter() + 30))
        assert var["T"].varValue <= s.makespan * (1 + 1e-6)
        assert all(o.unit != "PS" for d in donors for o in var["cand"][d])
        new = lns._neighbour(P, s, window, order, var)
        assert check_schedule(as_plan(new), rows, edges, cap, links, C) == []


def test_rounding_meets_the_capacities():
    rows, edges, cap, links, C = layered_dag(30, 2)
    P = Problem(rows, edges, cap, links, C)
    opts = {v: P.options[v] for v in P.nodes}
    # every node's largest share on its PL pf16 point: far beyond the LUTs
    share = {v: [1.0 if o.point == "pf16" else 0.1 if o.unit == "PL" else 0.0 for o in opts[v]] for v in P.nodes}
    option = round_options(P, opts, share)
    used = sum(o.usage("lut") for o in option.values() if o.unit == "PL")
    assert used <= cap[("PL", "lut")]
    assert sum(o.point == "pf16" for o in option.values()) == cap[("PL", "lut")] // (16 * 900)
    s = list_schedule(P, option)
    assert check_schedule(as_plan(s), rows, edges, cap, links, C) == []


def _large(monkeypatch, nodes):
    calls = []
    real = ilp._solve_large

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(ilp, "_solve_large", spy)
    monkeypatch.setattr(ilp, "LNS_NODES", nodes)
    return calls


@pytest.mark.parametrize("solver", ["cbc", "highs"])
def test_solve_takes_the_large_graph_path_within_the_limit(monkeypatch, solver):
    calls = _large(monkeypatch, 30)
    rows, edges, cap, links, C = layered_dag(50, 4)
    cpu = cpu_seconds()
    plan = solve(rows, edges, cap, links, ps_cores=C, solver=solver, time_limit=3)
    # the limit is kept: CPU seconds with the solvers' (a solver left running past the limit adds its
    # own), not the wall time a loaded machine stretches; they are at most the wall time on one core
    cpu = cpu_seconds() - cpu
    assert calls and cpu < 3 + 1.5, cpu
    assert check_schedule(plan, rows, edges, cap, links, C) == []
    assert plan.makespan_us <= plan.baselines["HEFT"] * (1 + 1e-12)
    assert plan.bound is not None and plan.bound <= plan.makespan_us
    assert 0.0 <= plan.gap < 1.0 and (plan.gap == 0.0) == (plan.status == "Optimal")


def test_small_graphs_and_no_limit_take_the_whole_model(monkeypatch):
    calls = _large(monkeypatch, 30)
    rows, edges, cap, links, C = layered_dag(12, 3)
    plan = solve(rows, edges, cap, links, ps_cores=C, time_limit=30)  # at most LNS_NODES nodes
    assert plan.status == "Optimal" and check_schedule(plan, rows, edges, cap, links, C) == []
    rows, edges, cap, links, C = layered_dag(40, 3)
    solve(rows, edges, cap, links, ps_cores=C, time_limit=2, lns=False)  # the plain path, by flag
    assert not calls
    monkeypatch.setattr(ilp, "_run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("whole model")))
    solve(rows, edges, cap, links, ps_cores=C, time_limit=2)  # above LNS_NODES: no whole model
    assert calls
