"""Calibrated profiles: the model's rows of the nodes a build's components implement, replaced
by what the vendor tools reported for those components.

``calibrate(profile, build_dir, manifest)`` (the build's ``manifest.json`` as a dict) reads every
report under ``build_dir`` (``partition.reports.find_reports``) and matches each to the component
of the manifest whose ``top`` it names. For every node a component implements (the manifest's ``nodes``), the
node's PL rows (every design point of the model) become one row:

* ``latency_us = cycles x clock_ns / 1000 + launch_overhead_us``: cycles are the co-simulation's
  average latency where a passing co-simulation report exists (``source`` ``cosim``), else the
  synthesis report's worst-case latency (``csynth``); the clock is the period the kernel runs at
  (the target, or the estimate where synthesis misses it); the launch overhead is the device
  catalogue's, the same term the model adds (the host's start of a kernel, which the tools do not
  see);
* resources from the synthesis report: LUT, FF, DSP, URAM, and BRAM_18K / 2 as ``bram36``;
* a node several components implement (a backward pass: input gradient and weight gradient) adds
  their latencies (the host calls them in turn) and their resources; it is calibrated only when
  every one of them has a report;
* an hls4ml component computes a whole forward pass of its network in one call (its nodes of one
  instance and phase: ``q`` fwd, ``q`` tfwd): the call's latency is shared over those nodes by
  their FLOPs, and the pass's first node carries the component's resources (the ILP adds them up
  per node);
* ``point``: the built design point, ``pf<N>`` from the component's parameters (``+``-joined for
  several), else ``built``;
* an activation folded into a component (the manifest's ``folded``) runs inside that component's
  call: its PL row costs 0 and no resources, with the component's source.

``compare(model_rows, calibrated_rows)`` pairs every calibrated row with the model's row of the
same node, unit and design point (else the point nearest in parallelism) and gives the model's
error in % against the report; ``compare_figure`` plots it.

AIE nodes (``source`` ``aie``): a node of the build's AIE graph (``aie/manifest.json``) whose every
output PLIO has an aiesimulator output gets one AIE row: ``latency_us`` = the last output time
stamp (the simulation starts at 0) + the catalogue's AIE launch overhead; tiles and PLIO pairs as
built, the PL data movers' LUT/FF the model's at that point.

A component whose report gives no latency (``undef`` and no co-simulation) stays on the model,
and a note says so. Refused with one line naming the file: a folder without a manifest or without
reports, a build of another design or batch, a report whose top is no component of the build, a
report for another part, any report that cannot be read.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from rlhls.core.errors import RlhlsError
from rlhls.designs.devices import get_device

from .profile_io import ProfileRow
from .reports import find_reports, read_aiesim_output, read_cosim, read_csynth

__all__ = ["calibrate", "compare", "compare_figure"]


def _point(comps) -> str:
    pfs = [c.get("params", {}).get("pf") for c in comps]
    return "+".join(f"pf{p}" for p in pfs) if all(isinstance(p, int) for p in pfs) else "built"


def _component_of(path: Path, build_dir: Path, comps: list) -> dict | None:
    """The component whose folder holds `path`, if any."""
    for c in comps:
        d = build_dir / c.get("dir", "")
        if c.get("dir") and d in path.parents:
            return c
    return None


def _pick(paths_reports, notes, what):
    """One report per top: where several folders hold one (classic and unified runs), the newest."""
    by_top = {}
    for path, rep in paths_reports:
        by_top.setdefault(rep.top, []).append((path, rep))
    out = {}
    for top, items in by_top.items():
        items.sort(key=lambda pr: pr[0].stat().st_mtime, reverse=True)
        out[top] = items[0][1]
        folders = {p.parent for p, _ in items}
        if len(folders) > 1:
            notes.append(f"{what} of '{top}': {len(items)} reports, the newest used ({items[0][0]})")
    return out


def _calls(comps, profile, graph, manifest) -> dict:
    """``{(component, node): (share of one call, carries the resources)}`` for the hls4ml components:
    one call of the network's top computes every layer of one forward pass (an instance and phase:
    ``q`` fwd, ``q`` tfwd), shared over its nodes by FLOPs; the pass's first node carries the
    component's resources. Other components: one call per node (absent: (1, True))."""
    if not any(c.get("kind") == "hls4ml" for c in comps):
        return {}
    if graph is None:
        from rlhls.designs.graph import build_graph
        from rlhls.designs.registry import get_design

        graph = build_graph(get_design(manifest["design"], files=False), manifest.get("batch"))
    where = {n.name: (n.instance, n.phase) for n in graph.nodes}
    flops = {r.node: max(1.0, float(r.flops or 0)) for r in profile}
    out = {}
    for c in comps:
        if c.get("kind") != "hls4ml":
            continue
        passes: dict[tuple[str, str], list[str]] = {}
        for n in c.get("nodes") or []:
            passes.setdefault(where.get(n, (n, "")), []).append(n)
        for nodes in passes.values():
            tot = sum(flops.get(n, 1.0) for n in nodes)
            for i, n in enumerate(nodes):
                out[(c["name"], n)] = (flops.get(n, 1.0) / tot, i == 0)
    return out


def calibrate(profile, build_dir, manifest: dict, *, batch: int | None = None, graph=None):
    """``(rows, notes)``: `profile`'s rows with the reported components' nodes replaced (module
    docstring), and one line per thing left on the model. `batch`: the profile's batch, checked
    against the build's; `graph`: its training graph, when the caller has it."""
    build_dir = Path(build_dir)
    where = build_dir / "manifest.json"
    design = getattr(profile, "design", None)
    if design and manifest.get("design") and manifest["design"] != design:
        raise RlhlsError(f"{where}: the build is of design '{manifest['design']}', the profile of '{design}'")
    if batch is not None and manifest.get("batch") not in (None, batch):
        raise RlhlsError(f"{where}: the build is at batch {manifest['batch']}, the profile at batch {batch}")
    found = find_reports(build_dir)
    if not any(found.values()):
        raise RlhlsError(f"{build_dir}: no synthesis or co-simulation reports (csynth.xml, <top>_cosim.rpt) nor "
                         "aiesimulator outputs in it; run `rlhls build --synth` (and --cosim) with Vitis first")
    comps = [c for c in manifest["components"] if isinstance(c, dict) and c.get("top")]
    tops = {c["top"]: c for c in comps}
    part = str(manifest.get("part") or "")

    def check(path, rep, kind):
        if rep.top not in tops:
            raise RlhlsError(f"{path}: top '{rep.top}' is no component of the build in {build_dir} "
                             f"(its tops: {', '.join(sorted(tops)) or 'none'})")
        home = _component_of(path, build_dir, comps)
        if home is not None and home["top"] != rep.top:
            raise RlhlsError(f"{path}: {kind} of top '{rep.top}' inside component '{home['name']}', whose top is "
                             f"'{home['top']}'")
        if kind == "synthesis report" and part and rep.part.lower() != part.lower():
            raise RlhlsError(f"{path}: synthesised for part {rep.part}; the build is for {part}")

    synths, cosims = [], []
    for p in found["csynth"]:
        srep = read_csynth(p)
        check(p, srep, "synthesis report")
        synths.append((p, srep))
    for p in found["cosim"]:
        crep = read_cosim(p)
        check(p, crep, "co-simulation report")
        cosims.append((p, crep))
    notes: list[str] = []
    synth = _pick(synths, notes, "synthesis")
    cosim = _pick(cosims, notes, "co-simulation")

    device = get_device(getattr(profile, "device", None) or manifest.get("device"))
    pl = device.units.get("PL")
    launch = pl.perf["launch_overhead_us"].value if pl is not None and "launch_overhead_us" in pl.perf else 0.0

    per_comp = {}  # component name -> (latency_us, cycles, resources, source)
    for top, c in tops.items():
        s, m = synth.get(top), cosim.get(top)
        if s is None:
            if m is not None:
                notes.append(f"{c['name']}: a co-simulation report but no synthesis report (resources, clock); "
                             "stays on the model")
            continue
        cycles, source = s.latency_worst_cycles, "csynth"
        if m is not None and m.status.lower() != "pass":
            notes.append(f"{c['name']}: co-simulation status {m.status}; its latency is not used")
        elif m is not None and m.latency_avg_cycles is not None:
            cycles, source = m.latency_avg_cycles, "cosim"
        if cycles is None:
            notes.append(f"{c['name']}: latency 'undef' in {s.path} and no co-simulation; stays on the model")
            continue
        res = {"lut": s.resources.get("LUT"), "ff": s.resources.get("FF"), "dsp": s.resources.get("DSP"),
               "bram36": None if s.resources.get("BRAM_18K") is None else s.resources["BRAM_18K"] / 2,
               "uram": s.resources.get("URAM")}
        per_comp[c["name"]] = (cycles * s.clock_ns / 1000.0 + launch, float(cycles),
                               {k: float(v) for k, v in res.items() if v}, source)

    by_node: dict[str, list] = {}
    folded: dict = {}
    for c in comps:
        for n in c.get("nodes") or []:
            by_node.setdefault(n, []).append(c)
        for n in c.get("folded") or []:
            folded[n] = c
    have_pl = {r.node for r in profile if r.unit == "PL"}
    known = {r.node for r in profile}
    unknown = sorted(n for n in list(by_node) + list(folded) if n not in known)
    if unknown:
        raise RlhlsError(f"{where}: node '{unknown[0]}' of the build is not in the profile's training graph")
    share = _calls(comps, profile, graph, manifest)
    new = {}
    for node, cs in by_node.items():
        if not all(c["name"] in per_comp for c in cs):
            if any(c["name"] in per_comp for c in cs):
                missing = [c["name"] for c in cs if c["name"] not in per_comp]
                notes.append(f"{node}: no usable report for {', '.join(missing)}; stays on the model")
            continue
        if node not in have_pl:
            notes.append(f"{node}: the profile allows it no PL row; the report is not used")
            continue
        parts = []
        for c in cs:
            lat, cyc, r, src = per_comp[c["name"]]
            frac, first = share.get((c["name"], node), (1.0, True))
            parts.append((lat * frac, cyc * frac, r if first else {}, src))
        res = {}
        for _, _, r, _ in parts:
            for k, v in r.items():
                res[k] = res.get(k, 0.0) + v
        src = "cosim" if all(p[3] == "cosim" for p in parts) else "csynth"
        new[node] = dict(latency_us=sum(p[0] for p in parts), cycles=sum(p[1] for p in parts), resources=res,
                         source=src, point=_point(cs))
    for node, c in folded.items():
        if node in new or c["name"] not in per_comp or node not in have_pl:
            continue
        new[node] = dict(latency_us=0.0, cycles=0.0, resources={}, source=per_comp[c["name"]][3], point=_point([c]))

    aie = _aie_rows(profile, build_dir, manifest, found["aiesim"], device, notes)
    rows, done = [], set()
    for r in profile:
        repl = new if r.unit == "PL" else aie if r.unit == "AIE" else {}
        if r.node not in repl:
            rows.append(r)
        elif (r.node, r.unit) not in done:
            done.add((r.node, r.unit))
            rows.append(ProfileRow(node=r.node, unit=r.unit, flops=r.flops, runs=r.runs, **repl[r.node]))
    return rows, notes


def _aie_rows(profile, build_dir: Path, manifest: dict, outputs: list, device, notes: list) -> dict:
    """{node: row fields} of the AIE nodes whose every output PLIO has an aiesimulator output: the
    last time stamp + the catalogue's AIE launch overhead; tiles and PLIO pairs as built, the PL
    data movers' LUT/FF the model's at that point."""
    if not outputs:
        return {}
    from rlhls.core.fileio import read_json

    files = (manifest.get("aie") or {}).get("files") or []
    mpath = next((build_dir / f for f in files if isinstance(f, str) and f.endswith("manifest.json")
                  and not Path(f).is_absolute() and ".." not in Path(f).parts), None)  # inside the build only
    if mpath is None or not mpath.is_file():
        raise RlhlsError(f"{outputs[0]}: an aiesimulator output, but the build in {build_dir} has no AIE graph")
    try:
        graph = read_json(mpath)
    except (OSError, ValueError) as e:
        raise RlhlsError(f"{mpath}: cannot be read ({e})") from None
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    if not isinstance(nodes, list) or not all(_aie_node(n) for n in nodes):
        raise RlhlsError(f"{mpath}: not the manifest of an AIE graph (expected nodes with a name, plio_outputs, "
                         "and tiles and plio_pairs as numbers)")
    owner = {plio: n for n in nodes for plio in n.get("plio_outputs") or []}
    sims = {}
    for p in outputs:
        sim = read_aiesim_output(p)
        if sim.plio not in owner:
            raise RlhlsError(f"{p}: PLIO '{sim.plio}' is no output of the build's AIE graph "
                             f"(its outputs: {', '.join(sorted(owner)) or 'none'})")
        sims[sim.plio] = sim
    unit = device.units.get("AIE")
    launch = unit.perf["launch_overhead_us"].value if unit is not None and "launch_overhead_us" in unit.perf else 0.0
    model = {(r.node, r.point): r for r in profile if r.unit == "AIE"}
    out = {}
    for n in nodes:
        got = [sims[q] for q in n.get("plio_outputs") or [] if q in sims]
        if not got:
            continue
        if len(got) < len(n["plio_outputs"]):
            notes.append(f"{n['name']}: aiesimulator outputs for {len(got)} of its {len(n['plio_outputs'])} PLIOs; "
                         "stays on the model")
            continue
        if not any(node == n["name"] for node, _ in model):
            notes.append(f"{n['name']}: the profile allows it no AIE row; the simulation is not used")
            continue
        m = model.get((n["name"], n.get("point")))
        res = {"aie_tiles": float(n["tiles"]), "plio": float(n["plio_pairs"])}
        if m is not None:  # the PL data movers of the point built, as the model has them
            res.update({k: m.usage(k) for k in ("lut", "ff") if m.usage(k)})
        last = max(o.last_ns for o in got)
        out[n["name"]] = dict(latency_us=last / 1000.0 + launch, cycles=None, resources=res, source="aie",
                              point=str(n.get("point") or "built"))
    return out


def _aie_node(n) -> bool:
    """`n` is a node of an AIE manifest as emit_aie writes it (the fields _aie_rows reads)."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0

    return (isinstance(n, dict) and isinstance(n.get("name"), str) and isinstance(n.get("plio_outputs", []), list)
            and all(isinstance(q, str) for q in n.get("plio_outputs") or []) and number(n.get("tiles"))
            and number(n.get("plio_pairs")))


def _pf(point: str) -> int | None:
    nums = re.findall(r"pf(\d+)", point or "")
    return sum(int(n) for n in nums) if nums else None


def compare(model, calibrated) -> list[dict]:
    """Each row of `calibrated` whose source is not the model's, beside the model's row of the same
    node and unit: the same design point, else the one nearest in parallelism (``pf``, on a log
    scale), else the first. ``error_pct`` = (model - report) / report x 100, per latency and resource;
    None where the report's figure is 0."""
    by: dict[tuple[str, str], list] = {}
    for r in model:
        by.setdefault((r.node, r.unit), []).append(r)
    out = []
    for c in calibrated:
        if c.source == "model":
            continue
        cands = by.get((c.node, c.unit))
        if not cands:
            out.append({"node": c.node, "unit": c.unit, "source": c.source, "point": c.point, "model_point": None,
                        "latency_us": c.latency_us, "model_latency_us": None, "error_pct": None})
            continue
        same = [m for m in cands if m.point == c.point]
        pf = _pf(c.point)
        if same:
            m = same[0]
        elif pf is not None and any(_pf(x.point) for x in cands):
            m = min(((x, q) for x in cands if (q := _pf(x.point))), key=lambda t: abs(math.log(t[1] / pf)))[0]
        else:
            m = cands[0]

        def err(mv, cv):
            return None if not cv else (mv - cv) / cv * 100.0

        rec = {"node": c.node, "unit": c.unit, "source": c.source, "point": c.point, "model_point": m.point,
               "latency_us": c.latency_us, "model_latency_us": m.latency_us,
               "error_pct": err(m.latency_us, c.latency_us)}
        for k in ("lut", "ff", "dsp", "bram36", "uram"):
            rec[k] = c.usage(k)
            rec[f"model_{k}"] = m.usage(k)
            rec[f"{k}_error_pct"] = err(m.usage(k), c.usage(k))
        out.append(rec)
    return out


def compare_figure(rows: list[dict]):
    """Model against report per node: latency bars (log scale) and the latency error in %."""
    from matplotlib.figure import Figure

    rows = [r for r in rows if r["model_latency_us"] is not None and r["latency_us"] > 0]
    fig = Figure(figsize=(max(6.0, 0.45 * len(rows) + 2), 6.5), layout="constrained")
    ax, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["model_latency_us"] for r in rows], 0.4, label="model")
    ax.bar([i + 0.2 for i in x], [r["latency_us"] for r in rows], 0.4, label="report")
    ax.set_yscale("log")
    ax.set_ylabel("latency (us)")
    ax.legend()
    ax.set_title("profile: model against the tools' reports")
    ax2.bar(list(x), [r["error_pct"] or 0.0 for r in rows], 0.6, color="tab:red")
    ax2.axhline(0, color="black", lw=0.8)
    ax2.set_ylabel("model error (%)")
    ax2.set_xticks(list(x), [f"{r['node']} ({r['source']})" for r in rows], rotation=60, ha="right", fontsize=7)
    return fig
