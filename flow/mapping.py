"""Mapping a plan onto hardware components (no files): which PL node becomes which kernel or
hls4ml project, which nodes go to the AIE graph and which stay on the host.

``map_design(design, graph, assignment, hls4ml=True, points=None) -> Mapping``; every node on the PL:

* forward nodes of a network whose matrix-multiply forward nodes are all on the PL become one
  hls4ml project for that network (shared by the online and target instances), in the PL's
  formats, when hls4ml takes them (``hls4ml=False``, a split network or formats hls4ml cannot
  take: the kernels below instead);
* every other node goes to the kernels that implement it (``designs.kernels.kernels_for``: the
  design's own kernels first, then the generic ones; a backward node takes two, its input
  gradient and its weight gradient), each with the parameters it derives from the node
  (``Kernel.node_params``) at the design point the plan chose for it (``points``: a ``pf<N>``
  point is the component's ``pf``, at most the dimension it unrolls); instances with identical
  parameters are one component, which records each node's point;
* activation nodes fold into the component of their matrix-multiply neighbour (forward: the one
  before; backward: the one after, where the derivative mask meets dy);
* a node no kernel implements is ``unmapped``: it runs on the host (a warning lists them).

AIE nodes (only matrix multiplies may go there) are listed for ``flow.aie.emit_aie``; PS nodes
are host code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.kernels import KernelContext, kernels_for
from rlhls.designs.network import Precision

from .hls4ml_convert import hls4ml_precision_config, hls_format
from .kernels import KernelSources

__all__ = ["Component", "Mapping", "map_design", "jsonable"]

_FWD = ("fwd", "tfwd")


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "item"):
        return x.item()
    return str(x)


@dataclass
class Component:
    name: str
    kind: str                 # 'kernel' | 'hls4ml'
    kernel: str | None        # kernel name, or None for hls4ml
    network: str | None
    params: dict
    unit: str = "PL"
    nodes: list = field(default_factory=list)
    points: dict = field(default_factory=dict)  # node -> the plan's design point it was built at
    folded: list = field(default_factory=list)
    top: str | None = None
    dir: str = ""
    csim: dict | None = None
    vitis: list = field(default_factory=list)
    sources: KernelSources | None = None  # not serialised
    cu: str = ""              # compute-unit name in system.cfg
    hls_model: Any = None     # hls4ml ModelGraph (not serialised)
    # an hls4ml component while the build writes and checks it: its network, hls4ml's function, its folder
    _net: Any = field(default=None, init=False, repr=False, compare=False)
    _core: str = field(default="", init=False, repr=False, compare=False)
    _final_dir: Path | None = field(default=None, init=False, repr=False, compare=False)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "kernel": self.kernel, "unit": self.unit,
                "network": self.network, "top": self.top, "dir": self.dir, "nodes": list(self.nodes),
                "points": dict(self.points),
                "folded": list(self.folded), "cu": self.cu, "params": jsonable(self.params), "csim": self.csim,
                "vitis": self.vitis}


@dataclass
class Mapping:
    components: list
    node_components: dict   # node -> [component names]
    unmapped: dict          # PL node -> why it runs on the host
    aie_nodes: list
    host: list              # PS nodes
    warnings: list
    points: dict = field(default_factory=dict)  # PL node -> the plan's design point it was built at


def _ident(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return s if s[:1].isalpha() else f"k_{s}"


class _Mapper:
    def __init__(self, design, graph, assignment, hls4ml: bool, points: dict | None = None):
        self.design, self.graph, self.unit = design, graph, assignment
        self.ctx = KernelContext(design, graph, points=points)
        self.hls4ml = hls4ml
        self.warnings: list[str] = []
        self.components: list[Component] = []
        self._by_key: dict = {}
        self.node_comp: dict[str, list[str]] = {}
        self.unmapped: dict[str, str] = {}

    def _attach(self, comp: Component, node: str):
        if node not in comp.nodes:
            comp.nodes.append(node)
            if node in self.ctx.points:
                comp.points[node] = self.ctx.points[node]
        self.node_comp.setdefault(node, []).append(comp.name)

    def _kernel_component(self, kernel, params: dict, node) -> Component:
        p = kernel.resolve(params)
        key = (kernel.name, json.dumps(jsonable(p), sort_keys=True))
        if key in self._by_key:
            return self._by_key[key]
        layer = self.ctx.layer(node)
        base = _ident(f"{node.instance}_{layer.name}_{kernel.component_suffix}" if layer is not None
                      and kernel.component_suffix else kernel.name)
        taken = {c.name for c in self.components}
        name, i = base, 2
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        net = self.ctx.network(node)
        comp = Component(name, "kernel", kernel.name, net.name if net else None, p, dir=f"pl/{name}")
        self.components.append(comp)
        self._by_key[key] = comp
        return comp

    # -- forward networks through hls4ml
    def _pl_precision(self) -> Precision:
        s, a = self.ctx.unit_formats("PL")
        return Precision(parse_format(str(s)), parse_format(str(a)))

    def _hls4ml_networks(self) -> set:
        if not self.hls4ml:
            return set()
        p = self._pl_precision()
        try:
            for role, f in (("storage", p.storage), ("acc", p.acc)):
                hls_format(f, f"design '{self.design.name}' PL {role}")
        except RlhlsError as e:
            self.warnings.append(f"hls4ml cannot take the PL formats ({e}): forward layers become "
                                 "dense_forward kernels")
            return set()
        out = set()
        for name, net in self.ctx.nets.items():
            mm = [n for n in self.graph.nodes if n.mm and n.phase in _FWD and n.layer.startswith(name + ".")]
            if not mm or not all(self.unit[n.name] == "PL" for n in mm):
                continue
            if any(not k.generic for n in mm for k, _ in kernels_for(n, self.ctx, "PL")):
                continue  # the design's own unit computes these forward passes (the traffic seed's MAC array)
            try:
                hls4ml_precision_config(net, p)
            except RlhlsError as e:
                self.warnings.append(f"{e}: network '{name}' forward layers become dense_forward kernels")
                continue
            out.add(name)
        return out

    def _hls4ml_component(self, net: str) -> Component:
        name = _ident(f"{net}_fwd")
        comp = next((c for c in self.components if c.kind == "hls4ml" and c.network == net), None)
        if comp is None:
            p = self._pl_precision()
            comp = Component(name, "hls4ml", None, net, {"network": net, "storage": str(p.storage),
                                                         "acc": str(p.acc), "io_type": "io_parallel",
                                                         "batch": self.graph.batch}, dir=f"pl/{name}")
            self.components.append(comp)
        return comp

    def _name_shared(self):
        """A kernel component that several layers share is named after all of them
        (``actor_critic_fc2_fwd``: one 400x300 forward for both networks), not after its first node;
        a second instance of a network (``critic@pi``: the critic's weights again) adds nothing."""
        from rlhls.designs.kernels import get_kernel

        renamed: dict[str, str] = {}
        taken = {c.name for c in self.components}
        for comp in self.components:
            suffix = get_kernel(comp.kernel).component_suffix if comp.kind == "kernel" else ""
            if not suffix:
                continue
            held: dict[str, list[str]] = {}
            for name in comp.nodes:
                node = self.graph.node(name)
                layer = self.ctx.layer(node)
                if layer is not None and layer.name not in held.setdefault(node.instance, []):
                    held[node.instance].append(layer.name)
            for inst in [i for i in held if "@" in i]:
                if i_base(inst) in held and set(held[inst]) <= set(held[i_base(inst)]):
                    del held[inst]
            if len(held) < 2 and all(len(v) < 2 for v in held.values()):
                continue
            layers = list(held.values())
            parts = ([*held, *layers[0]] if all(v == layers[0] for v in layers)
                     else [p for inst, v in held.items() for p in (inst, *v)])
            base = _ident("_".join([*parts, suffix]))
            if len(base) > 60:  # a kernel many layers share: the first ones and a count
                base = _ident("_".join([*parts[:3], f"and{len(parts) - 3}more", suffix]))
            name, i = base, 2
            while name in taken and name != comp.name:
                name, i = f"{base}_{i}", i + 1
            if name != comp.name:
                taken.discard(comp.name)
                taken.add(name)
                renamed[comp.name] = name
                comp.name, comp.dir = name, f"pl/{name}"
        if renamed:
            self.node_comp = {n: [renamed.get(c, c) for c in cs] for n, cs in self.node_comp.items()}

    # -- activations
    def _fold(self, node):
        g = self.graph
        # the matrix multiply before it (forward) / after it (backward), through other activations of the
        # same instance (LayerNorm -> LeakyReLU, ReLU -> Quant); where there is none (an activation at the
        # network's input), the one on the other side
        for step in ((g.predecessors, g.successors) if node.phase in _FWD else (g.successors, g.predecessors)):
            seen, todo, mm = set(), [node.name], []
            while todo:
                for nb in step(todo.pop()):
                    if nb in seen or nb.split(".", 1)[0] != node.instance or g.node(nb).phase != node.phase:
                        continue
                    seen.add(nb)
                    (mm if g.node(nb).mm else todo).append(nb)
            for nb in mm:
                if nb in self.node_comp:
                    comp = next(c for c in self.components if c.name == self.node_comp[nb][0])
                    comp.folded.append(node.name)
                    self.node_comp.setdefault(node.name, []).append(comp.name)
                    return
            if mm:
                break
        self.unmapped[node.name] = "activation whose matrix-multiply neighbour is not on the PL"

    def run(self) -> Mapping:
        g = self.graph
        pl = [n for n in g.nodes if self.unit[n.name] == "PL"]
        hls_nets = self._hls4ml_networks()
        # matrix multiplies first: activations fold into them afterwards
        for node in sorted(pl, key=lambda n: not n.mm):
            if node.kind.startswith("act."):
                continue
            net = self.ctx.network(node)
            if node.kind == "mm.fwd" and net is not None and net.name in hls_nets:
                self._attach(self._hls4ml_component(net.name), node.name)
                continue
            chosen = kernels_for(node, self.ctx, "PL")
            for kernel, params in chosen:
                self._attach(self._kernel_component(kernel, params, node), node.name)
            if not chosen:
                self.unmapped[node.name] = f"no PL kernel implements '{node.kind}' nodes (runs on the host)"
        for node in pl:
            if node.kind.startswith("act."):
                self._fold(node)
        self._name_shared()
        if self.unmapped:
            names = list(self.unmapped)
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            self.warnings.append(f"{len(names)} PL node(s) have no kernel and run on the host: "
                                 f"{', '.join(names[:3])}{more} (see 'unmapped' in manifest.json)")
        return Mapping(self.components, self.node_comp, self.unmapped,
                       [n.name for n in g.nodes if self.unit[n.name] == "AIE"],
                       [n.name for n in g.nodes if self.unit[n.name] == "PS"], self.warnings,
                       {n: p for n, p in self.ctx.points.items() if n in self.node_comp})


def i_base(instance: str) -> str:
    """The network an instance computes (``critic@pi`` -> ``critic``)."""
    return instance.split("@", 1)[0]


def map_design(design, graph, assignment: dict, *, hls4ml: bool = True, points: dict | None = None) -> Mapping:
    """The components that implement `assignment` ({node: unit}, every node of `graph`) at the design
    points `points` ({node: point}, a Plan's ``point``; None: the design's own parameters)."""
    return _Mapper(design, graph, assignment, hls4ml, points).run()
