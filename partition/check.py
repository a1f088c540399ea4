"""Solver-independent check of a plan against its inputs.

`check_schedule` recomputes everything from the plan's units, points and times: each node on a
unit and point its profile allows, finish = start + latency, precedence with transfer times,
at most ``ps_cores`` PS nodes running at any instant, resources summed per unit within capacity,
makespan = the latest finish, or more where a loop-carried edge u -> v (graph edges
``(src, dst, bytes, True)``) needs it: ``S_v + makespan >= F_u + transfer`` (training steps run
back to back with period = makespan), and then equal to the largest such need. Where the rows'
``runs`` differ (rlhls.partition.heft), each loop of equally often run nodes is checked on its own
(an edge between loops: the consumer starts after the transfer) and the makespan is the sum over the
loops of runs x the loop's. It returns the violations as readable lines (empty = valid).
"""

from __future__ import annotations

from .profile_io import RESOURCES, is_carry

__all__ = ["check_schedule"]


def _get(plan, key):
    return plan[key] if isinstance(plan, dict) else getattr(plan, key)


def check_schedule(plan, rows, edges, capacity, links=None, ps_cores=1, *, tol=1e-6) -> list[str]:
    bad: list[str] = []
    asg, start, point = _get(plan, "assignment"), _get(plan, "start_us"), _get(plan, "point")
    makespan = float(_get(plan, "makespan_us"))
    eps = tol * max(1.0, abs(makespan))
    table = {(r.node, r.unit, r.point): r for r in rows}
    nodes = list(dict.fromkeys(r.node for r in rows))
    runs = {r.node: float(getattr(r, "runs", 1.0)) for r in rows}
    one = len(set(runs.values())) <= 1
    chosen, finish = {}, {}
    for v in nodes:
        if v not in asg:
            bad.append(f"node {v}: not assigned")
            continue
        r = table.get((v, asg[v], str(point.get(v, "0"))))
        if r is None:
            bad.append(f"node {v}: unit {asg[v]} point {point.get(v)!r} has no profile row")
            continue
        chosen[v] = r
        s = float(start[v])
        if s < -eps:
            bad.append(f"node {v}: starts at {s:g} < 0")
        finish[v] = s + r.latency_us
    for v in asg:
        if v not in table and not any(k[0] == v for k in table):
            bad.append(f"node {v}: assigned but not in the profile")
    given_finish = None
    try:
        given_finish = _get(plan, "finish_us")
    except (KeyError, AttributeError):
        pass
    if given_finish:
        for v, f in finish.items():
            if v in given_finish and abs(float(given_finish[v]) - f) > eps:
                bad.append(f"node {v}: finish {given_finish[v]:g} != start + latency {f:g}")
    links = links or {}
    need: dict[float, float] = {}  # runs -> the period the carry edges of that loop need
    last = {r: max((f for v, f in finish.items() if runs[v] == r), default=0.0) for r in set(runs.values())}
    # one loop: the makespan is its period; several: each loop's own, checked by their sum below
    r1 = next(iter(last), 1.0)
    period = {r1: makespan / r1} if one and r1 > 0 else {}
    for e in edges:
        a, b, *nb = e
        if a not in chosen or b not in chosen:
            continue
        nbytes = float(nb[0]) if nb else 0.0
        ua, ub = chosen[a].unit, chosen[b].unit
        xfer = 0.0
        if ua != ub and (ua, ub) in links:
            lat, bw = links[(ua, ub)]
            xfer = lat + nbytes / bw
        if runs[a] != runs[b]:  # from another loop: in memory when b's loop starts, after its transfer
            if float(start[b]) < xfer - eps:
                bad.append(f"edge {a}->{b}: {b} starts at {float(start[b]):g} before the transfer from the other "
                           f"loop ({xfer:g})")
            continue
        if is_carry(e):
            r = runs[a]
            need[r] = max(need.get(r, 0.0), finish[a] + xfer - float(start[b]))
            T = period.get(r, max(last[r], need[r]))
            if float(start[b]) + T < finish[a] + xfer - eps:
                bad.append(f"carry edge {a}->{b}: next step's {b} starts at {float(start[b]) + T:g} before "
                           f"{a} finishes + transfer ({finish[a]:g} + {xfer:g})")
            continue
        if float(start[b]) < finish[a] + xfer - eps:
            bad.append(f"edge {a}->{b}: {b} starts at {float(start[b]):g} before {a} finishes + transfer "
                       f"({finish[a]:g} + {xfer:g})")
    # PS: sweep the intervals of each loop, ends before starts at equal times
    for loop in sorted(set(runs.values())):
        events = []
        for v, r in chosen.items():
            if r.unit == "PS" and r.latency_us > eps and runs[v] == loop:
                events.append((float(start[v]) + eps, 1, v))
                events.append((finish[v] - eps, -1, v))
        events.sort(key=lambda e: (e[0], e[1]))
        running = set()
        for t, d, v in events:
            if d < 0:
                running.discard(v)
            else:
                running.add(v)
                if len(running) > ps_cores:
                    bad.append(f"PS: {len(running)} nodes run at once at {t:g} us ({', '.join(sorted(running))}) "
                               f"with {ps_cores} core(s)")
                    break
    for (u, res), cap in (capacity or {}).items():
        if res == "cores" or res not in RESOURCES:
            continue
        used = sum(r.usage(res) for r in chosen.values() if r.unit == u)
        if used > cap * (1 + 1e-9) + 1e-9:
            bad.append(f"{u} {res}: uses {used:g} > capacity {cap:g}")
    if finish and one:
        lf, nd = last[r1], need.get(r1, 0.0)
        if abs(r1 * max(lf, nd) - makespan) > eps:
            what = "latest finish" if lf >= nd else "period the carry edges need"
            bad.append(f"makespan {makespan:g} != {what} {max(lf, nd):g}" + (f" x runs {r1:g}" if r1 != 1.0 else ""))
    elif finish:
        total = sum(r * max(last[r], need.get(r, 0.0)) for r in last)
        if abs(total - makespan) > eps:
            bad.append(f"makespan {makespan:g} != {total:g}, the sum over the loops of runs x the loop's makespan")
    return bad
