"""Lower bounds of the large-graph path: the LP relaxation with energy rows (partition/energy.py)
and that model as a MIP (its dual bound), the packed start's MIP, and the CP-SAT model (partition/cpsat.py, where OR-Tools is installed),
each against optima the whole ILP proves on small graphs."""

from __future__ import annotations

import time

import pulp
import pytest

from rlhls.partition import cpsat, ilp
from rlhls.partition.check import check_schedule
from rlhls.partition.heft import Problem, heft
from rlhls.partition.ilp import solve
from rlhls.partition.profile_io import ProfileRow

from test_partition_lns import as_plan, layered_dag


def _lp(P, H, energy, mip=False):
    return ilp._lp_relaxation(P, H, time.perf_counter() + 60, energy=energy, mip=mip)[0]


def test_descendant_rows_see_the_cores_after_a_fork():
    # r then four children, all PS-only, 10 us each, 2 cores: the plain LP spreads the 50 us of
    # work over the whole makespan (25); the children can only start after r (30, the optimum)
    rows = [ProfileRow(v, "PS", 10.0) for v in ("r", "c1", "c2", "c3", "c4")]
    edges = [("r", f"c{i}", 0) for i in range(1, 5)]
    P = Problem(rows, edges, None, None, 2)
    opt = solve(rows, edges, ps_cores=2)
    assert opt.status == "Optimal" and opt.makespan_us == pytest.approx(30.0)
    assert _lp(P, 40.0, False) == pytest.approx(25.0, rel=1e-6)
    assert _lp(P, 40.0, True) == pytest.approx(30.0, rel=1e-6)


def test_window_rows_see_the_cores_between_two_nodes():
    # s (100) -> a -> four PS-only nodes (10 each, 2 cores) -> b -> t (100): only the window
    # between a and b holds the PS work; the path alone says 212, the cores 222 (the optimum)
    rows = [ProfileRow("s", "PL", 100.0), ProfileRow("a", "PL", 1.0), ProfileRow("b", "PL", 1.0),
            ProfileRow("t", "PL", 100.0)] + [ProfileRow(f"m{i}", "PS", 10.0) for i in range(4)]
    edges = [("s", "a", 0), ("b", "t", 0)] + [e for i in range(4) for e in (("a", f"m{i}", 0), (f"m{i}", "b", 0))]
    P = Problem(rows, edges, None, None, 2)
    opt = solve(rows, edges, ps_cores=2)
    assert opt.status == "Optimal" and opt.makespan_us == pytest.approx(222.0)
    assert _lp(P, 300.0, False) == pytest.approx(212.0, rel=1e-6)
    assert _lp(P, 300.0, True) == pytest.approx(222.0, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_energy_bound_stays_below_the_proven_optimum(seed):
    rows, edges, cap, links, C = layered_dag(14, seed, ps_cores=2)
    P = Problem(rows, edges, cap, links, C)
    opt = solve(rows, edges, cap, links, ps_cores=C)
    assert opt.status == "Optimal"
    H = heft(P).makespan * (1 + 1e-9) + 1e-9
    plain, energy = _lp(P, H, False), _lp(P, H, True)
    # the MIP on the same rows (in its child process, as in solve): whole options lift the bound
    mip = _lp(P, H, True, mip=True)
    assert plain <= energy <= mip <= opt.makespan_us * (1 + 1e-7)
    if seed == 0:  # 16,694 (LP + energy rows) -> 17,124, the optimum
        assert mip > energy * 1.02


def test_energy_bound_is_stronger_than_the_lp_on_a_larger_graph():
    rows, edges, cap, links, C = layered_dag(120, 0, ps_cores=4)
    P = Problem(rows, edges, cap, links, C)
    H = heft(P).makespan * (1 + 1e-9) + 1e-9
    assert _lp(P, H, True) > _lp(P, H, False) * 1.001


def test_packed_start_leaves_the_cores_idle_time():
    rows, edges, cap, links, C = layered_dag(40, 1, ps_cores=2)
    P = Problem(rows, edges, cap, links, C)
    s = heft(P)
    H = s.makespan * (1 + 1e-9) + 1e-9
    share = 0.8 * ilp._ps_busy(P, s)
    # the MIP is solved to its end in ~4 s: the deadline only stops a hang (20 s left a loaded machine 4x)
    option = ilp._relaxed_mip(P, H, time.perf_counter() + 300, share, None)
    assert option is not None
    assert sum(o.latency_us for o in option.values() if o.unit == "PS") <= share * C * H * (1 + 1e-6)
    for (u, r), c in P.capacity.items():
        assert sum(o.usage(r) for o in option.values() if o.unit == u) <= c + 1e-6
    assert check_schedule(as_plan(ilp.list_schedule(P, option)), rows, edges, cap, links, C) == []


@pytest.mark.skipif(not cpsat.available(), reason="OR-Tools not installed (pip install rlhls[cpsat])")
@pytest.mark.parametrize("seed", [0, 1])
def test_cpsat_plan_is_valid_and_its_bound_below_the_optimum(seed):
    rows, edges, cap, links, C = layered_dag(14, seed, ps_cores=2)
    P = Problem(rows, edges, cap, links, C)
    opt = solve(rows, edges, cap, links, ps_cores=C)
    h = heft(P)
    sched, bound, _ = cpsat.solve_cpsat(P, h.makespan * (1 + 1e-9) + 1e-9, 20, hint=h)
    assert sched is not None and check_schedule(as_plan(sched), rows, edges, cap, links, C) == []
    assert bound <= opt.makespan_us * (1 + 1e-9) <= sched.makespan * (1 + 1e-9)
    # on a graph this small CP-SAT proves its optimum, up to the 0.01 us its times are rounded to
    assert sched.makespan == pytest.approx(opt.makespan_us, abs=0.01 * len(P.nodes))


def test_an_lp_stopped_by_its_time_limit_gives_no_bound(monkeypatch):
    # PuLP reports HiGHS's time limit as status Optimal with an "integer feasible" solution; the
    # values then are no optimum of the LP and must not be read as a bound
    rows, edges, cap, links, C = layered_dag(14, 0, ps_cores=2)
    P = Problem(rows, edges, cap, links, C)
    H = heft(P).makespan * (1 + 1e-9) + 1e-9
    solve_lp = pulp.HiGHS.actualSolve

    def stopped(self, lp, **kw):
        status = solve_lp(self, lp, **kw)
        lp.assignStatus(pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible)
        return status

    monkeypatch.setattr(pulp.HiGHS, "actualSolve", stopped)
    assert ilp._lp_relaxation(P, H, time.perf_counter() + 60, energy=True) is None
