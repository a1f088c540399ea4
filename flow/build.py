"""`rlhls build`: a design (and optionally a partition plan) → a build folder of Vitis projects.

Mapping of the training graph (`build_graph(design)`) onto components; `--plan` decides each
node's unit (default: every node on PL); PS nodes get nothing (the manifest lists them as host):

* forward nodes (`fwd`, `tfwd`, DDPG's `critic@pi` pass) of a network whose matrix-multiply
  forward nodes are all on PL → one hls4ml project for that network (`flow.hls4ml_convert.`
  `convert_network`), shared by the online and target instances. Precision: the design's PL
  format pair `pl`/`pl_acc` (mixed-precision designs), else `storage`/`acc`. When the plan
  splits a network's forward pass, hls4ml cannot take the PL formats, or `build_design(...,
  hls4ml=False)` (fast tests), each PL-placed MM forward node becomes a `dense_forward` kernel.
* backward MM nodes → `dense_backward` (input gradient, when the node computes one) and
  `weight_gradient` (dW, db; not for the `critic@pi` pass, which computes no weight gradient).
  Conv2d layers are lowered through im2col: rows = batch·OH·OW, K = C·KH·KW, M = out channels.
* update nodes → `weight_update` with the NetSpec's optimizer ('none', TRPO's line-search step,
  is a plain SGD step with the step given) over the layer's parameter count.
* activation nodes are folded: forward into the component of the MM node before them
  (hls4ml fuses them), backward into the component of the MM backward node after them (the
  derivative mask is applied where dy enters dense_backward / weight_gradient).
* nodes on PL without a kernel in this round (losses, GAE, returns, Polyak `soft`, TRPO's FVP
  passes, CG, line search) are listed as `unmapped` in the manifest with a warning; they run on
  the host until their kernels exist.
* AIE nodes (only MM nodes may go there) → `flow.aie.emit_aie(design, nodes, <out>)` (writes <out>/aie/).

Kernel components with identical parameters are shared (e.g. the online and `critic@pi`
passes' input gradients). Parameters come from the layer shapes, the design's batch size, the
KernelSpec's formats and parallelism (`pf`, or `unroll` as AP-DRL names it) — named in each
kernel's own parameter names (`Kernel.params`) and validated by `Kernel.resolve`.

Part: `--part`, else the device catalogue's part. The MAX4 Stratix-V (CPP, F-DDPG) has no
Xilinx part: sources are emitted anyway with `part=` set to the placeholder `PLACEHOLDER_PART`
(a comment and a warning say to pass --part); --synth/--cosim refuse such a build (exit 2).
Clock: `--clock` ns, else 1000 / design.clocks_mhz['PL'].

Never clobbers: a non-empty --out without our manifest.json is refused unless --force (which
replaces it). Files go to a temporary folder beside --out that is renamed into place; on an
error nothing is left. C simulation (`--csim`) compiles each kernel's testbench with g++
(`flow.csim.run_csim`) and runs each hls4ml project through `check_hls4ml`; the g++ build cache
is shared per user — `$RLHLS_CACHE_DIR/csim`, else `$XDG_CACHE_HOME/rlhls/csim`, else
`~/.cache/rlhls/csim` — so rebuilds (also with --force) reuse compiled testbenches.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlhls import __version__
from rlhls.designs.devices import get_device
from rlhls.designs.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import get_kernel
from rlhls.designs.network import Precision
from rlhls.designs.registry import get_design
from rlhls.partition.fileio import check_out, staged_folder
from rlhls.partition.plan import read_plan

from . import project as P
from . import vitis as V
from .aie import emit_aie
from .csim import run_csim
from .hls4ml_convert import check_hls4ml, convert_network, hls4ml_precision_config, hls_format
from .kernels import render_kernel
from .paths import cache_dir, include_dir

PLACEHOLDER_PART = "PLACEHOLDER_PART"
_XILINX_PREFIXES = ("xc", "xa", "xq")
UNITS = ("PS", "PL", "AIE")
_FWD_PHASES = ("fwd", "tfwd")
_NO_KERNEL = {"loss": "loss", "returns": "n-step returns", "soft": "Polyak update",
              "fvp_fwd": "FVP forward", "fvp_bwd": "FVP backward", "cg": "conjugate gradient",
              "linesearch": "line search"}

# Our names of kernel parameters → the names a kernel may use for them (first match wins).
# Dense kernels: a (rows × K) · (K × M) product, rows = batch (pl_matmul's n, k, m).
_DENSE_SYNONYMS = {
    "batch": ("batch", "batch_size", "n", "rows", "n_rows", "samples"),
    "n_in": ("n_in", "in_features", "inputs", "k", "fan_in", "in_dim", "n_inputs"),
    "n_out": ("n_out", "out_features", "outputs", "m", "units", "fan_out", "out_dim", "n_outputs"),
    "storage": ("storage", "fmt", "format", "storage_format", "data"),
    "acc": ("acc", "acc_format", "accum", "accumulator"),
    "pf": ("pf", "unroll", "parallelism", "lanes"),
}
_UPDATE_SYNONYMS = {
    "n_params": ("n", "n_params", "size", "length", "count", "n_weights", "params"),
    "optimizer": ("optimizer", "opt"),
    "lr": ("lr", "learning_rate", "alpha"),
    "storage": ("storage", "fmt", "format", "storage_format", "data"),
    "acc": ("acc", "acc_format", "accum", "accumulator"),
    "pf": ("pf", "unroll", "parallelism", "lanes"),
}


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


@dataclass
class Component:
    name: str
    kind: str                 # 'kernel' | 'hls4ml'
    kernel: str | None        # kernel name, or None for hls4ml
    network: str | None
    params: dict
    nodes: list = field(default_factory=list)
    folded: list = field(default_factory=list)
    top: str | None = None
    dir: str = ""
    csim: dict | None = None
    vitis: list = field(default_factory=list)
    sources: object = None    # KernelSources (not serialised)
    cu: str = ""              # compute-unit name in system.cfg
    hls_model: object = None  # hls4ml ModelGraph (not serialised)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "kernel": self.kernel, "network": self.network,
                "top": self.top, "dir": self.dir, "nodes": list(self.nodes), "folded": list(self.folded),
                "cu": self.cu, "params": _jsonable(self.params), "csim": self.csim, "vitis": self.vitis}


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

    @property
    def csim_passed(self) -> bool:
        return all(c.csim["passed"] for c in self.components if c.csim is not None)

    @property
    def vitis_passed(self) -> bool:
        return all(s["passed"] for c in self.components for s in c.vitis)

    @property
    def ok(self) -> bool:
        return self.csim_passed and self.vitis_passed

    def to_json(self) -> dict:
        return {"design": self.design, "out": str(self.out), "part": self.part, "clock_ns": self.clock_ns,
                "ok": self.ok, "components": [c.to_json() for c in self.components], "aie": self.aie,
                "host": self.host, "unmapped": self.unmapped, "warnings": self.warnings,
                "vitis_flow": self.flow, "seconds": round(self.seconds, 3)}


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "item"):
        return x.item()
    return str(x)


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


def load_assignment(graph, plan) -> tuple[dict, dict | None]:
    """{node: unit} for every graph node, and {'path', 'sha256'} of the plan file."""
    names = [n.name for n in graph.nodes]
    if plan is None:
        return {n: "PL" for n in names}, None
    path = Path(plan)
    if path.is_dir():  # read_plan takes a folder holding plan.json too
        path = path / "plan.json"
    assignment = read_plan(path)["assignment"]  # validated there: {node: unit in UNITS}
    known = set(names)
    for node, unit in assignment.items():
        if node not in known:
            raise RlhlsError(f"plan '{path}': node '{node}' is not in the training graph of '{graph.design}'")
        if unit == "AIE" and not graph.node(node).mm:
            raise RlhlsError(f"plan '{path}': node '{node}' is not a matrix-multiply node and cannot go to AIE")
    missing = [n for n in names if n not in assignment]
    if missing:
        raise RlhlsError(f"plan '{path}': no unit for node '{missing[0]}' ({len(missing)} of {len(names)} "
                         "nodes missing); expected every training-graph node")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {n: assignment[n] for n in names}, {"path": str(path.resolve()), "sha256": digest}


# ---------------------------------------------------------------------------------------------
# the mapping (no files)
# ---------------------------------------------------------------------------------------------


def _ident(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return s if s[:1].isalpha() else f"k_{s}"


def _pl_formats(design) -> tuple[str, str]:
    f = design.formats
    if "pl" in f:
        return f["pl"], f.get("pl_acc", f.get("acc", f["pl"]))
    return f.get("storage", "fp32"), f.get("acc", f.get("storage", "fp32"))


def _spec(design, kernel: str):
    for k in design.kernels:
        if k.name == kernel and k.unit == "PL":
            return k
    return None


def gae_params(design) -> dict:
    """The design's GAE KernelSpec in the gae kernel's parameter names, with PPO's gamma/lambda."""
    spec = _spec(design, "gae")
    k = get_kernel("gae")
    names = {p.name for p in k.params}
    p = {key: v for key, v in spec.params.items() if key in names}
    hp = design.hyperparams
    p.update(gamma=hp["gamma"], lam=hp["gae_lambda"], datapath=spec.acc)
    p.setdefault("clock_mhz", design.clocks_mhz.get("PL", 300.0))
    return dict(k.resolve(p))


def _pf(design, kernel: str):
    spec = _spec(design, kernel)
    for s in ([spec] if spec else []) + [k for k in design.kernels if k.unit == "PL"]:
        for key in ("pf", "unroll"):
            if isinstance(s.params.get(key), int):
                return s.params[key]
    return None


def _kernel_formats(design, kernel: str) -> tuple[str, str]:
    spec = _spec(design, kernel)
    if spec is not None:
        return spec.storage, spec.acc
    if kernel == "weight_update" and "master" in design.formats:
        return design.formats["master"], design.formats["master"]
    return _pl_formats(design)


class _Mapper:
    def __init__(self, design, graph, nets, assignment, hls4ml: bool, warnings: list):
        self.design, self.graph, self.nets = design, graph, nets
        self.unit = assignment
        self.hls4ml = hls4ml
        self.warnings = warnings
        self.components: list[Component] = []
        self._by_key: dict = {}
        self.node_comp: dict[str, list[str]] = {}
        self.unmapped: dict[str, str] = {}
        self._layers = {name: {l.name: l for l in net.layers} for name, net in nets.items()}
        self._compute = {name: [l for l in net.layers if l.kind != "Flatten"] for name, net in nets.items()}

    # -- helpers
    def _split(self, node):
        inst = node.name.split(".", 1)[0]
        if "." not in node.layer:
            return inst, None, None
        net, lname = node.layer.split(".", 1)
        return inst, net, self._layers.get(net, {}).get(lname)

    def _attach(self, comp: Component, node: str):
        if node not in comp.nodes:
            comp.nodes.append(node)
        self.node_comp.setdefault(node, []).append(comp.name)

    def _kernel_params(self, kernel: str, ours: dict, synonyms: dict) -> dict:
        """Our values named in the kernel's own parameter names, validated by Kernel.resolve."""
        k = get_kernel(kernel)
        declared = [p.name for p in k.params]
        mapped = {}
        for ourkey, value in ours.items():
            if value is None:
                continue
            for alias in synonyms.get(ourkey, (ourkey,)):
                if alias in declared and alias not in mapped:
                    mapped[alias] = value
                    break
        try:
            return dict(k.resolve(mapped))
        except RlhlsError as e:
            pf_keys = [a for a in synonyms.get("pf", ()) if a in mapped]
            if not pf_keys:
                raise
            # the design's parallelism may not fit this layer (e.g. must divide K): kernel default
            for a in pf_keys:
                mapped.pop(a)
            self.warnings.append(f"{kernel}: {e}; using the kernel's default parallelism")
            return dict(k.resolve(mapped))

    def _kernel_component(self, kernel: str, params: dict, name: str, network: str | None) -> Component:
        key = (kernel, json.dumps(_jsonable(params), sort_keys=True))
        if key in self._by_key:
            return self._by_key[key]
        base, i = _ident(name), 2
        taken = {c.name for c in self.components}
        cname = base
        while cname in taken:
            cname, i = f"{base}_{i}", i + 1
        comp = Component(cname, "kernel", kernel, network, params, dir=f"pl/{cname}")
        self.components.append(comp)
        self._by_key[key] = comp
        return comp

    def _dense_dims(self, layer) -> tuple[int, int, int]:
        b = self.graph.batch
        if layer.kind == "Conv2d":
            o, oh, ow = layer.out_shape
            kh, kw = layer.kernel
            return b * oh * ow, layer.in_shape[0] * kh * kw, o
        return b, layer.in_shape[0], layer.out_shape[0]

    def _dense(self, kernel: str, node, layer, net: str, suffix: str):
        rows, k, m = self._dense_dims(layer)
        storage, acc = _kernel_formats(self.design, kernel)
        ours = {"batch": rows, "n_in": k, "n_out": m, "storage": str(parse_format(storage)),
                "acc": str(parse_format(acc)), "pf": _pf(self.design, kernel)}
        params = self._kernel_params(kernel, ours, _DENSE_SYNONYMS)
        inst = node.name.split(".", 1)[0]
        comp = self._kernel_component(kernel, params, f"{inst}_{layer.name}_{suffix}", net)
        self._attach(comp, node.name)
        return comp

    # -- the mapping
    def run(self):
        g = self.graph
        pl = [n for n in g.nodes if self.unit[n.name] == "PL"]
        hls4ml_nets = set()
        if self.hls4ml and self._hls4ml_formats_ok():
            for net in self.nets:
                mm_fwd = [n for n in g.nodes if n.mm and n.phase in _FWD_PHASES and n.layer.startswith(net + ".")]
                if mm_fwd and all(self.unit[n.name] == "PL" for n in mm_fwd) and self._hls4ml_takes(net):
                    hls4ml_nets.add(net)
        hls_comp = {}
        for node in pl:  # MM nodes first: activations fold into their neighbours afterwards
            inst, net, layer = self._split(node)
            if not node.mm or layer is None:
                continue
            if node.phase in _FWD_PHASES:
                if net in hls4ml_nets:
                    if net not in hls_comp:
                        name = _ident(f"{net}_fwd")
                        hls_comp[net] = Component(name, "hls4ml", None, net, self._hls4ml_params(net),
                                                  dir=f"pl/{name}")
                        self.components.append(hls_comp[net])
                    self._attach(hls_comp[net], node.name)
                else:
                    self._dense("dense_forward", node, layer, net, "fwd")
            elif node.phase == "bwd":
                i = [l.name for l in self._compute[net]].index(layer.name)
                succ = [g.node(s) for s in g.successors(node.name)]
                want_dx = i > 0 or any(s.phase == "bwd" for s in succ)
                weights = "@" not in inst
                if want_dx:
                    self._dense("dense_backward", node, layer, net, "dx")
                if weights:
                    self._dense("weight_gradient", node, layer, net, "dw")
            else:
                self.unmapped[node.name] = f"no PL kernel for phase '{node.phase}' in this round"
        for node in pl:
            inst, net, layer = self._split(node)
            if node.mm and layer is not None:
                continue
            if node.phase == "upd" and layer is not None:
                self._update(node, layer, net)
            elif layer is not None and node.phase in _FWD_PHASES + ("bwd",):
                self._fold(node)
            elif node.phase == "gae" and _spec(self.design, "gae") is not None:
                params = gae_params(self.design)
                self._attach(self._kernel_component("gae", params, "gae", None), node.name)
            else:
                what = _NO_KERNEL.get(node.phase, node.phase)
                self.unmapped[node.name] = f"no PL kernel for {what} in this round (runs on the host)"
        if self.unmapped:
            names = list(self.unmapped)
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            self.warnings.append(f"{len(names)} PL node(s) have no kernel in this round and run on the host: "
                                 f"{', '.join(names[:3])}{more} (see 'unmapped' in manifest.json)")

    def _hls4ml_formats_ok(self) -> bool:
        storage, acc = _pl_formats(self.design)
        try:
            for role, text in (("storage", storage), ("acc", acc)):
                hls_format(parse_format(text), f"design '{self.design.name}' PL {role}")
        except RlhlsError as e:
            self.warnings.append(f"hls4ml cannot take the PL formats ({e}): forward layers become "
                                 "dense_forward kernels")
            return False
        return True

    def _hls4ml_takes(self, net: str) -> bool:
        """hls4ml can convert this network in the PL formats (e.g. not a float softmax)."""
        try:
            hls4ml_precision_config(self.nets[net], Precision(*_pl_formats(self.design)))
        except RlhlsError as e:
            self.warnings.append(f"{e}: network '{net}' forward layers become dense_forward kernels")
            return False
        return True

    def _hls4ml_params(self, net: str) -> dict:
        storage, acc = _pl_formats(self.design)
        return {"network": net, "storage": str(parse_format(storage)), "acc": str(parse_format(acc)),
                "io_type": "io_parallel", "batch": self.graph.batch}

    def _update(self, node, layer, net):
        spec = next((s for s in self.design.networks if s.name == net), None)
        opt = spec.optimizer if spec else "adam"
        storage, acc = _kernel_formats(self.design, "weight_update")
        hp = self.design.hyperparams
        lr = next((hp[k] for k in (f"{net}_lr", "learning_rate", "lr") if isinstance(hp.get(k), (int, float))), None)
        ours = {"n_params": layer.n_params, "optimizer": "sgd" if opt == "none" else opt, "lr": lr,
                "storage": str(parse_format(storage)), "acc": str(parse_format(acc)), "pf": None}
        params = self._kernel_params("weight_update", ours, _UPDATE_SYNONYMS)
        comp = self._kernel_component("weight_update", params, f"{node.name.split('.')[0]}_{layer.name}_upd", net)
        self._attach(comp, node.name)

    def _fold(self, node):
        g = self.graph
        nbrs = g.predecessors(node.name) if node.phase in _FWD_PHASES else g.successors(node.name)
        inst = node.name.split(".", 1)[0]
        for nb in nbrs:
            if nb.split(".", 1)[0] == inst and g.node(nb).mm and nb in self.node_comp:
                comp = next(c for c in self.components if c.name == self.node_comp[nb][0])
                comp.folded.append(node.name)
                self.node_comp.setdefault(node.name, []).append(comp.name)
                return
        self.unmapped[node.name] = "activation whose matrix-multiply neighbour is not on PL"


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------


def _write_kernel(comp: Component, root: Path, design, part, clock_ns, note):
    src = render_kernel(comp.kernel, dict(comp.params), seed=0, component=comp.name)
    comp.sources, comp.top = src, src.top
    write_kernel_component(root / comp.dir, src, design.name, part, clock_ns, note)


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
    # rlhls_types.h / rlhls_tb.h: the project must stand alone on a Vitis machine
    for h in sorted(include_dir().iterdir()):
        if h.is_file():
            (d / "include").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(h, d / "include" / h.name)
    syn = [f"src/{n}" for n in src.files if n.endswith((".cpp", ".cc", ".c"))]
    tb = [f"tb/{n}" for n in src.tb_files] + [f"tb/{n}" for n in tb_data]
    # -I paths are relative to the component folder, where rlhls runs v++ / vitis_hls
    hc = P.HlsComponent(src.top, src.top, syn, tb, cflags="-std=c++14 -Isrc -Iinclude",
                        tb_cflags="-std=c++14 -Isrc -Iinclude -Itb")
    _write_project_files(d, hc, design_name, part, clock_ns, note)


def _write_hls4ml(comp: Component, root: Path, nets, design, part, clock_ns, note):
    d = root / comp.dir
    prec = Precision(comp.params["storage"], comp.params["acc"])
    with contextlib.redirect_stdout(sys.stderr):  # hls4ml prints its progress on stdout (breaks --json)
        res = convert_network(nets[comp.network], prec, d, part=part, clock_ns=clock_ns, io_type="io_parallel")
    comp._net = nets[comp.network]
    comp.top, comp.hls_model = res["top"], res["hls_model"]
    comp.params = {**comp.params, "top": comp.top}
    syn = sorted(f"firmware/{p.name}" for p in (d / "firmware").glob("*.cpp"))  # convert_network wrote d
    tb = sorted(p.name for p in d.glob("*_test.cpp"))
    if (d / "tb_data").is_dir():
        tb += sorted(f"tb_data/{p.name}" for p in (d / "tb_data").iterdir() if p.is_file())
    if not syn:
        raise RlhlsError(f"component '{comp.name}': the hls4ml project in '{d}' has no firmware/*.cpp")
    hc = P.HlsComponent(comp.name, comp.top, syn, tb, cflags="-std=c++14", tb_cflags="-std=c++14 -Ifirmware")
    _write_project_files(d, hc, design, part, clock_ns, note)


def _write_project_files(d: Path, hc, design, part, clock_ns, note):
    name = design if isinstance(design, str) else design.name
    d.mkdir(parents=True, exist_ok=True)
    (d / P.HLS_CONFIG).write_text(P.hls_config_text(hc, design=name, part=part, clock_ns=clock_ns,
                                                    part_note=note))
    (d / P.RUN_HLS).write_text(P.run_hls_tcl_text(hc, design=name, part=part, clock_ns=clock_ns,
                                                  part_note=note))


def _design_digest(design) -> str:
    return hashlib.sha256(json.dumps(_jsonable(design.describe()), sort_keys=True).encode()).hexdigest()


def _manifest(root: Path, design, graph, assignment, mapper, comps, aie, plan_info, part, note, clock_ns) -> dict:
    owners = {c.name: c.name for c in comps}
    units = {}
    for n in graph.nodes:
        u = assignment[n.name]
        entry = {"unit": u}
        if u == "PL":
            entry["components"] = mapper.node_comp.get(n.name, [])
            if n.name in mapper.unmapped:
                entry["unmapped"] = mapper.unmapped[n.name]
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
        "components": [{**c.to_json(), "params_sha256": hashlib.sha256(
            json.dumps(_jsonable(c.params), sort_keys=True).encode()).hexdigest()} for c in comps],
        "system_cfg": P.SYSTEM_CFG,
        "aie": aie, "host": [n for n, u in assignment.items() if u == "PS"], "unmapped": dict(mapper.unmapped),
        "units": units, "summary": {"nodes": counts, "components": len(comps)},
        "files": P.file_entries(root, owners),
    }


def _ours(out: Path) -> bool:
    return P.read_manifest(out) is not None  # a build folder from before the ownership record


def build_design(design, out, *, plan=None, part=None, clock_ns=None, csim=False, synth=False, cosim=False,
                 force=False, progress=None, tools=None, hls4ml=True) -> BuildResult:
    """Write the build folder `out` for `design` (a Design or its name); see the module docstring.

    hls4ml=False maps forward layers to dense_forward kernels instead of hls4ml projects (no
    hls4ml conversion or hls4ml csim: much faster, for tests)."""
    t0 = time.perf_counter()
    say = progress or (lambda msg: None)
    if isinstance(design, str):
        design = get_design(design)
    out = Path(out).absolute()  # hls4ml changes directory while it writes
    warnings: list[str] = []

    # -- every input check before anything is written
    part, note = resolve_part(design, part, need_real=synth or cosim)
    if note:
        warnings.append(note)
    clock_ns = resolve_clock(design, clock_ns)
    tools = tools or V.find_tools()
    flow = V.select_flow(tools, synth=synth, cosim=cosim)
    graph = build_graph(design)
    nets = design.build_networks()
    assignment, plan_info = load_assignment(graph, plan)
    check_out(out, force=force, ours=_ours)
    mapper = _Mapper(design, graph, nets, assignment, hls4ml, warnings)
    mapper.run()
    comps = mapper.components
    aie_nodes = [n.name for n in graph.nodes if assignment[n.name] == "AIE"]

    # -- write into a folder beside out, published when complete (fileio.staged_folder)
    with staged_folder(out, command="build", ours=_ours) as tmp:
        for i, comp in enumerate(comps, 1):
            say(f"[{i}/{len(comps)}] {comp.name}: {comp.kind}{' ' + comp.kernel if comp.kernel else ''} "
                f"({len(comp.nodes)} node(s))")
            if comp.kind == "hls4ml":
                _write_hls4ml(comp, tmp, nets, design, part, clock_ns, note)
            else:
                _write_kernel(comp, tmp, design, part, clock_ns, note)
        aie = {"nodes": aie_nodes, "files": []}
        if aie_nodes:
            say(f"AIE graph for {len(aie_nodes)} node(s)")
            paths = emit_aie(design, list(aie_nodes), tmp)  # writes <root>/aie/
            aie["files"] = sorted(Path(p).resolve().relative_to(tmp.resolve()).as_posix() for p in paths)
        for c in comps:
            c.cu = f"{c.top}_1"
        (tmp / P.SYSTEM_CFG).write_text(P.system_cfg_text(
            [{"name": c.name, "kind": c.kind, "kernel": c.kernel, "top": c.top, "cu": c.cu,
              "nodes": c.nodes} for c in comps], design=design.name, aie_nodes=aie_nodes, part_note=note))
        manifest = _manifest(tmp, design, graph, assignment, mapper, comps, aie, plan_info, part, note, clock_ns)
        P.write_json(tmp / P.MANIFEST, manifest)

    for c in comps:
        c._final_dir = out / c.dir
    result = BuildResult(design.name, out, part, clock_ns, comps, aie,
                         manifest["host"], dict(mapper.unmapped), warnings, flow)
    if csim:
        _run_csims(result, say)
    if flow:
        for comp in comps:
            for step in V.component_steps(flow, tools, out / comp.dir, synth=synth, cosim=cosim):
                say(f"{step.name} {comp.name}: {Path(step.argv[0]).name} ...")
                comp.vitis.append(V.run_step(step))
                if not comp.vitis[-1]["passed"]:
                    break
    result.seconds = time.perf_counter() - t0
    return result


def _check_hls4ml(comp: Component) -> dict:
    """hls4ml's compile + predict against the network model, in a scratch copy of the project
    (hls4ml compiles inside its OutputDir; the build folder stays as the manifest lists it)."""
    net = comp._net
    prec = Precision(comp.params["storage"], comp.params["acc"])
    x = np.random.default_rng(0).uniform(-1.0, 1.0, size=(4, *net.input_shape))
    with tempfile.TemporaryDirectory(prefix=f"rlhls-hls4ml-{comp.name}-") as work:
        shutil.copytree(comp._final_dir, Path(work) / comp.name)
        comp.hls_model.config.config["OutputDir"] = str(Path(work) / comp.name)
        r = check_hls4ml(net, prec, comp.hls_model, x)
    return {"passed": r["passed"],
            "detail": f"max |hls4ml - model| = {r['max_diff_lsb']:.3g} LSB (bound {r['bound_lsb']:.3g} LSB)"}


def _csim_one(comp: Component, cache: Path) -> None:
    t = time.perf_counter()
    if comp.kind == "kernel":
        with tempfile.TemporaryDirectory(prefix=f"rlhls-csim-{comp.name}-") as work:
            try:
                r = run_csim(comp.sources, Path(work), cache)
                comp.csim = {"passed": bool(r.passed), "detail": str(r.detail), "cached": bool(r.cached),
                             "seconds": round(float(r.seconds), 3)}
            except RlhlsError as e:
                comp.csim = {"passed": False, "detail": str(e), "cached": False,
                             "seconds": round(time.perf_counter() - t, 3)}
    else:  # hls4ml
        try:
            r = _check_hls4ml(comp)
            comp.csim = {"passed": bool(r["passed"]), "detail": r["detail"], "cached": False,
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
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        futs = {pool.submit(_csim_one, c, cache): c for c in kernels}
        for f in as_completed(futs):
            f.result()
            report(futs[f])
    for comp in result.components:  # hls4ml compiles with os.chdir: one at a time, not in threads
        if comp.kind == "hls4ml":
            _csim_one(comp, cache)
            report(comp)
