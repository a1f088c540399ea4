"""The normalised partitioning problem, HEFT list scheduling and the single-unit baselines.

`Problem` gathers profile rows, edges, capacities, links and the PS core count once, in a form the
ILP, HEFT and the checker share. `heft(problem)` is insertion-based HEFT (Topcuoglu et al. 2002)
extended to this model: design points are alternatives of a unit, transfers cost
``latency_us + bytes / bytes_per_us`` across units, PS nodes run on ``ps_cores`` identical cores
(no overlap per core), PL/AIE are spatial (no time conflict) and resources are summed over all
nodes on a unit (AP-DRL eq. 7). Capacities are met greedily, keeping a reserve for nodes that
have no other unit; if a node finds no option that fits, HEFT gives up (None).

`baselines(problem)`: all-PS, all-PL, all-AIE (HEFT restricted to one unit; None where some node
cannot run there or the unit's capacity cannot hold them) and HEFT itself.

The cost of a schedule (`semi_active` computes it; the ILP minimises it; ``rlhls perf`` reports it
for a plan): nodes run ``runs`` times per training step (the profile rows' ``runs``: PPO's GAE once
per rollout of epochs x minibatches steps, DDPG's actor every policy_frequency steps, TRPO's FVP and
value-fit counts; default once). Nodes that run equally often form a loop; the loops run one after
another, each scheduled on its own, and the makespan of one training step is the sum over the loops
of runs x the loop's makespan. Within a loop: precedence + transfer on every edge, PS nodes on
``ps_cores`` cores one at a time per core, PL/AIE side by side, loop-carried edges within the loop
give that loop's period. An edge between two loops is an input in memory when the consumer's loop
starts: ``S_dst >= transfer`` (its transfer still counts, the producer's finish does not); a
loop-carried edge between loops likewise. With every node once this is one loop, the model above.
"""

from __future__ import annotations

import math
import numbers
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import overload

from rlhls.core.errors import RlhlsError

from .profile_io import MAX_NODES, MAX_PS_CORES, UNITS, ProfileRow, is_carry, topo_order

__all__ = ["Problem", "Schedule", "heft", "baselines", "semi_active", "carry_span", "local_search"]

EPS = 1e-9


@dataclass
class Schedule:
    """A complete schedule: option per node, times, PS core per PS node."""

    option: dict  # node -> ProfileRow
    start: dict
    finish: dict
    core: dict  # PS node -> core index
    makespan: float  # of one training step: sum over the loops of runs x the loop's makespan
    loops: dict = field(default_factory=dict)  # runs -> makespan of one run of that loop


class Problem:
    """Inputs normalised: nodes in topological order, options per node, preds/succs, costs."""

    def __init__(self, rows: Iterable[ProfileRow], edges: Iterable[tuple], capacity: dict | None = None,
                 links: dict | None = None, ps_cores: int | None = 1, runs: dict | None = None) -> None:
        rows = list(rows)
        if not rows:
            raise RlhlsError("profile: no rows; expected one row per node x unit")
        self.rows = rows
        self.options: dict[str, list[ProfileRow]] = {}
        for r in rows:
            self.options.setdefault(r.node, []).append(r)
        if len(self.options) > MAX_NODES:
            raise RlhlsError(f"profile: {len(self.options)} nodes, more than the {MAX_NODES} a partition takes")
        for s, d, *_ in edges:
            for v in (s, d):
                if v not in self.options:
                    raise RlhlsError(f"graph: node '{v}' has no profile rows; expected every graph node to be profiled")
        # runs per training step (module docstring): `runs` {node: runs} or the rows' own
        self.runs: dict[str, float] = self._node_runs(rows, runs)
        carry = [(e[0], e[1], float(e[2])) for e in edges if is_carry(e)]
        dag = [(s, d, float(b[0]) if b else 0.0) for s, d, *b in (e for e in edges if not is_carry(e))]
        self.nodes = topo_order(list(self.options), dag)
        same = [e for e in dag if self.runs[e[0]] == self.runs[e[1]]]
        cross = [e for e in dag if self.runs[e[0]] != self.runs[e[1]]]
        # loop-carried edges within a loop (u -> v in its next run): S_v + T_loop >= F_u + transfer
        self.carry = [e for e in carry if self.runs[e[0]] == self.runs[e[1]]]
        self.edges = same  # precedence + transfer
        # between loops (DAG edges, then carry edges): S_dst >= transfer
        self.release = cross + [e for e in carry if self.runs[e[0]] != self.runs[e[1]]]
        self.loops: dict[float, list[str]] = {}  # runs -> its nodes, in topological order
        for v in self.nodes:
            self.loops.setdefault(self.runs[v], []).append(v)
        self.carry_of: dict[float, list] = {r: [e for e in self.carry if self.runs[e[0]] == r] for r in self.loops}
        self.pruned = self._prune()
        self.index: dict[str, int] = {v: i for i, v in enumerate(self.nodes)}
        self.preds: defaultdict[str, list[tuple[str, float]]] = defaultdict(list)  # node -> [(pred, bytes)]
        self.succs: defaultdict[str, list[tuple[str, float]]] = defaultdict(list)
        for s, d, b in self.edges:
            self.preds[d].append((s, b))
            self.succs[s].append((d, b))
        self.rel_preds: defaultdict[str, list[tuple[str, float]]] = defaultdict(list)  # release edges into a node
        self.cross_preds: defaultdict[str, list[str]] = defaultdict(list)  # DAG edges from other loops
        self.cross_succs: defaultdict[str, list[str]] = defaultdict(list)
        for s, d, b in self.release:
            self.rel_preds[d].append((s, b))
        for s, d, _ in cross:
            self.cross_preds[d].append(s)
            self.cross_succs[s].append(d)
        capacity = dict(capacity or {})
        cores = capacity.pop(("PS", "cores"), None)
        if ps_cores is None:
            ps_cores = cores if cores else 1
        if isinstance(ps_cores, bool) or not isinstance(ps_cores, numbers.Real) or not ps_cores <= MAX_PS_CORES:
            raise RlhlsError(f"PS cores {ps_cores!r}: expected a whole number in 1..{MAX_PS_CORES}")
        self.ps_cores: int = max(1, int(float(ps_cores)))  # a Real <= MAX_PS_CORES: float is exact
        # (unit, resource) -> capacity; (src unit, dst unit) -> (latency us, bytes per us)
        self.capacity: dict[tuple[str, str], float] = {k: float(v) for k, v in capacity.items()}
        self.links: dict[tuple[str, str], tuple[float, float]] = {
            k: (float(a), float(b)) for k, (a, b) in (links or {}).items()}

    @staticmethod
    def _node_runs(rows, runs) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in rows:
            x = float(getattr(r, "runs", 1.0)) if runs is None else float(runs.get(r.node, 1.0))
            if not math.isfinite(x) or x < 0:
                raise RlhlsError(f"profile: node '{r.node}' runs {x!r} times per step; expected a number >= 0")
            if r.node in out and out[r.node] != x:
                raise RlhlsError(f"profile: node '{r.node}' has rows that run {out[r.node]:g} and {x:g} times per "
                                 "step; expected one value per node")
            out[r.node] = x
        return out

    @property
    def multi(self) -> bool:
        """Nodes run at more than one rate: several loops."""
        return len(self.loops) > 1

    def weighted(self, loops: dict) -> float:
        """The makespan of a training step from the loops' {runs: makespan}."""
        return sum(r * t for r, t in loops.items())

    def release_time(self, v, option: dict) -> float:
        """The earliest start of `v` that its inputs from other loops allow (``option``: of those placed)."""
        u = option[v].unit
        return max((self.transfer(nb, option[p].unit, u) for p, nb in self.rel_preds.get(v, ()) if p in option),
                   default=0.0)

    def _prune(self) -> int:
        """Drop options dominated within their unit (no faster, and no cheaper in any resource):
        the unit fixes every transfer, and a shorter latency only relaxes every constraint."""
        dropped = 0
        for v, opts in self.options.items():
            keep = []
            for i, o in enumerate(opts):
                res = set(o.resources)
                dom = False
                for j, q in enumerate(opts):
                    if j == i or q.unit != o.unit:
                        continue
                    keys = res | set(q.resources)
                    if q.latency_us <= o.latency_us and all(q.usage(r) <= o.usage(r) for r in keys):
                        strict = q.latency_us < o.latency_us or any(q.usage(r) < o.usage(r) for r in keys)
                        if strict or j < i:  # equal twins: keep the first
                            dom = True
                            break
                if not dom:
                    keep.append(o)
            dropped += len(opts) - len(keep)
            self.options[v] = keep
        return dropped

    # -- costs -------------------------------------------------------------------------------

    def transfer(self, nbytes: float, src_unit: str, dst_unit: str) -> float:
        if src_unit == dst_unit:
            return 0.0
        link = self.links.get((src_unit, dst_unit))
        if link is None:
            return 0.0
        return link[0] + nbytes / link[1]

    def units_of(self, node) -> list[str]:
        return list(dict.fromkeys(o.unit for o in self.options[node]))

    def min_latency(self, node) -> float:
        return min(o.latency_us for o in self.options[node])

    def heads_tails(self):
        """Longest min-latency path before each node's start (head) and after its finish (tail)."""
        head, tail = {}, {}
        for v in self.nodes:
            head[v] = max((head[p] + self.min_latency(p) for p, _ in self.preds[v]), default=0.0)
        for v in reversed(self.nodes):
            tail[v] = max((self.min_latency(s) + tail[s] for s, _ in self.succs[v]), default=0.0)
        return head, tail

    def serial_horizon(self) -> float:
        """A makespan every capacity-feasible assignment reaches: run all nodes one after another."""
        return self.weighted(self.serial_loops())

    def serial_loops(self) -> dict:
        """{runs: a makespan of that loop every capacity-feasible assignment reaches}: its nodes one
        after another, after every input from another loop has arrived."""
        def most(s, d, b):
            return max((self.transfer(b, a.unit, c.unit) for a in self.options[s] for c in self.options[d]),
                       default=0.0)

        total = dict.fromkeys(self.loops, 0.0)
        for v in self.nodes:
            total[self.runs[v]] += max(o.latency_us for o in self.options[v])
        for s, d, b in self.edges + self.release:
            total[self.runs[d]] += most(s, d, b)
        # carry u -> v: S_v + T >= F_u + x holds with F_u <= the serial total, T = total + max x
        for r, carry in self.carry_of.items():
            total[r] += max((most(s, d, b) for s, d, b in carry), default=0.0)
        return total

    def constrained(self) -> list[tuple[str, str]]:
        """(unit, resource) pairs with a capacity that some option actually uses."""
        return [(u, r) for (u, r) in self.capacity
                if any(o.unit == u and o.usage(r) > 0 for o in self.rows)]


def semi_active(problem: Problem, option: dict, core: dict, order_key: dict, cutoff: float | None = None) -> Schedule:
    """Earliest start times for fixed options and per-core PS sequences (ordered by ``order_key``;
    a core runs the nodes of one loop at a time: the sequences are per loop and core). The
    schedule's makespan is the cost of a training step (module docstring).

    ``cutoff``: when the latest finishes already exceed it, the carry edges' period is not computed
    (the makespan returned is then only a lower bound, above ``cutoff``)."""
    seq = defaultdict(list)
    for v, c in core.items():
        seq[problem.runs[v], c].append(v)
    prev_on_core = {}
    for c, vs in seq.items():
        vs.sort(key=lambda v: (order_key[v], problem.index[v]))
        for a, b in zip(vs, vs[1:]):
            prev_on_core[b] = a
    # Kahn over precedence + core chains
    extra = defaultdict(list)
    indeg = {v: len(problem.preds[v]) for v in problem.nodes}
    for b, a in prev_on_core.items():
        extra[a].append(b)
        indeg[b] += 1
    ready = [v for v in problem.nodes if indeg[v] == 0]
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    rel = {v: problem.release_time(v, option) for v in problem.rel_preds}
    while ready:
        v = ready.pop()
        o = option[v]
        t = rel.get(v, 0.0)
        for p, nb in problem.preds[v]:
            t = max(t, finish[p] + problem.transfer(nb, option[p].unit, o.unit))
        if v in prev_on_core:
            t = max(t, finish[prev_on_core[v]])
        start[v], finish[v] = t, t + o.latency_us
        for w in [s for s, _ in problem.succs[v]] + extra[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    if len(start) != len(problem.nodes):
        raise RuntimeError("core order contradicts the precedence graph")
    loops = {r: max((finish[v] for v in vs), default=0.0) for r, vs in problem.loops.items()}
    makespan = problem.weighted(loops)
    if cutoff is not None and makespan > cutoff:
        return Schedule(dict(option), start, finish, dict(core), makespan, loops)
    for r, carry in problem.carry_of.items():
        if carry and carry_span(problem, option, start, finish, carry) > loops[r] + EPS:
            loops[r], d = _min_period(problem, option, prev_on_core, loops[r], problem.loops[r], carry, rel)
            start.update(d)
            finish.update({v: d[v] + option[v].latency_us for v in d})
    return Schedule(dict(option), start, finish, dict(core), problem.weighted(loops), loops)


def carry_span(problem: Problem, option: dict, start: dict, finish: dict, carry=None) -> float:
    """The least period the loop-carried edges (default all within loops) allow: max over u -> v of
    F_u + transfer - S_v."""
    return max((finish[u] + problem.transfer(b, option[u].unit, option[v].unit) - start[v]
                for u, v, b in (problem.carry if carry is None else carry)), default=0.0)


def _min_period(problem: Problem, option: dict, prev_on_core: dict, lo: float, nodes=None, carry=None,
                rel=None):
    """Least period T (and earliest starts for it) for fixed options and PS core sequences.

    Difference constraints S_b - S_a >= w: precedence (latency + transfer), core chains (latency),
    carry u -> v (t_u + transfer - T), S >= its release time (``rel``; 0), and T >= every finish; over
    ``nodes`` (one loop; default all) with its ``carry`` edges. Longest paths (Bellman-Ford)
    at a trial T; a positive cycle (through carry arcs) means T is below that cycle's ratio, which
    is a lower bound, so T jumps to it; otherwise T takes a Newton step on the convex, decreasing
    max finish(T) - T (never past the optimum). Ends when max finish <= T: exact, not bisection.
    """
    nodes = problem.nodes if nodes is None else nodes
    inside = set(nodes)
    rel = rel or {}
    lat = {v: option[v].latency_us for v in nodes}
    arcs = [(a, b, lat[a] + problem.transfer(nb, option[a].unit, option[b].unit), 0)
            for a, b, nb in problem.edges if b in inside]
    arcs += [(a, b, lat[a], 0) for b, a in prev_on_core.items() if b in inside]
    arcs += [(u, v, lat[u] + problem.transfer(nb, option[u].unit, option[v].unit), 1)
             for u, v, nb in (problem.carry if carry is None else carry)]
    T = lo
    n = len(nodes)
    for _ in range(10000):
        d = {v: rel.get(v, 0.0) for v in nodes}
        cnt = dict.fromkeys(nodes, 0)
        pred: dict[str, tuple[str, float, int]] = {}  # node -> the arc that last raised it
        tol = 1e-12 * max(1.0, T)
        last = None
        for _round in range(n + 1):
            last = None
            for a, b, w, c in arcs:
                val = d[a] + w - c * T
                if val > d[b] + tol:
                    d[b], cnt[b], pred[b] = val, cnt[a] + c, (a, w, c)
                    last = b
            if last is None:
                break
        if last is not None:  # positive cycle: walk back into it, then around it
            v = last
            for _k in range(n):
                v = pred[v][0]
            wsum, k, u = 0.0, 0, v
            while True:
                a, w, c = pred[u]
                wsum, k, u = wsum + w, k + c, a
                if u == v:
                    break
            T = max(T * (1 + 1e-15), wsum / k) if k else T * (1 + 1e-9)
            continue
        end = max(nodes, key=lambda v: d[v] + lat[v])
        M = d[end] + lat[end]
        if M <= T + tol * 10:
            return T, d
        T = T + (M - T) / (1 + cnt[end])
    raise RuntimeError("no period found for the loop-carried edges")


def _rank(problem: Problem, units) -> dict:
    def avg_lat(v):
        ls = [o.latency_us for o in problem.options[v] if units is None or o.unit in units]
        return sum(ls) / len(ls) if ls else 0.0

    rank: dict[str, float] = {}
    for v in reversed(problem.nodes):
        best = 0.0
        uv = [u for u in problem.units_of(v) if units is None or u in units]
        for s, nb in problem.succs[v]:
            us = [u for u in problem.units_of(s) if units is None or u in units]
            pairs = [problem.transfer(nb, a, b) for a in uv for b in us] or [0.0]
            best = max(best, sum(pairs) / len(pairs) + rank[s])
        rank[v] = avg_lat(v) + best
    return rank


SHARES = (1.0, 0.5, 0.25, 0.125, 1 / 16, 1 / 32, 1 / 64)


def heft(problem: Problem, units=None) -> Schedule | None:
    """Insertion-based HEFT; ``units`` restricts the units used. None if capacities defeat it.

    Greedy earliest finish spends a capacity on the first nodes (their fastest design points);
    so HEFT also runs with each option limited to a share of every capacity (1, 1/2, ... 1/64,
    falling back to the smallest option where none fits) and keeps the best schedule.
    """
    best = None
    for share in SHARES if problem.constrained() else (1.0,):
        s = _heft(problem, units, share)
        if s is not None and (best is None or s.makespan < best.makespan - EPS):
            best = s
    return best


def _heft(problem: Problem, units, share: float) -> Schedule | None:
    opts = {v: [o for o in problem.options[v] if units is None or o.unit in units] for v in problem.nodes}
    cons0 = problem.constrained()
    if share < 1.0:
        for v, os_ in opts.items():
            ok = [o for o in os_
                  if all(o.usage(r) <= share * problem.capacity[(u, r)] for (u, r) in cons0 if u == o.unit)]
            if not ok:  # keep the least-using option per unit
                ok = [min((o for o in os_ if o.unit == u), key=lambda o: sum(o.resources.values()))
                      for u in dict.fromkeys(o.unit for o in os_)]
            opts[v] = ok
    if any(not o for o in opts.values()):
        return None
    rank = _rank(problem, units)
    cons = problem.constrained()
    used: defaultdict[tuple[str, str], float] = defaultdict(float)
    # reserve: what nodes with a single unit must still take of each constrained resource
    forced = {}
    for v in problem.nodes:
        us = {o.unit for o in opts[v]}
        forced[v] = {(u, r): (min(o.usage(r) for o in opts[v]) if us == {u} else 0.0) for (u, r) in cons}
    reserve: defaultdict[tuple[str, str], float] = defaultdict(float)
    for v in problem.nodes:
        for k, a in forced[v].items():
            reserve[k] += a
    carry_out: defaultdict[str, list[tuple[str, float]]] = defaultdict(list)
    for u, w, nb in problem.carry:
        carry_out[u].append((w, nb))
    # sorted (start, finish) per core, per loop (a core runs one loop at a time)
    busy: dict[float, list[list[tuple[float, float]]]] = {r: [[] for _ in range(problem.ps_cores)]
                                                          for r in problem.loops}
    option: dict[str, ProfileRow] = {}
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    core: dict[str, int] = {}
    # inputs from other loops: placed first, so that their transfer is known (not waited for)
    waiting = {v: len(problem.preds[v]) + len(problem.cross_preds.get(v, ())) for v in problem.nodes}
    ready = [v for v in problem.nodes if waiting[v] == 0]
    while ready:
        ready.sort(key=lambda v: (-rank[v], problem.index[v]))
        v = ready.pop(0)
        for k, a in forced[v].items():
            reserve[k] -= a
        best = None
        for o in opts[v]:
            if any(used[(o.unit, r)] + o.usage(r) + reserve[(o.unit, r)] > problem.capacity[(o.unit, r)] + EPS
                   for (u, r) in cons if u == o.unit):
                continue
            t = max((problem.transfer(nb, option[p].unit, o.unit) for p, nb in problem.rel_preds.get(v, ())
                     if p in option), default=0.0)
            for p, nb in problem.preds[v]:
                t = max(t, finish[p] + problem.transfer(nb, option[p].unit, o.unit))
            c = None
            if o.unit == "PS":
                best_c: tuple[float, int] | None = None
                for ci, slots in enumerate(busy[problem.runs[v]]):
                    s = _earliest_gap(slots, t, o.latency_us)
                    if best_c is None or s < best_c[0] - EPS:
                        best_c = (s, ci)
                assert best_c is not None  # ps_cores >= 1
                t, c = best_c
            load = sum(o.usage(r) / problem.capacity[(o.unit, r)] for (u, r) in cons if u == o.unit)
            end = t + o.latency_us
            for w, nb in carry_out[v]:  # the next step's w waits for v's result
                if w in start:
                    end = max(end, t + o.latency_us + problem.transfer(nb, o.unit, option[w].unit) - start[w])
            key = (end, load, UNITS.index(o.unit))
            if best is None or key < best[0]:
                best = (key, o, t, c)
        if best is None:
            return None
        _, o, t, c = best
        option[v], start[v], finish[v] = o, t, t + o.latency_us
        for (u, r) in cons:
            if u == o.unit:
                used[(u, r)] += o.usage(r)
        if c is not None:
            core[v] = c
            busy[problem.runs[v]][c].append((t, t + o.latency_us))
            busy[problem.runs[v]][c].sort()
        for succ in [w for w, _ in problem.succs[v]] + problem.cross_succs.get(v, []):
            waiting[succ] -= 1
            if waiting[succ] == 0:
                ready.append(succ)
    if problem.carry or problem.release:  # the period the carry edges need; inputs placed after their reader
        return semi_active(problem, option, core, start)
    loops = {r: max((finish[v] for v in vs), default=0.0) for r, vs in problem.loops.items()}
    return Schedule(option, start, finish, core, problem.weighted(loops), loops)


def _earliest_gap(slots, ready: float, length: float) -> float:
    t = ready
    for a, b in slots:
        if t + length <= a + EPS:
            return t
        t = max(t, b)
    return t


def baselines(problem: Problem, heft_schedule: Schedule | None = None) -> dict:
    """Makespans of all-PS, all-PL, all-AIE and HEFT (None where not possible)."""
    out = {}
    for u in UNITS:
        s = heft(problem, units=(u,))
        out[f"all_{u}"] = None if s is None else s.makespan
    if heft_schedule is None:
        heft_schedule = heft(problem)
    out["HEFT"] = None if heft_schedule is None else heft_schedule.makespan
    return out


@overload
def local_search(problem: Problem, sched: Schedule, max_evals: int = ..., deadline: float | None = ...) -> Schedule:
    ...
@overload
def local_search(problem: Problem, sched: None, max_evals: int = ..., deadline: float | None = ...) -> None: ...
def local_search(problem: Problem, sched: Schedule | None, max_evals: int = 20000,
                 deadline: float | None = None) -> Schedule | None:
    """Improve a schedule by moving one node at a time to another option (and PS core), or two
    nodes together (one faster, one cheaper to make room in a capacity), each move re-evaluated
    exactly (:func:`semi_active`: transfers, PS core sequences, carry edges). A move is taken when
    it shortens the makespan, or keeps it and frees capacity (so later moves have room); first
    improvement, until a sweep over all nodes finds none, ``max_evals`` evaluations are spent or
    ``time.perf_counter()`` passes ``deadline``.
    The result is never worse than ``sched``; it is the incumbent the ILP starts from.
    """
    if sched is None:
        return None
    cons = [k for k in problem.constrained()]
    cap = problem.capacity
    nodes = problem.nodes
    C = problem.ps_cores

    def load_of(option):
        used = defaultdict(float)
        for o in option.values():
            for (u, r) in cons:
                if u == o.unit:
                    used[(u, r)] += o.usage(r)
        return used

    def frac(used):
        return sum(used[k] / cap[k] for k in cons if cap[k] > 0)

    cur = sched
    used = load_of(cur.option)
    cur_load = frac(used)
    evals = 0
    tol = 1e-9

    def better(ms, ld):
        return ms < cur.makespan * (1 - tol) - tol or (ms <= cur.makespan * (1 + tol) + tol and ld < cur_load - 1e-12)

    def fits(delta):
        return all(used[k] + d <= cap[k] + EPS for k, d in delta.items() if d > 0)

    def delta_of(changes):
        d = defaultdict(float)
        for v, o in changes:
            old = cur.option[v]
            for (u, r) in cons:
                if u == old.unit:
                    d[(u, r)] -= old.usage(r)
                if u == o.unit:
                    d[(u, r)] += o.usage(r)
        return d

    def evaluate(changes, cores):
        nonlocal evals
        evals += 1
        option = dict(cur.option)
        core = dict(cur.core)
        for (v, o), c in zip(changes, cores):
            option[v] = o
            core.pop(v, None)
            if o.unit == "PS":
                core[v] = c
        try:
            return semi_active(problem, option, core, cur.start, cutoff=cur.makespan * (1 + tol) + tol)
        except RuntimeError:
            return None

    def core_choices(v, o):
        if o.unit != "PS":
            return [None]
        return [c for c in range(C) if not (cur.option[v].unit == "PS" and cur.core.get(v) == c and o is cur.option[v])]

    improved = True
    def spent() -> bool:
        return evals >= max_evals or (deadline is not None and time.perf_counter() > deadline)

    while improved and not spent():
        improved = False
        slack = _slack(problem, cur)
        for v in nodes:
            if spent():
                break
            for o in problem.options[v]:
                for c in core_choices(v, o):
                    if o is cur.option[v] and c is None:
                        continue
                    cv = cur.option[v]
                    if o.unit == cv.unit and o.unit != "PS":
                        # same unit, same transfers: slower only pays when it frees capacity;
                        # faster only when v is critical (no slack)
                        if o.latency_us > cv.latency_us + slack[v] + EPS * max(1.0, cur.makespan):
                            continue
                    d = delta_of([(v, o)])
                    ld = cur_load + sum(x / cap[k] for k, x in d.items() if cap[k] > 0)
                    if fits(d):
                        new = evaluate([(v, o)], [c])
                        if new is not None and better(new.makespan, ld):
                            cur, cur_load = new, ld
                            used = load_of(cur.option)
                            improved = True
                        continue
                    # over a capacity: only worth pairing when the move alone would shorten the makespan
                    if o.latency_us >= cur.option[v].latency_us:
                        continue
                    new = evaluate([(v, o)], [c])
                    if new is None or not new.makespan < cur.makespan * (1 - tol) - tol:
                        continue
                    over = {k for k, x in d.items() if x > 0 and used[k] + x > cap[k] + EPS}
                    done = False
                    for w in nodes:
                        if w == v or cur.option[w].unit not in {k[0] for k in over}:
                            continue
                        for o2 in problem.options[w]:
                            if o2 is cur.option[w] or o2.unit == "PS":
                                continue
                            d2 = delta_of([(v, o), (w, o2)])
                            if not fits(d2):
                                continue
                            ld2 = cur_load + sum(x / cap[k] for k, x in d2.items() if cap[k] > 0)
                            new2 = evaluate([(v, o), (w, o2)], [c, None])
                            if new2 is not None and better(new2.makespan, ld2):
                                cur, cur_load = new2, ld2
                                used = load_of(cur.option)
                                improved = done = True
                                break
                        if done or spent():
                            break
    return cur


def _slack(problem: Problem, sched: Schedule) -> dict:
    """Latest start - start per node for the schedule's options and PS core sequences (DAG and
    core chains only, carry edges ignored): how much a node may slow down without delaying the end
    of its loop."""
    option = sched.option
    nxt = {}
    seq = defaultdict(list)
    for v, c in sched.core.items():
        seq[problem.runs[v], c].append(v)
    for vs in seq.values():
        vs.sort(key=lambda v: (sched.start[v], problem.index[v]))
        for a, b in zip(vs, vs[1:]):
            nxt[a] = b
    # reverse topological order of the precedence + chain graph: by start time descending
    order = sorted(problem.nodes, key=lambda v: (sched.start[v], problem.index[v]), reverse=True)
    late: dict[str, float] = {}
    for v in order:
        lf = sched.loops.get(problem.runs[v], sched.makespan)
        for s, nb in problem.succs[v]:
            if s in late:
                lf = min(lf, late[s] - problem.transfer(nb, option[v].unit, option[s].unit))
        if v in nxt and nxt[v] in late:
            lf = min(lf, late[nxt[v]])
        late[v] = lf - option[v].latency_us
    return {v: max(0.0, late[v] - sched.start[v]) for v in problem.nodes}
