"""The partitioning model in OR-Tools CP-SAT (optional: ``pip install rlhls[cpsat]``).

The PS cores are a cumulative resource of capacity C over optional intervals (one per PS option):
with unit demands this is exact (intervals that never overlap more than C times colour onto C
cores). Options are literals, capacities linear rows on them, transfers precedence rows enforced
by the unit literals of both ends, loop-carried edges ``S_v + T >= F_u + transfer``.

CP-SAT works on integers: times are in units of 1/``scale`` µs, every latency and transfer
rounded down. A schedule of the real problem, its starts rounded down, stays a schedule of the
rounded one with no longer a makespan (floor(a + b) >= floor(a) + floor(b); the PS nodes running
at an integer point all run just before the next), so the rounded optimum, and any lower bound
CP-SAT proves for it, divided by ``scale``, is a lower bound of the real problem. Plans are read
back as options and PS core orders and timed exactly (`semi_active`).
"""

from __future__ import annotations

import math

from rlhls.core.errors import RlhlsError

from .heft import Problem, Schedule, semi_active

__all__ = ["available", "solve_cpsat"]

SCALE = 100  # 0.01 µs


def available() -> bool:
    try:
        from ortools.sat.python import cp_model  # noqa: F401
    except ImportError:
        return False
    return True


def _model(P: Problem, H: float, scale: int):
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    hs = int(math.floor(H * scale))
    fl = lambda t: int(math.floor(t * scale + 1e-9))  # noqa: E731
    T = m.new_int_var(0, hs, "T")
    x, z, S, E, ps_iv = {}, {}, {}, {}, []
    ps_work = []
    for v in P.nodes:
        i = P.index[v]
        S[v] = m.new_int_var(0, hs, f"S{i}")
        E[v] = m.new_int_var(0, hs, f"E{i}")
        lits = []
        for k, o in enumerate(P.options[v]):
            x[v, k] = lit = m.new_bool_var(f"x{i}_{k}")
            lits.append(lit)
            d = fl(o.latency_us)
            m.add(E[v] == S[v] + d).only_enforce_if(lit)
            if o.unit == "PS":
                ps_iv.append(m.new_optional_fixed_size_interval_var(S[v], d, lit, f"ps{i}_{k}"))
                ps_work.append(d * lit)
        m.add_exactly_one(lits)
        for u in P.units_of(v):
            ks = [k for k, o in enumerate(P.options[v]) if o.unit == u]
            if len(ks) == 1:
                z[v, u] = x[v, ks[0]]
            else:
                z[v, u] = m.new_bool_var(f"z{i}_{u}")
                m.add(sum(x[v, k] for k in ks) == z[v, u])
        m.add(T >= E[v])
    if ps_iv:
        m.add_cumulative(ps_iv, [1] * len(ps_iv), P.ps_cores)
        m.add(P.ps_cores * T >= sum(ps_work))  # implied; it helps the linear relaxation

    def link(a, b, nb, lhs):
        for u in P.units_of(a):
            for w in P.units_of(b):
                c = fl(P.transfer(nb, u, w))
                if c > 0:
                    m.add(lhs >= E[a] + c).only_enforce_if(z[a, u], z[b, w])

    for a, b, nb in P.edges:
        m.add(S[b] >= E[a])
        link(a, b, nb, S[b])
    for a, b, nb in P.carry:
        m.add(S[b] + T >= E[a])
        link(a, b, nb, S[b] + T)
    for (u, r) in P.constrained():
        terms = [(o.usage(r), x[v, k]) for v in P.nodes for k, o in enumerate(P.options[v])
                 if o.unit == u and o.usage(r) > 0]
        if sum(a for a, _ in terms) > P.capacity[(u, r)]:
            # usages are whole numbers in every profile we know; scale the row when they are not
            f = 1 if all(float(a).is_integer() for a, _ in terms) else 1000
            m.add(sum(int(round(a * f)) * lit for a, lit in terms) <= int(math.floor(P.capacity[(u, r)] * f + 1e-9)))
    m.minimize(T)
    return m, x, S, T


def solve_cpsat(P: Problem, H: float, time_limit: float, *, hint: Schedule | None = None, workers: int = 1,
                scale: int = SCALE, seed: int = 0):
    """(schedule or None, lower bound in µs, whether CP-SAT proved the rounded model optimal)
    within ``time_limit`` s, the makespan at most the horizon H (a plan at most H long must exist,
    e.g. HEFT's). The schedule is timed exactly, so it may exceed the rounded optimum by the
    rounding. ``hint``: a schedule CP-SAT starts its search from. One loop only (every node run
    equally often, rlhls.partition.heft)."""
    from ortools.sat.python import cp_model

    if P.multi:
        raise RlhlsError("CP-SAT model: nodes run at several rates; it models one loop (use rlhls.partition.ilp)")

    m, x, S, T = _model(P, H, scale)
    if hint is not None:
        for v in P.nodes:
            for k, o in enumerate(P.options[v]):
                m.add_hint(x[v, k], o is hint.option[v])
            m.add_hint(S[v], int(math.floor(hint.start[v] * scale + 1e-9)))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, float(time_limit))
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(m)
    bound = solver.best_objective_bound / scale if status != cp_model.UNKNOWN else 0.0
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, max(0.0, bound), False
    option = {}
    for v in P.nodes:
        option[v] = next(o for k, o in enumerate(P.options[v]) if solver.boolean_value(x[v, k]))
    start = {v: solver.value(S[v]) for v in P.nodes}
    # PS cores: greedy colouring by start (cumulative <= C, so C colours do)
    free = [0] * P.ps_cores
    core = {}
    for v in sorted((v for v in P.nodes if option[v].unit == "PS"), key=lambda v: (start[v], P.index[v])):
        d = int(math.floor(option[v].latency_us * scale + 1e-9))
        fits = [c for c in range(P.ps_cores) if free[c] <= start[v]]
        c = max(fits, key=lambda c: free[c]) if fits else min(range(P.ps_cores), key=lambda c: free[c])
        core[v] = c
        free[c] = max(free[c], start[v]) + d
    sched = semi_active(P, option, core, start)
    return sched, max(0.0, bound), status == cp_model.OPTIMAL
