"""The partitioning ILP against brute force on small random instances, HEFT, the checker, both solvers."""

from __future__ import annotations

import itertools
import random
import time

import pulp
import pytest

from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.partition import ilp
from rlhls.partition.check import check_schedule
from rlhls.partition.heft import Problem, heft, local_search
from rlhls.partition.ilp import solve
from rlhls.partition.profile import device_capacity, device_links, profile_design
from rlhls.partition.profile_io import UNITS, ProfileRow
from procs_util import cpu_seconds

TOL = 1e-6


def random_instance(seed: int):
    """A random DAG (3-8 nodes) x 3 units with links, 1-2 PS cores, forbidden units, design points."""
    rng = random.Random(seed)
    n = rng.randint(3, 8)
    names = [f"n{i}" for i in range(n)]
    p_edge = rng.uniform(0.15, 0.5)
    edges = [(names[i], names[j], rng.randint(0, 3000)) for i in range(n) for j in range(i + 1, n)
             if rng.random() < p_edge]
    # loop-carried edges (to the next training step): backwards, like a weight update -> its forward
    edges += [(names[j], names[i], rng.randint(0, 20000), True) for i in range(n) for j in range(i, n)
              if rng.random() < 0.2]
    rows = []
    for v in names:
        units = [u for u in UNITS if rng.random() < 0.7] or [rng.choice(UNITS)]
        for u in units:
            for p in range(2 if rng.random() < 0.25 else 1):
                res = {"dsp": rng.randint(0, 60)} if u == "PL" else {"aie_tiles": rng.randint(1, 6)} if u == "AIE" else {}
                rows.append(ProfileRow(v, u, round(rng.uniform(0.5, 20.0), 3), f"p{p}", res))
    # capacities tight but met by at least one random assignment
    pick = {v: rng.choice([r for r in rows if r.node == v]) for v in names}
    need = {k: sum(r.resources.get(k[1], 0) for r in pick.values() if r.unit == k[0]) for k in (("PL", "dsp"), ("AIE", "aie_tiles"))}
    capacity = {("PL", "dsp"): max(need[("PL", "dsp")], rng.randint(40, 160)),
                ("AIE", "aie_tiles"): max(need[("AIE", "aie_tiles")], rng.randint(4, 16))}
    links = {}
    for a, b in itertools.permutations(UNITS, 2):
        if rng.random() < 0.8:
            links[(a, b)] = (round(rng.uniform(0.0, 2.0), 3), rng.choice([500.0, 1000.0, 4000.0]))
    ps_cores = rng.choice([1, 2])
    return rows, edges, capacity, links, ps_cores


def _feasible_capacity(problem, choice):
    used = {}
    for r in choice.values():
        for res, a in r.resources.items():
            used[(r.unit, res)] = used.get((r.unit, res), 0.0) + a
    return all(used.get(k, 0.0) <= cap + 1e-9 for k, cap in problem.capacity.items())


def _period(nodes, lat, arcs, carry, lo, cap=float("inf")):
    """Least T with starts S >= 0: S_b - S_a >= w (arcs), S_v + T >= S_u + c (carry), S + lat <= T.

    Independent of the solver's code: bisection on T, each trial a Bellman-Ford longest-path test.
    Infinity when infeasible at ``cap`` (the best period so far: no bisection for a worse one)."""
    def feasible(T):
        d = dict.fromkeys(nodes, 0.0)
        allarcs = arcs + [(u, v, c - T) for u, v, c in carry]
        for _ in range(len(nodes) + 1):
            changed = False
            for a, b, w in allarcs:
                if d[a] + w > d[b] + 1e-12:
                    d[b], changed = d[a] + w, True
            if not changed:
                return all(d[v] + lat[v] <= T + 1e-9 for v in nodes)
        return False

    if feasible(lo):
        return lo
    if cap < float("inf") and not feasible(cap):
        return float("inf")
    hi = lo + sum(lat.values()) + sum(c for *_, c in carry) + sum(w for *_, w in arcs) + 1.0
    while not feasible(hi):
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return hi


def brute_force(rows, edges, capacity, links, ps_cores) -> float:
    """Exact optimum: every option assignment x every PS core sequence; with loop-carried edges
    the least period of each (options, core sequences) by `_period`."""
    P = Problem(rows, edges, capacity, links, ps_cores)
    nodes = P.nodes
    preds = {v: P.preds[v] for v in nodes}
    carry = [e[:3] for e in edges if len(e) > 3 and e[3]]
    options = {v: [r for r in rows if r.node == v] for v in nodes}  # all rows: no pruning here

    def lp_bound(choice):  # no PS conflicts: longest path with transfers; PS work per core
        fin = {}
        for v in nodes:
            s = max((fin[p] + P.transfer(b, choice[p].unit, choice[v].unit) for p, b in preds[v]), default=0.0)
            fin[v] = s + choice[v].latency_us
        work = sum(r.latency_us for r in choice.values() if r.unit == "PS") / ps_cores
        return max(max(fin.values()), work)

    def period(choice, fin, chains):
        lat = {v: choice[v].latency_us for v in nodes}
        arcs = [(p, v, lat[p] + P.transfer(b, choice[p].unit, choice[v].unit)) for v in nodes for p, b in preds[v]]
        arcs += [(a, b, lat[a]) for a, b in chains]
        cz = [(u, v, lat[u] + P.transfer(b, choice[u].unit, choice[v].unit)) for u, v, b in carry]
        return _period(nodes, lat, arcs, cz, max(fin.values()), best)

    choices = []
    for combo in itertools.product(*(options[v] for v in nodes)):
        choice = dict(zip(nodes, combo))
        if _feasible_capacity(P, choice):
            choices.append((lp_bound(choice), choice))
    choices.sort(key=lambda c: c[0])
    best = float("inf")

    def search(choice, fin, cores, chains):
        # cores: (free time, last PS node) per core; chains: (prev, next) pairs on a core
        nonlocal best
        fin = dict(fin)
        for v in nodes:  # settle non-PS nodes whose predecessors are done
            if v not in fin and choice[v].unit != "PS" and all(p in fin for p, _ in preds[v]):
                s = max((fin[p] + P.transfer(b, choice[p].unit, choice[v].unit) for p, b in preds[v]), default=0.0)
                fin[v] = s + choice[v].latency_us
        if fin and max(fin.values()) >= best - TOL:
            return
        if len(fin) == len(nodes):
            best = min(best, period(choice, fin, chains) if carry else max(fin.values()))
            return
        for v in nodes:
            if v in fin or choice[v].unit != "PS" or not all(p in fin for p, _ in preds[v]):
                continue
            ready = max((fin[p] + P.transfer(b, choice[p].unit, "PS") for p, b in preds[v]), default=0.0)
            # with carry edges the LP may delay starts, so which node precedes on a core matters
            for c in (sorted(set(cores), key=repr) if carry else list({f: (f, l) for f, l in cores}.values())):
                free, last = c
                s = max(ready, free)
                new = list(cores)
                new[new.index(c)] = (s + choice[v].latency_us, v)
                search(choice, {**fin, v: s + choice[v].latency_us}, tuple(sorted(new, key=repr)),
                       chains + ([(last, v)] if last is not None else []))

    for bound, choice in choices:
        if bound >= best - TOL:
            break
        search(choice, {}, ((0.0, None),) * ps_cores, [])
    return best


SEEDS = list(range(30))


@pytest.mark.parametrize("seed", SEEDS)
def test_ilp_matches_brute_force(seed):
    rows, edges, capacity, links, ps_cores = random_instance(seed)
    opt = brute_force(rows, edges, capacity, links, ps_cores)
    plans = {s: solve(rows, edges, capacity, links, ps_cores=ps_cores, solver=s) for s in ("cbc", "highs")}
    for name, plan in plans.items():
        assert plan.status == "Optimal" and plan.gap == 0.0, name
        assert plan.makespan_us == pytest.approx(opt, rel=1e-6, abs=1e-6), name
        assert check_schedule(plan, rows, edges, capacity, links, ps_cores) == []
        assert check_schedule(plan.to_json(), rows, edges, capacity, links, ps_cores) == []
        h = heft(Problem(rows, edges, capacity, links, ps_cores))
        if h is not None:
            assert plan.makespan_us <= h.makespan + 1e-6
            assert plan.baselines["HEFT"] == pytest.approx(h.makespan)
            assert check_schedule({"assignment": {v: o.unit for v, o in h.option.items()},
                                   "point": {v: o.point for v, o in h.option.items()},
                                   "start_us": h.start, "makespan_us": h.makespan},
                                  rows, edges, capacity, links, ps_cores) == []
    assert plans["cbc"].makespan_us == pytest.approx(plans["highs"].makespan_us, rel=1e-6, abs=1e-6)


def test_baselines_single_unit():
    # a chain of 3 nodes that every unit can run; no capacities: all-X is the chain's sum on X
    rows = [ProfileRow(v, u, t, "0") for v in "abc" for u, t in (("PS", 10.0), ("PL", 4.0), ("AIE", 2.0))]
    rows.append(ProfileRow("d", "PS", 1.0))  # d: PS only -> all-PL / all-AIE impossible
    edges = [("a", "b", 0), ("b", "c", 0)]
    plan = solve(rows, edges, {}, {}, ps_cores=1)
    assert plan.baselines["all_PS"] == pytest.approx(31.0)  # one core: 10 + 10 + 10 + 1
    rows2 = [r for r in rows if r.node != "d"]
    plan2 = solve(rows2, edges, {}, {}, ps_cores=1)
    assert plan2.baselines["all_PL"] == pytest.approx(12.0)
    assert plan2.baselines["all_AIE"] == pytest.approx(6.0)
    assert plan.baselines["all_PL"] is None and plan.baselines["all_AIE"] is None
    assert plan2.makespan_us == pytest.approx(6.0)


def test_ps_cores_serialise():
    # four independent PS-only nodes of 5 us: one core -> 20, two -> 10, four -> 5
    rows = [ProfileRow(f"n{i}", "PS", 5.0) for i in range(4)]
    for cores, span in ((1, 20.0), (2, 10.0), (4, 5.0)):
        plan = solve(rows, [], {("PS", "cores"): cores}, {}, ps_cores=None)
        assert plan.makespan_us == pytest.approx(span)
        assert check_schedule(plan, rows, [], {}, {}, cores) == []
        assert check_schedule(plan, rows, [], {}, {}, max(1, cores - 1)) != [] or cores == 1


@pytest.mark.parametrize("solver", ilp.SOLVERS)
def test_ps_cores_bind_beyond_the_relaxation(solver, monkeypatch):
    # three independent 2 us PS-only nodes on two cores: without the pair rows the model allows 3 us
    # (the work bound 6 / 2); the plan of that relaxation needs 4, so the whole model must decide
    rows = [ProfileRow(v, "PS", 2.0) for v in "abc"] + [ProfileRow("d", "PS", 1.0), ProfileRow("d", "PL", 1.5)]
    runs = []
    real = ilp._run
    monkeypatch.setattr(ilp, "_run", lambda *a, **k: runs.append(k["ps_pairs"]) or real(*a, **k))
    plan = solve(rows, [], {}, {}, ps_cores=2, solver=solver)
    assert runs == [False, True]
    assert plan.status == "Optimal" and plan.gap == 0.0
    assert plan.makespan_us == pytest.approx(brute_force(rows, [], {}, {}, 2)) == pytest.approx(4.0)
    assert check_schedule(plan, rows, [], {}, {}, 2) == []


@pytest.mark.parametrize("solver", ilp.SOLVERS)
def test_plan_read_from_a_model_without_core_variables_keeps_its_overlaps(solver):
    # two PS nodes, two cores: the model needs no core variables, and the plan read back must put
    # the nodes on different cores (both on one core would take 10 us, not the model's 5)
    P = Problem([ProfileRow(v, "PS", 5.0) for v in "ab"], [], {}, {}, 2)
    prob, var = ilp._build(P, 10.0)
    assert var["w"] == {}
    prob.solve(ilp._solver(solver, time.perf_counter() + 60))
    assert pulp.value(prob.objective) == pytest.approx(5.0)
    sched = ilp._extract(P, var)
    assert sched.makespan == pytest.approx(5.0) and sched.core["a"] != sched.core["b"]


def test_transfer_cost_moves_nodes():
    # b is faster on PL, but the PS->PL link costs more than it gains
    rows = [ProfileRow("a", "PS", 1.0), ProfileRow("b", "PS", 3.0), ProfileRow("b", "PL", 1.0)]
    edges = [("a", "b", 1000)]
    cheap = solve(rows, edges, {}, {("PS", "PL"): (0.1, 10000.0)})
    dear = solve(rows, edges, {}, {("PS", "PL"): (1.0, 100.0)})
    assert cheap.assignment["b"] == "PL" and cheap.makespan_us == pytest.approx(1.0 + 0.2 + 1.0)
    assert dear.assignment["b"] == "PS" and dear.makespan_us == pytest.approx(4.0)


def test_design_points_and_capacity():
    # two PL points: the fast one needs more DSP than is left when both nodes want it
    rows = []
    for v in ("a", "b"):
        rows += [ProfileRow(v, "PL", 2.0, "u8", {"dsp": 80}), ProfileRow(v, "PL", 5.0, "u2", {"dsp": 20})]
    plan = solve(rows, [], {("PL", "dsp"): 100}, {})
    assert sorted(plan.point.values()) == ["u2", "u8"] and plan.makespan_us == pytest.approx(5.0)
    assert check_schedule(plan, rows, [], {("PL", "dsp"): 100}, {}, 1) == []
    bad = dict(plan.to_json(), point={"a": "u8", "b": "u8"})
    assert any("dsp" in m for m in check_schedule(bad, rows, [], {("PL", "dsp"): 100}, {}, 1))


def test_time_limit_reports_gap():
    rng = random.Random(7)
    n = 40
    names = [f"n{i}" for i in range(n)]
    edges = [(names[i], names[j], rng.randint(0, 2000)) for i in range(n) for j in range(i + 1, min(n, i + 4))
             if rng.random() < 0.3]
    rows = [ProfileRow(v, u, rng.uniform(1, 20), "0", {"dsp": rng.randint(10, 60)} if u == "PL" else {})
            for v in names for u in ("PS", "PL")]
    plan = solve(rows, edges, {("PL", "dsp"): 300}, {("PS", "PL"): (1.0, 1000.0)}, ps_cores=2, time_limit=1)
    assert plan.status in ("Optimal", "Feasible (time limit)")
    assert 0.0 <= plan.gap < 1.0
    assert (plan.gap == 0.0) == (plan.status == "Optimal")
    assert check_schedule(plan, rows, edges, {("PL", "dsp"): 300}, {("PS", "PL"): (1.0, 1000.0)}, 2) == []


@pytest.mark.parametrize("solver", ["cbc", "highs"])
def test_time_limit_is_kept(solver):
    # 120 nodes, 2 PS cores: the full model takes ~1 s to build and CBC's feasibility pump alone
    # ran 8 s past a 2 s limit before solvers were stopped at the deadline
    rng = random.Random(7)
    names = [f"n{i}" for i in range(120)]
    edges = [(a, names[j], rng.randint(0, 2000)) for i, a in enumerate(names) for j in range(i + 1, min(120, i + 4))
             if rng.random() < 0.3]
    rows = [ProfileRow(v, u, rng.uniform(1, 20), "0", {"dsp": rng.randint(10, 60)} if u == "PL" else {})
            for v in names for u in ("PS", "PL")]
    cap, links = {("PL", "dsp"): 300}, {("PS", "PL"): (1.0, 1000.0)}
    cpu = cpu_seconds()
    plan = solve(rows, edges, cap, links, ps_cores=2, time_limit=2, solver=solver)
    # CPU seconds with the solvers' (CBC running past the limit adds its own), not the wall time a
    # loaded machine stretches; they are at most the wall time on one core
    cpu = cpu_seconds() - cpu
    assert plan.status == "Feasible (time limit)" and cpu < 2 + 1.5, cpu
    assert check_schedule(plan, rows, edges, cap, links, 2) == []


def test_solver_optimum_is_its_plans_makespan_on_a2c():
    # A2C-InvPendulum with uncapped PS cores: CBC 2.10.3 given a MIP start took the makespan for
    # integral and proved 47.0 "optimal" while its own plan runs in 46.25 (and HiGHS finds 46.25)
    d = get_design("apdrl-a2c-invpendulum")
    edges = build_graph(d, None).all_edges()
    P = Problem(profile_design(d), edges, device_capacity(d.device), device_links(d.device), 99)
    inc = local_search(P, heft(P), max_evals=ilp.LS_EVALS)
    found = {}
    for solver in ilp.SOLVERS:
        prob, var = ilp._build(P, inc.makespan * (1 + 1e-9) + 1e-9)
        prob.solve(ilp._solver(solver, time.perf_counter() + 60))
        assert pulp.LpStatus[prob.status] == "Optimal", solver
        found[solver] = pulp.value(prob.objective)
        assert found[solver] == pytest.approx(ilp._extract(P, var).makespan, rel=1e-6), solver
    assert found["cbc"] == pytest.approx(found["highs"], rel=1e-6)
    assert found["cbc"] < inc.makespan - 1.0  # the instance is not solved by the incumbent already


@pytest.mark.parametrize("name", ["apdrl-a2c-invpendulum", "apdrl-ddpg-lunarcont"])
@pytest.mark.parametrize("ps_pairs", [False, True])
def test_start_given_to_highs_is_a_feasible_point_of_the_model(name, ps_pairs):
    # HiGHS drops a start that breaks any row, the capacity counts included, without a word.
    # As solve() builds them: the relaxation starts from HEFT, the whole model from a better plan
    # below whose makespan it is built (its PS core and ordering variables get values too)
    d = get_design(name)
    P = Problem(profile_design(d), build_graph(d, None).all_edges(), device_capacity(d.device),
                device_links(d.device), None)
    start = heft(P)
    if ps_pairs:
        start = local_search(P, start, max_evals=ilp.LS_EVALS)
    prob, var = ilp._build(P, start.makespan * (1 + 1e-9) + 1e-9, ps_pairs=ps_pairs)
    assert var["counts"], "capacity rows with counts expected on this design"
    assert bool(var["o"]) == ps_pairs
    ilp._set_start(P, var, start)
    assert all(v.varValue is not None for v in prob.variables())
    rows = prob.constraints() if callable(prob.constraints) else list(prob.constraints.values())  # PuLP 3 / 2
    broken = [con.name for con in rows if not con.valid(1e-6)]
    assert broken == []
