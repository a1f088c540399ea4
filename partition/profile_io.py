"""The partitioner's input files: profile, graph, capacity and links CSVs.

All four are plain CSV with a header row; column order is free, extra columns are an error only
where noted. Blank lines and lines starting with ``#`` are skipped. Rows are numbered as a
spreadsheet shows them (the header is row 1).

Profile CSV — one row per node x unit (x design point)::

    node,unit,latency_us,point,lut,ff,dsp,bram36,uram,aie_tiles,source,cycles,flops
    q.fc1.fwd,PS,120.5,,0,0,0,0,0,0,model,,2048
    q.fc1.fwd,PL,8.2,u4,5200,7100,40,4,0,0,model,2460,2048
    q.fc1.fwd,PL,4.6,u8,9800,13900,80,4,0,0,csynth,1380,2048
    q.fc1.fwd,AIE,3.1,,0,0,0,0,0,2,model,,2048

* required: ``node``, ``unit`` (PS, PL or AIE), ``latency_us`` (a number >= 0);
* resource columns ``lut, ff, dsp, bram36, uram, aie_tiles, plio``: any subset, missing or empty = 0
  (``plio``: PL<->AIE stream pairs an AIE node uses; capacity ``AIE,plio``);
* ``point`` (optional): the design point (e.g. an unroll factor); several rows of one node and unit
  with different points are alternatives, the partitioner picks one; missing or empty = ``"0"``;
* ``cycles``, ``flops`` (optional): informative only;
* ``runs`` (optional, missing or empty = 1): how many times the node runs per training step, the
  same on every row of a node (``rlhls profile`` writes it from the algorithm's rule: PPO's GAE once
  per rollout of update_epochs x num_minibatches steps, DDPG's actor every policy_frequency steps,
  TRPO's FVP and value-fit counts). Nodes that run equally often form a loop, scheduled on its own;
  the makespan is the sum over the loops of runs x the loop's makespan (rlhls.partition.heft);
* ``source`` (optional, missing or empty = ``model``): where the row's latency and resources come
  from: ``model`` (the kernels' cost models), ``csynth`` (a Vitis HLS synthesis report: cycles x
  the clock the kernel runs at), ``cosim`` (a co-simulation report's measured cycles, resources
  from synthesis), ``aie`` (AIE compiler / simulator outputs), ``measured`` (timed on this
  machine). The partitioner treats every source alike; the plan records the ones it used.
A unit with no row for a node is forbidden for that node (that is how "only matrix-multiply nodes
may go to AIE" is written: the profile has no AIE rows for the others).

Graph CSV — one row per edge of the training-step DAG: ``src,dst,bytes[,carry]`` (bytes >= 0, the
tensor the edge carries). Every node named here must have profile rows; profile nodes without edges
are isolated nodes of the graph. ``carry`` (optional column, ``0``/``1``, empty or missing = 0)
marks a loop-carried edge: from ``src`` in one training step to ``dst`` in the next (e.g. a layer's
weight update to its next forward). Steps repeat back to back with period T = the makespan, so a
carry edge asks ``S_dst + T >= S_src + t_src + transfer``; carry edges are not part of the DAG (they
may point backwards; a carry self-loop is allowed and trivially met)::

    src,dst,bytes,carry
    q.fc1.fwd,q.fc1_relu.fwd,8192,0
    q.fc1.upd,q.fc1.fwd,1280,1

Capacity CSV — ``unit,resource,capacity``: resource one of the profile's resource columns or
``cores`` (the PS core count; PS nodes beyond it do not overlap in time). A (unit, resource) pair
that is not listed is unlimited.

Links CSV — ``src_unit,dst_unit,latency_us,bytes_per_us``: the cost of an edge whose two ends sit
on different units is ``latency_us + bytes / bytes_per_us``; a unit pair that is not listed is free.

Limits, checked as a file is read (one line naming the file and row, before any work): a file of
at most ``MAX_CSV_BYTES``, cells within Python's csv field limit, at most ``MAX_NODES`` nodes, at
most ``MAX_PS_CORES`` PS cores.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Literal, overload

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_text, read_limited

__all__ = [
    "RESOURCES", "UNITS", "SOURCES", "ProfileRow", "read_profile", "write_profile", "read_graph",
    "read_capacity", "read_links", "check_inputs", "atomic_write_text", "topo_order", "is_carry",
    "MAX_CSV_BYTES", "MAX_NODES", "MAX_PS_CORES",
]

RESOURCES = ("lut", "ff", "dsp", "bram36", "uram", "aie_tiles", "plio")
UNITS = ("PS", "PL", "AIE")
SOURCES = ("model", "csynth", "cosim", "aie", "measured", "measured-board")
CAPACITY_RESOURCES = RESOURCES + ("cores",)

MAX_CSV_BYTES = 64 << 20  # a profile of MAX_NODES nodes with dozens of design points each is a few tens of MB
MAX_NODES = 10_000  # the designs' training graphs have at most 57 nodes, the large-graph benchmark 1,000;
# HEFT and the ILP grow faster than the node count
MAX_PS_CORES = 1024  # the PS has 2-8 ARM cores on every catalogue device; the ILP and the Gantt chart have
# a lane per core


@dataclass(frozen=True)
class ProfileRow:
    """One (node, unit, design point) alternative with its latency and resource use."""

    node: str
    unit: str
    latency_us: float
    point: str = "0"
    resources: dict = field(default_factory=dict)
    cycles: float | None = None
    flops: float | None = None
    source: str = "model"
    provenance: dict | None = field(default=None, compare=False)  # model rows: {figure: where it comes from}
    runs: float = 1.0  # the node's runs per training step (module docstring)

    def usage(self, resource: str) -> float:
        return float(self.resources.get(resource, 0.0) or 0.0)


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


def _read_rows(path, kind: str, required: tuple, optional: tuple):
    """Yield ``(row_number, {column: text})``; RlhlsError for a missing file/column, empty file."""
    path = Path(path)
    try:
        text = read_limited(path, MAX_CSV_BYTES, f"a {kind} file holds").decode("utf-8-sig")
    except FileNotFoundError:
        raise RlhlsError(f"{kind} file {path}: not found") from None
    except (OSError, ValueError) as exc:  # ValueError: too large, not a regular file, not UTF-8
        raise RlhlsError(f"{kind} file {path}: cannot be read ({exc})") from None
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines())]
    lines = [(n, ln) for n, ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise RlhlsError(f"{path}: empty {kind} file; expected a header row '{','.join(required)}' and data rows")
    header_no, header_line = lines[0]
    header = [h.strip().lower() for h in _cells(header_line, path, header_no)]
    for col in required:
        if col not in header:
            raise RlhlsError(
                f"{path}: row {header_no}: missing column '{col}'; expected columns {','.join(required)}"
                + (f" (optional: {','.join(optional)})" if optional else "")
            )
    for col in header:
        if col not in required and col not in optional:
            raise RlhlsError(
                f"{path}: row {header_no}: unknown column '{col}'; expected {','.join(required)}"
                + (f" and optionally {','.join(optional)}" if optional else "")
            )
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise RlhlsError(f"{path}: row {header_no}: column '{dup}' appears twice")
    if len(lines) == 1:
        raise RlhlsError(f"{path}: empty {kind} file: a header but no data rows")
    for n, ln in lines[1:]:
        bad = next((c for c in ln if ord(c) < 32 and c != "\t"), None)
        if bad is not None:
            raise RlhlsError(f"{path}: row {n}: control character {bad!r} in the row; expected plain text")
        if ln.count('"') % 2:
            raise RlhlsError(f"{path}: row {n}: unterminated double quote; quote a whole cell (\"a,b\") or none")
        cells = _cells(ln, path, n)
        if len(cells) > len(header):
            raise RlhlsError(f"{path}: row {n}: {len(cells)} cells but the header has {len(header)} columns")
        cells = [c.strip() for c in cells] + [""] * (len(header) - len(cells))
        yield n, dict(zip(header, cells))


def _cells(line: str, path, row: int) -> list[str]:
    try:
        return next(csv.reader([line]))
    except csv.Error as exc:  # a cell over the csv module's field limit
        raise RlhlsError(f"{path}: row {row}: {exc}") from None


@overload
def _number(text: str, path, row: int, col: str, *, required: Literal[True], positive: bool = False) -> float: ...
@overload
def _number(text: str, path, row: int, col: str, *, required: Literal[False], positive: bool = False) -> float | None:
    ...
def _number(text: str, path, row: int, col: str, *, required: bool, positive: bool = False) -> float | None:
    if text == "":
        if required:
            raise RlhlsError(f"{path}: row {row}: column '{col}' is empty; expected a number")
        return None
    try:
        value = float(text)
    except ValueError:
        raise RlhlsError(f"{path}: row {row}: {col} '{text}' is not a number") from None
    if not math.isfinite(value):
        raise RlhlsError(f"{path}: row {row}: {col} '{text}' is not finite; expected a finite number")
    if value < 0 or (positive and value == 0):
        raise RlhlsError(
            f"{path}: row {row}: {col} {value:g} is {'not positive' if value >= 0 else 'negative'}; "
            f"expected a number {'> 0' if positive else '>= 0'}"
        )
    return value


def _unit(text: str, path, row: int, col: str) -> str:
    for u in UNITS:
        if text.upper() == u:
            return u
    raise RlhlsError(f"{path}: row {row}: unknown unit '{text}' in column '{col}'; expected one of {', '.join(UNITS)}")


def read_profile(path) -> list[ProfileRow]:
    """Read a profile CSV (format in the module docstring)."""
    rows: list[ProfileRow] = []
    seen: dict = {}
    nodes: set = set()
    runs_of: dict = {}  # node -> (runs, row)
    optional = ("point",) + RESOURCES + ("cycles", "flops", "source", "runs")
    for n, rec in _read_rows(path, "profile", ("node", "unit", "latency_us"), optional):
        node = rec["node"]
        if not node:
            raise RlhlsError(f"{path}: row {n}: column 'node' is empty; expected a node name")
        unit = _unit(rec["unit"], path, n, "unit")
        lat = _number(rec["latency_us"], path, n, "latency_us", required=True)
        point = rec.get("point", "") or "0"
        res = {}
        for r in RESOURCES:
            v = _number(rec.get(r, ""), path, n, r, required=False)
            if v:
                res[r] = v
        key = (node, unit, point)
        if node not in nodes:
            nodes.add(node)
            if len(nodes) > MAX_NODES:
                raise RlhlsError(f"{path}: row {n}: node '{node}' is one more than the {MAX_NODES} nodes a "
                                 "profile may have")
        if key in seen:
            raise RlhlsError(
                f"{path}: row {n}: node '{node}' on {unit} point '{point}' repeats row {seen[key]}; "
                "give distinct 'point' values for alternatives"
            )
        seen[key] = n
        source = rec.get("source", "").lower() or "model"
        if source not in SOURCES:
            raise RlhlsError(f"{path}: row {n}: unknown source '{rec['source']}'; expected one of {', '.join(SOURCES)}")
        runs = _number(rec.get("runs", ""), path, n, "runs", required=False)
        runs = 1.0 if runs is None else runs
        if node in runs_of and runs_of[node][0] != runs:
            raise RlhlsError(f"{path}: row {n}: node '{node}' runs {runs:g} times per step, row {runs_of[node][1]} "
                             f"says {runs_of[node][0]:g}; expected one value per node")
        runs_of.setdefault(node, (runs, n))
        rows.append(ProfileRow(
            node=node, unit=unit, latency_us=lat, point=point, resources=res,
            cycles=_number(rec.get("cycles", ""), path, n, "cycles", required=False),
            flops=_number(rec.get("flops", ""), path, n, "flops", required=False), source=source, runs=runs,
        ))
    return rows


def write_profile(rows, path) -> None:
    """Write profile rows as CSV (atomically); ``point`` and ``source`` always written, cycles/flops if
    any row has them, runs if any node runs other than once."""
    rows = list(rows)
    cols = ["node", "unit", "latency_us", "point", *RESOURCES, "source"]
    extra = [c for c in ("cycles", "flops") if any(getattr(r, c) is not None for r in rows)]
    extra += ["runs"] if any(r.runs != 1.0 for r in rows) else []
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols + extra)

    def fmt(v):
        return "" if v is None else repr(float(v)) if not float(v).is_integer() else str(int(v))

    for r in rows:
        w.writerow([r.node, r.unit, fmt(r.latency_us), r.point, *[fmt(r.usage(k)) for k in RESOURCES],
                    r.source, *[fmt(getattr(r, c)) for c in extra]])
    atomic_write_text(path, buf.getvalue())


class _Edges(list):
    """A list of edges that remembers the CSV row of each (for later error messages)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.row_numbers: list[int] = []


def is_carry(edge) -> bool:
    """True for a loop-carried edge tuple ``(src, dst, bytes, True)``."""
    return len(edge) > 3 and bool(edge[3])


def read_graph(path) -> list[tuple]:
    """Read a graph CSV ``src,dst,bytes[,carry]``; RlhlsError on self-loops, duplicates and cycles.

    DAG edges come back as ``(src, dst, bytes)``, carry edges as ``(src, dst, bytes, True)``.
    """
    edges = _Edges()
    where: dict[tuple[str, str, bool], int] = {}
    nodes: set[str] = set()
    for n, rec in _read_rows(path, "graph", ("src", "dst", "bytes"), ("carry",)):
        src, dst = rec["src"], rec["dst"]
        for col, v in (("src", src), ("dst", dst)):
            if not v:
                raise RlhlsError(f"{path}: row {n}: column '{col}' is empty; expected a node name")
        c = rec.get("carry", "")
        if c not in ("", "0", "1"):
            raise RlhlsError(f"{path}: row {n}: carry '{c}' is not 0 or 1")
        carry = c == "1"
        if src == dst and not carry:
            raise RlhlsError(f"{path}: row {n}: edge {src}->{dst} joins a node to itself (a cycle)")
        b = _number(rec["bytes"], path, n, "bytes", required=True)
        key = (src, dst, carry)
        for v in (src, dst):
            if v not in nodes:
                nodes.add(v)
                if len(nodes) > MAX_NODES:
                    raise RlhlsError(f"{path}: row {n}: node '{v}' is one more than the {MAX_NODES} nodes a "
                                     "graph may have")
        if key in where:
            raise RlhlsError(f"{path}: row {n}: {'carry ' if carry else ''}edge {src}->{dst} repeats row {where[key]}")
        where[key] = n
        edges.append((src, dst, int(round(b)), True) if carry else (src, dst, int(round(b))))
        edges.row_numbers.append(n)
    dag = [e for e in edges if not is_carry(e)]
    cyc = _find_cycle(list(dict.fromkeys([e[0] for e in edges] + [e[1] for e in edges])), dag)
    if cyc:
        loop = " -> ".join(cyc + [cyc[0]])
        row = where[(cyc[-1], cyc[0], False)]
        raise RlhlsError(f"{path}: row {row}: edge closes a cycle {loop}; expected a DAG")
    return edges


class Capacity(dict):
    """(unit, resource) -> capacity, with ``rows``: the file's row of each (for error lines)."""

    rows: dict


def read_capacity(path) -> dict[tuple[str, str], float]:
    """Read a capacity CSV ``unit,resource,capacity``."""
    cap = Capacity()
    where: dict[tuple[str, str], int] = {}
    cap.rows = where
    for n, rec in _read_rows(path, "capacity", ("unit", "resource", "capacity"), ()):
        unit = _unit(rec["unit"], path, n, "unit")
        res = rec["resource"].lower()
        if res not in CAPACITY_RESOURCES:
            raise RlhlsError(
                f"{path}: row {n}: unknown resource '{rec['resource']}'; "
                f"expected one of {', '.join(CAPACITY_RESOURCES)}"
            )
        v = _number(rec["capacity"], path, n, "capacity", required=True)
        if res == "cores" and (v < 1 or not float(v).is_integer() or v > MAX_PS_CORES):
            raise RlhlsError(f"{path}: row {n}: PS cores {v:g} is not a whole number in 1..{MAX_PS_CORES}")
        if (unit, res) in where:
            raise RlhlsError(f"{path}: row {n}: {unit} {res} repeats row {where[(unit, res)]}")
        where[(unit, res)] = n
        cap[(unit, res)] = v
    return cap


def read_links(path) -> dict[tuple[str, str], tuple[float, float]]:
    """Read a links CSV ``src_unit,dst_unit,latency_us,bytes_per_us``."""
    links: dict[tuple[str, str], tuple[float, float]] = {}
    where: dict[tuple[str, str], int] = {}
    for n, rec in _read_rows(path, "links", ("src_unit", "dst_unit", "latency_us", "bytes_per_us"), ()):
        a = _unit(rec["src_unit"], path, n, "src_unit")
        b = _unit(rec["dst_unit"], path, n, "dst_unit")
        if a == b:
            raise RlhlsError(f"{path}: row {n}: link {a}->{b} joins a unit to itself; expected two different units")
        lat = _number(rec["latency_us"], path, n, "latency_us", required=True)
        bw = _number(rec["bytes_per_us"], path, n, "bytes_per_us", required=True, positive=True)
        if (a, b) in where:
            raise RlhlsError(f"{path}: row {n}: link {a}->{b} repeats row {where[(a, b)]}")
        where[(a, b)] = n
        links[(a, b)] = (lat, bw)
    return links


# ----------------------------------------------------------------------------------------------
# Cross-file checks and graph helpers
# ----------------------------------------------------------------------------------------------


def _find_cycle(nodes, edges) -> list[str] | None:
    """A cycle of the graph's edges (carry edges left out), as the nodes along it; None for a DAG."""
    ts = TopologicalSorter({v: () for v in nodes})
    for e in edges:
        if not is_carry(e):
            ts.add(e[1], e[0])
    try:
        ts.prepare()
    except CycleError as e:
        return list(e.args[1][:-1])  # graphlib repeats the first node at the end
    return None


def topo_order(nodes, edges) -> list[str]:
    """Nodes in a topological order (stable: ties keep the order of ``nodes``)."""
    index = {v: i for i, v in enumerate(nodes)}
    indeg = dict.fromkeys(nodes, 0)
    succ: dict[str, list[str]] = {v: [] for v in nodes}
    for e in edges:
        if is_carry(e):
            continue
        s, d = e[0], e[1]
        succ[s].append(d)
        indeg[d] += 1
    import heapq

    ready = [(index[v], v) for v in nodes if indeg[v] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, v = heapq.heappop(ready)
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, (index[w], w))
    if len(out) != len(nodes):
        cyc = _find_cycle(nodes, edges) or []  # a node left out is on a cycle
        raise RlhlsError(f"graph has a cycle {' -> '.join(cyc + [cyc[0]])}; expected a DAG")
    return out


def check_inputs(rows, edges, capacity=None, links=None, *, profile_name="profile", graph_name="graph") -> None:
    """Cross-file checks: graph nodes have profile rows, no cycle. RlhlsError naming file and row."""
    if not rows:
        raise RlhlsError(f"{profile_name}: no profile rows")
    have = {r.node for r in rows}
    numbers = getattr(edges, "row_numbers", None) or [i + 2 for i in range(len(edges))]
    for i, (s, d, *_) in enumerate(edges):
        for v in (s, d):
            if v not in have:
                raise RlhlsError(
                    f"{graph_name}: row {numbers[i]}: node '{v}' has no rows in {profile_name}; "
                    "expected every graph node to be profiled on at least one unit"
                )
    cyc = _find_cycle(list(have), edges)
    if cyc:
        raise RlhlsError(f"{graph_name}: the graph has a cycle {' -> '.join(cyc + [cyc[0]])}; expected a DAG")
