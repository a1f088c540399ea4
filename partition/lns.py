"""Large-neighbourhood search around an incumbent schedule, the ILP as the sub-solver.

For graphs too large for the whole model within the time limit (a 300-node random DAG: CBC finds
no plan of the relaxation in 30 s), `improve` frees a window of K nodes consecutive in the
incumbent's start order and re-solves their options, PS cores and order exactly while every other
node keeps its option, core and times:

* a free node starts after its fixed predecessors' finish + transfer (linear in its unit), after
  its free predecessors (eq. 5's linearisation, one row per unit of the source), and on PS core c
  after the last fixed node of c that starts before the window;
* the objective T is the longest path through the window: T >= F_v + transfer + q_s for each
  fixed successor s (q_s = the incumbent's longest path from S_s to its end, PS core chains
  included), T >= F_v + q_n on core c (n the first fixed node of c after the window), T >= F_v;
* two free nodes on one core do not overlap (ordering binary, as the whole model);
* capacities: what the fixed nodes leave.

Every other window is placed around a node of the incumbent's critical path (no slack), drawn
at random, the rest anywhere: on the 1000-node random DAG the loss is in the options along the
critical path (the LP rounding's plan: 515,090 µs with unlimited PS cores, 529,334 on 4), and 120
windows so placed reached 522,665 µs from 524,703 where windows anywhere reached 524,021 (at 300
nodes 117,832 against 117,845 from the LP rounding's 121,295).

The sub-plan is evaluated exactly (`semi_active`: every node at its earliest start, carry edges
included) and kept when the makespan shrinks, or stays and the sum of finish times shrinks (the
search then moves along plateaus). A window takes one node more after a sub-solve proved
optimal, two fewer after one stopped at its time slice. Donors: nodes off the PS outside the
window, with slack, that hold a capacity; they may move to other options off the PS, so the window
can take the capacity they give up. Windows and donors are drawn by a seeded generator: for a seed
and a number of iterations whose sub-solves all end proven, the plan is the same run to run; with
a wall-clock deadline the number of iterations (and so the plan) depends on the machine's speed.
"""

from __future__ import annotations

import random
import time

import pulp

from .heft import Problem, Schedule, _slack, semi_active

__all__ = ["improve", "LNS_NODES"]

LNS_NODES = 150  # graphs with more nodes skip the whole model and go straight to this search
K_MIN, K_START, K_MAX = 6, 10, 24
SLICE_S = 1.0  # time for one sub-solve at most (a 20-node window took 0.2 s or 7 s to prove, by where it lay)


def _tails(problem: Problem, sched: Schedule) -> dict:
    """The incumbent's longest path from each node's start to the end (precedence + core chains)."""
    slack = _slack(problem, sched)
    return {v: sched.makespan - (sched.start[v] + slack[v]) for v in problem.nodes}


def _candidates(problem: Problem, window: list, donors: list) -> dict:
    """Options per free node: all for the window, those off the PS for a donor."""
    cand = {v: list(problem.options[v]) for v in window}
    cand.update({v: [o for o in problem.options[v] if o.unit != "PS"] for v in donors})
    return cand


def _sub_model(problem: Problem, sched: Schedule, window: list, donors: list, order: list, q: dict):
    P = problem
    free = window + donors
    fset = set(free)
    cand = _candidates(P, window, donors)
    units = {v: list(dict.fromkeys(o.unit for o in cand[v])) for v in free}
    H = sched.makespan
    prob = pulp.LpProblem("rlhls_lns", pulp.LpMinimize)
    T = prob.add_variable("T", lowBound=0, upBound=H * (1 + 1e-9) + 1e-9)
    x, z, S, lat = {}, {}, {}, {}
    # windows on the free nodes' starts (they keep the ordering rows' big-Ms small)
    minlat = {v: min(o.latency_us for o in cand[v]) for v in free}
    lo_s: dict[str, float] = {}
    hi_s: dict[str, float] = {}
    for v in sorted(free, key=P.index.__getitem__):
        lo_s[v] = max([sched.finish[p] for p, _ in P.preds[v] if p not in fset]
                      + [lo_s[p] + minlat[p] for p, _ in P.preds[v] if p in fset] + [0.0])
    for v in sorted(free, key=P.index.__getitem__, reverse=True):
        hi_s[v] = min([H - minlat[v]] + [H - q[s] - minlat[v] for s, _ in P.succs[v] if s not in fset]
                      + [hi_s[s] - minlat[v] for s, _ in P.succs[v] if s in fset])
        hi_s[v] = max(hi_s[v], lo_s[v])
    for v in free:
        i = P.index[v]
        for k in range(len(cand[v])):
            x[v, k] = prob.add_variable(f"x_{i}_{k}", cat="Binary")
        S[v] = prob.add_variable(f"S_{i}", lowBound=lo_s[v], upBound=hi_s[v])
        lat[v] = pulp.lpSum(o.latency_us * x[v, k] for k, o in enumerate(cand[v]))
        for u in units[v]:
            z[v, u] = pulp.lpSum(x[v, k] for k, o in enumerate(cand[v]) if o.unit == u)
        prob += pulp.lpSum(x[v, k] for k in range(len(cand[v]))) == 1, f"one_{i}"
        prob += T >= S[v] + lat[v], f"end_{i}"
    prob += T
    opt = sched.option
    for v in free:
        i = P.index[v]
        for p, nb in P.preds[v]:
            if p in fset:
                prob += S[v] >= S[p] + lat[p], f"prec_{P.index[p]}_{i}"
                for u in units[p]:
                    costs = {w: P.transfer(nb, u, w) for w in units[v] if w != u}
                    cmax = max(costs.values(), default=0.0)
                    if cmax > 0:
                        prob += (S[v] >= S[p] + lat[p] + pulp.lpSum(c * z[v, w] for w, c in costs.items() if c > 0)
                                 - cmax * (1 - z[p, u])), f"xfer_{P.index[p]}_{i}_{u}"
            else:
                prob += S[v] >= sched.finish[p] + pulp.lpSum(P.transfer(nb, opt[p].unit, w) * z[v, w]
                                                             for w in units[v]), f"rel_{P.index[p]}_{i}"
        for s, nb in P.succs[v]:
            if s not in fset:
                prob += T >= S[v] + lat[v] + q[s] + pulp.lpSum(P.transfer(nb, w, opt[s].unit) * z[v, w]
                                                                for w in units[v]), f"tail_{i}_{P.index[s]}"
    # capacities left by the fixed nodes
    for (u, r) in P.constrained():
        left = P.capacity[(u, r)] - sum(opt[v].usage(r) for v in P.nodes if v not in fset and opt[v].unit == u)
        terms = [o.usage(r) * x[v, k] for v in free for k, o in enumerate(cand[v]) if o.unit == u and o.usage(r) > 0]
        if terms:
            prob += pulp.lpSum(terms) <= left, f"cap_{u}_{r}"
    # PS cores: between the last fixed node before the window and the first after it, per core
    ps = [v for v in window if "PS" in units[v]]
    w = {}
    if ps:
        lo = order.index(window[0])
        before = order[:lo]
        after = order[lo + len(window):]
        for c in range(P.ps_cores):
            prev = [v for v in before if sched.core.get(v) == c]
            nxt = [v for v in after if sched.core.get(v) == c]
            a_c = max((sched.finish[v] for v in prev), default=0.0)
            q_c = q[nxt[0]] if nxt else 0.0
            for v in ps:
                w[v, c] = prob.add_variable(f"w_{P.index[v]}_{c}", cat="Binary")
                if a_c > 0:
                    prob += S[v] >= a_c * w[v, c], f"after_{P.index[v]}_{c}"
                if q_c > 0:
                    prob += T >= S[v] + lat[v] + q_c * w[v, c], f"before_{P.index[v]}_{c}"
        for v in ps:
            prob += pulp.lpSum(w[v, c] for c in range(P.ps_cores)) == z[v, "PS"], f"core_{P.index[v]}"
        reach = _reach_within(P, free)
        for n, a in enumerate(ps):
            for b in ps[n + 1:]:
                if b in reach[a] or a in reach[b]:
                    continue
                ia, ib = P.index[a], P.index[b]
                same = prob.add_variable(f"q_{ia}_{ib}", lowBound=0, upBound=1)
                for c in range(P.ps_cores):
                    prob += same >= w[a, c] + w[b, c] - 1, f"same_{ia}_{ib}_{c}"
                o = prob.add_variable(f"o_{ia}_{ib}", cat="Binary")
                la = pulp.lpSum(op.latency_us * x[a, k] for k, op in enumerate(cand[a]) if op.unit == "PS")
                lb = pulp.lpSum(op.latency_us * x[b, k] for k, op in enumerate(cand[b]) if op.unit == "PS")
                m1 = max(0.0, hi_s[a] + max(op.latency_us for op in P.options[a] if op.unit == "PS") - lo_s[b])
                m2 = max(0.0, hi_s[b] + max(op.latency_us for op in P.options[b] if op.unit == "PS") - lo_s[a])
                prob += S[b] >= S[a] + la - m1 * (1 - o) - m1 * (1 - same), f"d1_{ia}_{ib}"
                prob += S[a] >= S[b] + lb - m2 * o - m2 * (1 - same), f"d2_{ia}_{ib}"
    return prob, dict(x=x, S=S, w=w, T=T, cand=cand)


def _reach_within(problem: Problem, free: list) -> dict:
    """Descendants of each free node among the free nodes (paths through fixed nodes included)."""
    fset = set(free)
    lo = min(problem.index[v] for v in free)
    hi = max(problem.index[v] for v in free)
    desc: dict[str, set[str]] = {}
    for v in reversed(problem.nodes[lo:hi + 1]):
        d = set()
        for s, _ in problem.succs[v]:
            if problem.index[s] <= hi:
                d.add(s)
                d |= desc.get(s, set())
        desc[v] = d
    return {v: desc[v] & fset for v in free}


def _neighbour(problem: Problem, sched: Schedule, free: list, order: list, var) -> Schedule | None:
    """``free``: the window (donors are never on the PS: their core order does not change)."""
    option = dict(sched.option)
    core = {v: c for v, c in sched.core.items() if v not in set(free)}
    for v in var["cand"]:
        cand = var["cand"][v]
        vals = [var["x"][v, k].varValue or 0.0 for k in range(len(cand))]
        option[v] = cand[max(range(len(vals)), key=lambda k: vals[k])]
        if option[v].unit == "PS":
            core[v] = max(range(problem.ps_cores), key=lambda c: var["w"][v, c].varValue or 0.0)
    # order on a core: the incumbent's start order, the window re-ordered by the sub-plan's starts
    lo = order.index(free[0])
    key = {v: float(r) for r, v in enumerate(order)}
    inside = sorted(free, key=lambda v: (var["S"][v].varValue or 0.0, problem.index[v]))
    for r, v in enumerate(inside):
        key[v] = float(lo + r)
    try:
        return semi_active(problem, option, core, key)
    except RuntimeError:
        return None


def _donors(problem: Problem, sched: Schedule, window: set, rng: random.Random, k: int) -> list:
    """Nodes off the PS outside the window that hold a capacity and have a cheaper option off the
    PS: the window may take what they give up (the capacities are spent on a large graph, and
    the critical path needs them where the slack is not). Drawn from those with the most slack."""
    cons = problem.constrained()
    if not cons:
        return []
    slack = _slack(problem, sched)
    pool = []
    for v in problem.nodes:
        o = sched.option[v]
        if v in window or o.unit == "PS" or slack[v] <= 0:
            continue
        if any(any(a.unit != "PS" and (a.unit != o.unit or a.usage(r) < o.usage(r))
                   for a in problem.options[v]) for (u, r) in cons if u == o.unit and o.usage(r) > 0):
            pool.append(v)
    pool.sort(key=lambda v: (-slack[v], problem.index[v]))
    pool = pool[:3 * k]
    return sorted(rng.sample(pool, min(len(pool), k // 2)), key=problem.index.__getitem__)


def improve(problem: Problem, sched: Schedule, deadline: float, solver_for, *, seed: int = 0,
            max_iters: int | None = None, slice_s: float = SLICE_S, log: list | None = None,
            stats: list | None = None) -> Schedule:
    """The incumbent improved by LNS until ``deadline`` (perf_counter) or ``max_iters`` windows.

    ``solver_for(deadline)`` gives the PuLP solver of one sub-model, ``slice_s`` its time at
    most. Never worse than ``sched``. ``log`` (a list) receives (seconds, makespan) at every
    improvement, ``stats`` (window size, status, proven, seconds) for every sub-solve. The
    sub-model knows one loop: a problem whose nodes run at several rates (rlhls.partition.heft) is
    returned as it is (the ILP solves those whole)."""
    if problem.multi:
        return sched
    rng = random.Random(seed)
    n = len(problem.nodes)
    k = min(K_START, n)
    cur = sched
    t0 = time.perf_counter()
    it = 0
    while time.perf_counter() < deadline - 0.05 and (max_iters is None or it < max_iters):
        it += 1
        order = sorted(problem.nodes, key=lambda v: (cur.start[v], problem.index[v]))
        k = max(1, min(k, n))
        lo = rng.randrange(0, n - k + 1)
        if it % 2 == 0:  # every other window around a node of the critical path (module docstring)
            slack = _slack(problem, cur)
            crit = [i for i, v in enumerate(order) if slack[v] <= 1e-9 * max(1.0, cur.makespan)]
            if crit:
                lo = max(0, min(n - k, rng.choice(crit) - rng.randrange(k)))
        free = order[lo:lo + k]
        q = _tails(problem, cur)
        donors = _donors(problem, cur, set(free), rng, k)
        prob, var = _sub_model(problem, cur, free, donors, order, q)
        left = deadline - time.perf_counter()
        if left <= 0.05:
            break
        slice_end = time.perf_counter() + min(slice_s, left)
        prob.solve(solver_for(slice_end))
        status = pulp.LpStatus[prob.status]
        proven = status == "Optimal" and prob.sol_status == pulp.LpSolutionOptimal
        took = time.perf_counter() - slice_end + min(slice_s, left)
        k = min(K_MAX, k + 1) if proven else max(K_MIN, k - 2)
        if stats is not None:
            stats.append((len(free), status, proven, round(took, 2)))
        if status != "Optimal":
            continue
        new = _neighbour(problem, cur, free, order, var)
        if new is None:
            continue
        tol = 1e-9 * max(1.0, cur.makespan)
        if new.makespan < cur.makespan - tol or (
                new.makespan <= cur.makespan + tol and sum(new.finish.values()) < sum(cur.finish.values()) - tol):
            if log is not None and new.makespan < cur.makespan - tol:
                log.append((time.perf_counter() - t0, new.makespan))
            cur = new
    return cur

