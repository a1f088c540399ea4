"""The vendor's documented rules, checked on a build folder (nothing here runs Vitis).

``check_build(out) -> list[Violation]`` runs every rule of ``RULES`` on the build folder ``out``
(``rlhls build`` runs it last and records the result in ``manifest.json``; ``rlhls check`` runs it on
any build folder). One function per rule; each names the document and section it enforces and
reports the file (relative to ``out``) and line of every violation:

* ``part_name`` — AMD part numbers (UG1399 "HLS General Options" ``part``; DS890 / DS950 ordering
  information: ``xc|xa|xq`` + device + ``-`` package + ``-`` speed grade [``-`` temperature]).
* ``hls_sources`` — ``hls_config.cfg`` / ``run_hls.tcl`` (UG1399 "C-Synthesis Sources", "Test Bench
  Sources", "HLS General Options"): the top ``syn.top`` names is defined in a ``syn.file``, every
  listed file exists, the tcl lists the same top and files, clock and flow target are the design's.
* ``kernel_interfaces`` — the top function of a Vitis kernel (UG1399 "Interfaces for Vitis Kernel
  Flow", "AXI Adapter Interface Protocols", "AXI4-Lite Interface"): pointer / array arguments on
  ``m_axi`` (offset=slave) or ``axis`` (or ``s_axilite``, a register array), scalars and ``return``
  on ``s_axilite``, one s_axilite bundle, no Vivado-IP-only modes (``ap_vld``, ``ap_none``, ...).
* ``hls_pragmas`` — every ``#pragma HLS`` of the synthesis sources is a pragma of UG1399 "HLS
  Pragmas", with its required option (``variable=`` / ``port=``) and positive integer factors.
* ``testbench`` — a self-checking testbench (UG1399 "Writing a Test Bench": returns 0 only when
  the results are correct) with its vectors: inputs and expected outputs listed as tb files.
* ``system_cfg`` — ``system.cfg`` connectivity (UG1393 "Linking the Kernels", UG1702
  "--connectivity Options"): ``nk=<kernel>:<n>:<cu1>.<cun>`` names a kernel top of the build with
  n compute-unit names, unique, one per component; ``sc=`` / ``sp=`` name existing compute units.
* ``aie_graph`` — the ADF graph (UG1079 "Creating a Data Flow Graph (Including Kernels)", "Run-Time
  Ratio", "Input and Output PLIO", "Explicit Packet Switching"): every kernel has a source that
  exists and a run-time ratio in (0, 1]; PLIO names are unique; every input PLIO's file exists
  under aie/ with its expected output beside the output PLIO's; pktsplit / pktmerge fan-out <= 32.
* ``aie_kernel_source`` — AIE kernel sources (UG1079 "Kernel Class" / "Graph Programming Model"):
  each kernel class registers its run function (``registerKernelClass`` / ``REGISTER_FUNCTION``)
  and its source includes its header.
* ``aie_budget`` — the graph's tiles and PLIO pairs within the device's capacity and its routable
  stream budget (``designs.kernels.cost.aie_plio_pairs``; AM020 "AI Engine-ML Array Interface").

Nothing outside ``out`` is read: a path the manifest records (``project.check_paths``) or a file
names (``syn.file``, a kernel source, a PLIO file) that leads out of the folder through ``..``, an
absolute path or a symbolic link is one RlhlsError line (``project.within``), checked before it is read.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from rlhls.core.errors import RlhlsError

from . import project as P

__all__ = ["Violation", "RULES", "check_build", "is_amd_part", "AMD_PART"]

# xc|xa|xq, family letters, device number and suffix, package (letters + pins), speed grade
# (digit + optional letters), then optional temperature grade / silicon revision fields
AMD_PART = re.compile(r"^x[caq][a-z]{1,4}\d{1,4}[a-z]{0,3}-[a-z]{2,6}\d{3,4}-\d[a-z]{0,3}(-[a-z](-[a-z0-9]+)?)?$",
                      re.I)
UG1399_PARTS = "UG1399 'HLS General Options' (part); DS890/DS950 ordering information"
VITIS_IFACE = "UG1399 'Interfaces for Vitis Kernel Flow', 'AXI Adapter Interface Protocols', 'AXI4-Lite Interface'"
PRAGMAS = {"aggregate", "alias", "allocation", "array_partition", "array_reshape", "array_stencil", "bind_op",
           "bind_storage", "cache", "dataflow", "dependence", "disaggregate", "expression_balance",
           "function_instantiate", "inline", "interface", "latency", "loop_flatten", "loop_merge",
           "loop_tripcount", "occurrence", "performance", "pipeline", "protocol", "reset", "stable",
           "stream", "top", "unroll"}
VITIS_MODES_DATA = {"m_axi", "axis"}
VIVADO_ONLY = {"ap_none", "ap_vld", "ap_ack", "ap_hs", "ap_ovld", "ap_fifo", "ap_memory", "bram", "ap_stable"}
MAX_PKT_FANOUT = 32


@dataclass
class Violation:
    rule: str
    doc: str  # the document and section the rule enforces
    file: str  # relative to the build folder
    line: int  # 1-based; 0 = the file as a whole
    message: str

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: [{self.rule}] {self.message} ({self.doc})"


def is_amd_part(part) -> bool:
    return isinstance(part, str) and bool(AMD_PART.match(part))


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _rel(out: Path, p: Path) -> str:
    try:
        return p.relative_to(out).as_posix()
    except ValueError:
        return str(p)


def _cfg_entries(path: Path) -> list[tuple[str, str, str, int]]:
    """(section, key, value, line) of a .cfg; section '' above the first header."""
    out, sec = [], ""
    for i, raw in enumerate(_lines(path), 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("[") and s.endswith("]"):
            sec = s[1:-1].strip().lower()
        elif "=" in s:
            k, v = s.split("=", 1)
            out.append((sec, k.strip(), v.strip(), i))
    return out


def _components(out: Path, manifest: dict) -> list[dict]:
    return [c for c in manifest.get("components", []) if (out / c.get("dir", "")).is_dir()]


def _cfg(out: Path, comp: dict):
    path = P.within(out, out / comp["dir"] / P.HLS_CONFIG)
    return path, _cfg_entries(path)


def _get(entries, key, section="hls"):
    return [(v, ln) for s, k, v, ln in entries if s == section and k == key]


def _strip_comments(text: str) -> str:
    """C++ comments blanked (line structure kept, so line numbers stay right)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _find_function(text: str, name: str):
    """(line, args text, body text, body start line) of the definition of `name`, or None."""
    code = _strip_comments(text)
    for m in re.finditer(rf"\b{re.escape(name)}\s*\(", code):
        pre = code[:m.start()].rstrip()
        if not re.search(r"\bvoid$", pre):
            continue
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        rest = code[i:].lstrip()
        if not rest.startswith("{"):
            continue  # a declaration
        b0 = i + (len(code[i:]) - len(rest))
        depth, j = 1, b0 + 1
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        return (code.count("\n", 0, m.start()) + 1, code[m.end():i - 1], code[b0:j],
                code.count("\n", 0, b0) + 1)
    return None


def _args(args_text: str) -> list[tuple[str, bool]]:
    """(name, is_pointer_or_array) of each argument."""
    out, depth, cur = [], 0, ""
    for ch in args_text:
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    res = []
    for a in out:
        a = a.strip()
        if not a or a == "void":
            continue
        m = re.search(r"(\w+)\s*(\[[^\]]*\]\s*)*$", a)
        res.append((m.group(1) if m else a, "*" in a or "[" in a))
    return res


def _pragma_options(text: str) -> dict:
    opts = {}
    for tok in re.findall(r"(\w+)(?:\s*=\s*([^\s]+))?", text):
        opts[tok[0].lower()] = tok[1]
    return opts


# --------------------------------------------------------------------------------------- rules


def rule_part_name(out: Path, m: dict) -> list[Violation]:
    doc = UG1399_PARTS
    v = []
    if not is_amd_part(m.get("part")):
        v.append(Violation("part_name", doc, P.MANIFEST, 0, f"part {m.get('part')!r} is not an AMD part number"))
    for c in _components(out, m):
        path, entries = _cfg(out, c)
        parts = [(val, ln) for s, k, val, ln in entries if s == "" and k == "part"]
        if not parts:
            v.append(Violation("part_name", doc, _rel(out, path), 0, "no part= above [hls]"))
        for val, ln in parts:
            if not is_amd_part(val):
                v.append(Violation("part_name", doc, _rel(out, path), ln, f"part={val} is not an AMD part number"))
            elif val != m.get("part"):
                v.append(Violation("part_name", doc, _rel(out, path), ln,
                                   f"part={val}, the build's is {m.get('part')}"))
        tcl = P.within(out, out / c["dir"] / P.RUN_HLS)
        for i, line in enumerate(_lines(tcl), 1):
            mm = re.match(r"\s*set_part\s+(\S+)", line)
            if mm and (not is_amd_part(mm.group(1)) or mm.group(1) != m.get("part")):
                v.append(Violation("part_name", doc, _rel(out, tcl), i,
                                   f"set_part {mm.group(1)}: expected the build's AMD part {m.get('part')}"))
    return v


def rule_hls_sources(out: Path, m: dict) -> list[Violation]:
    doc = "UG1399 'C-Synthesis Sources', 'Test Bench Sources', 'HLS General Options'"
    v = []
    clock = f"{P.clock_text(float(m.get('clock_ns', 0)))}ns"
    for c in m.get("components", []):
        if not (out / c.get("dir", "")).is_dir():
            v.append(Violation("hls_sources", doc, P.MANIFEST, 0, f"component {c.get('name')}: folder "
                                                                  f"{c.get('dir')} missing"))
    for c in _components(out, m):
        d = out / c["dir"]
        path, entries = _cfg(out, c)
        rel = _rel(out, path)
        if not path.is_file():
            v.append(Violation("hls_sources", doc, rel, 0, "missing"))
            continue
        tops = _get(entries, "syn.top")
        syn = _get(entries, "syn.file")
        tb = _get(entries, "tb.file")
        if len(tops) != 1:
            v.append(Violation("hls_sources", doc, rel, tops[1][1] if len(tops) > 1 else 0,
                               f"expected one syn.top, found {len(tops)}"))
            continue
        top, top_ln = tops[0]
        if top != c.get("top"):
            v.append(Violation("hls_sources", doc, rel, top_ln,
                               f"syn.top={top}, the component's top is {c.get('top')}"))
        for f, ln in syn + tb:
            if not P.within(out, d / f).exists():
                v.append(Violation("hls_sources", doc, rel, ln, f"{f} does not exist"))
        if not any(_find_function((d / f).read_text(errors="replace"), top) for f, _ in syn if (d / f).is_file()):
            v.append(Violation("hls_sources", doc, rel, top_ln, f"syn.top={top}: no syn.file defines void {top}(...)"))
        for key, want in (("clock", clock), ("flow_target", "vitis")):
            got = _get(entries, key)
            if [g for g, _ in got] != [want]:
                v.append(Violation("hls_sources", doc, rel, got[0][1] if got else 0,
                                   f"{key}={','.join(g for g, _ in got) or '(none)'}, expected {want}"))
        tcl = P.within(out, d / P.RUN_HLS)
        tl = _lines(tcl)
        tops_tcl = [(i, ln.split()[1]) for i, ln in enumerate(tl, 1) if ln.startswith("set_top ")]
        if [t for _, t in tops_tcl] != [top]:
            v.append(Violation("hls_sources", doc, _rel(out, tcl), tops_tcl[0][0] if tops_tcl else 0,
                               f"set_top {' '.join(t for _, t in tops_tcl) or '(none)'}: expected {top}"))
        files_tcl = {ln.split()[2] if ln.split()[1] == "-tb" else ln.split()[1]
                     for ln in tl if ln.startswith("add_files ") and len(ln.split()) > 2}
        if files_tcl != {f for f, _ in syn + tb}:
            v.append(Violation("hls_sources", doc, _rel(out, tcl), 0,
                               f"add_files lists {sorted(files_tcl ^ {f for f, _ in syn + tb})} differently from "
                               f"{P.HLS_CONFIG}"))
        per = [ln for ln in tl if ln.startswith("create_clock")]
        want_ns = P.clock_text(float(m.get("clock_ns", 0)))
        if len(per) != 1 or f"-period {want_ns} " not in per[0] + " ":
            v.append(Violation("hls_sources", doc, _rel(out, tcl), 0, f"create_clock: expected -period {want_ns}"))
    return v


def _top_source(out: Path, c: dict):
    d = out / c["dir"]
    _, entries = _cfg(out, c)
    for f, _ in _get(entries, "syn.file"):
        p = P.within(out, d / f)
        if p.is_file():
            text = p.read_text(errors="replace")
            fn = _find_function(text, c.get("top") or "")
            if fn:
                return p, fn
    return None, None


def rule_kernel_interfaces(out: Path, m: dict) -> list[Violation]:
    v = []
    for c in _components(out, m):
        p, fn = _top_source(out, c)
        if p is None:
            continue  # hls_sources reports a top that is not defined
        rel = _rel(out, p)
        line, args_text, body, body_line = fn
        modes: dict[str, list[tuple[str, int]]] = {}  # port -> (mode, line) of its INTERFACE pragmas
        lite_bundles: dict[str, int] = {}
        for i, ln in enumerate(body.splitlines()):
            mm = re.match(r"\s*#\s*pragma\s+HLS\s+interface\b(.*)", ln, re.I)
            if not mm:
                continue
            o = _pragma_options(mm.group(1))
            mode = o.pop("mode", None) or next((k for k, val in o.items() if val == "" and k != "register"), None)
            port = o.get("port", "")
            if (mode or "").lower() == "s_axilite":  # one control interface per kernel
                lite_bundles.setdefault(o.get("bundle") or "control", body_line + i)
            if (mode or "").lower() == "m_axi" and o.get("offset") not in (None, "", "slave"):
                v.append(Violation("kernel_interfaces", VITIS_IFACE, rel, body_line + i,
                                   f"{c['top']}: m_axi port {port} offset={o.get('offset')}: a Vitis kernel takes "
                                   "its buffer addresses through s_axilite (offset=slave)"))
            for name in port.split(","):
                modes.setdefault(name, []).append(((mode or "").lower(), body_line + i))
        for name, ptr in _args(args_text):
            got = modes.get(name, [])
            ms = {g for g, _ in got}
            bad = ms & VIVADO_ONLY
            if bad:
                v.append(Violation("kernel_interfaces", VITIS_IFACE, rel, got[0][1],
                                   f"{c['top']}: port {name} on {', '.join(sorted(bad))}, a Vivado IP mode (a Vitis "
                                   "kernel takes m_axi / axis data and s_axilite scalars)"))
            elif ptr and not ms & (VITIS_MODES_DATA | {"s_axilite"}):
                # s_axilite takes any argument but a stream: a small register array (AXI adapter protocols)
                v.append(Violation("kernel_interfaces", VITIS_IFACE, rel, line,
                                   f"{c['top']}: pointer/array port {name} has no m_axi, axis or s_axilite INTERFACE"))
            elif not ptr and (not ms & {"s_axilite"} or ms & VITIS_MODES_DATA):
                v.append(Violation("kernel_interfaces", VITIS_IFACE, rel, line,
                                   f"{c['top']}: scalar port {name} takes s_axilite only (m_axi / axis: arrays, "
                                   "pointers and streams)"))
        if len(lite_bundles) > 1:
            other = min(ln for b, ln in lite_bundles.items() if b != "control")
            v.append(Violation("kernel_interfaces", VITIS_IFACE, rel, other,
                               f"{c['top']}: s_axilite bundles {', '.join(sorted(lite_bundles))}: a Vitis kernel has "
                               "one s_axilite control interface"))
        if "s_axilite" not in {g for g, _ in modes.get("return", [])}:
            v.append(Violation("kernel_interfaces", VITIS_IFACE, rel, line,
                               f"{c['top']}: no 'INTERFACE s_axilite port=return' (the kernel's control)"))
    return v


def rule_hls_pragmas(out: Path, m: dict) -> list[Violation]:
    doc = "UG1399 'HLS Pragmas'"
    need = {"array_partition": "variable", "array_reshape": "variable", "interface": "port", "stream": "variable",
            "bind_storage": "variable", "dependence": "variable"}
    v = []
    for c in _components(out, m):
        d = out / c["dir"]
        _, entries = _cfg(out, c)
        for f, _ in _get(entries, "syn.file"):
            p = P.within(out, d / f)
            for i, ln in enumerate(_lines(p), 1):
                mm = re.match(r"\s*#\s*pragma\s+HLS\s+(\w+)(.*)", ln, re.I)
                if not mm:
                    continue
                name, o = mm.group(1).lower(), _pragma_options(mm.group(2))
                if name not in PRAGMAS:
                    v.append(Violation("hls_pragmas", doc, _rel(out, p), i, f"unknown pragma HLS {mm.group(1)}"))
                    continue
                if name in need and not o.get(need[name]):
                    v.append(Violation("hls_pragmas", doc, _rel(out, p), i, f"pragma HLS {name} without {need[name]}="))
                for key in ("ii", "factor", "min", "max"):
                    val = o.get(key)
                    if val is not None and val != "" and not (val.isdigit() and (int(val) > 0 or key == "min")):
                        v.append(Violation("hls_pragmas", doc, _rel(out, p), i,
                                           f"pragma HLS {name} {key}={val}: expected a positive integer"))
    return v


def rule_testbench(out: Path, m: dict) -> list[Violation]:
    doc = "UG1399 'Writing a Test Bench' (self-checking: 0 only when the results are correct), 'Test Bench Sources'"
    v = []
    for c in _components(out, m):
        d = out / c["dir"]
        path, entries = _cfg(out, c)
        rel = _rel(out, path)
        tb = [(f, ln) for f, ln in _get(entries, "tb.file") if P.within(out, d / f)]
        srcs = [(f, ln) for f, ln in tb if f.endswith((".cpp", ".cc", ".c"))]
        data = [(f, ln) for f, ln in tb if not f.endswith((".cpp", ".cc", ".c", ".h")) and (d / f).is_file()]
        if not srcs:
            v.append(Violation("testbench", doc, rel, 0, f"component {c['name']}: no testbench source in tb.file"))
            continue
        if not any(Path(f).name.startswith("expected") for f, _ in data):
            v.append(Violation("testbench", doc, rel, 0,
                               f"component {c['name']}: no expected-output vectors in tb.file"))
        for f, ln in data:
            if (d / f).stat().st_size == 0:
                v.append(Violation("testbench", doc, rel, ln, f"{f} is empty"))
        texts = "\n".join((d / f).read_text(errors="replace") for f, _ in srcs if (d / f).is_file())
        for f, ln in data:
            if Path(f).name not in texts:
                v.append(Violation("testbench", doc, rel, ln, f"the testbench never reads {Path(f).name}"))
        if "return 1" not in texts or "main(" not in texts:
            v.append(Violation("testbench", doc, srcs[0][0], 0,
                               f"component {c['name']}: the testbench has no main() returning 1 on a mismatch"))
    return v


def rule_system_cfg(out: Path, m: dict) -> list[Violation]:
    doc = "UG1393 'Linking the Kernels'; UG1702 '--connectivity Options'"
    if m.get("kind") == "policy":
        return []
    path = P.within(out, out / P.SYSTEM_CFG)
    rel = P.SYSTEM_CFG
    if not path.is_file():
        return [Violation("system_cfg", doc, rel, 0, "missing")]
    v = []
    tops = {c.get("top"): c for c in m.get("components", [])}
    seen_k: dict[str, int] = {}
    cus: set[str] = set()
    for sec, k, val, ln in _cfg_entries(path):
        if sec != "connectivity":
            v.append(Violation("system_cfg", doc, rel, ln, f"{k}= outside [connectivity]"))
            continue
        if k == "nk":
            parts = val.split(":")
            if len(parts) not in (2, 3) or not parts[1].isdigit() or int(parts[1]) < 1:
                v.append(Violation("system_cfg", doc, rel, ln, f"nk={val}: expected <kernel>:<count>[:<cu1>.<cu2>...]"))
                continue
            if parts[0] not in tops:
                v.append(Violation("system_cfg", doc, rel, ln, f"nk={val}: no kernel top {parts[0]} in this build"))
            if parts[0] in seen_k:
                v.append(Violation("system_cfg", doc, rel, ln, f"nk={val}: kernel {parts[0]} named twice"))
            seen_k[parts[0]] = ln
            names = parts[2].split(".") if len(parts) == 3 else [f"{parts[0]}_{i + 1}" for i in range(int(parts[1]))]
            if len(names) != int(parts[1]) or len(set(names)) != len(names) or cus & set(names):
                v.append(Violation("system_cfg", doc, rel, ln,
                                   f"nk={val}: expected {parts[1]} unique compute-unit names"))
            cus |= set(names)
        elif k in ("sc", "sp", "slr"):
            for end in re.split(r"[:]", val)[: 2 if k == "sc" else 1]:
                cu = end.split(".")[0]
                if cu not in cus:
                    v.append(Violation("system_cfg", doc, rel, ln, f"{k}={val}: no compute unit {cu} (nk= first)"))
        else:
            v.append(Violation("system_cfg", doc, rel, ln, f"{k}=: not a [connectivity] option of this flow"))
    for top in tops:
        if top not in seen_k:
            v.append(Violation("system_cfg", doc, rel, 0, f"kernel {top} has no nk= line"))
    return v


def _aie_manifest(out: Path):
    p = P.within(out, out / "aie" / "manifest.json")
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def rule_aie_graph(out: Path, m: dict) -> list[Violation]:
    if not (m.get("aie") or {}).get("nodes"):
        return []
    doc = ("UG1079 'Creating a Data Flow Graph (Including Kernels)', 'Run-Time Ratio', 'Input and Output PLIO', "
           "'Explicit Packet Switching'")
    aie = out / "aie"
    g = P.within(out, aie / "graph.h")
    lines = _lines(g)
    rel = _rel(out, g)
    if not lines:
        return [Violation("aie_graph", doc, rel, 0, "missing")]
    v = []
    kernels: dict[str, dict[str, int]] = {}
    names: dict[str, int] = {}
    for i, ln in enumerate(lines, 1):
        for mm in re.finditer(r"adf::source\((\w+(?:\[\d+\])?)\)\s*=\s*\"([^\"]+)\"", ln):
            kernels.setdefault(mm.group(1), {})["source"] = i
            if not P.within(out, aie / mm.group(2)).is_file():
                v.append(Violation("aie_graph", doc, rel, i, f"kernel source {mm.group(2)} does not exist"))
        for mm in re.finditer(r"adf::runtime<adf::ratio>\((\w+(?:\[\d+\])?)\)\s*=\s*([0-9.eE+-]+)", ln):
            kernels.setdefault(mm.group(1), {})["ratio"] = i
            r = float(mm.group(2))
            if not 0 < r <= 1:
                v.append(Violation("aie_graph", doc, rel, i,
                                   f"run-time ratio {r} of {mm.group(1)}: expected in (0, 1]"))
        for mm in re.finditer(r"adf::(input|output)_plio::create\(\"(\w+)\",\s*[\w:]+,\s*\"([^\"]+)\"\)", ln):
            kind, name, f = mm.groups()
            if name in names:
                v.append(Violation("aie_graph", doc, rel, i, f"PLIO name {name} used twice (line {names[name]})"))
            names[name] = i
            data = P.within(out, aie / f)
            if kind == "input" and not (data.is_file() and data.stat().st_size):
                v.append(Violation("aie_graph", doc, rel, i, f"input PLIO {name}: data file {f} missing or empty"))
            if kind == "output":
                exp = P.within(out, data.with_name(data.stem + "_expected" + data.suffix))
                if not (exp.is_file() and exp.stat().st_size):
                    v.append(Violation("aie_graph", doc, rel, i,
                                       f"output PLIO {name}: no expected output {_rel(aie, exp)} beside it"))
        for mm in re.finditer(r"adf::pkt(split|merge)<(\d+)>", ln):
            if not 1 <= int(mm.group(2)) <= MAX_PKT_FANOUT:
                v.append(Violation("aie_graph", doc, rel, i,
                                   f"pkt{mm.group(1)}<{mm.group(2)}>: fan-out 1..{MAX_PKT_FANOUT}"))
    for k, seen in kernels.items():
        if "source" not in seen or "ratio" not in seen:
            v.append(Violation("aie_graph", doc, rel, seen.get("source") or seen.get("ratio") or 0,
                               f"kernel {k} has no {'source' if 'source' not in seen else 'run-time ratio'}"))
    gc = P.within(out, aie / "graph.cpp")
    if not re.search(r"^\s*\w+\s+\w+\s*;", "\n".join(_lines(gc)), re.M):
        v.append(Violation("aie_graph", doc, _rel(out, gc), 0, "no top-level graph instance"))
    return v


def rule_aie_kernel_source(out: Path, m: dict) -> list[Violation]:
    if not (m.get("aie") or {}).get("nodes"):
        return []
    doc = "UG1079 'C++ Kernel Class Support' (registerKernelClass, REGISTER_FUNCTION), 'Kernel Inputs and Outputs'"
    v = []
    kd = P.within(out, out / "aie" / "kernels")
    classes = set()
    for h in sorted(kd.glob("*.h")):
        text = P.within(out, h).read_text(errors="replace")
        for mm in re.finditer(r"^class\s+(\w+)\s*\{", text, re.M):
            cls = mm.group(1)
            classes.add(cls)
            line = text.count("\n", 0, mm.start()) + 1
            reg = re.findall(rf"REGISTER_FUNCTION\({cls}::(\w+)\);", text)
            if not re.search(rf"registerKernelClass\(\)\s*\{{\s*REGISTER_FUNCTION\({cls}::\w+\);", text) \
                    or len(reg) != 1:
                v.append(Violation("aie_kernel_source", doc, _rel(out, h), line,
                                   f"kernel class {cls} must register exactly one run function ({len(reg)} found)"))
                continue
            if "#include <adf.h>" not in text and '#include "adf.h"' not in text:
                v.append(Violation("aie_kernel_source", doc, _rel(out, h), 0, "does not include adf.h"))
            decl = re.search(rf"\bvoid\s+{reg[0]}\s*\(([^;{{]*)\)\s*;", text)
            ports = decl.group(1) if decl else ""
            if not re.search(r"adf::input_(async_)?buffer<|input_stream<", ports) or \
                    not re.search(r"adf::output_(async_)?buffer<|output_stream<", ports):
                v.append(Violation("aie_kernel_source", doc, _rel(out, h), line,
                                   f"{cls}::{reg[0]}: expected adf input and output buffer or stream ports"))
            cc = P.within(out, h.with_suffix(".cc"))
            if not cc.is_file() or f'#include "{h.name}"' not in cc.read_text(errors="replace"):
                v.append(Violation("aie_kernel_source", doc, _rel(out, cc), 0, f"does not include {h.name}"))
    g = P.within(out, out / "aie" / "graph.h")
    for i, ln in enumerate(_lines(g), 1):
        for mm in re.finditer(r"create_object<(\w+)>", ln):
            if mm.group(1) not in classes:
                v.append(Violation("aie_kernel_source", doc, _rel(out, g), i,
                                   f"kernel class {mm.group(1)} is declared in no aie/kernels/*.h"))
    return v


def rule_aie_budget(out: Path, m: dict) -> list[Violation]:
    if not (m.get("aie") or {}).get("nodes"):
        return []
    doc = "AM020 'AI Engine-ML Array Interface' (streams per PL interface tile); routable budget: designs/devices.py"
    am = _aie_manifest(out)
    rel = "aie/manifest.json"
    if am is None:
        return [Violation("aie_budget", doc, rel, 0, "missing or not JSON")]
    from rlhls.designs.devices import get_device
    from rlhls.designs.kernels.cost import aie_plio_pairs

    try:
        dev = get_device(am.get("device") or m.get("device"))
    except RlhlsError as e:
        return [Violation("aie_budget", doc, rel, 0, str(e))]
    tiles, pairs = int(dev.units["AIE"].resources["aie_tiles"].value), aie_plio_pairs(dev)
    v = []
    if am.get("tiles", 0) > tiles:
        v.append(Violation("aie_budget", doc, rel, 0, f"{am['tiles']} AIE tiles, over the {tiles} of {dev.id}"))
    if am.get("plio_pairs", 0) > pairs:
        v.append(Violation("aie_budget", doc, rel, 0, f"{am['plio_pairs']} PLIO pairs, over the routable budget "
                                                      f"{pairs} of {dev.id}"))
    return v


RULES = {
    "part_name": rule_part_name,
    "hls_sources": rule_hls_sources,
    "kernel_interfaces": rule_kernel_interfaces,
    "hls_pragmas": rule_hls_pragmas,
    "testbench": rule_testbench,
    "system_cfg": rule_system_cfg,
    "aie_graph": rule_aie_graph,
    "aie_kernel_source": rule_aie_kernel_source,
    "aie_budget": rule_aie_budget,
}


def check_build(out, *, building: bool = False) -> list[Violation]:
    """Every rule on the build folder `out`; RlhlsError when it is no build folder of ours, or one whose
    checks did not finish (`building`: the build's own check, while they run)."""
    out = Path(out)
    m = P.read_manifest(out)
    if m is not None and m.get("kind") == "policy":  # rlhls build --weights: one project, no link
        m = {**m, "components": [{**m["component"], "kind": "hls4ml"}]}
    if m is None or "components" not in m:
        raise RlhlsError(f"'{out}': not a build folder (no manifest.json written by {P.GENERATOR})")
    P.check_paths(out, m)  # what the manifest names stays inside `out`; each file read is checked again (P.within)
    if not building:
        P.check_complete(out, m)
    v = []
    for fn in RULES.values():
        v += fn(out, m)
    return v


def summary(violations) -> dict:
    """What the manifest records."""
    return {"rules": list(RULES), "violations": [x.to_json() for x in violations], "passed": not violations}
