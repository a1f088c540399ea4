"""Profile a design: every training-graph node on every unit it may run on.

``profile_design(design, device, batch)`` builds the training graph
(:func:`rlhls.designs.graph.build_graph`) and costs each node:

* **PS** — one row (point ``"0"``): ``ps_cost(flops, nbytes=node bytes)`` on one core: the Arm
  cores run the host software, no kernel.
* **PL, AIE** — the kernels that implement the node on that unit (several units of the design's
  own that run in turn on one node add their latencies and resources) (``designs.kernels.kernels_for``:
  the design's own kernels first, then the generic ones) give its design points
  (``Kernel.node_points``): the dense kernels a matrix-multiply node as one GEMM at ``pf`` = 1, 4,
  16, ... 1024 MAC lanes (TAPCA's DSE, AP-DRL §IV-B, Table I), the optimizer kernel an update
  node at 1..64 elements per cycle, the GAE unit its configured PEs (HEPPO-GAE Table IV), the AIE
  matrix multiply 1..64 tiles x 1..32 PL<->AIE stream pairs (the streams a resource of their own,
  ``plio``). A PL node no kernel implements is costed generically: a matrix multiply as the dense
  kernels cost one, anything else (losses, returns, Polyak steps, activations, CG) as an elementwise
  pipeline at ``pf`` = 1, 4, 16, 64 over ``node bytes / (2 x word)``
  elements (activations: batch x layer outputs) with ``ceil(flops / elements)`` chained
  operators; an AIE node no kernel implements gets no row (only matrix multiplies may go there,
  AP-DRL §IV-A).

A node that a design's own unit implements (a non-generic kernel the design names: HEPPO-GAE's
GAE unit, CPP's FVP unit, F-DDPG's gradient kernel, the traffic seed's MAC array) gets rows on
that unit only: the seed's accelerator is the design, not a choice left to the partitioner.
(HEPPO-GAE on the ZCU106: the networks' fp32 passes would rather have the GAE unit's 768 DSPs,
and a free choice puts GAE on the PS.) A design's ``pins`` ({node-name glob: unit}) place the
nodes its own units do not implement where the seed does: the traffic seed keeps everything
but its MAC array's stages (the heads, activations, loss, RMSprop) on the PS.

Formats per unit (AP-DRL §IV-D; ``designs.kernels.unit_formats``): a mixed-precision design
computes on the PS in ``formats['ps']``, on the PL in ``formats['pl']`` accumulating in
``formats['pl_acc']``, on the AIE in ``formats['aie']``; others in their storage format. The PL
clock is the design's on its own device, else the catalogue's.

``device_capacity(device)`` gives the partitioner ``(unit, resource) -> capacity`` in the profile's
resource names, with ``('PS', 'cores')``; the Stratix V's ALMs count as two LUTs each (the catalogue:
'an ALM is two adaptive LUTs') and its M20K blocks as 36 Kb-equivalent ``bram36`` (bits / 36 Kb).
``device_links(device)`` is :attr:`Device.links` as ``(src, dst) -> (latency_us, bytes_per_us)``,
except the PL<->AIE bandwidth: an AIE row's latency already includes streaming every operand and
result through its PLIOs (``aie_matmul``), so the PL<->AIE edge keeps the catalogue's hand-off
latency and takes the whole PL->AIE interface bandwidth (catalogue ``pl_to_aie_gbytes_per_s``,
DS958) instead of one PLIO's — the bytes are not charged twice.
"""

from __future__ import annotations

import fnmatch
import math

from rlhls.core.errors import RlhlsError
from rlhls.designs.devices import Device, get_device
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KernelContext, kernels_for, unit_formats
from rlhls.designs.kernels.cost import aie_plio_pairs, combine_provenance, pl_elementwise, ps_cost
from rlhls.designs.kernels.dense import gemm_points
from rlhls.designs.network import ELEMENTWISE_KINDS

from .profile_io import RESOURCES, ProfileRow, write_profile

__all__ = ["Profile", "profile_design", "device_capacity", "device_links", "unit_formats", "PL_EW_POINTS"]

PL_EW_POINTS = (1, 4, 16, 64)
ACT_KINDS = ELEMENTWISE_KINDS  # layers costed per element (batch x outputs)


def _resolve_design(design):
    if isinstance(design, str):
        from rlhls.designs.registry import get_design

        return get_design(design)
    if not hasattr(design, "formats") or not hasattr(design, "build_networks"):
        raise RlhlsError(f"profile: design {design!r} is not a Design or a registered design name")
    return design


def _row(node, unit, cost, point) -> ProfileRow:
    res = {r: float(cost["resources"][r]) for r in RESOURCES if cost["resources"].get(r)}
    if unit == "AIE" and cost.get("plio"):
        res["plio"] = float(cost["plio"])
    return ProfileRow(node=node.name, unit=unit, latency_us=float(cost["latency_us"]), point=point,
                      resources=res, cycles=float(cost["cycles"]), flops=float(node.flops),
                      provenance=cost.get("provenance"), runs=float(getattr(node, "runs", 1.0)))


def _elements(node, layer, batch: int, word: int) -> int:
    if node.phase in ("upd", "soft") and layer is not None:
        return max(1, int(layer.n_params))
    if layer is not None and layer.kind in ACT_KINDS:
        return max(1, batch * math.prod(layer.out_shape))
    return max(1, math.ceil(node.bytes / (2 * word)))


def _generic_points(node, ctx):
    """A PL node no kernel implements: a matrix multiply as one GEMM, else an elementwise
    pipeline (module docstring)."""
    if node.mm:
        return gemm_points(node, ctx)
    fmt, _ = ctx.unit_formats("PL")
    n_el = _elements(node, ctx.layer(node), ctx.batch, math.ceil(fmt.bits / 8))
    ops = math.ceil(node.flops / n_el) if node.flops > 0 else 0
    clock = ctx.clock_mhz("PL")
    return [(f"pf{pf}", pl_elementwise(n_el, ops, fmt, ctx.device, pf=pf, clock_mhz=clock))
            for pf in PL_EW_POINTS if pf == 1 or pf <= n_el]


class Profile(list):
    """ProfileRows of one design on one device (a list), with what the partitioner's reader needs
    to know: ``design``, ``device`` and ``own`` ({node: unit} of nodes its own units implement)."""

    def __init__(self, rows=(), design=None, device=None, own=None):
        super().__init__(rows)
        self.design, self.device, self.own = design, device, dict(own or {})

    def write_csv(self, path) -> None:
        write_profile(self, path)


def _in_sequence(parts: list) -> list:
    """One design point of units that run one after the other on a node: latencies and cycles add,
    resources add (each unit is its own hardware). Each part must offer one point."""
    if any(len(p) != 1 for p in parts):
        return parts[0]
    names = [p[0][0] for p in parts]
    costs = [p[0][1] for p in parts]
    res: dict[str, float] = {}
    for c in costs:
        for r, v in c["resources"].items():
            res[r] = res.get(r, 0) + (v or 0)
    out = {"latency_us": sum(c["latency_us"] for c in costs), "cycles": sum(c.get("cycles") or 0 for c in costs),
           "resources": res}
    if all(c.get("provenance") for c in costs):
        out["provenance"] = combine_provenance([c["provenance"] for c in costs])
    return [("+".join(names), out)]


def profile_design(design, device=None, batch: int | None = None, *, graph=None) -> Profile:
    """Rows for every node x unit (x design point) of ``design``'s training graph at ``batch``
    (or of `graph`, that graph built already)."""
    design = _resolve_design(design)
    device = device if isinstance(device, Device) else get_device(device or design.device)
    graph = graph if graph is not None else build_graph(design, batch)
    ctx = KernelContext(design, graph, device)
    rows = Profile(design=design.name, device=device.id)
    for node in graph.nodes:
        chosen = {u: kernels_for(node, ctx, u) for u in ("PL", "AIE") if u in device.units}
        own = [u for u, ks in chosen.items() if any(not k.generic and ctx.spec(k.name, u) for k, _ in ks)]
        if own:
            rows.own[node.name] = own[0]
        pin = None if own else _pin(design, node.name)
        if pin is not None and pin != "PS" and pin not in chosen:
            raise RlhlsError(f"design '{design.name}': node '{node.name}' is pinned to {pin}, which device "
                             f"'{device.id}' lacks")
        if not own and pin in (None, "PS"):
            rows.append(_row(node, "PS", ps_cost(node.flops, device, nbytes=node.bytes), "0"))
        for unit, ks in chosen.items():
            if (own and unit not in own) or (pin is not None and unit != pin):
                continue
            owns = [k for k, _ in ks if not k.generic and ctx.spec(k.name, unit)]
            if len(owns) > 1:  # several units of the design's own in turn (HEPPO: standardizer, then GAE)
                points = _in_sequence([k.node_points(node, ctx, unit) for k in owns])
            elif ks:
                points = ks[0][0].node_points(node, ctx, unit)
            elif unit == "PL":
                points = _generic_points(node, ctx)
            else:
                points = []
            if pin is not None and not points:
                raise RlhlsError(f"design '{design.name}': node '{node.name}' is pinned to {unit}, where no "
                                 f"kernel implements it")
            rows += [_row(node, unit, c, point) for point, c in points]
    return rows


def _pin(design, node: str) -> str | None:
    """The unit ``design.pins`` gives ``node`` (first matching glob), else None."""
    return next((u for g, u in design.pins.items() if fnmatch.fnmatchcase(node, g)), None)


def device_capacity(device) -> dict:
    """``(unit, resource) -> capacity`` in the profile's resource names, plus ``('PS', 'cores')``."""
    device = device if isinstance(device, Device) else get_device(device)
    out = {}
    for (unit, res), cap in device.capacity().items():
        if res in RESOURCES or res == "cores":
            out[(unit, res)] = float(cap)
        elif res == "alm":  # Stratix V: two adaptive LUTs per ALM
            out[(unit, "lut")] = 2.0 * cap
        elif res == "m20k":  # 20 Kb blocks as 36 Kb equivalents
            out[(unit, "bram36")] = float(math.floor(cap * 20 / 36))
    aie = device.units.get("AIE")
    if aie is not None and "plio_count" in aie.perf and "plio_count_out" in aie.perf:
        # PL<->AIE stream pairs: 8 in / 6 out streams per PL interface tile (AM020, catalogue perf)
        out[("AIE", "plio")] = float(aie_plio_pairs(device))
    return out


def device_links(device) -> dict:
    """``(src_unit, dst_unit) -> (latency_us, bytes_per_us)`` from :attr:`Device.links`."""
    device = device if isinstance(device, Device) else get_device(device)
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for l in device.links:  # the first path between two units; a named second one is not the planner's
        out.setdefault((l.src, l.dst), (l.latency_us.value, l.bytes_per_us.value))
    aie = device.units.get("AIE")
    total = aie.perf.get("pl_to_aie_gbytes_per_s") if aie is not None else None
    if total is not None:
        # an AIE row already streams all its operands and results through its own PLIOs
        # (aie_matmul in_us/out_us): the PL<->AIE edge adds the hand-off latency, and its byte
        # term uses the whole interface's bandwidth so the same bytes are not charged twice
        for key in (("PL", "AIE"), ("AIE", "PL")):
            if key in out:
                out[key] = (out[key][0], max(out[key][1], total.value * 1e3))
    return out
