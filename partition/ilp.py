"""The partitioning ILP: AP-DRL §IV-C (eq. 2-7) with transfers, PS cores and design points.

Variables: ``x[i,k]`` (node i takes option k = a (unit, point) profile row), start ``S_i``,
makespan ``T``. With ``z_iu = sum_k on u x_ik`` and ``F_i = S_i + sum_k t_k x_ik``:

* eq. 2/3/6  minimise T;  T >= F_i + tail_i for every node (tail_i = least time its successors
  still need; for sinks 0, which is eq. 6);  T <= H, the HEFT makespan (or a serial horizon).
* eq. 4      sum_k x_ik = 1 — one unit and one design point per node; units without profile rows
  for a node are simply not among its options.
* eq. 5      S_j >= F_i for every edge i->j, plus the transfer when the ends sit on different
  units: for each unit u of i,  S_j >= F_i + sum_v c(u,v) z_jv - max_v c(u,v) (1 - z_iu), and
  the mirror row for each unit v of j,  S_j >= F_i + sum_u c(u,v) z_iu - max_u c(u,v) (1 - z_jv);
  c(u,v) = latency_us + bytes / bytes_per_us of the link u->v (0 when not listed). Either row
  alone is exact; with both, the LP cannot halve a transfer by splitting one end over two units.
* eq. 7      sum over nodes of usage x <= capacity for every (unit, resource) given, written on
  integer counts ``n[u,r,a]`` = number of options chosen that use exactly a of r on u
  (n = sum of those x;  sum_a a n <= capacity). The same feasible set; it gives the solvers whole
  counts to branch and cut on ("how many nodes take 32 PLIO streams") where the row on x alone
  offers hundreds of binaries.
* carry      loop-carried edges u -> v (from one training step to the next, steps back to back
  with period T): T + S_v >= F_u + transfer, linearised as eq. 5.
* PS cores   PL and AIE are spatial (nodes overlap freely); PS nodes are assigned to C identical
  cores (``w[i,c]``, symmetry broken: the n-th PS-capable node in topological order uses a core
  < n, and core c only if an earlier node uses core c-1) and two PS nodes on one core do not overlap
  (ordering binary ``o_ij``, per-pair big-M M_ij = (H - tail_i) - head_j). Pairs already ordered by a
  path need nothing. With C = 1 the core variables vanish. A valid cut ``C T >= sum of PS latencies`` helps the bound.

Node runs (partition/heft.py): nodes that run equally often per training step form a loop with a
makespan ``T_r`` of its own; the objective is the cost of a training step, ``sum_r r T_r`` (with
every node once: T). Every row above holds within a loop (``T_r`` for its nodes; PS pairs only within
a loop: the loops run one after another); an edge between two loops is ``S_dst >= transfer`` (eq. 5's
rows without the source's finish); each loop's T_r is bounded by ``(H - sum of the other loops'
r' x least makespans) / r``. This is the quantity `semi_active` evaluates and ``rlhls perf`` reports.

Two steps: the model is solved first without the PS core and pair rows (the relaxation keeps
``C T >= PS work``). Its plan, with PS cores coloured greedily by the solver's start times and
the earliest starts recomputed, is feasible; when its makespan equals the relaxation's optimum it
is optimal for the whole model, which is the case on every AP-DRL graph (the PS runs few, short
nodes there). Otherwise the whole model is solved, below the best plan yet, in the time left;
the relaxation's optimum stays a valid bound. The pair rows were half of the rows and most of the
branching on DDPG and PPO while deciding nothing there.

Incumbent: HEFT gives H. When the solver stops at the time limit unproven, a local search (one
node to another option or PS core, or a pair that trades a faster option for a cheaper one; kept
when the exact makespan shrinks) improves the plan it leaves.

Pre-solve (exact: every plan it removes is slower than the horizon H): per (node, unit) the
earliest start (fastest options + least transfers of the predecessors) and least tail; options
that cannot finish within H go, and a unit goes when none of its options is left (repeated to a
fixpoint). These windows give S bounds, ``S_i >= head(unit)``, ``T >= F_i + tail(unit)`` and the
PS big-Ms; PS pairs whose windows allow one order only get no ordering binary; a capacity no
choice of options can exceed gets no row.

Warm start: the HEFT schedule through ``Highs.setSolution`` for HiGHS. CBC gets none (the bundled
2.10.3, given a MIP start, can take the makespan for integral and stop at a worse "optimum"); the
horizon H still bounds its search. CBC makes one round of root cuts (``passC 1``). HiGHS runs
with a relative gap of 1e-9 (its default 1e-4 stopped 0.004 % short of the optimum on
PPO-MsPacman).
After solving, start times are recomputed as the earliest ones for the solver's units, points and
PS core sequences (clears solver tolerances); the result is never worse than HEFT.

Tie-break (after solving): many plans share the optimal makespan (nodes off the critical path);
nodes are moved off the PS or between PL and AIE, one at a time, when the makespan does not grow,
the capacities hold and the PS busy time plus the time spent on transfers between units (eq. 5
and carry edges) shrinks — of equally fast plans, the one that leaves the PS most free (it also
steps the environment and runs the host loop, AP-DRL Fig. 10) and moves the least data between
units. HEPPO-GAE's GAE unit, off the critical path of a minibatch step, goes to the PL this way.

Large graphs (more than ``lns.LNS_NODES`` nodes, with a time limit; ``solve(lns=False)`` keeps the
whole model): the whole model found no plan in 30 s on a 300-node random DAG, and its bound after
60 s was its LP relaxation's. Instead: the LP relaxation of the model without PS pair rows (a
bound), its options rounded within the capacities and list-scheduled (partition/relax.py); when
that LP was quick, the same model as a MIP (HiGHS) with PS work held to the share of the cores the
best plan keeps busy, list-scheduled (the relaxation alone crowds the PS); the best of these and
HEFT improved by the local search, then large-neighbourhood search with the ILP as sub-solver on
windows of the incumbent (partition/lns.py) until a reserve (a tenth of the limit, or 2.5 times
that first LP, plus a fifth for the MIP, at most 0.3) is left, in which the LP is solved again
below the final makespan with rounds of the violated energy rows (partition/energy.py: PS work of
a node's ancestors, descendants, or of the nodes between two nodes, over the cores), then that
model with its energy rows as a MIP (HiGHS, one thread) until the limit: the higher of the LP's
optimum and the MIP's dual bound is the bound.

Gap: 0 when the solver proves optimality; otherwise (incumbent - bound) / incumbent, the bound
read from CBC's log ("Objective value"/"Lower bound" after a stop) or HiGHS' ``mip_dual_bound``,
and never below the model's own lower bound (critical path with least latencies; PS work / C).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from typing import Any

import pulp

from rlhls.core import procs
from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_text, process_scratch, read_json, scratch_dir
from rlhls.core.procs import library_output

from . import energy as energy_rows
from .heft import EPS, Problem, Schedule, baselines, heft, local_search, semi_active
from .lns import LNS_NODES, improve
from .plan import Plan, utilisation
from .relax import list_schedule, round_options

__all__ = ["solve", "check_capacity", "SOLVERS"]

SOLVERS = ("cbc", "highs")
LS_EVALS = 2000  # local-search budget (schedule evaluations) when the solver stops unproven
OPTIMAL, FEASIBLE, INFEASIBLE = "Optimal", "Feasible (time limit)", "Infeasible"


def _wait(proc: subprocess.Popen, deadline: float):
    """The solver process's exit code, or None when it was killed at ``deadline`` (perf_counter)."""
    try:
        return proc.wait(timeout=max(deadline - time.perf_counter(), 0.05))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


class _HiGHSWarm(pulp.HiGHS):
    """pulp.HiGHS that hands the variables' initial values to HiGHS as a start solution, and is
    cancelled at ``deadline`` (perf_counter) should HiGHS run past its own time limit.

    With a deadline the solve runs in a child process killed at the deadline: HiGHS checks its
    time limit and cancel flag only between phases, and its root cut loop ran 2.5 s past a 2 s
    limit on a 120-node graph. ``dual_bound`` is HiGHS's MIP dual bound after a solve."""

    deadline: float | None = None
    in_child: bool = False
    dual_bound: float | None = None

    def actualSolve(self, lp):
        if self.deadline is None or self.in_child:
            status = super().actualSolve(lp)
            try:
                self.dual_bound = float(lp.solverModel.getInfo().mip_dual_bound)
            except Exception:  # older highspy: no info
                self.dual_bound = None
            return status
        with scratch_dir("highs") as tmp:
            model, start, out = (os.path.join(tmp, f) for f in ("model.mps", "start.json", "solution.json"))
            vs, names, _, _ = lp.writeMPS(model, rename=1)  # MPS: JSON took 1.4 s on a 28k-row model
            with open(start, "w") as f:
                json.dump({names[v.name]: v.varValue for v in vs if v.varValue is not None}, f)
            left = max(self.deadline - time.perf_counter(), 0.05)
            code = "import sys; from rlhls.partition.ilp import _highs_child; _highs_child(*sys.argv[1:])"
            proc = procs.popen([sys.executable, "-c", code, model, start, out, repr(left), repr(time.time())],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rc = _wait(proc, self.deadline)
            try:
                res = read_json(out) if rc == 0 else None
            except (OSError, ValueError):  # no answer, or not one the child wrote whole
                res = None
            if not isinstance(res, dict):
                lp.assignStatus(pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound)
                return pulp.LpStatusNotSolved
        res["values"] = {v.name: res["values"][names[v.name]] for v in vs}
        lp.assignVarsVals(res["values"])
        lp.assignStatus(res["status"], res["sol_status"])
        self.dual_bound = res["dual_bound"]
        return res["status"]

    def callSolver(self, lp):
        import highspy

        vs = lp.variables()
        if any(v.varValue is not None for v in vs):
            sol = highspy.HighsSolution()
            sol.col_value = [float(v.varValue) if v.varValue is not None else 0.0 for v in vs]
            sol.value_valid = True
            lp.solverModel.setSolution(sol)
        timer = None
        if self.deadline is not None:  # the model's transfer to HiGHS took some of the time
            lp.solverModel.setOptionValue("time_limit", max(self.deadline - time.perf_counter(), 0.05))
        if self.deadline is not None and hasattr(lp.solverModel, "cancelSolve"):
            lp.solverModel.HandleUserInterrupt = True
            timer = threading.Timer(max(self.deadline - time.perf_counter(), 0.0), lp.solverModel.cancelSolve)
            timer.daemon = True
            timer.start()
        try:
            super().callSolver(lp)
        finally:
            if timer is not None:
                timer.cancel()


class _CbcDeadline(pulp.PULP_CBC_CMD):
    """pulp's bundled CBC, stopped at ``deadline`` (perf_counter): CBC checks its own time limit
    only between phases (its feasibility pump ran 8 s past a 2 s limit on a 120-node graph), and
    it answers SIGINT as late. Past the deadline the process is killed and the run counts as not
    solved; the caller keeps the plan it had."""

    deadline: float | None = None
    grace: float = 0.0  # killed this long after the deadline (CBC's own limit), to keep its plan

    def solve_CBC(self, lp, use_mps=True):
        if self.deadline is None:
            return super().solve_CBC(lp, use_mps)
        tmp_mps, tmp_sol = self.create_tmp_files(lp.name, "mps", "sol")
        vs, var_names, con_names, _ = lp.writeMPS(tmp_mps, rename=1)
        left = max(self.deadline - time.perf_counter(), 0.05)
        args = [self.path, tmp_mps, "-sec", f"{left:.3f}", *("-" + o for o in self.options + self.getOptions()
                                                           if not o.startswith("sec")),
                "-solve", "-printingOptions", "all", "-solution", tmp_sol]
        with open(self.optionsDict.get("logPath") or os.devnull, "w") as log:
            proc = procs.popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)  # CBC dies with rlhls
            rc = _wait(proc, self.deadline + self.grace)
        try:
            if rc != 0 or not os.path.exists(tmp_sol):
                lp.assignStatus(pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound)
                return pulp.LpStatusNotSolved
            status, values, dj, pi, slacks, sol_status = self.readsol_MPS(tmp_sol, lp, vs, var_names, con_names)
            lp.assignVarsVals(values)
            lp.assignVarsDj(dj)
            lp.assignConsPi(pi)
            lp.assignConsSlack(slacks, activity=True)
            lp.assignStatus(status, sol_status)
            return status
        finally:
            self.delete_tmp_files(tmp_mps, tmp_sol)


def _solver(name: str, deadline, log_path=None):
    """The solver, its time limit the time left to ``deadline`` (perf_counter; None: no limit)."""
    time_limit = None if deadline is None else max(deadline - time.perf_counter(), 0.05)
    if name == "cbc":
        # no MIP start (module docstring); one thread: CBC's parallel search gives other tied plans
        # run to run, and its repeatable mode (threads 100 + n) crashed on DQN-Breakout; one round
        # of root cuts, then branch: on the AP-DRL graphs more rounds cost more than they prune
        with warnings.catch_warnings():  # PuLP 3.x deprecates the bundled CBC; it is still the one installed
            warnings.simplefilter("ignore", DeprecationWarning)
            cmd = _CbcDeadline(msg=False, timeLimit=time_limit, logPath=log_path, threads=1, options=["passC 1"])
        cmd.deadline = deadline
        cmd.tmpDir = str(process_scratch())  # its model and solution files: swept if this process is killed
        return cmd
    if name == "highs":
        # HiGHS stops at a 1e-4 relative gap by default; "Optimal" here means proven
        cmd = _HiGHSWarm(msg=False, timeLimit=time_limit, threads=1, gapRel=1e-9)
        cmd.deadline = deadline
        return cmd
    raise RlhlsError(f"solver '{name}' is not known; expected one of {', '.join(SOLVERS)}")


def _highs_child(model: str, start: str, out: str, left: str, sent: str | None = None) -> None:
    """The child process of a HiGHS solve under a deadline (``_HiGHSWarm``): solves the MPS
    ``model`` from the start values in JSON file ``start`` within ``left`` s of ``sent`` (epoch
    seconds) and writes the values, statuses and bound."""
    left_s = float(left)
    if sent is not None:  # the child's start-up (imports, reading the model) took seconds on 300 nodes
        left_s -= time.time() - float(sent)
    # stop a little before the parent kills this process, so that the plan and bound get written
    deadline = time.perf_counter() + left_s - min(0.5, 0.1 * float(left))
    variables, lp = pulp.LpProblem.fromMPS(model)
    for name, value in read_json(start).items():
        v = variables[name]
        # MPS keeps 12 digits of a bound: a start at its bound can fall just outside (PuLP refuses it)
        if v.lowBound is not None:
            value = max(value, v.lowBound)
        if v.upBound is not None:
            value = min(value, v.upBound)
        v.setInitialValue(value)
    cmd = _solver("highs", deadline)
    cmd.in_child = True
    with library_output(os.devnull, fds=(1,)):
        lp.solve(cmd)
    res = {"status": lp.status, "sol_status": lp.sol_status, "dual_bound": cmd.dual_bound,
           "values": {v.name: v.varValue for v in lp.variables()}}
    atomic_write_text(out, json.dumps(res))


# ----------------------------------------------------------------------------------------------
# Capacity feasibility (assignment only: any assignment can be scheduled, so this is all of it)
# ----------------------------------------------------------------------------------------------


def _min_need(problem: Problem, key) -> float:
    u, r = key
    need = 0.0
    for v in problem.nodes:
        opts = problem.options[v]
        need += min(o.usage(r) if o.unit == u else 0.0 for o in opts)
    return need


def _assignable(problem: Problem, keys, solver: str) -> bool:
    prob = pulp.LpProblem("capacity", pulp.LpMinimize)
    x = {(v, k): prob.add_variable(f"x_{i}_{k}", cat="Binary")
         for i, v in enumerate(problem.nodes) for k in range(len(problem.options[v]))}
    prob += pulp.lpSum([])
    for v in problem.nodes:
        prob += pulp.lpSum(x[v, k] for k in range(len(problem.options[v]))) == 1
    for (u, r) in keys:
        terms = [o.usage(r) * x[v, k] for v in problem.nodes for k, o in enumerate(problem.options[v])
                 if o.unit == u and o.usage(r) > 0]
        if terms:
            prob += pulp.lpSum(terms) <= problem.capacity[(u, r)]
    prob.solve(_solver(solver, time.perf_counter() + 30))
    return pulp.LpStatus[prob.status] == "Optimal"


def check_capacity(problem: Problem, *, source: str = "capacity", solver: str = "cbc",
                   feasible_known: bool = False, rows: dict | None = None) -> None:
    """RlhlsError naming the resource and unit (and the capacity file's row, ``rows``) when no
    assignment meets the capacities.
    ``feasible_known``: a schedule within the capacities exists already (skip the assignment ILP)."""
    keys = problem.constrained()
    rows = rows or {}

    def where(key):
        return f"{source}: row {rows[key]}" if key in rows else source

    for key in keys:
        need = _min_need(problem, key)
        if need > problem.capacity[key] + EPS:
            u, r = key
            worst = max(problem.nodes, key=lambda v: min(o.usage(r) if o.unit == u else 0.0
                                                         for o in problem.options[v]))
            raise RlhlsError(
                f"{where(key)}: {u} {r} capacity {problem.capacity[key]:g} is below the {need:g} the nodes "
                f"need at least (each node at its least use of {r} on {u}; node '{worst}' alone needs "
                f"{min(o.usage(r) if o.unit == u else 0.0 for o in problem.options[worst]):g}); no assignment fits"
            )
    if feasible_known or len(keys) < 2 or _assignable(problem, keys, solver):
        return
    for key in keys:
        if _assignable(problem, [k for k in keys if k != key], solver):
            raise RlhlsError(
                f"{where(key)}: {key[0]} {key[1]} capacity {problem.capacity[key]:g} cannot be met together with "
                "the other capacities (without it an assignment exists)"
            )
    key = max(keys, key=lambda k: _min_need(problem, k) / problem.capacity[k])
    raise RlhlsError(
        f"{source}: no assignment meets the capacities together; the tightest is {key[0]} {key[1]} "
        f"(capacity {problem.capacity[key]:g}, least need {_min_need(problem, key):g})"
    )


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------


def _reach(problem: Problem):
    """Descendant sets as bit masks over topological indices."""
    desc: dict[str, int] = {}
    for v in reversed(problem.nodes):
        m = 0
        for s, _ in problem.succs[v]:
            m |= (1 << problem.index[s]) | desc[s]
        desc[v] = m
    return desc


def _loop_bounds(problem: Problem) -> dict:
    """{runs: a lower bound of that loop's makespan}: critical path at least latencies; PS work / C."""
    head, tail = problem.heads_tails()
    out = {}
    for r, vs in problem.loops.items():
        lb = max((head[v] + problem.min_latency(v) + tail[v] for v in vs), default=0.0)
        ps_only = sum(problem.min_latency(v) for v in vs if problem.units_of(v) == ["PS"])
        out[r] = max(lb, ps_only / problem.ps_cores)
    return out


def _lower_bound(problem: Problem) -> float:
    return problem.weighted(_loop_bounds(problem))


def _horizons(problem: Problem, H: float) -> dict:
    """{runs: the longest that loop can take in a step of cost at most H}: H less the other loops'
    least costs, over its runs (a loop run 0 times: its serial makespan)."""
    if not problem.multi:
        return {r: H for r in problem.loops}
    lb, serial = _loop_bounds(problem), problem.serial_loops()
    out = {}
    for r in problem.loops:
        h = serial[r] if r == 0 else (H - sum(q * lb[q] for q in problem.loops if q != r)) / r
        out[r] = max(h, 0.0) * (1 + 1e-9) + 1e-9
    return out


def _objective(var) -> float:
    """The cost of a step in the solver's solution: sum over the loops of runs x T_r."""
    return sum(r * float(t.varValue or 0.0) for r, t in var["Tl"].items())


def _cbc_bound(log_path) -> float | None:
    try:
        text = open(log_path, encoding="utf-8", errors="replace").read()
    except OSError:
        return None
    m = re.findall(r"Lower bound:\s*([-+0-9.eE]+)", text)
    if m:
        return float(m[-1])
    m = re.findall(r"best possible\s*([-+0-9.eE]+)", text)
    return float(m[-1]) if m else None


def solve(rows, edges, capacity=None, links=None, *, ps_cores=None, solver="cbc", time_limit=None,
          warm_start=True, source="capacity", lns: bool = True, seed: int = 0, runs: dict | None = None) -> Plan:
    """Optimal (or best within ``time_limit`` s) partition and schedule; see the module docstring.

    ``ps_cores`` None takes ``capacity[('PS','cores')]`` (else 1). RlhlsError when the
    capacities admit no assignment (naming the resource and unit) or for a bad solver name.
    ``lns``: graphs of more than ``lns.LNS_NODES`` nodes with a time limit take the
    large-neighbourhood search (`_solve_large`) instead of the whole model; False keeps the
    whole model for every graph (and so do graphs whose nodes run at several rates). ``seed`` seeds
    the search's windows. ``runs``: {node: runs per training step} (default the rows' ``runs``).
    """
    if solver not in SOLVERS:
        raise RlhlsError(f"solver '{solver}' is not known; expected one of {', '.join(SOLVERS)}")
    if time_limit is not None and not time_limit > 0:
        raise RlhlsError(f"time limit {time_limit} s is not positive")
    t0 = time.perf_counter()
    problem = Problem(rows, edges, capacity, links, ps_cores, runs)
    start_sched = heft(problem)
    check_capacity(problem, source=source, solver=solver, feasible_known=start_sched is not None,
                   rows=getattr(capacity, "rows", None))
    base = baselines(problem, start_sched)
    horizon = start_sched.makespan if start_sched else problem.serial_horizon()
    horizon = horizon * (1 + 1e-9) + 1e-9
    if lns and time_limit is not None and start_sched is not None and len(problem.nodes) > LNS_NODES \
            and not problem.multi:
        return _solve_large(problem, start_sched, base, solver, t0, t0 + time_limit, seed)

    # first without the PS pair rows; that optimum is the model's when its plan keeps the cores
    ts = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit  # a limit is a limit: the steps after it too
    status, proven, sched, bound, var = _run(problem, horizon, solver, deadline, start_sched if warm_start else None,
                                             ps_pairs=False)
    if var["relaxed"] and proven:
        relaxed_opt = _objective(var)
        # 1e-7: PuLP reads the solver's values to 8 significant digits
        if sched is None or sched.makespan > relaxed_opt * (1 + 1e-7) + 1e-9:
            proven, bound = False, relaxed_opt  # the PS cores bind: the whole model, below the best plan yet
            best = min((s for s in (sched, start_sched) if s is not None), key=lambda s: s.makespan, default=None)
            left = None if deadline is None else deadline - time.perf_counter()
            if left is None or left > 0:
                h = horizon if best is None else min(horizon, best.makespan * (1 + 1e-9) + 1e-9)
                status, proven, full, full_bound, var = _run(problem, h, solver, deadline,
                                                             best if warm_start else None, ps_pairs=True)
                if full_bound is not None and math.isfinite(full_bound):
                    bound = max(bound, full_bound)
                if full is not None and (best is None or full.makespan < best.makespan):
                    best = full
            sched = best
    solve_seconds = time.perf_counter() - ts
    if sched is None or (start_sched is not None and start_sched.makespan < sched.makespan - 1e-9):
        if start_sched is None:
            if status == "Infeasible":
                raise RlhlsError(f"{source}: the ILP is infeasible although each capacity alone can be met")
            raise RlhlsError(f"solver {solver} found no schedule within {time_limit} s and HEFT cannot meet "
                             "the capacities; raise --time-limit")
        sched = start_sched
    if not proven:  # stopped by the time limit: improve the plan it leaves, within the limit
        sched = local_search(problem, sched, max_evals=LS_EVALS, deadline=deadline)
    return _finish(problem, sched, proven, bound, base, solver, t0, solve_seconds, deadline)


def _finish(problem, sched, proven, bound, base, solver, t0, solve_seconds, deadline) -> Plan:
    sched = _polish(problem, sched, deadline)
    lb = _lower_bound(problem)
    if bound is not None and math.isfinite(bound):
        lb = max(lb, bound)
    if proven:
        gap = 0.0
        status_text = OPTIMAL
    else:
        gap = max(0.0, (sched.makespan - lb) / sched.makespan) if sched.makespan > 0 else 0.0
        status_text = OPTIMAL if gap <= 1e-9 else FEASIBLE
    plan = Plan(
        status=status_text,
        makespan_us=sched.makespan,
        gap=gap,
        assignment={v: sched.option[v].unit for v in problem.nodes},
        start_us={v: sched.start[v] for v in problem.nodes},
        point={v: sched.option[v].point for v in problem.nodes},
        finish_us={v: sched.finish[v] for v in problem.nodes},
        baselines=base,
        solve_seconds=time.perf_counter() - t0,
        solver=solver,
        core={v: c for v, c in sched.core.items()},
        ps_cores=problem.ps_cores,
        bound=None if proven else lb,
        latency_us={v: sched.option[v].latency_us for v in problem.nodes},
        solver_seconds=solve_seconds,
        runs={v: r for v, r in problem.runs.items() if r != 1.0},
        loops=dict(sched.loops),
    )
    plan.utilisation = utilisation(plan, problem.rows, problem.capacity)
    return plan


SUB_GRACE_S = 0.3
# of the time limit: local search by then; the packed start's MIP; the last bound's reserve (at
# least BOUND_LPS times the first LP's time: the energy rows take a second LP, at most BOUND_SHARE)
LS_SHARE, PACK_SHARE, BOUND_SHARE, BOUND_LPS = 0.15, 0.3, 0.3, 2.5
# of the limit, added to the reserve for the bound's MIP (300 nodes: +0.8 % bound in 10 s where the
# search gains 0.7 % in 35 s); below MIP_MIN_S left the MIP is not started (a child, the model in MPS)
MIP_SHARE, MIP_MIN_S = 0.2, 1.0
PACK_GATE = 0.05  # the packed start only when the first LP took less than this share of the limit


def _solve_large(problem: Problem, start: Schedule, base, solver, t0, deadline, seed) -> Plan:
    """Large graphs: the LP relaxation of the model without PS pair rows (a bound, and its options
    rounded and list-scheduled: partition/relax.py); the same model as a MIP with the PS work held
    to the share of the cores the best plan so far keeps busy (its options list-scheduled: the
    "packed" start); the best of these and HEFT improved by local search, then LNS with the ILP as
    sub-solver (partition/lns.py); at the end the LP again at the final makespan (its windows only
    tighten) with rounds of the violated energy rows (partition/energy.py), then as a MIP: the bound."""
    limit = deadline - t0
    ts = time.perf_counter()
    bound, sched = None, start
    # up to 0.7 of the limit: without this LP the plan stays HEFT's (1000 nodes at 10 s under a
    # load of 7 on 2 cores took more than half)
    lp = _lp_relaxation(problem, start.makespan * (1 + 1e-9) + 1e-9, t0 + 0.7 * limit)
    t_lp = time.perf_counter() - ts
    reserve = min(BOUND_SHARE, max(0.1, BOUND_LPS * t_lp / limit) + MIP_SHARE) * limit
    if lp is not None:
        bound, var = lp
        option = round_options(problem, var["opts"], {v: [var["x"][v, k].varValue or 0.0 for k in range(len(o))]
                                                      for v, o in var["opts"].items()})
        rounded = None if option is None else list_schedule(problem, option)
        if rounded is not None and rounded.makespan < sched.makespan:
            sched = rounded
    # the relaxation's optimum crowds the PS (its plan took 1.2x its makespan once packed on the
    # cores); asked to leave the cores the idle time the best plan needed, its plan packs. Its
    # root is the LP: when that alone took a large share of the limit, the MIP finds no plan in time
    if lp is not None and t_lp < PACK_GATE * limit:
        end = min(time.perf_counter() + PACK_SHARE * limit, deadline - reserve - 0.1 * limit)
        option = _relaxed_mip(problem, sched.makespan * (1 + 1e-9) + 1e-9, end, _ps_busy(problem, sched), sched)
        packed = None if option is None else list_schedule(problem, option)
        if packed is not None and packed.makespan < sched.makespan:
            sched = packed
    sched = local_search(problem, sched, max_evals=LS_EVALS,
                         deadline=max(t0 + LS_SHARE * limit, time.perf_counter() + 0.05 * limit))

    def sub_solver(end):
        if solver == "highs":  # a small model: in process, under HiGHS' own time limit
            cmd = _solver(solver, min(end, deadline))
            cmd.deadline = None
            return cmd
        # CBC stops at its own limit with the best plan it has; killed only SUB_GRACE_S later
        cmd = _solver(solver, min(end, deadline - SUB_GRACE_S))
        cmd.grace = SUB_GRACE_S
        return cmd

    sched = improve(problem, sched, deadline - reserve, sub_solver, seed=seed)
    lp = _lp_relaxation(problem, sched.makespan * (1 + 1e-9) + 1e-9, deadline, energy=True, mip=True, start=sched)
    if lp is not None:
        bound = lp[0] if bound is None else max(bound, lp[0])
    return _finish(problem, sched, False, bound, base, solver, t0, time.perf_counter() - ts, deadline)


def _ps_busy(problem: Problem, sched: Schedule) -> float:
    """The share of the PS cores' time over the makespan that a schedule keeps busy."""
    work = sum(o.latency_us for o in sched.option.values() if o.unit == "PS")
    return min(1.0, work / (problem.ps_cores * sched.makespan)) if sched.makespan > 0 else 1.0


def _relaxed_mip(problem: Problem, H: float, deadline: float, ps_share: float, start: Schedule | None):
    """The options of HiGHS's best plan of the model without PS pair rows at horizon H with PS work
    <= ps_share * C * T, found by ``deadline``; None when it found none."""
    try:
        prob, var = _build(problem, H, ps_pairs=False, deadline=deadline, ps_share=ps_share)
    except _OutOfTime:
        return None
    if deadline - time.perf_counter() <= 0.1:
        return None
    if start is not None:
        _set_start(problem, var, start)
    with scratch_dir("mip") as tmp:
        with library_output(os.path.join(tmp, "solver.out"), fds=(1,)):
            prob.solve(_solver("highs", deadline))
    if pulp.LpStatus[prob.status] != "Optimal" or var["T"].varValue is None:
        return None
    return {v: o[max(range(len(o)), key=lambda k: var["x"][v, k].varValue or 0.0)] for v, o in var["opts"].items()}


def _lp_relaxation(problem: Problem, H: float, deadline: float, energy: bool = False, mip: bool = False,
                   start: Schedule | None = None):
    """(optimum, var) of the LP relaxation of the model without PS pair rows at horizon H (a bound
    on every plan at most H long), or None when it is not solved by ``deadline``. ``energy``: then
    rounds of the violated energy rows (partition/energy.py) and the LP again, while time is left;
    the optimum of the last LP solved in time. ``mip``: then, with at least ``MIP_MIN_S`` left, the
    same model with its rows as a MIP (HiGHS, one thread, from the plan ``start``) until
    ``deadline``; its dual bound, where higher, is the bound (options whole: the LP blends a node's
    PS and PL latencies along a path and over the cores)."""
    try:
        prob, var = _build(problem, H, ps_pairs=False, deadline=deadline)
    except _OutOfTime:
        return None
    cats = {v.name: v.cat for v in prob.variables()}
    for v in prob.variables():
        v.cat = pulp.LpContinuous
    best, D, added = None, None, set()
    while True:
        left = deadline - time.perf_counter()
        if left <= 0.05:
            break
        cmd = pulp.HiGHS(msg=False, timeLimit=left, threads=1)
        with scratch_dir("lp") as tmp:
            with library_output(os.path.join(tmp, "solver.out"), fds=(1,)):
                prob.solve(cmd)
        # PuLP reads HiGHS's time limit as "Optimal" (the solution only "integer feasible"): its
        # values are no optimum, so no bound
        if (pulp.LpStatus[prob.status] != "Optimal" or prob.sol_status != pulp.LpSolutionOptimal
                or var["T"].varValue is None):
            break
        best = float(var["T"].varValue) * (1 - 1e-7)
        if not energy:
            break
        if D is None:
            D = energy_rows.descendants(problem)
        # a row already added can read as violated again within the solver's tolerances
        rows = [(name, row) for name, row in energy_rows.separate(problem, var, D) if name not in added]
        if not rows:
            break
        for name, row in rows:
            prob.addConstraint(row, name)
            added.add(name)
    if mip and best is not None and deadline - time.perf_counter() > MIP_MIN_S:
        for v in prob.variables():
            v.cat = cats[v.name]
            v.varValue = None
        if start is not None:
            _set_start(problem, var, start)
        cmd = _solver("highs", deadline)
        with scratch_dir("mipbound") as tmp:
            with library_output(os.path.join(tmp, "solver.out"), fds=(1,)):
                prob.solve(cmd)
        # 1e-7: the solver's tolerances, as the LP's optimum
        if cmd.dual_bound is not None and math.isfinite(cmd.dual_bound) and cmd.dual_bound <= H:
            best = max(best, cmd.dual_bound * (1 - 1e-7))
    return None if best is None else (best, var)


def _run(problem: Problem, H: float, solver: str, deadline, start: Schedule | None, ps_pairs: bool):
    """One solver run on the model at horizon H, until ``deadline`` (perf_counter, building the
    model included): (status, proven, schedule, bound, var)."""
    try:
        prob, var = _build(problem, H, ps_pairs=ps_pairs, deadline=deadline)
    except _OutOfTime:
        return "Not Solved", False, None, None, {"relaxed": False}
    if start is not None and solver == "highs":
        _set_start(problem, var, start)
    with scratch_dir("ilp") as tmp:
        log = os.path.join(tmp, "cbc.log") if solver == "cbc" else None
        cmd = _solver(solver, deadline, log)
        with library_output(os.path.join(tmp, "solver.out"), fds=(1,)):  # HiGHS prints a banner from C++
            prob.solve(cmd)
        bound = _cbc_bound(log) if solver == "cbc" else cmd.dual_bound
    status = pulp.LpStatus[prob.status]
    proven = status == "Optimal" and prob.sol_status == pulp.LpSolutionOptimal
    return status, proven, _extract(problem, var) if status == "Optimal" else None, bound, var


def _windows(P: Problem, Hr: dict, opts: dict):
    """Per (node, unit) earliest start / least tail (fastest option there + least transfers; the
    inputs from other loops included); drops options that cannot finish within their loop's horizon
    (``Hr`` {runs: horizon}) and repeats until nothing changes."""
    tol = {r: 1e-9 * max(1.0, h) for r, h in Hr.items()}
    while True:
        minlat: dict[str, dict[str, float]] = {v: {} for v in P.nodes}
        for v in P.nodes:
            for o in opts[v]:
                m = minlat[v]
                m[o.unit] = min(m.get(o.unit, math.inf), o.latency_us)
        head: dict[tuple[str, str], float] = {}
        tail: dict[tuple[str, str], float] = {}
        for v in P.nodes:
            for u in minlat[v]:
                head[v, u] = max((min(head[p, w] + lp + P.transfer(nb, w, u) for w, lp in minlat[p].items())
                                  for p, nb in P.preds[v]), default=0.0)
                if v in P.rel_preds:
                    head[v, u] = max([head[v, u]] + [min(P.transfer(nb, w, u) for w in minlat[p])
                                                     for p, nb in P.rel_preds[v]])
        for v in reversed(P.nodes):
            for u in minlat[v]:
                tail[v, u] = max((min(P.transfer(nb, u, w) + ls + tail[s, w] for w, ls in minlat[s].items())
                                  for s, nb in P.succs[v]), default=0.0)
        new = {v: [o for o in opts[v]
                   if head[v, o.unit] + o.latency_us + tail[v, o.unit] <= Hr[P.runs[v]] + tol[P.runs[v]]]
               for v in P.nodes}
        if all(len(new[v]) == len(opts[v]) for v in P.nodes) or any(not o for o in new.values()):
            return opts, minlat, head, tail
        opts = new


class _OutOfTime(Exception):
    """The deadline passed while the model was being built."""


def _build(problem: Problem, H: float, opts: dict | None = None, ps_pairs: bool = True, deadline=None,
           ps_share: float = 1.0):
    """The model at horizon H. ``ps_pairs`` False leaves out the PS core and pair-ordering rows
    (a relaxation: PS nodes may then overlap beyond the core count; the ``ps_work`` cut stays).
    ``ps_share`` < 1 asks PS work <= ps_share * C * T (a restriction, not a relaxation: it leaves
    the cores idle time to pack the PS nodes in; for starting plans only, never for bounds).
    _OutOfTime when ``deadline`` (perf_counter) passes during the edge rows or the pair rows
    (quadratic in PS nodes)."""
    P = problem
    prob = pulp.LpProblem("rlhls_partition", pulp.LpMinimize)
    Hr = _horizons(P, H)
    opts, minlat, head, tail = _windows(P, Hr, dict(opts or P.options))
    units = {v: list(minlat[v]) for v in P.nodes}
    es = {v: min(head[v, u] for u in units[v]) for v in P.nodes}
    Hv = {v: Hr[P.runs[v]] for v in P.nodes}  # the horizon of v's loop
    fin = {v: max(Hv[v] - tail[v, u] for u in units[v]) for v in P.nodes}  # latest finish
    idx = P.index
    # a makespan per loop (one loop: T); the objective: the cost of a step, sum of runs x T_r
    Tl = {r: prob.add_variable("T" if not P.multi else f"T_{j}", lowBound=0, upBound=Hr[r])
          for j, r in enumerate(P.loops)}
    Tv = {v: Tl[P.runs[v]] for v in P.nodes}
    x, S, lat, z = {}, {}, {}, {}
    for v in P.nodes:
        i = idx[v]
        for k in range(len(opts[v])):
            x[v, k] = prob.add_variable(f"x_{i}_{k}", cat="Binary")
        hi = max(es[v], max(Hv[v] - tail[v, u] - minlat[v][u] for u in units[v]))
        S[v] = prob.add_variable(f"S_{i}", lowBound=es[v], upBound=hi)
        lat[v] = pulp.lpSum(o.latency_us * x[v, k] for k, o in enumerate(opts[v]))
        for u in units[v]:
            z[v, u] = pulp.lpSum(x[v, k] for k, o in enumerate(opts[v]) if o.unit == u)
    if list(Tl) == [1.0]:
        prob += Tl[1.0]
    else:
        prob += pulp.lpSum(r * t for r, t in Tl.items())
    for v in P.nodes:
        i = idx[v]
        prob += pulp.lpSum(x[v, k] for k in range(len(opts[v]))) == 1, f"one_{i}"
        # F_v + the least tail of v's unit <= T;  S_v >= the earliest start on v's unit
        prob += Tv[v] >= S[v] + pulp.lpSum((o.latency_us + tail[v, o.unit]) * x[v, k]
                                           for k, o in enumerate(opts[v])), f"mk_{i}"
        if len(units[v]) > 1 and any(head[v, u] > es[v] for u in units[v]):
            prob += S[v] >= pulp.lpSum(head[v, u] * z[v, u] for u in units[v] if head[v, u] > 0), f"es_{i}"
    # precedence + transfers (eq. 5) with z indicators, no products: one row per unit of either end
    # (the source's unit fixed, the sum over the destination's units, and the mirror image); each
    # alone is exact, together the LP cannot halve a transfer by splitting either end
    # an input from another loop (``after`` False): the same rows without the source's finish
    def transfer_rows(name, lhs, a, b, nb, after=True):
        for side, fixed, other, cost in (("s", a, b, lambda f, o: P.transfer(nb, f, o)),
                                         ("d", b, a, lambda f, o: P.transfer(nb, o, f))):
            for u in units[fixed]:
                costs = {w: cost(u, w) for w in units[other] if w != u}
                cmax = max(costs.values(), default=0.0)
                if cmax <= 0:
                    continue
                xfer = pulp.lpSum(c * z[other, w] for w, c in costs.items() if c > 0) - cmax * (1 - z[fixed, u])
                prob.addConstraint(lhs >= (S[a] + lat[a] + xfer if after else xfer), f"{name}{side}_{u}")

    for e, (a, b, nb) in enumerate(P.edges):
        # the edge rows take most of the build (1000 nodes under a load of 15: 2.6 s past a 10 s limit)
        if deadline is not None and e % 256 == 0 and time.perf_counter() > deadline:
            raise _OutOfTime
        prob += S[b] >= S[a] + lat[a], f"prec_{e}"
        transfer_rows(f"xfer_{e}", S[b], a, b, nb)
    # loop-carried edges u -> v (next step): S_v + T >= F_u + transfer, same linearisation as eq. 5;
    # without a transfer it always holds (T >= F_u, S_v >= 0)
    for e, (a, b, nb) in enumerate(P.carry):
        transfer_rows(f"carry_{e}", Tv[a] + S[b], a, b, nb)
    for e, (a, b, nb) in enumerate(P.release):
        transfer_rows(f"rel_{e}", S[b], a, b, nb, after=False)
    # capacities (eq. 7); a resource no choice of options can exhaust needs no row
    counts = []
    for (u, r) in P.constrained():
        most = sum(max((o.usage(r) for o in opts[v] if o.unit == u), default=0.0) for v in P.nodes)
        if most <= P.capacity[(u, r)] + EPS:
            continue
        level: dict[float, list] = {}  # usage -> the options using exactly that much
        for v in P.nodes:
            for k, o in enumerate(opts[v]):
                if o.unit == u and o.usage(r) > 0:
                    level.setdefault(o.usage(r), []).append((v, k))
        # on integer counts of options per usage level (module docstring)
        terms = []
        for j, (a, members) in enumerate(sorted(level.items())):
            n = prob.add_variable(f"n_{u}_{r}_{j}", lowBound=0, upBound=len(members), cat="Integer")
            prob += n == pulp.lpSum(x[m] for m in members), f"count_{u}_{r}_{j}"
            counts.append((n, members))
            terms.append(a * n)
        prob += pulp.lpSum(terms) <= P.capacity[(u, r)], f"cap_{u}_{r}"
    # PS cores, per loop (the loops run one after another: PS nodes of two loops never meet)
    ps = [v for v in P.nodes if "PS" in units[v]]
    C = P.ps_cores
    w: dict[tuple[str, int], Any] = {}  # (PS node, core) -> its binary
    o_var: dict[tuple, Any] = {}  # (a, b): a before b on their core; (a, b, 'q'): they share one
    relaxed = False
    desc = None
    for j, (runs, T) in enumerate(Tl.items()):
        ps_r = [v for v in ps if P.runs[v] == runs]
        if ps_r:
            ps_lat = pulp.lpSum(o.latency_us * x[v, k] for v in ps_r for k, o in enumerate(opts[v]) if o.unit == "PS")
            prob += C * ps_share * T >= ps_lat, "ps_work" if not P.multi else f"ps_work_{j}"
        relaxed = relaxed or (len(ps_r) > C and not ps_pairs)
        if len(ps_r) > C and ps_pairs:
            desc = desc if desc is not None else _reach(P)
            _ps_pair_rows(prob, P, ps_r, x, z, S, w, o_var, opts, head, tail, minlat, es, fin, Hr[runs], desc,
                          deadline)
    T_one = next(iter(Tl.values())) if not P.multi else None  # the LP bounds and energy rows take one loop
    return prob, dict(x=x, S=S, T=T_one, Tl=Tl, w=w, o=o_var, ps=ps, opts=opts, counts=counts, relaxed=relaxed)


def _ps_pair_rows(prob, P: Problem, ps: list, x, z, S, w, o_var, opts, head, tail, minlat, es, fin, H: float, desc,
                  deadline) -> None:
    """The PS core and pair-ordering rows of the PS-capable nodes `ps` of one loop at its horizon H."""
    C = P.ps_cores
    idx = P.index
    tol = 1e-9 * max(1.0, H)
    if C > 1:
        # symmetry: the first PS node takes core 0; core c only after some earlier node took c-1
        for n, v in enumerate(ps):
            for c in range(min(C, n + 1)):
                w[v, c] = prob.add_variable(f"w_{idx[v]}_{c}", cat="Binary")
            prob += pulp.lpSum(w[v, c] for c in range(min(C, n + 1))) == z[v, "PS"], f"core_{idx[v]}"
            for c in range(1, min(C, n + 1)):
                prob += w[v, c] <= pulp.lpSum(w[q, c - 1] for q in ps[:n] if (q, c - 1) in w), f"sym_{idx[v]}_{c}"
    for n, a in enumerate(ps):
        if deadline is not None and time.perf_counter() > deadline:
            raise _OutOfTime
        for b in ps[n + 1:]:
            if desc[a] >> idx[b] & 1:  # a path a -> b already orders them
                continue
            ia, ib = idx[a], idx[b]
            # windows on the PS: one of the two orders may be impossible
            a_fits = head[a, "PS"] + minlat[a]["PS"] + minlat[b]["PS"] + tail[b, "PS"] <= H + tol
            b_fits = head[b, "PS"] + minlat[b]["PS"] + minlat[a]["PS"] + tail[a, "PS"] <= H + tol
            latps = {v: pulp.lpSum(o.latency_us * x[v, k] for k, o in enumerate(opts[v]) if o.unit == "PS")
                     for v in (a, b)}
            if C == 1:
                apart = 2 - z[a, "PS"] - z[b, "PS"]
            else:
                q = prob.add_variable(f"q_{ia}_{ib}", lowBound=0, upBound=1)
                for c in range(C):
                    if (a, c) in w and (b, c) in w:
                        prob += q >= w[a, c] + w[b, c] - 1, f"same_{ia}_{ib}_{c}"
                apart = 1 - q
                o_var[a, b, "q"] = q
            m1 = max(0.0, fin[a] - es[b])
            m2 = max(0.0, fin[b] - es[a])
            if not b_fits:  # b cannot precede a on one core: a first when they share a core
                prob += S[b] >= S[a] + latps[a] - m1 * apart, f"d1_{ia}_{ib}"
                continue
            if not a_fits:
                prob += S[a] >= S[b] + latps[b] - m2 * apart, f"d2_{ia}_{ib}"
                continue
            oab = prob.add_variable(f"o_{ia}_{ib}", cat="Binary")
            o_var[a, b] = oab
            prob += S[b] >= S[a] + latps[a] - m1 * (1 - oab) - m1 * apart, f"d1_{ia}_{ib}"
            prob += S[a] >= S[b] + latps[b] - m2 * oab - m2 * apart, f"d2_{ia}_{ib}"


def _set_start(problem: Problem, var, sched: Schedule) -> None:
    if any(not any(o is sched.option[v] for o in var["opts"][v]) for v in problem.nodes):
        return  # an option of the start lies outside the windows (rounding): no start
    for (v, k), xv in var["x"].items():
        xv.setInitialValue(1 if var["opts"][v][k] is sched.option[v] else 0)
    for n, members in var["counts"]:
        n.setInitialValue(sum(1 for v, k in members if var["opts"][v][k] is sched.option[v]))
    for v, s in var["S"].items():
        s.setInitialValue(s.lowBound if s.lowBound is not None and sched.start[v] < s.lowBound else sched.start[v])
    for r, t in var["Tl"].items():
        t.setInitialValue(sched.loops.get(r, sched.makespan))
    # relabel HEFT's cores by first use in topological order, per loop (the model's symmetry breaking)
    relabel: dict[tuple[float, int], int] = {}
    used: dict[float, int] = {}
    for v in var["ps"]:
        if v not in sched.core:
            continue
        key = (problem.runs[v], sched.core[v])
        if key not in relabel:
            relabel[key] = used.get(key[0], 0)
            used[key[0]] = relabel[key] + 1
    core = {v: relabel[problem.runs[v], c] for v, c in sched.core.items()}
    for (v, c), wv in var["w"].items():
        wv.setInitialValue(1 if core.get(v) == c else 0)
    for key, ov in var["o"].items():
        if len(key) == 3:
            a, b, _ = key
            ov.setInitialValue(1 if a in core and b in core and core[a] == core[b] else 0)
        else:
            a, b = key
            ov.setInitialValue(1 if sched.start[a] <= sched.start[b] else 0)


def _xfer_total(problem: Problem, option: dict) -> float:
    """PS busy time + transfer time between units of a choice of options per training step, each
    node and edge (at its consumer) as often as it runs (the tie-break's score)."""
    runs = problem.runs
    ps = sum(runs[v] * o.latency_us for v, o in option.items() if o.unit == "PS")
    return ps + sum(runs[c] * problem.transfer(b, option[a].unit, option[c].unit)
                    for a, c, b in problem.edges + problem.carry + problem.release)


def _polish(problem: Problem, sched: Schedule, deadline: float | None = None) -> Schedule:
    """Among plans with the same makespan, less PS time and transfer time (module docstring)."""
    if sched is None:
        return sched
    T = sched.makespan
    cons = problem.constrained()
    for _ in range(len(problem.nodes)):
        if deadline is not None and time.perf_counter() > deadline:
            break
        base = _xfer_total(problem, sched.option)
        used = {k: sum(o.usage(k[1]) for o in sched.option.values() if o.unit == k[0]) for k in cons}
        best = None
        for v in problem.nodes:
            cur = sched.option[v]
            for o in problem.options[v]:
                if o.unit == cur.unit or o.unit == "PS":
                    continue
                if any(used[(u, r)] - (cur.usage(r) if cur.unit == u else 0) + o.usage(r)
                       > problem.capacity[(u, r)] + EPS for (u, r) in cons if u == o.unit):
                    continue
                option = dict(sched.option, **{v: o})
                gain = base - _xfer_total(problem, option)
                if gain <= EPS or (best is not None and gain <= best[0]):
                    continue
                core = {w: c for w, c in sched.core.items() if w != v}
                try:
                    new = semi_active(problem, option, core, sched.start)
                except RuntimeError:
                    continue
                if new.makespan <= T * (1 + 1e-9) + 1e-9:
                    best = (gain, new)
        if best is None:
            return sched
        sched = best[1]
    return sched


def _extract(problem: Problem, var) -> Schedule | None:
    option, core, key = {}, {}, {}
    for v in problem.nodes:
        opts = var["opts"][v]
        vals = [var["x"][v, k].varValue or 0.0 for k in range(len(opts))]
        option[v] = opts[max(range(len(opts)), key=lambda k: vals[k])]
        key[v] = var["S"][v].varValue or 0.0
    C = problem.ps_cores
    on_ps = [v for v in problem.nodes if option[v].unit == "PS"]
    for v in on_ps:
        cs = [c for c in range(C) if (v, c) in var["w"]]
        if cs:
            core[v] = max(cs, key=lambda c: var["w"][v, c].varValue or 0.0)
    if len(core) < len(on_ps):
        # no core variables (C = 1, at most C PS nodes, or the relaxation): colour the solver's
        # intervals greedily by start, each onto the free core that idles least (C colours suffice
        # when no more than C overlap, else semi_active delays the rest); per loop
        frees = {r: [0.0] * C for r in problem.loops}
        for v in sorted((v for v in on_ps if v not in core), key=lambda v: (key[v], problem.index[v])):
            free = frees[problem.runs[v]]
            fits = [c for c in range(C) if free[c] <= key[v] + 1e-9 * max(1.0, key[v])]
            c = max(fits, key=lambda c: free[c]) if fits else min(range(C), key=lambda c: free[c])
            core[v] = c
            free[c] = max(free[c], key[v]) + option[v].latency_us
    # order on a core: solver start, ties broken by the pair's ordering binary via topological index
    try:
        return semi_active(problem, option, core, key)
    except RuntimeError:
        return None
