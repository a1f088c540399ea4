"""Energy cuts: rows that make the LP relaxation see how PS work packs onto the C cores.

The LP relaxation of the model without PS pair rows knows the PS cores only through ``C T >= PS
work``. Three families of rows, each valid for every schedule (transfers are never negative and
loop-carried edges only add constraints), bring in where that work has to lie:

* ancestors: every ancestor of b finishes before S_b, and the cores run at most C nodes at a
  time from 0, so ``C S_b >= PS work of b's ancestors``;
* descendants: every descendant of a starts after F_a and ends by T:
  ``C (T - F_a) >= PS work of a's descendants``;
* windows: the nodes that are descendants of a and ancestors of b run within [F_a, S_b]:
  ``C (S_b - F_a) >= their PS work``.

There are n^2 window rows, most of them slack, so `separate` returns only the rows the LP's
current solution violates, most violated first; the caller adds them and solves again.
"""

from __future__ import annotations

import numpy as np
import pulp

from .heft import Problem

__all__ = ["descendants", "separate"]

WINDOW_NODES = 1200  # above: no window rows (their check is an n x n x n product: 1 s at 1000 nodes)


def descendants(problem: Problem) -> np.ndarray:
    """D[i, j] True when node j (topological index) is reachable from node i."""
    n = len(problem.nodes)
    D = np.zeros((n, n), dtype=bool)
    for v in reversed(problem.nodes):
        i = problem.index[v]
        for s, _ in problem.succs[v]:
            j = problem.index[s]
            D[i, j] = True
            D[i] |= D[j]
    return D


def separate(problem: Problem, var: dict, D: np.ndarray, most: int = 60, tol: float = 1e-5) -> list:
    """Violated energy rows at the LP solution in ``var`` (from ``ilp._build``): a list of
    (name, constraint), at most ``most`` per family. ``tol``: relative to T."""
    P = problem
    C = P.ps_cores
    nodes = P.nodes
    x, opts, S, T = var["x"], var["opts"], var["S"], var["T"]
    ps_terms = {v: [(o.latency_us, x[v, k]) for k, o in enumerate(opts[v]) if o.unit == "PS"] for v in nodes}
    lat = {v: pulp.lpSum(o.latency_us * x[v, k] for k, o in enumerate(opts[v])) for v in nodes}
    w = np.array([sum(a * (xv.varValue or 0.0) for a, xv in ps_terms[v]) for v in nodes])
    s = np.array([S[v].varValue or 0.0 for v in nodes])
    f = s + np.array([sum(o.latency_us * (x[v, k].varValue or 0.0) for k, o in enumerate(opts[v])) for v in nodes])
    t = T.varValue or 0.0
    eps = tol * max(1.0, t)
    Df = D.astype(float)

    def work(members):
        return pulp.lpSum(a * xv for j in members for a, xv in ps_terms[nodes[j]])

    rows = []
    anc = (w @ Df) / C - s  # > 0: violated
    for b in np.argsort(-anc)[:most]:
        if anc[b] <= eps:
            break
        vb = nodes[b]
        rows.append((f"e_anc_{b}", C * S[vb] >= work(np.nonzero(D[:, b])[0])))
    desc = (Df @ w) / C - (t - f)
    for a in np.argsort(-desc)[:most]:
        if desc[a] <= eps:
            break
        va = nodes[a]
        rows.append((f"e_desc_{a}", C * (T - S[va] - lat[va]) >= work(np.nonzero(D[a])[0])))
    if len(nodes) > WINDOW_NODES:
        return rows
    win = ((Df * w) @ Df) / C - (s[None, :] - f[:, None])
    win[~D] = -np.inf
    flat = np.argsort(-win, axis=None)[:most]
    for fl in flat:
        a, b = divmod(int(fl), len(nodes))
        if win[a, b] <= eps:
            break
        va, vb = nodes[a], nodes[b]
        rows.append((f"e_win_{a}_{b}", C * (S[vb] - S[va] - lat[va]) >= work(np.nonzero(D[a] & D[:, b])[0])))
    return rows
