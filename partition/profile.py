"""Profile a design: every training-graph node on every unit it may run on, from the cost models.

``profile_design(design, device, batch)`` builds the training graph
(:func:`rlhls.designs.graph.build_graph`) and costs each node with the primitives of
:mod:`rlhls.designs.kernels.cost`:

* **PS** — one row (point ``"0"``): ``ps_cost(flops, nbytes=node bytes)`` on one core.
* **PL** — several design points per node, as TAPCA's DSE (AP-DRL §IV-B, Table I: loop unroll in
  exponential progression): matrix-multiply nodes at ``pf`` = 1, 4, 16, 64, 256, 1024 MAC lanes
  (points ``pf1`` ...), bounded by the unit's DSPs and by the layer's ``k*m``; other nodes as
  elementwise pipelines at ``pf`` = 1, 4, 16, 64 (bounded by the element count).
* **AIE** — matrix-multiply nodes only (AP-DRL §IV-A: non-MM layers are unsuitable for AIE), at
  1, 4, 16, 64 tiles x 1, 2, 4, ... 32 PL<->AIE stream pairs (at most two per tile; points
  ``t16p8`` ...): the streams are a resource of their own (``plio``, capacity
  ``min(plio_count, plio_count_out)`` of the catalogue: 6 pairs per PL interface tile, AM020), apart
  from the tiles, because AIE-ML memory tiles (or AIE1 stream-switch broadcast) stage one stream to
  many tiles. Both are summed over the AIE nodes (AP-DRL eq. 7: the AIE graph is spatial).

Every matrix-multiply node is costed as one GEMM ``(n_eff, k, m)``: ``k x m`` is the layer's weight
matrix (Dense ``in x out``; Conv2d ``C*KH*KW x O``) and ``n_eff = ceil(MACs / (k m))`` — exact MAC
counts for forward (``n_eff`` = batch x output positions), backward (input + weight gradient:
about twice that) and the TRPO FVP passes; the operand traffic of a backward node is within a
factor two of its real traffic (an approximation).  Elementwise nodes: activations process
``batch x layer outputs`` elements, optimizer/Polyak steps the layer's parameters, other nodes
(losses, GAE, returns, CG, line search) ``node bytes / (2 x word size)`` elements (what they read
and write), each with ``ceil(flops / elements)`` chained operators.

Formats per unit (AP-DRL §IV-D): when the design is mixed precision (``design.formats`` has
``ps``, ``pl``, ``aie``), PS ``formats['ps']`` (fp32), PL ``formats['pl']`` (fp16) accumulating in
``formats['pl_acc']`` (fp32), AIE ``formats['aie']`` (bf16, fp32 accumulation); otherwise the
design's storage format (and ``acc``) on every unit.  The PL clock is the design's
(``design.clocks_mhz['PL']``) when profiling on the design's own device, else the catalogue's.

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

import math

from rlhls.designs.devices import Device, get_device
from rlhls.designs.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels.cost import aie_matmul, dsp_per_mac, pl_elementwise, pl_matmul, ps_cost

from .profile_io import RESOURCES, ProfileRow

__all__ = ["profile_design", "device_capacity", "device_links", "unit_formats", "PL_MM_POINTS",
           "PL_EW_POINTS", "AIE_TILE_POINTS", "AIE_PLIO_POINTS"]

PL_MM_POINTS = (1, 4, 16, 64, 256, 1024)
PL_EW_POINTS = (1, 4, 16, 64)
AIE_TILE_POINTS = (1, 4, 16, 64)
AIE_PLIO_POINTS = (1, 2, 4, 8, 16, 32)
ACT_KINDS = ("ReLU", "Tanh", "Sigmoid", "Softmax", "Identity")


def _resolve_design(design):
    if isinstance(design, str):
        from rlhls.designs.registry import get_design

        return get_design(design)
    if not hasattr(design, "formats") or not hasattr(design, "build_networks"):
        raise RlhlsError(f"profile: design {design!r} is not a Design or a registered design name")
    return design


def _resolve_device(device, design) -> Device:
    if device is None:
        return get_device(design.device)
    if isinstance(device, Device):
        return device
    return get_device(device)


def unit_formats(design) -> dict:
    """``{unit: (storage format, accumulator format)}`` as AP-DRL §IV-D (see the module docstring)."""
    f = design.formats
    storage = f.get("storage", "fp32")
    acc = f.get("acc", storage)
    if all(k in f for k in ("ps", "pl", "aie")):
        return {"PS": (parse_format(f["ps"]), parse_format(f["ps"])),
                "PL": (parse_format(f["pl"]), parse_format(f.get("pl_acc", acc))),
                "AIE": (parse_format(f["aie"]), parse_format(f.get("aie_acc", acc)))}
    s, a = parse_format(storage), parse_format(acc)
    return {"PS": (s, a), "PL": (s, a), "AIE": (s, a)}


def _layers(design) -> dict:
    """``'net.layer'`` (the graph's ``Node.layer``) -> Layer object."""
    out = {}
    for net in design.build_networks(0).values():
        for layer in net.layers:
            out[f"{net.name}.{layer.name}"] = layer
    return out


def _mm_dims(layer) -> tuple[int, int]:
    if layer.kind == "Dense":
        return int(layer.in_shape[0]), int(layer.units)
    fan_out, fan_in = layer._fan()  # Conv2d: (O, C*KH*KW)
    return int(fan_in), int(fan_out)


def _row(node, unit, cost, point) -> ProfileRow:
    res = {r: float(cost["resources"][r]) for r in RESOURCES if cost["resources"].get(r)}
    if unit == "AIE" and cost.get("plio"):
        res["plio"] = float(cost["plio"])
    return ProfileRow(node=node.name, unit=unit, latency_us=float(cost["latency_us"]), point=point,
                      resources=res, cycles=float(cost["cycles"]), flops=float(node.flops))


def _elements(node, layer, batch: int, word: int) -> int:
    if node.phase in ("upd", "soft") and layer is not None:
        return max(1, int(layer.n_params))
    if layer is not None and layer.kind in ACT_KINDS:
        return max(1, batch * math.prod(layer.out_shape))
    return max(1, math.ceil(node.bytes / (2 * word)))


def profile_design(design, device=None, batch: int | None = None) -> list[ProfileRow]:
    """Rows for every node x unit (x design point) of ``design``'s training graph at ``batch``."""
    design = _resolve_design(design)
    device = _resolve_device(device, design)
    graph = build_graph(design, batch)
    batch = graph.batch
    fmts = unit_formats(design)
    layers = _layers(design)
    units = device.units
    pl_clock = None
    if "PL" in units:
        pl_clock = units["PL"].clock_mhz.value
        if device.id == get_device(design.device).id and "PL" in design.clocks_mhz:
            pl_clock = float(design.clocks_mhz["PL"])
    rows: list[ProfileRow] = []
    for node in graph.nodes:
        layer = layers.get(node.layer)
        rows.append(_row(node, "PS", ps_cost(node.flops, device, nbytes=node.bytes), "0"))
        if node.mm:
            if layer is None or not layer.is_mm:
                raise RlhlsError(f"profile of '{design.name}': node '{node.name}' is a matrix multiply "
                                 f"but layer '{node.layer}' is not a Dense/Conv2d layer of the design")
            k, m = _mm_dims(layer)
            n_eff = max(1, math.ceil(node.flops / (2 * k * m)))
        if "PL" in units:
            fmt, acc = fmts["PL"]
            max_lanes = units["PL"].resources["dsp"].value / dsp_per_mac(device, fmt) \
                if "dsp" in units["PL"].resources else math.inf
            if node.mm:
                pts = [p for p in PL_MM_POINTS if p <= max_lanes and (p == 1 or p <= k * m)]
                for pf in pts:
                    c = pl_matmul(n_eff, k, m, fmt, device, pf=pf, clock_mhz=pl_clock, acc=acc)
                    rows.append(_row(node, "PL", c, f"pf{pf}"))
            else:
                word = math.ceil(fmt.bits / 8)
                n_el = _elements(node, layer, batch, word)
                ops = math.ceil(node.flops / n_el) if node.flops > 0 else 0
                for pf in PL_EW_POINTS:
                    if pf > 1 and pf > n_el:
                        break
                    c = pl_elementwise(n_el, ops, fmt, device, pf=pf, clock_mhz=pl_clock)
                    rows.append(_row(node, "PL", c, f"pf{pf}"))
        if "AIE" in units and node.mm:
            fmt, _ = fmts["AIE"]
            cap = units["AIE"].resources["aie_tiles"].value
            pcap = _plio_pairs(units["AIE"])
            for t in AIE_TILE_POINTS:
                for p in AIE_PLIO_POINTS:
                    if t <= cap and p <= min(2 * t, pcap):
                        c = aie_matmul(n_eff, k, m, fmt, device, tiles=t, plios=p)
                        rows.append(_row(node, "AIE", c, f"t{t}p{p}"))
    return rows


def _plio_pairs(aie) -> int:
    return int(min(aie.perf["plio_count"].value, aie.perf["plio_count_out"].value))


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
        out[("AIE", "plio")] = float(_plio_pairs(aie))
    return out


def device_links(device) -> dict:
    """``(src_unit, dst_unit) -> (latency_us, bytes_per_us)`` from :attr:`Device.links`."""
    device = device if isinstance(device, Device) else get_device(device)
    out = {(l.src, l.dst): (l.latency_us.value, l.bytes_per_us.value) for l in device.links}
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
