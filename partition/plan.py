"""The partition result: `Plan`, its files (plan.json, plan.csv, gantt.png) and `read_plan`.

plan.json::

    {"status": "Optimal" | "Feasible (time limit)", "makespan_us": float, "gap": float,
     "assignment": {node: "PS"|"PL"|"AIE"}, "start_us": {node: float}, "point": {node: str},
     "finish_us": {node: float}, "core": {PS node: int}, "ps_cores": int,
     "baselines": {"all_PS"|"all_PL"|"all_AIE"|"HEFT": float | null},
     "utilisation": {unit: {"busy": fraction of makespan (PS: of makespan x cores), resource: fraction}},
     "solver": "cbc"|"highs", "solve_seconds": float, "bound": float | null,
     "sources": {node: "model"|"csynth"|"cosim"|"aie"|"measured"},   (the profile row each node got)
     "runs": {node: runs per training step} (nodes run other than once; absent: every node once)}

``makespan_us`` is the cost of one training step (rlhls.partition.heft): with every node once the
latest finish (or the period the loop-carried edges need); where nodes run at several rates, the
sum over the loops (nodes that run equally often) of runs x the loop's makespan, the loops
scheduled one after another, each from time 0 (its nodes' start_us / finish_us are within it).
``rlhls perf`` reports the same quantity for the plan (``variants.plan.graph_step_us``).

plan.csv: ``node,unit,point,start_us,finish_us,latency_us`` in start order.
gantt.png: one lane per unit (one per PS core), a bar per node, the makespan as a line.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_bytes, atomic_write_text, check_out, read_json, staged_folder

from .profile_io import MAX_NODES, MAX_PS_CORES, UNITS

__all__ = ["Plan", "write_plan", "read_plan", "load_plan", "check_plan", "utilisation", "plan_csv", "gantt_figure",
           "gantt_png"]


@dataclass
class Plan:
    status: str
    makespan_us: float
    gap: float
    assignment: dict
    start_us: dict
    point: dict
    finish_us: dict
    baselines: dict
    solve_seconds: float
    solver: str = ""
    core: dict = field(default_factory=dict)
    ps_cores: int = 1
    bound: float | None = None
    latency_us: dict = field(default_factory=dict)
    solver_seconds: float = 0.0
    utilisation: dict = field(default_factory=dict)
    source: str = ""  # the plan.json it was read from ("" when solved in this process)
    sources: dict = field(default_factory=dict)  # node -> source of the profile row it got
    runs: dict = field(default_factory=dict)  # node -> runs per training step, of those not run once
    loops: dict = field(default_factory=dict)  # runs -> makespan of one run of that loop (solved here)

    def record_sources(self, rows) -> dict:
        """Note, per node, the source of the profile row the plan chose (unit and point); returns
        {source: nodes}."""
        for r in rows:
            if self.assignment.get(r.node) == r.unit and self.point.get(r.node, r.point) == r.point:
                self.sources[r.node] = getattr(r, "source", "model")
        count: dict[str, int] = {}
        for s in self.sources.values():
            count[s] = count.get(s, 0) + 1
        return count

    @property
    def units(self) -> dict:
        """{unit: number of nodes}."""
        out: dict[str, int] = {}
        for u in self.assignment.values():
            out[u] = out.get(u, 0) + 1
        return out

    def gantt(self, edges=()):
        """The Gantt chart as a matplotlib Figure (see gantt_figure)."""
        return gantt_figure(self, edges)

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "makespan_us": self.makespan_us,
            "gap": self.gap,
            "assignment": dict(self.assignment),
            "start_us": dict(self.start_us),
            "point": dict(self.point),
            "finish_us": dict(self.finish_us),
            "core": dict(self.core),
            "ps_cores": self.ps_cores,
            "baselines": dict(self.baselines),
            "utilisation": self.utilisation,
            "solver": self.solver,
            "solve_seconds": self.solve_seconds,
            "bound": self.bound,
            "sources": dict(self.sources),
            **({"runs": dict(self.runs)} if self.runs else {}),
        }


def utilisation(plan, rows, capacity) -> dict:
    """Busy fraction per unit and used fraction of each capacity given."""
    chosen = {}
    for r in rows:
        if plan.assignment.get(r.node) == r.unit and plan.point.get(r.node) == r.point:
            chosen[r.node] = r
    out = {}
    span = plan.makespan_us
    runs = getattr(plan, "runs", {}) or {}
    for u in UNITS:
        nodes = [v for v, uu in plan.assignment.items() if uu == u]
        if not nodes and not any(k[0] == u for k in capacity):
            continue
        busy = sum(runs.get(v, 1.0) * (plan.finish_us[v] - plan.start_us[v]) for v in nodes)
        lanes = plan.ps_cores if u == "PS" else 1
        entry: dict[str, float] = {"nodes": len(nodes)}
        # PL/AIE run nodes side by side: busy = time some node runs (union of intervals), per loop x its runs
        if u != "PS":
            loops: dict[float, list] = {}
            for v in nodes:
                loops.setdefault(runs.get(v, 1.0), []).append((plan.start_us[v], plan.finish_us[v]))
            busy = sum(r * _union(iv) for r, iv in loops.items())
        entry["busy"] = busy / (span * lanes) if span > 0 else 0.0
        for (cu, res), cap in capacity.items():
            if cu == u and res != "cores" and cap > 0:
                entry[res] = sum(chosen[v].usage(res) for v in nodes if v in chosen) / cap
        out[u] = entry
    return out


def _union(intervals) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def plan_csv(plan: Plan) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["node", "unit", "point", "start_us", "finish_us", "latency_us"])
    for v in sorted(plan.assignment, key=lambda v: (plan.start_us[v], plan.finish_us[v], v)):
        s, f = plan.start_us[v], plan.finish_us[v]
        w.writerow([v, plan.assignment[v], plan.point[v], f"{s:.6g}", f"{f:.6g}", f"{f - s:.6g}"])
    return buf.getvalue()


def gantt_figure(plan: Plan, edges=()):
    """A matplotlib Figure: one lane per unit (PS: per core); every bar named (inside it where the name
    fits, else a number keyed under the chart); edges between units as vertical arrows at the consumer's
    start; the makespan as a line. Where nodes run at several rates, the loops are drawn once each, one
    after another, each labelled with its runs. Made with the object API, so a notebook's backend is
    left alone."""
    from matplotlib.figure import Figure

    runs = getattr(plan, "runs", {}) or {}
    shift: dict[str, float] = {}  # node -> where its loop is drawn from
    marks: list[tuple[float, float, float]] = []  # (from, to, runs) of each loop drawn
    if runs:
        by: dict[float, list[str]] = {}
        for v in plan.assignment:
            by.setdefault(float(runs.get(v, 1.0)), []).append(v)
        at = 0.0
        for r in sorted(by):
            span_r = max(float((getattr(plan, "loops", {}) or {}).get(r, 0.0)), max(plan.finish_us[v] for v in by[r]))
            shift.update(dict.fromkeys(by[r], at))
            marks.append((at, at + span_r, r))
            at += span_r
    start = {v: plan.start_us[v] + shift.get(v, 0.0) for v in plan.assignment}
    finish = {v: plan.finish_us[v] + shift.get(v, 0.0) for v in plan.assignment}

    lanes: list[tuple[str, int | None]] = []
    if any(u == "PS" for u in plan.assignment.values()) or plan.ps_cores:
        used_cores = sorted(set(plan.core.values())) or [0]
        n_ps = max(plan.ps_cores, max(used_cores) + 1) if any(u == "PS" for u in plan.assignment.values()) else 0
        lanes += [("PS", c) for c in range(n_ps)]
    for u in ("PL", "AIE"):
        if any(uu == u for uu in plan.assignment.values()):
            lanes.append((u, None))
    # spatial units: stack overlapping bars into sub-rows so each stays visible
    rows_of = {}
    sub = {}
    for lane in lanes:
        u, c = lane
        nodes = [v for v, uu in plan.assignment.items() if uu == u and (c is None or plan.core.get(v, 0) == c)]
        nodes.sort(key=lambda v: (start[v], v))
        ends: list[float] = []
        for v in nodes:
            for i, e in enumerate(ends):
                if start[v] >= e - 1e-12:
                    ends[i] = finish[v]
                    sub[v] = i
                    break
            else:
                sub[v] = len(ends)
                ends.append(finish[v])
        rows_of[lane] = (nodes, max(1, len(ends)))
    colours = {"PS": "#4C72B0", "PL": "#55A868", "AIE": "#C44E52"}
    total_rows = sum(n for _, n in rows_of.values()) or 1
    fig_h = min(2.0 + 0.35 * total_rows, 30)
    fig = Figure(figsize=(12, fig_h))
    ax = fig.add_subplot()
    span = (marks[-1][1] if marks else plan.makespan_us) or 1.0
    y, ticks, labels, centre = 0.0, [], [], {}
    drawn: list[tuple[str, str, float]] = []  # (lane label, node, row centre) in the order shown, top lane first
    for lane in reversed(lanes):
        nodes, n = rows_of[lane]
        u, c = lane
        name = f"PS core {c}" if u == "PS" else u
        for v in nodes:
            yy = y + (n - 1 - sub[v])
            s, f = start[v], finish[v]
            ax.barh(yy + 0.5, max(f - s, span * 1e-4), left=s, height=0.8, color=colours[u], edgecolor="black", lw=0.4)
            centre[v] = (s, f, yy + 0.5)
            drawn.append((name, v, yy + 0.5))
        ticks.append(y + n / 2)
        labels.append(name)
        y += n
        ax.axhline(y, color="grey", lw=0.5)
    ax.set_yticks(ticks, labels)
    ax.set_ylim(0, y + 0.6)
    ax.set_xlim(0, span * 1.08)
    ax.set_xlabel("time (us)")
    fig.tight_layout()
    top_first = {name: i for i, name in enumerate(reversed(labels))}
    drawn.sort(key=lambda d: (top_first[d[0]], -d[2], centre[d[1]][0]))
    _label_bars(fig, ax, drawn, centre, span * 1.08)
    # an edge between units is a vertical arrow at the consumer's start, from the producer's row to the
    # consumer's bar: vertical arrows never cross one another (a line from the producer's end to the
    # consumer's start crosses the others wherever the schedule interleaves)
    crossing = [(a, b) for a, b, *r in edges if not (len(r) > 1 and r[1])
                and a in centre and b in centre and plan.assignment[a] != plan.assignment[b]]
    for a, b in crossing if len(crossing) <= 200 else ():  # arrows only while they stay readable
        x, ya, yb = centre[b][0], centre[a][2], centre[b][2]
        ax.annotate("", xy=(x, yb), xytext=(x, ya),
                    arrowprops=dict(arrowstyle="->", color="grey", lw=0.6, alpha=0.7, shrinkA=0, shrinkB=0))
        ax.plot([x], [ya], marker="o", ms=2, color="grey", alpha=0.7)
    if marks:  # the loops, one after another: each once, its runs per step above it
        for a, b, r in marks:
            ax.axvline(b, color="black", ls=":", lw=1)
            ax.text((a + b) / 2, y, f"x{r:.4g}: {b - a:.4g} us", ha="center", va="bottom", fontsize=8)
    else:
        ax.axvline(plan.makespan_us, color="black", ls="--", lw=1)
        ax.text(plan.makespan_us, y, f" makespan {plan.makespan_us:.4g} us", va="bottom", fontsize=8)
    gap = "" if plan.gap <= 0 else f", gap {plan.gap:.1%}"
    loops = " = sum of runs x loop (each loop drawn once)" if marks else ""
    ax.set_title(f"{plan.status}{gap}: makespan {plan.makespan_us:.4g} us{loops} ({plan.solver})")
    fig.tight_layout()
    return fig


_LABEL_PT = 7  # font size of a bar's name
_CHAR_W = 0.6  # a character's width, in font sizes (DejaVu Sans, an estimate that errs wide)


def _label_bars(fig, ax, drawn, centre, xspan: float) -> None:
    """Every bar named: inside it where its name fits, else by a number on it and in the key under the
    chart (the PS's short nodes, most often). Numbers close together are staggered within their row."""
    import textwrap

    width_pt = ax.get_position().width * fig.get_figwidth() * 72
    per_us = width_pt / xspan
    key: dict[str, list[str]] = {}
    last: dict[float, list[float]] = {}  # row -> right ends of the numbers placed in it (per level)
    k = 0
    for lane, v, yc in drawn:
        s, f, _ = centre[v]
        if (f - s) * per_us >= (len(v) + 1) * _LABEL_PT * _CHAR_W:
            ax.text((s + f) / 2, yc, v, ha="center", va="center", fontsize=_LABEL_PT, color="white", clip_on=True)
            continue
        k += 1
        text = str(k)
        x = (s + f) / 2
        half = (len(text) * 6 * _CHAR_W + 2) / 2 / per_us
        ends = last.setdefault(yc, [-float("inf")] * 3)
        level = next((i for i in (1, 0, 2) if ends[i] <= x - half), min(range(3), key=lambda i: ends[i]))
        ends[level] = x + half
        ax.text(x, yc + (level - 1) * 0.27, text, ha="center", va="center", fontsize=6, color="black", clip_on=True,
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
        key.setdefault(lane, []).append(f"{k} {v}")
    if key:
        chars = max(40, int(width_pt / (7 * _CHAR_W)))
        lines = [line for lane, items in key.items()
                 for line in textwrap.wrap(f"{lane}: " + ", ".join(items), chars, subsequent_indent="    ")]
        ax.annotate("\n".join(lines), xy=(0, 0), xycoords="axes fraction", xytext=(0, -30),
                    textcoords="offset points", va="top", ha="left", fontsize=7)
        fig.set_figheight(fig.get_figheight() + 0.14 * len(lines) + 0.1)


def gantt_png(plan: Plan, edges=()) -> bytes:
    buf = io.BytesIO()
    gantt_figure(plan, edges).savefig(buf, format="png", dpi=120)
    return buf.getvalue()


PLAN_FILES = ("plan.json", "plan.csv", "gantt.png")


def plan_folder(folder: Path) -> bool:
    """A folder written by an rlhls before the ownership record: plan files only, a valid plan.json."""
    if not all(p.name in PLAN_FILES for p in folder.iterdir()):
        return False
    try:
        read_plan(folder / "plan.json")
    except RlhlsError:
        return False
    return True


def write_plan(plan: Plan, out_dir, rows=None, edges=(), *, force: bool = False, bound: dict | None = None) -> Path:
    """plan.json, plan.csv and gantt.png into ``out_dir`` (fileio.staged_folder: built beside it,
    then published; a folder rlhls did not write is refused unless ``force``, which still deletes
    nothing of the user's). ``bound``: the record of the run the plan was solved for."""
    out_dir = Path(out_dir)
    check_out(out_dir, command="partition", force=force, ours=plan_folder)
    with staged_folder(out_dir, command="partition", ours=plan_folder) as tmp:
        rec = {**plan.to_json(), **({"binding": bound} if bound is not None else {})}
        atomic_write_text(tmp / "plan.json", json.dumps(rec, indent=1, default=str) + "\n")
        atomic_write_text(tmp / "plan.csv", plan_csv(plan))
        atomic_write_bytes(tmp / "gantt.png", gantt_png(plan, edges))
    return out_dir


def load_plan(path) -> Plan:
    """A plan.json (file or a folder holding one) as a Plan, validated (``read_plan``)."""
    path = Path(path)
    if path.is_dir():
        path = path / "plan.json"
    d = read_plan(path)
    fin = d["finish_us"] if isinstance(d.get("finish_us"), dict) else {}
    return Plan(status=d["status"], makespan_us=float(d["makespan_us"]), gap=float(d["gap"]),
                assignment=dict(d["assignment"]), start_us=dict(d["start_us"]), point=dict(d["point"]),
                finish_us={v: float(fin.get(v, d["start_us"][v])) for v in d["assignment"]},
                baselines=dict(d.get("baselines") or {}), solve_seconds=float(d.get("solve_seconds") or 0.0),
                solver=str(d.get("solver") or ""), core=dict(d.get("core") or {}),
                ps_cores=int(d.get("ps_cores") or 1), bound=d.get("bound"),
                utilisation=dict(d.get("utilisation") or {}), source=str(path),
                sources=dict(d.get("sources") or {}), runs={v: float(r) for v, r in (d.get("runs") or {}).items()})


def check_plan(plan, graph, *, where: str = "plan") -> dict:
    """The plan's {node: unit} for every node of `graph`, after checking that it names only
    nodes of the graph, every one of them, and puts only matrix multiplies on the AIE.
    `plan` is a Plan or a {node: unit} dict; errors name `where` (the plan file)."""
    asg = plan.assignment if hasattr(plan, "assignment") else dict(plan)
    where = getattr(plan, "source", "") or where
    names = [n.name for n in graph.nodes]
    known = set(names)
    for node, unit in asg.items():
        if node not in known:
            raise RlhlsError(f"plan '{where}': node '{node}' is not in the training graph of '{graph.design}' "
                             f"(is the plan for this design and batch?)")
        if unit not in UNITS:
            raise RlhlsError(f"plan '{where}': node '{node}' on unknown unit {unit!r} (expected PS, PL or AIE)")
        if unit == "AIE" and not graph.node(node).mm:
            raise RlhlsError(f"plan '{where}': node '{node}' is not a matrix-multiply node and cannot go to AIE")
    missing = [n for n in names if n not in asg]
    if missing:
        raise RlhlsError(f"plan '{where}': no unit for node '{missing[0]}' ({len(missing)} of {len(names)} "
                         "nodes missing); expected every training-graph node")
    return {n: asg[n] for n in names}


def _number(v, low=0.0) -> bool:
    """`v` is a finite JSON number >= `low` (no bool, no NaN or Infinity, no text)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= low


def read_plan(path) -> dict:
    """Read and validate a plan.json (a file or a folder holding one): every field ``load_plan``
    takes, its type and range, one line naming the field."""
    path = Path(path)
    if path.is_dir():
        path = path / "plan.json"
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise RlhlsError(f"plan {path}: not found") from None
    except OSError as exc:
        raise RlhlsError(f"plan {path}: cannot be read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise RlhlsError(f"plan {path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError as exc:  # too large or deep, not UTF-8, not a regular file
        raise RlhlsError(f"plan {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RlhlsError(f"plan {path}: expected a JSON object with status, makespan_us, assignment, start_us, point")
    for key in ("status", "makespan_us", "gap", "assignment", "start_us", "point"):
        if key not in data:
            raise RlhlsError(f"plan {path}: missing key '{key}'")
    if not isinstance(data["status"], str):
        raise RlhlsError(f"plan {path}: 'status' must be a string")
    for key in ("makespan_us", "gap"):
        v = data[key]
        if not _number(v):
            raise RlhlsError(f"plan {path}: '{key}' = {_show(v)} must be a number >= 0")
    asg = data["assignment"]
    if not isinstance(asg, dict) or not asg:
        raise RlhlsError(f"plan {path}: 'assignment' must be a non-empty object {{node: unit}}")
    if len(asg) > MAX_NODES:
        raise RlhlsError(f"plan {path}: 'assignment' has {len(asg)} nodes, more than the {MAX_NODES} a plan may have")
    for node, unit in asg.items():
        if unit not in UNITS:
            raise RlhlsError(f"plan {path}: node '{node}' assigned to unknown unit {_show(unit)}; "
                             f"expected one of {', '.join(UNITS)}")
    cores = data.get("ps_cores")
    if cores is not None and not (_number(cores, 1) and float(cores).is_integer() and cores <= MAX_PS_CORES):
        raise RlhlsError(f"plan {path}: 'ps_cores' = {_show(cores)} must be a whole number in 1..{MAX_PS_CORES}")
    tables = {"start_us": "a number >= 0", "point": "a string", "finish_us": "a number >= its start_us",
              "core": f"a PS core 0..{int(cores or 1) - 1}", "sources": "a string", "runs": "a number >= 0"}
    for key, want in tables.items():
        if key not in data or (key not in ("start_us", "point") and data[key] is None):
            continue
        table = data[key]
        if not isinstance(table, dict):
            raise RlhlsError(f"plan {path}: '{key}' must be an object {{node: value}}")
        if key in ("start_us", "point"):
            for node in asg:
                if node not in table:
                    raise RlhlsError(f"plan {path}: node '{node}' has no '{key}' entry")
        for node, v in table.items():
            if node not in asg:
                raise RlhlsError(f"plan {path}: '{key}' names node '{node}', which has no assignment")
            ok = (_number(v) if key in ("start_us", "runs") else isinstance(v, str) if key in ("point", "sources") else
                  _number(v) and v >= data["start_us"][node] if key == "finish_us" else
                  _number(v) and float(v).is_integer() and v < int(cores or 1))
            if not ok:
                raise RlhlsError(f"plan {path}: {key} of node '{node}' = {_show(v)} must be {want}")
    for key, want in (("solve_seconds", "a number >= 0"), ("bound", "a number >= 0"), ("solver", "a string")):
        v = data.get(key)
        if v is not None and not (isinstance(v, str) if key == "solver" else _number(v)):
            raise RlhlsError(f"plan {path}: '{key}' = {_show(v)} must be {want} (or null)")
    for key, nested in (("baselines", False), ("utilisation", True)):
        table = data.get(key)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise RlhlsError(f"plan {path}: '{key}' must be an object")
        for name, v in table.items():
            values = v.items() if nested and isinstance(v, dict) else [(None, v)]
            for sub, x in values:
                if not (_number(x) or (x is None and not nested)):
                    field = f"{key}.{name}" + (f".{sub}" if sub is not None else "")
                    raise RlhlsError(f"plan {path}: '{field}' = {_show(x)} must be a number >= 0"
                                     + ("" if nested else " (or null)"))
    return data


def _show(v) -> str:
    """A value for an error line, cut short (a crafted file's value may be megabytes)."""
    text = repr(v) if isinstance(v, (str, int, float, bool, type(None))) and len(str(v)) <= 40 else \
        f"{type(v).__name__} {str(v)[:30]}..." if isinstance(v, (str, int)) else repr(v)[:40]
    return text
