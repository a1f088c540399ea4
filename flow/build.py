"""Building a design: its plan's components as a folder of Vitis projects (files, csim, Vitis).

``build_design(design, out, plan=None, csim=False, ...) -> BuildResult`` maps the plan onto
components (``flow.mapping.map_design``: hls4ml forward networks, the kernels that implement each
PL node at the design point the plan chose for it, the AIE nodes, the host nodes; without a plan
every node is on the PL at the design's own parameters) and writes:

* one Vitis HLS component per kernel component (``flow.kernels.render_kernel``: HLS top,
  testbench, tb data from the numpy model) or hls4ml project (``flow.hls4ml_convert``, its function
  wrapped in a Vitis kernel top with its testbench and the emulator's vectors:
  ``flow.hls4ml_kernel``), each with ``hls_config.cfg`` (``v++ -c --mode hls``) and ``run_hls.tcl``
  (classic flow);
* ``aie/`` for the AIE nodes (``flow.aie.emit_aie``: an ADF graph within the device's tiles and
  PLIOs);
* ``system.cfg`` (v++ link) and ``manifest.json`` (what was generated from what, with sha256s,
  and after ``csim`` the results of every check); last, the rule checker (``flow.rules``) on the
  finished folder, its result in the manifest's ``rules`` (a violation makes the build not ok).

Part: ``part``, else the design's ``part``, else the device catalogue's part. The CPP and F-DDPG
designs name an AMD part (the KU15P, the Alveo U250's VU13P-class part: ``BUILD_PART`` in
``designs/cpp.py`` / ``designs/fddpg.py``) beside their Stratix-V device; a design on a device with
no AMD part that names none is emitted with ``part=PLACEHOLDER_PART`` (a comment and a warning say
to pass --part; the rule checker reports it); synth/cosim refuse such a build. Clock: ``clock_ns``,
else 1000 / the design's PL MHz.

Never clobbers (``core.fileio``): a non-empty ``out`` rlhls did not write is refused unless
``force`` (which deletes nothing of the user's); the folder is built beside ``out`` and published
when written, its manifest saying ``"complete": false`` until its checks (csim, Vitis, the rules)
have run and it is rewritten with their results: a build they did not finish (interrupted, killed)
is refused by ``rlhls check``, ``--reports`` and a calibration (``project.check_complete``).
``csim`` compiles and runs each kernel's testbench with g++ (``flow.csim.run_csim``, cached by
content hash under ``$RLHLS_CACHE_DIR``, else ``$XDG_CACHE_HOME/rlhls``, else ``~/.cache/rlhls``;
one that cannot be written is replaced by a scratch folder, said once), each hls4ml project through
``check_hls4ml``, and the AIE kernels under the shim (``flow.aie.check_aie``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlhls.core import __version__, procs
from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import check_out, scratch_dir, staged_folder
from rlhls.core.toolchain import cache_dir
from rlhls.designs.devices import get_device
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import build_graph
from rlhls.designs.network import Precision
from rlhls.designs.registry import get_design
from rlhls.partition.plan import check_plan

from . import link as L
from . import project as P
from . import vitis as V
from .aie import aie_fit, check_aie, emit_aie
from .csim import run_csim
from .hls4ml_convert import convert_network, csim_flags
from .hls4ml_kernel import run_wrapper_csim, wrap_network
from .kernels import render_kernel
from .mapping import Component, jsonable, map_design
from .paths import include_dir
from .rules import check_build
from .rules import summary as rules_summary

PLACEHOLDER_PART = "PLACEHOLDER_PART"
_XILINX_PREFIXES = ("xc", "xa", "xq")
UNITS = ("PS", "PL", "AIE")
_FWD_PHASES = ("fwd", "tfwd")
# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


@dataclass
class BuildResult:
    design: str
    out: Path
    part: str
    clock_ns: float
    components: list
    aie: dict
    host: list
    unmapped: dict
    warnings: list
    flow: str | None = None
    seconds: float = 0.0
    rules: dict | None = None  # flow.rules.summary of the finished folder
    link: dict | None = None  # --platform / --link / --board: what the manifest records (flow.link)

    @property
    def csim_passed(self) -> bool:
        return all(c.csim["passed"] for c in self.components if c.csim is not None)

    @property
    def vitis_passed(self) -> bool:
        return all(s["passed"] for c in self.components for s in c.vitis)

    @property
    def link_passed(self) -> bool:
        """Every link / package step that ran passed (and, with --link, they ran)."""
        link = self.link or {}
        return all(r["passed"] for r in link.get("results", [])) and not link.get("not_run")

    @property
    def ok(self) -> bool:
        return (self.csim_passed and self.vitis_passed and all(a["passed"] for a in self.aie.get("csim") or [])
                and self.link_passed and (self.rules is None or self.rules["passed"]))

    @property
    def checks(self) -> int:
        """How many checks ran: C simulations (PL components, AIE kernels) and Vitis steps."""
        return (sum(c.csim is not None for c in self.components) + len(self.aie.get("csim") or [])
                + sum(len(c.vitis) for c in self.components) + len((self.link or {}).get("results", [])))

    @property
    def passed(self) -> bool:
        """Checks ran and every one passed (``ok`` alone: none failed, which holds when none ran)."""
        return self.ok and self.checks > 0

    def to_json(self) -> dict:
        return {"design": self.design, "out": str(self.out), "part": self.part, "clock_ns": self.clock_ns,
                "ok": self.ok, "components": [c.to_json() for c in self.components], "aie": self.aie,
                "host": self.host, "unmapped": self.unmapped, "warnings": self.warnings,
                "vitis_flow": self.flow, "rules": self.rules, "link": self.link, "seconds": round(self.seconds, 3)}


def csim_cache_dir() -> Path:
    """Per-user csim build cache (see the module docstring)."""
    return cache_dir() / "csim"


# ---------------------------------------------------------------------------------------------
# inputs: part, clock, plan
# ---------------------------------------------------------------------------------------------


def is_xilinx_part(part: str) -> bool:
    return part.lower().startswith(_XILINX_PREFIXES)


def resolve_part(design, part: str | None, *, need_real: bool) -> tuple[str, str]:
    """(part, note): note is non-empty when the part is the placeholder."""
    if part is not None:
        if not isinstance(part, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", part) or not is_xilinx_part(part):
            raise RlhlsError(f"--part {part!r}: expected an AMD/Xilinx part number such as xczu7ev-ffvc1156-2-e")
        return part, ""
    if getattr(design, "part", None):  # the design names the AMD part (CPP: the Stratix V has none)
        return design.part, ""
    dev = get_device(design.device)
    if is_xilinx_part(dev.part):
        return dev.part, ""
    if need_real:
        raise RlhlsError(f"design '{design.name}' targets {dev.part} ({dev.board}), which has no AMD/Xilinx part: "
                         "pass --part PART for --synth/--cosim")
    return PLACEHOLDER_PART, (f"design '{design.name}' targets {dev.part} ({dev.board}), which has no AMD/Xilinx "
                              f"part: part={PLACEHOLDER_PART} is a placeholder, rebuild with --part PART for Vitis")


def resolve_clock(design, clock_ns: float | None) -> float:
    if clock_ns is None:
        mhz = design.clocks_mhz.get("PL")
        if not mhz:
            raise RlhlsError(f"design '{design.name}' has no PL clock: pass --clock NS")
        return round(1000.0 / float(mhz), 4)
    try:
        c = float(clock_ns)
    except (TypeError, ValueError):
        raise RlhlsError(f"--clock {clock_ns!r}: expected a period in ns, e.g. 4.0") from None
    if not (math.isfinite(c) and 0.5 <= c <= 1000):
        raise RlhlsError(f"--clock {clock_ns!r}: expected a period in ns between 0.5 and 1000")
    return c


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------


def _write_kernel(comp: Component, root: Path, design, part, clock_ns, note):
    assert comp.kernel is not None  # a 'kernel' component names its kernel
    src = render_kernel(comp.kernel, dict(comp.params), seed=0, component=comp.name)
    comp.sources, comp.top = src, src.top
    write_kernel_component(root / comp.dir, src, design.name, part, clock_ns, note)


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def our_headers(texts) -> list[str]:
    """The headers of vitis/include/ that these sources include, directly or through each other."""
    have = {h.name for h in include_dir().iterdir() if h.is_file()}
    todo = [m for t in texts for m in _INCLUDE.findall(t) if m in have]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [m for m in _INCLUDE.findall((include_dir() / name).read_text()) if m in have]
    return sorted(seen)


def write_kernel_component(d: Path, src, design_name: str, part: str, clock_ns: float, note: str = "",
                           tb_data: dict | None = None) -> None:
    """One kernel's Vitis HLS component in folder d: src/ (HLS sources), tb/ (ABI wrapper,
    testbench, tb data: `tb_data` or src.tb_data), include/ (our headers), hls_config.cfg and
    run_hls.tcl. Also used by the cosim backend (host/backends.py)."""
    tb_data = src.tb_data if tb_data is None else tb_data
    for sub, files in (("src", src.files), ("tb", src.tb_files)):
        for name, text in files.items():
            p = d / sub / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    for name, data in tb_data.items():
        p = d / "tb" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    # the headers of ours it includes (rlhls_types.h, rlhls_tb.h, ...): the project stands alone on a
    # Vitis machine and carries nothing it does not use
    for name in our_headers([*src.files.values(), *src.tb_files.values()]):
        (d / "include").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(include_dir() / name, d / "include" / name)
    syn = [f"src/{n}" for n in src.files if n.endswith((".cpp", ".cc", ".c"))]
    tb = [f"tb/{n}" for n in src.tb_files] + [f"tb/{n}" for n in tb_data]
    # -I paths are relative to the component folder, where rlhls runs v++ / vitis_hls
    hc = P.HlsComponent(src.top, src.top, syn, tb, cflags="-std=c++14 -Isrc -Iinclude",
                        tb_cflags="-std=c++14 -Isrc -Iinclude -Itb")
    _write_project_files(d, hc, design_name, part, clock_ns, note)


HLS4ML_SCRIPTS = ("build_prj.tcl", "project.tcl", "vivado_synth.tcl", "build_opt.tcl")


def _write_hls4ml(comp: Component, root: Path, nets, design, part, clock_ns, note):
    """hls4ml's project of the network (its function: <name>_core) in a Vitis kernel top named after
    the component (flow.hls4ml_kernel), with the testbench and vectors that compare it."""
    d = root / comp.dir
    prec = Precision(parse_format(comp.params["storage"]), parse_format(comp.params["acc"]))
    core = f"{comp.name}_core"
    with contextlib.redirect_stdout(sys.stderr):  # hls4ml prints its progress on stdout (breaks --json)
        res = convert_network(nets[comp.network], prec, d, part=part, clock_ns=clock_ns, io_type="io_parallel",
                              name=core)
    # hls4ml's own project scripts and testbench: the component's are hls_config.cfg / run_hls.tcl and
    # tb/ (its kernel top around the core); hls4ml's build_lib.sh is replaced by ours, its bridge kept
    for left in (*HLS4ML_SCRIPTS, f"{core}_test.cpp"):
        (d / left).unlink(missing_ok=True)
    if (d / "tb_data").is_dir() and not any((d / "tb_data").iterdir()):
        (d / "tb_data").rmdir()
    comp._net = nets[comp.network]
    comp.top, comp.hls_model, comp._core = comp.name, res["hls_model"], core
    w = wrap_network(comp._net, prec, d, core=core, top=comp.top, n_max=int(comp.params.get("batch") or 1))
    comp.params = {**comp.params, "top": comp.top, "core": core}
    _write_wrapped_project(d, comp.name, w, design, part, clock_ns, note)


def _write_wrapped_project(d: Path, top: str, w: dict, design, part, clock_ns, note) -> None:
    """Project files of an hls4ml network in its kernel top (``hls4ml_kernel.wrap_network``'s `w`)."""
    (d / "include").mkdir(parents=True, exist_ok=True)  # rlhls_tb.h: the testbench stands alone on a Vitis machine
    shutil.copyfile(include_dir() / "rlhls_tb.h", d / "include" / "rlhls_tb.h")
    hc = P.HlsComponent(top, top, w["syn"], w["tb"], cflags="-std=c++14 -Isrc -Ifirmware",
                        tb_cflags="-std=c++14 -Isrc -Ifirmware -Iinclude")
    _write_project_files(d, hc, design, part, clock_ns, note)


def _write_project_files(d: Path, hc, design, part, clock_ns, note):
    name = design if isinstance(design, str) else design.name
    d.mkdir(parents=True, exist_ok=True)
    (d / P.HLS_CONFIG).write_text(P.hls_config_text(hc, design=name, part=part, clock_ns=clock_ns,
                                                    part_note=note))
    (d / P.RUN_HLS).write_text(P.run_hls_tcl_text(hc, design=name, part=part, clock_ns=clock_ns,
                                                  part_note=note))


def _design_digest(design) -> str:
    return hashlib.sha256(json.dumps(jsonable(design.describe()), sort_keys=True).encode()).hexdigest()


def _manifest_components(comps) -> list:
    return [{**c.to_json(), "params_sha256": hashlib.sha256(
        json.dumps(jsonable(c.params), sort_keys=True).encode()).hexdigest()} for c in comps]


def _manifest(root: Path, design, graph, assignment, mapping, aie, plan_info, part, note, clock_ns) -> dict:
    comps = mapping.components
    owners = {c.name: c.name for c in comps}
    units = {}
    for n in graph.nodes:
        u = assignment[n.name]
        entry = {"unit": u}
        if mapping.points.get(n.name):
            entry["point"] = mapping.points[n.name]
        if u == "PL":
            entry["components"] = mapping.node_components.get(n.name, [])
            if n.name in mapping.unmapped:
                entry["unmapped"] = mapping.unmapped[n.name]
        elif u == "AIE":
            entry["components"] = ["aie"]
        else:
            entry["components"] = []
        units[n.name] = entry
    counts = {u: sum(1 for v in assignment.values() if v == u) for u in UNITS}
    return {
        "generator": P.GENERATOR, "version": __version__,
        "design": design.name, "design_sha256": _design_digest(design),
        "device": design.device, "part": part, "part_placeholder": bool(note), "clock_ns": clock_ns,
        "batch": graph.batch, "formats": dict(design.formats), "plan": plan_info,
        "components": _manifest_components(comps), "system_cfg": P.SYSTEM_CFG,
        "aie": aie, "host": list(mapping.host), "unmapped": dict(mapping.unmapped),
        "units": units, "summary": {"nodes": counts, "components": len(comps)},
        "files": P.file_entries(root, owners),
    }


def plan_points(plan) -> dict | None:
    """{node: design point} of a Plan (None: a plain {node: unit} assignment, or no plan)."""
    return dict(plan.point) if getattr(plan, "point", None) else None


def _ours(out: Path) -> bool:
    return P.read_manifest(out) is not None  # a build folder from before the ownership record


def build_design(design, out, *, plan=None, graph=None, part=None, clock_ns=None, csim=False, synth=False,
                 cosim=False, force=False, progress=None, tools=None, hls4ml=True,
                 link: L.LinkRequest | None = None, bound=None, full_data=False) -> BuildResult:
    """Write the build folder `out` for `design` (a Design or its name); see the module docstring.
    `bound`: the record of the run binding it (``BoundRun.record()``), kept in the manifest (``binding``).

    `plan`: a Plan (``partition.plan``), a {node: unit} dict, or None (every node on the PL);
    `graph`: the design's training graph when the caller has it. hls4ml=False maps forward layers
    to dense_forward kernels instead of hls4ml projects (much faster, for tests). `link`
    (``flow.link.link_request``): the Makefile that links and packages for a platform, run with
    ``run`` (synthesis first: the link takes the .xo files), and the board package. `full_data` (and
    `synth` / `cosim`): ``aie/data/`` holds one whole training step for aiesimulator, else a sample
    of a size independent of the batch (``flow.aie.emit_aie``)."""
    t0 = time.perf_counter()
    say = progress or (lambda msg: None)
    if isinstance(design, str):
        design = get_design(design)
    out = Path(out).absolute()  # hls4ml changes directory while it writes

    # -- every input check before anything is written
    platform = link.platform if link is not None else None
    part, note = resolve_part(design, part, need_real=synth or cosim or platform is not None)
    clock_ns = resolve_clock(design, clock_ns)
    tools = tools or V.find_tools()
    if link is not None:
        L.check_request(link, part=part, tools=tools)
        synth = synth or link.run  # the link takes the components' .xo
    flow = V.select_flow(tools, synth=synth, cosim=cosim)
    graph = graph if graph is not None else build_graph(design)
    if plan is None:
        assignment, plan_info = {n.name: "PL" for n in graph.nodes}, None
    else:
        assignment = check_plan(plan, graph)
        plan_info = {"source": getattr(plan, "source", "") or None, "sha256": hashlib.sha256(
            json.dumps(assignment, sort_keys=True).encode()).hexdigest()}
    check_out(out, command="build", force=force, ours=_ours)
    if csim:
        csim_cache_dir()  # an unwritable compile cache is said (and a scratch one taken) before the build
    # PL components at the plan's design points (its pf), as the AIE graph below
    mapping = map_design(design, graph, assignment, hls4ml=hls4ml, points=plan_points(plan))
    warnings = ([note] if note else []) + mapping.warnings
    chosen = plan_points(plan)
    points = ({n: p for n, p in chosen.items() if n in mapping.aie_nodes}
              if chosen else None)  # the AIE graph follows the plan's design points
    if mapping.aie_nodes:
        warnings += aie_fit(design, mapping.aie_nodes, graph, points=points)  # refuses what cannot fit
        if platform is not None:
            warnings.append(f"the AIE graph's PLIOs ({len(mapping.aie_nodes)} AIE node(s)) have no PL data movers in "
                            "this build: system.cfg connects none of them (no sc= line), which a real v++ --link "
                            "of the graph needs")
    comps = mapping.components
    nets = design.build_networks()

    # -- write into a folder beside out, published when complete (fileio.staged_folder)
    with staged_folder(out, command="build", ours=_ours) as tmp:
        for i, comp in enumerate(comps, 1):
            say(f"[{i}/{len(comps)}] {comp.name}: {comp.kind}{' ' + comp.kernel if comp.kernel else ''} "
                f"({len(comp.nodes)} node(s))")
            if comp.kind == "hls4ml":
                _write_hls4ml(comp, tmp, nets, design, part, clock_ns, note)
            else:
                _write_kernel(comp, tmp, design, part, clock_ns, note)
        aie = {"nodes": list(mapping.aie_nodes), "files": [], "csim": None}
        if mapping.aie_nodes:
            say(f"AIE graph for {len(mapping.aie_nodes)} node(s)")
            paths = emit_aie(design, list(mapping.aie_nodes), tmp, graph=graph, points=points,
                             full_data=full_data or synth or cosim)  # <root>/aie/
            aie["files"] = sorted(Path(p).resolve().relative_to(tmp.resolve()).as_posix() for p in paths)
        for c in comps:
            c.cu = f"{c.top}_1"
        (tmp / P.SYSTEM_CFG).write_text(P.system_cfg_text(
            [{"name": c.name, "kind": c.kind, "kernel": c.kernel, "top": c.top, "cu": c.cu,
              "nodes": c.nodes} for c in comps], design=design.name, aie_nodes=mapping.aie_nodes, part_note=note))
        link_info = None
        if link is not None:
            link_info = L.write_link_files(
                tmp, link, design=design, aie_nodes=list(mapping.aie_nodes), part=part,
                components=[{"name": c.name, "dir": c.dir, "top": c.top, "cu": c.cu, "nodes": list(c.nodes)}
                            for c in comps])
        manifest = _manifest(tmp, design, graph, assignment, mapping, aie, plan_info, part, note, clock_ns)
        if bound is not None:
            manifest["binding"] = bound
        if link_info is not None:
            manifest["link"] = link_info
        manifest["complete"] = False  # published before its checks run: refused until they finish (below)
        P.write_json(tmp / P.MANIFEST, manifest)

    for c in comps:
        c._final_dir = out / c.dir
    result = BuildResult(design.name, out, part, clock_ns, comps, aie, list(mapping.host), dict(mapping.unmapped),
                         warnings, flow, link=link_info)
    if csim:
        _run_csims(result, say)
        if mapping.aie_nodes:
            say(f"AIE check of {len(mapping.aie_nodes)} node(s) under the g++ shim")
            aie["csim"] = check_aie(out)
    if flow:
        for comp in comps:
            for step in V.component_steps(flow, tools, out / comp.dir, synth=synth, cosim=cosim):
                say(f"{step.name} {comp.name}: {Path(step.argv[0]).name} ...")
                comp.vitis.append(V.run_step(step))
                if not comp.vitis[-1]["passed"]:
                    break
    if link is not None and link.run and link_info is not None:
        if result.vitis_passed:
            steps = L.link_steps(link, design_name=design.name, aie=bool(mapping.aie_nodes),
                                 components=[{"dir": c.dir, "top": c.top} for c in comps])
            link_info["results"] = L.run_link_steps(out, steps, tools, say)
            link_info["steps"] = [s.to_json() for s in steps]
        else:
            link_info["not_run"] = "a component's synthesis failed"
    # the vendor's documented rules on the finished folder (flow.rules), recorded with the checks
    result.rules = rules_summary(check_build(out, building=True))
    manifest["rules"] = result.rules
    manifest["components"] = _manifest_components(comps)
    manifest["aie"] = aie
    manifest["complete"] = True
    P.write_json(out / P.MANIFEST, manifest)
    result.seconds = time.perf_counter() - t0
    return result


def _check_hls4ml(comp: Component) -> dict:
    """The kernel top + hls4ml's function + testbench under g++ against the emulator's vectors
    (what vitis-run --csim of the component runs)."""
    if comp._final_dir is None or comp.top is None:
        raise RlhlsError(f"component {comp.name}: checked before it was written")
    return run_wrapper_csim(comp._final_dir, top=comp.top, core=comp._core, include=include_dir(),
                            flags=csim_flags(comp.hls_model)[:1])


def _csim_one(comp: Component, cache: Path) -> None:
    t = time.perf_counter()
    if comp.kind == "kernel":
        with scratch_dir(f"csim-{comp.name}") as work:
            try:
                if comp.sources is None:
                    raise RlhlsError(f"component {comp.name}: checked before it was written")
                r = run_csim(comp.sources, Path(work), cache)
                comp.csim = {"passed": bool(r.passed), "detail": str(r.detail), "cached": bool(r.cached),
                             "seconds": round(float(r.seconds), 3)}
            except RlhlsError as e:
                comp.csim = {"passed": False, "detail": str(e), "cached": False,
                             "seconds": round(time.perf_counter() - t, 3)}
    else:  # hls4ml
        try:
            res = _check_hls4ml(comp)
            comp.csim = {"passed": bool(res["passed"]), "detail": res["detail"], "cached": False,
                         "seconds": round(time.perf_counter() - t, 3)}
        except RlhlsError as e:
            comp.csim = {"passed": False, "detail": str(e), "cached": False,
                         "seconds": round(time.perf_counter() - t, 3)}


def _run_csims(result: BuildResult, say) -> None:
    """One g++ build + run per component, in parallel (each build is single-threaded)."""
    cache = csim_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    def report(comp):
        if comp.csim is not None:
            state = "pass" if comp.csim["passed"] else "FAIL"
            say(f"csim {comp.name}: {state}{' (cached)' if comp.csim['cached'] else ''}")

    kernels = [c for c in result.components if c.kind == "kernel"]
    pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1))
    try:
        futs = {pool.submit(_csim_one, c, cache): c for c in kernels}
        for f in as_completed(futs):
            f.result()
            report(futs[f])
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the compiles in flight end now, the others never start
        with procs.halted():
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for comp in result.components:  # hls4ml compiles with os.chdir: one at a time, not in threads
        if comp.kind == "hls4ml":
            _csim_one(comp, cache)
            report(comp)


# ---------------------------------------------------------------------------------------------
# the trained policy: rlhls build DESIGN --weights RUN_FOLDER
# ---------------------------------------------------------------------------------------------

POLICY_ROLES = ("actor", "q")  # the network that maps a state to the action (DDPG, PPO, A2C / DQN)
POLICY_FILES = ("states.npy", "expected.npy")  # the recorded inputs and the emulator's outputs, in the project


def policy_specs(design) -> list:
    """The design's policy network as the chain of NetSpecs it runs (a shared trunk first)."""
    spec = next((n for n in design.networks if n.role in POLICY_ROLES), None)
    if spec is None:
        raise RlhlsError(f"design '{design.name}' has no policy network (no network of role "
                         f"{' or '.join(POLICY_ROLES)}: {', '.join(n.role for n in design.networks)})")
    chain = [spec]
    while chain[0].input_from is not None:
        chain.insert(0, design.net(chain[0].input_from))
    return chain


def _find_params(state, net) -> dict:
    """The parameters of `net` (keys as net.get_params()) in a trainer's checkpoint state: the dict
    holding them under the network's own name first (DDPG 'actor', A2C 'policy', PPO 'params/policy'),
    then under 'params' (DQN); never a target network's or an optimizer's."""
    keys = set(net.get_params())
    found = []

    def walk(x, path):
        if isinstance(x, dict):
            if keys <= set(x) and all(hasattr(x[k], "shape") for k in keys):
                found.append((path, x))
                return
            for k, v in x.items():
                walk(v, path + (str(k),))

    walk(state, ())

    def rank(path):
        if any("target" in p or p.startswith("opt") for p in path):
            return None
        return 0 if path and path[-1] == net.name else (1 if net.name in path else (2 if path[-1:] == ("params",)
                                                                                  else 3))
    ranked = sorted((r, i) for i, (p, _) in enumerate(found) if (r := rank(p)) is not None)
    if not ranked:
        raise RlhlsError(f"checkpoint: no parameters of network '{net.name}' (expected {', '.join(sorted(keys))})")
    return {k: np.asarray(found[ranked[0][1]][1][k], dtype=np.float64) for k in keys}


def _resized(net, params):
    """`net` with its Dense layers as wide as `params` say (a run that trained other output or input
    sizes: an --env override, F-DDPG model 2's unpadded outputs)."""
    from rlhls.designs.network import Network

    if all(params[f"{l.name}.{k}"].shape == v.shape for l in net.layers for k, v in l.params.items()):
        return net
    layers = [copy.copy(l) for l in net.layers]
    for l in layers:
        if l.kind == "Dense":
            l.units = int(params[f"{l.name}.W"].shape[1])
    first = next(l for l in net.layers if l.is_mm)
    shape = (int(params[f"{first.name}.W"].shape[0]),) if first.kind == "Dense" else net.input_shape
    return Network(net.name, shape, layers, seed=net.seed, init=net.init)


def policy_network(design, state: dict):
    """The design's trained policy network (one Network, a trunk's layers first) from a trainer's
    checkpoint state (``checkpoint['trainer']``)."""
    from rlhls.designs.network import Network

    if isinstance(design, str):
        design = get_design(design)
    fresh = design.build_networks(0)
    nets = []
    for spec in policy_specs(design):
        params = _find_params(state, fresh[spec.name])
        net = _resized(fresh[spec.name], params)
        net.set_params(params)
        nets.append(net)
    if len(nets) == 1:
        return nets[0]
    layers = [copy.copy(l) for n in nets for l in n.layers]
    out = Network(nets[-1].name, nets[0].input_shape, layers, seed=nets[-1].seed, init=nets[-1].init)
    old = [l for n in nets for l in n.layers]
    out.set_params({f"{new.name}.{k}": v for new, o in zip(out.layers, old) for k, v in o.params.items()})
    return out


def policy_precision(design) -> tuple:
    """(Precision, note): the PL's formats of the design where hls4ml takes them, else its storage
    format (an fp16 / bf16 PL has no hls4ml project; the note says so)."""
    from rlhls.designs.kernels import unit_formats

    from .hls4ml_convert import hls_format

    s, a = unit_formats(design)["PL"]
    try:
        hls_format(s, "policy storage")
        hls_format(a, "policy accumulator")
        return Precision(parse_format(str(s)), parse_format(str(a))), ""
    except RlhlsError:
        st = design.formats.get("storage", "fp32")
        return Precision(st, design.formats.get("acc", st)), (
            f"the PL's formats {s}/{a} have no hls4ml project: the policy is exported in the design's storage "
            f"format {st}")


def export_policy(design, net, out, states, *, expected=None, run=None, part=None, clock_ns=None, force=False,
                  csim=True, progress=None) -> dict:
    """The trained policy `net` as a Vitis HLS inference project in ``out`` (hls4ml, the design's PL
    formats, the trained weights quantized to them); with `csim` its C simulation on `states` (the
    recorded inputs, N x input shape) is compared with the emulator (``Network.forward`` in hls4ml's
    table mode) and with `expected` (the outputs recorded with the states) bit for bit. Returns the
    manifest (``manifest.json``, with the results)."""
    from .hls4ml_convert import check_hls4ml, table_precisions

    t0 = time.perf_counter()
    say = progress or (lambda msg: None)
    if isinstance(design, str):
        design = get_design(design)
    out = Path(out).absolute()
    part, note = resolve_part(design, part, need_real=False)
    clock_ns = resolve_clock(design, clock_ns)
    prec, fmt_note = policy_precision(design)
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != len(net.input_shape) + 1 or states.shape[1:] != net.input_shape or not len(states):
        raise RlhlsError(f"policy export: states have shape {states.shape}, expected (N >= 1, "
                         f"{', '.join(map(str, net.input_shape))}) for network '{net.name}'")
    ref = net.forward(states, table_precisions(net, prec))
    if expected is not None:
        expected = np.asarray(expected, dtype=np.float64).reshape(ref.shape)
    check_out(out, command="build", force=force, ours=_ours)
    name = f"{net.name}_policy"
    d_rel = f"pl/{name}"
    with staged_folder(out, command="build", ours=_ours) as tmp:
        say(f"hls4ml project of '{net.name}' ({prec.storage} / {prec.acc}) with the trained weights")
        core = f"{name}_core"
        with contextlib.redirect_stdout(sys.stderr):
            res = convert_network(net, prec, tmp / d_rel, part=part, clock_ns=clock_ns, io_type="io_parallel",
                                  name=core)
        d = tmp / d_rel
        np.save(d / POLICY_FILES[0], states)
        np.save(d / POLICY_FILES[1], ref)
        # the Vitis kernel top of a build's forward networks; its testbench on the recorded states
        w = wrap_network(net, prec, d, core=core, top=name, n_max=len(states), x=states)
        _write_wrapped_project(d, name, w, design, part, clock_ns, note)
        manifest = {"generator": P.GENERATOR, "version": __version__, "design": design.name, "kind": "policy",
                    "run": str(run) if run is not None else None, "network": net.name,
                    "layers": [l.describe() for l in net.layers], "device": design.device, "part": part,
                    "part_placeholder": bool(note), "clock_ns": clock_ns,
                    "formats": {"storage": str(prec.storage), "acc": str(prec.acc)},
                    "component": {"name": name, "top": name, "core": core, "dir": d_rel},
                    "states": int(len(states)),
                    "notes": [n for n in (note, fmt_note) if n], "csim": None, "files": P.file_entries(tmp),
                    "complete": False}  # until its checks ran (below)
        P.write_json(tmp / P.MANIFEST, manifest)
    if csim:
        say(f"C simulation of {name} on {len(states)} recorded state(s)")
        hls_model = res["hls_model"]
        with scratch_dir(f"policy-{name}") as work:
            shutil.copytree(out / d_rel, Path(work) / name)
            hls_model.config.config["OutputDir"] = str(Path(work) / name)
            with contextlib.redirect_stdout(sys.stderr):
                r = check_hls4ml(net, prec, hls_model, states)
        got = np.asarray(r["output"], dtype=np.float64).reshape(ref.shape)
        rec = None if expected is None else bool(np.array_equal(got, expected))
        top = run_wrapper_csim(out / d_rel, top=name, core=core, include=include_dir(),
                               flags=csim_flags(hls_model)[:1])  # the kernel top's testbench, as Vitis runs it
        manifest["csim"] = {"passed": bool(r["passed"] and rec is not False and top["passed"]),
                            "exact": bool(r["exact"]), "max_diff_lsb": float(r["max_diff_lsb"]),
                            "equals_recorded": rec, "kernel_top": top["detail"],
                            "seconds": round(float(r["seconds"]) + top["seconds"], 3)}
    manifest["rules"] = rules_summary(check_build(out, building=True))
    manifest["complete"] = True
    P.write_json(out / P.MANIFEST, manifest)
    manifest["seconds"] = round(time.perf_counter() - t0, 3)
    return manifest
