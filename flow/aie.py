"""AIE emission: an ADF project (graph, kernels, aie.cfg, Makefile) for the matrix-multiply nodes
a plan places on the AI Engines, at the plan's design points, and a host check of the exact kernel
sources under g++; the same sources serve the csim backend of AIE nodes (``aie_gemm``).

``emit_aie(design, nodes, out_dir, *, batch=None, graph=None, points=None, full_data=False) -> list[Path]``
writes ``out_dir/aie/``:

    graph.h            one ``adf::graph`` subclass per node (kernel objects, ``input_plio`` /
                       ``output_plio``, ``pktsplit`` / ``pktmerge``, ``connect<>`` nets,
                       ``runtime<ratio>``, ``repetition_count``) and a top graph ``rlhls_top``
    graph.cpp          the top graph instance and ``main()`` (init / run / end) for x86sim / aiesim
    kernels/mm_bf16.h  the bf16 ``aie::mmul<4, 8, 4>`` core: one K chunk of one output block
    kernels/<node>.h/.cc   the node's kernel class (one object per tile; ``input_buffer`` packet in,
                       ``output_async_buffer`` out, fp32 partial sums kept in the tile)
    aie.cfg, Makefile  ``v++ -c --mode aie`` compile (hw / x86sim) and the simulators
    data/              every PLIO's simulation file (``plio_data``): input streams of random bf16
                       operands as the data mover sends them, the emulator's outputs beside each
                       output PLIO (``<name>_expected.txt``), and the same vectors as the g++
                       harness reads them (``<node>.in.bin`` / ``<node>.expected.bin``). By default
                       each node's sample (``data_gemms``: its kernel on a few blocks, a size that
                       does not grow with the batch) and the first ``PLIO_SAMPLES`` beats of each
                       stream; ``full_data``: one whole training step (what aiesimulator runs)
    manifest.json      what was generated from what: per node its point, tiles, PLIOs, products
                       (shape, chunk, grid), kernels (blocks, chunks per kernel); the totals and
                       the device's capacity

What a node computes (one kernel class per node; C = A . B [+ bias], all in bf16 with fp32
accumulation, AP-DRL §II-B: AIE-ML computes BF16):

    fwd / tfwd   y  = x . W + b                     A = x (batch x in), B = W (in x out)
    bwd          dX = dY . W^T  (if the node has an input gradient)   A = dY, B = W read transposed
                 dW = X^T . dY  (if it has weight gradients)           A = X read transposed, B = dY
    Conv2d nodes are the same products on im2col columns (rows n, oh, ow; columns c, kh, kw); im2col
    / col2im and the bias gradient (a sum over the batch) stay with the data mover on PL / PS.
    Other nodes (activations, losses, updates, TRPO's fvp passes) raise RlhlsError.

Design points (AP-DRL §IV-B/D; the profiler's ``mm_aie`` points ``t<tiles>p<plios>``, the ILP
keeps their sum within the device). A node planned at ``tTpP`` gets at most T tiles and at most P
PL->AIE plus P AIE->PL PLIOs (``points``; a node without one gets the smallest point, t1p1):

* Chunks. Each product is cut into equal chunks (multiples of the 4x8x4 mmul block) whose tile
  memory fits ``TILE_BUFFER_BYTES``: the packet (A, B, bias chunk) and the C block, both
  double-buffered bf16, plus the block's fp32 partial sums. While the node has fewer output blocks
  than T, the largest block is halved along M or N (so a point's tiles have work).
* Time sharing. Output block j of the node (products in order, then row block, column block) goes
  to tile j % T; a tile's kernel object computes its blocks one K chunk per invocation
  (``repetition_count`` = its chunks per graph iteration): chunk 0 starts the fp32 accumulators at
  the bias (or +0), later chunks continue from the partial sums kept in the tile's memory, and the
  block's last chunk rounds to bf16 into the async output buffer (``async_repetition`` = its blocks).
  No cascade: the K chunks of a block meet in one tile, in k order, so every bit is the same as a
  single pass over k = 0 .. K-1. A bwd node's two products may share a tile (one class, both shapes).
* Streams. The tiles use min(P, tiles) PLIO pairs: tile t on pair t * P // tiles; a pair serving
  several tiles goes through ``pktsplit<n>`` / ``pktmerge<n>`` (n <= 32, so a node uses at most
  32 x P tiles), one packet per chunk, the PL data mover sending each tile's chunks in turn.
* Fit. The sums of tiles and PLIO pairs over the nodes must stay within the device's tiles
  (``aie_tiles``) and its routable stream budget (``cost.aie_plio_pairs``: a documented fraction of
  the interface streams, the partitioner's capacity too); ``aie_fit`` (and ``emit_aie``) refuse a
  graph that does not, with one RlhlsError line naming the node, the resource and the capacity.

Accumulation order (kernels/mm_bf16.h, the shim ``vitis/aie_shim`` and ``aie_dense_reference`` agree
on it bit for bit): acc = bf16 bias (or +0); for k = 0 .. K-1 in order: acc = fp32(acc + fp32(a*b));
out = bf16(acc) (round to nearest even). Inside the kernel that is: per 4x4 output block, one
``mac`` per 4x8x4 block over k in order (the shim's mac takes its 8 products in order), chunk after
chunk through the fp32 partial sums. This is exactly ``arith.dense(x, w, b, in_fmt=BF16,
acc_fmt=FP32, out_fmt=BF16)`` (bias as the first accumulator value, one rounding per product and per
add), so the two agree bit for bit on every input, signed zeros and subnormals included: the K
padding is -0.0 in A and +0.0 in B, and (-0)*(+0) = -0 leaves every IEEE sum unchanged. Caveat: real
AIE-ML hardware sums the products of one mac in its own adder tree and flushes fp32 subnormals, so
silicon may differ in the last bits; the shim defines the reference semantics (documented in
vitis/aie_shim/aie_api/aie.hpp). Not compiled here: graph.h (only the AIE compiler reads it).

``check_aie(out_dir) -> list[dict]`` compiles each node's kernel source with g++ against the shim
(``rlhls.core.toolchain.compile_cpp``, content-hash cache) together with a generated harness that
plays the time-shared data mover (chunking, padding, the tiles' turns on the shared PLIOs, the
release of each block at its last chunk), runs it on the node's ``data/<node>.in.bin`` and compares
the result with the emulator's ``data/<node>.expected.bin`` (``aie_dense_reference``) bit for bit:
one dict per product.

``aie_gemm(a, b, bias=None, *, a_transposed=False, b_transposed=False, point=None, cache_dir=None)``
runs one product through the same kernel sources (rendered for that shape as ``emit_aie`` renders
a node) and the same harness, built as a shared library (C ABI ``rlhls_aie_run``) and called
through ctypes: compiled once per shape (content-hash cache under ``cache_dir``, else
``core.toolchain.cache_dir()/aie``), loaded once per shape per process. The csim backend of AIE nodes.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from rlhls.core import procs
from rlhls.core.errors import RlhlsError
from rlhls.core.fileio import atomic_write_text, read_json, scratch_dir
from rlhls.designs.formats import BF16, FP32, parse_format
from rlhls.designs.graph import build_graph

__all__ = ["emit_aie", "aie_fit", "check_aie", "aie_gemm", "aie_dense_reference", "plan_chunks", "node_gemms",
           "GemmSpec", "TILE_BUFFER_BYTES", "MMUL_SHAPE", "MAX_PKT_FANOUT", "random_bf16",
           "order_sensitive_operands", "data_gemms", "data_node", "PLIO_SAMPLES"]

MMUL_SHAPE = (4, 8, 4)  # aie::mmul<M, K, N, bfloat16, bfloat16> on AIE-ML
TILE_BUFFER_BYTES = 48 * 1024  # of a tile's 64 KB: buffers (x2, ping-pong) + fp32 partial sums; rest stack / heap
RUNTIME_RATIO = 0.9  # one kernel per tile
PLIO_WIDTH = "adf::plio_64_bits"  # 4 bf16 per beat
MAX_PKT_FANOUT = 32  # pktsplit<n> / pktmerge<n>: n <= 32 (UG1079)


def _vitis_dir() -> Path:
    from rlhls.flow.paths import vitis_dir  # the data package rlhls.vitis (KERNELS stream)
    return vitis_dir()


def shim_dir() -> Path:
    return _vitis_dir() / "aie_shim"


@dataclass
class GemmSpec:
    """C (M x N) = A (M x K) . B (K x N) [+ bias]; A stored transposed when at, B when bt."""
    fn: str
    what: str
    M: int
    K: int
    N: int
    at: bool
    bt: bool
    bias: bool
    mc: int = 0
    kc: int = 0
    nc: int = 0
    grid_m: int = 1
    grid_k: int = 1
    grid_n: int = 1

    @property
    def tag(self) -> str:  # y, dx, dw, c: the product's name inside its node
        return self.fn.rsplit("_", 1)[-1]

    @property
    def blocks(self) -> int:
        return self.grid_m * self.grid_n

    @property
    def chunks(self) -> int:
        return self.blocks * self.grid_k

    @property
    def packet_words(self) -> int:
        return self.mc * self.kc + self.kc * self.nc + (self.nc if self.bias else 0)

    def to_json(self) -> dict:
        return dict(asdict(self), tag=self.tag, blocks=self.blocks, chunks=self.chunks,
                    packet_words=self.packet_words)


def _ceil_to(v: int, unit: int) -> int:
    return max(unit, -(-v // unit) * unit)


def _tile_bytes(packet_words: int, out_words: int) -> int:
    """Tile data memory of a kernel: packet and C block double-buffered in bf16, fp32 partial sums."""
    return 2 * 2 * packet_words + 2 * 2 * out_words + 4 * out_words


def plan_chunks(M: int, K: int, N: int, bias: bool, budget_bytes: int = TILE_BUFFER_BYTES):
    """Chunk (mc, kc, nc), multiples of the 4x8x4 mmul block, whose tile memory fits the budget:
    2 x 2 bytes x (A + B + bias + C) + 4 bytes x C (the fp32 partial sums).

    Halves, one at a time, the dimension whose halving saves the most bytes (ties: N, M, K) until
    the chunk fits.
    """
    um, uk, un = MMUL_SHAPE
    c = {"m": _ceil_to(M, um), "k": _ceil_to(K, uk), "n": _ceil_to(N, un)}
    unit = {"m": um, "k": uk, "n": un}

    def nbytes(d):
        return _tile_bytes(d["m"] * d["k"] + d["k"] * d["n"] + (d["n"] if bias else 0), d["m"] * d["n"])

    while nbytes(c) > budget_bytes:
        best = None
        for dim in ("n", "m", "k"):
            new = _ceil_to(-(-c[dim] // 2), unit[dim])
            if new >= c[dim]:
                continue
            trial = dict(c, **{dim: new})
            saved = nbytes(c) - nbytes(trial)
            if best is None or saved > best[0]:
                best = (saved, trial)
        if best is None:
            raise RlhlsError(f"AIE chunking: {M}x{K}x{N} does not fit {budget_bytes} bytes per tile")
        c = best[1]
    return c["m"], c["k"], c["n"]


def _set_grid(g: GemmSpec) -> None:
    g.grid_m, g.grid_k, g.grid_n = -(-g.M // g.mc), -(-g.K // g.kc), -(-g.N // g.nc)


def _chunk_node(gemms: list, tiles: int) -> None:
    """Chunks of a node's products: one kernel class serves them all, so its packet and block
    buffers are the largest of them and must fit together; then blocks are split (M or N) until
    the node has `tiles` output blocks or they are single 4x4 blocks."""
    budget = TILE_BUFFER_BYTES
    while True:
        for g in gemms:
            g.mc, g.kc, g.nc = plan_chunks(g.M, g.K, g.N, g.bias, budget)
        if _tile_bytes(max(g.packet_words for g in gemms), max(g.mc * g.nc for g in gemms)) <= TILE_BUFFER_BYTES:
            break
        budget = budget * 3 // 4
    for g in gemms:
        _set_grid(g)
    um, _, un = MMUL_SHAPE
    while sum(g.blocks for g in gemms) < tiles:
        cands = [g for g in gemms if g.mc > um or g.nc > un]
        if not cands:
            break
        g = max(cands, key=lambda s: s.mc * s.nc)
        if g.nc >= g.mc and g.nc > un:
            g.nc = _ceil_to(-(-g.nc // 2), un)
        else:
            g.mc = _ceil_to(-(-g.mc // 2), um)
        _set_grid(g)


def _cname(node: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", node)


def _layer_of(design, nets, node):
    netname, lname = node.layer.rsplit(".", 1)
    for net in nets.values():
        if net.name == netname:
            for layer in net.layers:
                if layer.name == lname:
                    return layer
    raise RlhlsError(f"AIE emission: node '{node.name}': layer '{node.layer}' not found in the "
                     f"networks of design '{design.name}'")


def node_gemms(design, graph, node_name: str, nets=None) -> list[GemmSpec]:
    """The matrix products of one training-graph node (see the module docstring)."""
    try:
        node = graph.node(node_name)
    except KeyError:
        raise RlhlsError(f"AIE emission: node '{node_name}' is not in the training graph of design "
                         f"'{design.name}' (e.g. {', '.join(n.name for n in graph.mm_nodes[:3])})") from None
    if not node.mm:
        raise RlhlsError(f"AIE emission: node '{node_name}' (phase '{node.phase}') is not a matrix "
                         f"multiply; only mm nodes (fwd, tfwd, bwd of Dense / Conv2d) go to AIE")
    if node.phase not in ("fwd", "tfwd", "bwd"):
        raise RlhlsError(f"AIE emission: node '{node_name}': phase '{node.phase}' has no AIE kernel "
                         f"(supported: fwd, tfwd, bwd)")
    nets = nets if nets is not None else design.build_networks()
    layer = _layer_of(design, nets, node)
    b = graph.batch
    if layer.kind == "Dense":
        rows, fin, fout = b, layer.in_shape[0], layer.out_shape[0]
        xs, names = "x", ("x", "W", "dY", "X")
    elif layer.kind == "Conv2d":
        o, oh, ow = layer.out_shape
        rows, fin, fout = b * oh * ow, layer.in_shape[0] * layer.kernel[0] * layer.kernel[1], o
        xs, names = "im2col(x)", ("im2col(x)", "W2 (C*KH*KW x O)", "dY2 (rows n,oh,ow)", "im2col(X)")
    else:
        raise RlhlsError(f"AIE emission: node '{node_name}': layer kind '{layer.kind}' has no AIE kernel")
    c = _cname(node_name)
    has_bias = "b" in layer.params
    if node.phase in ("fwd", "tfwd"):
        return [GemmSpec(f"{c}_y", f"y = {xs} . W{' + b' if has_bias else ''}  ({rows} x {fin} x {fout})",
                         rows, fin, fout, False, False, has_bias)]
    inst = node_name.rsplit(".", 2)[0]
    lname = layer.name
    weights = any(n.name == f"{inst}.{lname}.upd" for n in graph.nodes)
    bw = layer.flops(b)["backward_weight"]
    want_dx = node.flops > (bw if weights else 0)
    out = []
    if want_dx:
        out.append(GemmSpec(f"{c}_dx", f"dX = {names[2]} . {names[1]}^T  ({rows} x {fout} x {fin}; B read "
                            f"transposed from W)", rows, fout, fin, False, True, False))
    if weights:
        out.append(GemmSpec(f"{c}_dw", f"dW = {names[3]}^T . {names[2]}  ({fin} x {rows} x {fout}; A read "
                            f"transposed from X)", fin, rows, fout, True, False, False))
    return out


# ------------------------------------------------------------------ design points and the fit

_POINT = re.compile(r"t(\d+)p(\d+)")


def _smallest_point() -> str:
    from rlhls.designs.kernels.mm_aie import AIE_PLIO_POINTS, AIE_TILE_POINTS
    return f"t{AIE_TILE_POINTS[0]}p{AIE_PLIO_POINTS[0]}"


def _parse_point(node: str, point, caps: dict | None, dev_id: str = "") -> tuple[int, int]:
    m = _POINT.fullmatch(str(point).strip())
    if m is None or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise RlhlsError(f"AIE emission: node '{node}': design point {point!r} is not of the form "
                         f"t<tiles>p<plios> with both >= 1 (e.g. t16p8)")
    t, p = int(m.group(1)), int(m.group(2))
    if p > 2 * t:
        raise RlhlsError(f"AIE emission: node '{node}': design point {point} asks for {p} PL<->AIE stream pairs "
                         f"for {t} tile(s); at most two per tile ({2 * t})")
    if caps is not None:
        if t > caps["tiles"]:
            raise RlhlsError(f"AIE emission: node '{node}': design point {point} asks for {t} AIE tiles, over the "
                             f"{caps['tiles']} of {dev_id}")
        if p > caps["plio"]:
            raise RlhlsError(f"AIE emission: node '{node}': design point {point} asks for {p} PL<->AIE stream pairs "
                             f"(PLIOs), over the routable budget {caps['plio']} of {dev_id}")
    return t, p


def _node_json(name: str, gemms: list, point: str, t: int, p: int) -> dict:
    """One node's layout on the AIE (the manifest entry; every template renders from it)."""
    cname = _cname(name)
    _chunk_node(gemms, t)
    jobs = sum(g.blocks for g in gemms)
    tiles = min(t, jobs, MAX_PKT_FANOUT * p)
    pairs = min(p, tiles)
    kernels = []
    for i in range(tiles):
        blocks, j0 = [], 0
        for g in gemms:  # blocks j0 .. j0 + g.blocks - 1 of the node; tile i takes those with j % tiles == i
            blocks.append(len(range((i - j0) % tiles + j0, j0 + g.blocks, tiles)))
            j0 += g.blocks
        kernels.append({"tile": i, "plio": i * pairs // tiles, "blocks": blocks,
                        "chunks": sum(n * g.grid_k for n, g in zip(blocks, gemms))})
    groups = [{"plio": q, "tiles": [k["tile"] for k in kernels if k["plio"] == q]} for q in range(pairs)]
    packet = max(g.packet_words for g in gemms)
    out = max(g.mc * g.nc for g in gemms)
    chunks = [k["chunks"] for k in kernels]
    return {
        "name": name, "cname": cname, "cls": f"{cname}_tile", "point": point,
        "tiles": tiles, "plio_pairs": pairs,
        "summary": "; ".join(g.what for g in gemms),
        "gemms": [g.to_json() for g in gemms],
        "packet_words": packet, "out_words": out, "tile_bytes": _tile_bytes(packet, out),
        "chunks_per_kernel": {"min": min(chunks), "max": max(chunks)},
        "kernels": kernels, "groups": groups,
        "plio_inputs": [f"{cname}_in{q}" for q in range(pairs)],
        "plio_outputs": [f"{cname}_out{q}" for q in range(pairs)],
    }


def _aie_caps(design, device=None, nodes=()):
    from rlhls.designs.devices import get_device
    from rlhls.designs.kernels.cost import aie_plio_pairs

    dev = get_device(device or design.device)
    if "AIE" not in dev.units:
        raise RlhlsError(f"AIE emission: device {dev.id} of design '{design.name}' has no AI Engines "
                         f"(nodes {', '.join(list(nodes)[:3])} are planned there)")
    return dev, {"tiles": int(dev.units["AIE"].resources["aie_tiles"].value), "plio": aie_plio_pairs(dev)}


def _layout(design, nodes, graph, points, device=None) -> tuple[list, dict]:
    """Every node's layout at its point, refused when the sum does not fit the device."""
    if isinstance(nodes, str):
        nodes = [nodes]
    nodes = list(nodes)
    if not nodes:
        raise RlhlsError("AIE emission: no nodes given (expected the names of mm nodes placed on AIE)")
    if len(set(nodes)) != len(nodes):
        raise RlhlsError(f"AIE emission: node names repeat: {nodes}")
    if points is not None and not isinstance(points, dict):
        raise RlhlsError(f"AIE emission: points must be a {{node: 't<tiles>p<plios>'}} dict, "
                         f"not {type(points).__name__}")
    dev, caps = _aie_caps(design, device, nodes)
    nets = design.build_networks()
    used = {"tiles": 0, "plio": 0}
    out = []
    for name in nodes:
        gemms = node_gemms(design, graph, name, nets)
        if not gemms:
            raise RlhlsError(f"AIE emission: node '{name}' computes no matrix product")
        point = (points or {}).get(name) or _smallest_point()
        t, p = _parse_point(name, point, caps, dev.id)
        node = _node_json(name, gemms, str(point).strip(), t, p)
        used["tiles"] += node["tiles"]
        used["plio"] += node["plio_pairs"]
        for res, cap in caps.items():
            if used[res] > cap:
                what = "AIE tiles" if res == "tiles" else "PL<->AIE stream pairs (PLIOs)"
                budget = "" if res == "tiles" else "routable budget "
                raise RlhlsError(f"AIE emission: node '{name}' (at {node['point']}) brings the graph of design "
                                 f"'{design.name}' to {used[res]} {what}, over the {budget}{cap} of {dev.id}; plan "
                                 f"fewer nodes on the AIE or smaller design points")
        out.append(node)
    return out, {"device": dev.id, "tiles": caps["tiles"], "plio_pairs": caps["plio"]}


def _check_formats(design):
    for role, want in (("aie", BF16), ("aie_acc", FP32)):
        text = design.formats.get(role)
        if text is not None and parse_format(text) != want:
            raise RlhlsError(f"AIE emission: design '{design.name}' format '{role}' = {text!r}, but the AIE "
                             f"kernels compute bf16 x bf16 with fp32 accumulation (expected '{want}')")


def aie_fit(design, nodes: list[str], graph, device=None, points=None) -> list[str]:
    """Check that the AIE graph of `nodes` at their design points (`points`: {node: 't<T>p<P>'},
    missing = the smallest point) fits the device's tiles and PL<->AIE stream pairs; raises
    RlhlsError naming the first node that does not fit, the resource and the capacity. Returns
    warnings (a node without a design point)."""
    _layout(design, nodes, graph, points, device)
    missing = [n for n in ([nodes] if isinstance(nodes, str) else nodes) if not (points or {}).get(n)]
    if missing:
        return [f"AIE graph: no design point for {len(missing)} node(s) (e.g. '{missing[0]}'): they run at the "
                f"smallest point {_smallest_point()} (pass the plan's points)"]
    return []


@functools.lru_cache(maxsize=1)
def _env():
    """The templates' environment, made once: it keeps each template compiled (a build renders the
    harness once per node)."""
    import jinja2
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(_vitis_dir() / "aie")),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=False, lstrip_blocks=False)


def emit_aie(design, nodes: list[str], out_dir, *, batch: int | None = None, graph=None,
             points: dict | None = None, data: bool = True, full_data: bool = False) -> list[Path]:
    """Write ``out_dir/aie/`` for the given mm nodes at their design points (module docstring);
    refuses a graph over the device's tiles / PLIOs (as ``aie_fit``). `data`: the simulation files
    of ``data/`` (``plio_data``): by default the node's sample (``data_gemms``: a few blocks, its
    size independent of the batch) and the first ``PLIO_SAMPLES`` beats of each PLIO stream;
    `full_data`: one whole training step's operands and streams (what aiesimulator runs; large for
    a big batch), written as they are made. Returns the files written."""
    _check_formats(design)
    graph = graph if graph is not None else build_graph(design, batch)
    node_ctx, caps = _layout(design, nodes, graph, points)
    env = _env()
    n_tiles = sum(n["tiles"] for n in node_ctx)
    n_pairs = sum(n["plio_pairs"] for n in node_ctx)
    ctx = {"design": design, "batch": graph.batch, "nodes": node_ctx, "ratio": RUNTIME_RATIO,
           "plio_width": PLIO_WIDTH, "pl_freq": design.clocks_mhz.get("PL", 300.0), "device": caps["device"],
           "platform": f"xilinx_{design.device}_base_202420_1", "tiles": n_tiles, "plio_pairs": n_pairs}
    files = {
        "graph.h": env.get_template("graph.h.j2").render(**ctx),
        "graph.cpp": env.get_template("graph.cpp.j2").render(**ctx),
        "aie.cfg": env.get_template("aie.cfg.j2").render(**ctx),
        "Makefile": env.get_template("Makefile.j2").render(**ctx),
        "kernels/mm_bf16.h": env.get_template("mm_bf16.h.j2").render(**ctx),
    }
    for n in node_ctx:
        files[f"kernels/{n['cname']}.h"] = env.get_template("kernel.h.j2").render(node=n)
        files[f"kernels/{n['cname']}.cc"] = env.get_template("kernel.cc.j2").render(node=n)
    nodes_json = [{k: v for k, v in n.items() if k != "groups"} for n in node_ctx]
    if data:
        for n in nodes_json:
            n["data"] = data_spec(n, full=full_data)
    manifest = {
        "design": design.name, "batch": graph.batch, "device": design.device,
        "order": "acc = bf16 bias (or +0); for k in 0..K-1: acc = fp32(acc + fp32(a*b)); out = bf16 RNE; "
                 "K padding -0.0 in A, +0.0 in B; the K chunks of a block in k order on one tile, fp32 "
                 "partial sums kept in the tile between chunks",
        "schedule": "output block j of a node (products in order, row block, column block) on tile j % tiles, "
                    "one K chunk per invocation; tile t on PLIO pair t * plio_pairs // tiles (pktsplit / pktmerge)",
        "mmul": list(MMUL_SHAPE), "tile_buffer_bytes": TILE_BUFFER_BYTES,
        "tiles": n_tiles, "plio_pairs": n_pairs, "plio_inputs": n_pairs, "plio_outputs": n_pairs,
        "capacity": caps,
        "nodes": nodes_json,
    }
    files["manifest.json"] = json.dumps(manifest, indent=1) + "\n"

    def write_data(folder: Path) -> list[str]:
        names: list[str] = []
        for i, n in enumerate(nodes_json if data else ()):
            names += plio_data(n, np.random.default_rng(i), folder, full=full_data)
        return names

    return _write_folder(Path(out_dir) / "aie", files, write_data)


# ------------------------------------------------------------------ simulation data (aie/data/)

PKT_SOURCE = 0x0FFF0000  # source row / column fields of a PL packet header, as UG1079's example (0x8FFF0000)
PLIO_SAMPLES = 64  # 64-bit beats (text lines) of each PLIO stream written by default: a sample of its format
SAMPLE_K_CHUNKS = 2  # K chunks of a sample's product that carry data; the kernel's later chunks are K padding
NEG_ZERO_BITS = 0x8000  # bf16 -0.0: the K padding of A


def pkt_header(pkt_id: int) -> int:
    """A PL packet header: packet ID in bits 4:0, bit 31 the odd parity of the word (UG1079 'Packet
    Switching and the aiesimulator': 0x8FFF0000 is packet 0)."""
    h = PKT_SOURCE | (pkt_id & 0x1F)
    return h | (0 if bin(h).count("1") % 2 else 0x80000000)


def _sample_dim(n: int, unit: int, keep: int) -> int:
    """The size of `keep` blocks of `unit` taken from n: keep - 1 whole ones and n's last (ragged) one."""
    blocks = -(-n // unit)
    return n if blocks <= keep else (keep - 1) * unit + n - (blocks - 1) * unit


def data_gemms(node: dict, full: bool = False) -> list[dict]:
    """The products of a node's data instance: its own (`full`), or its sample: the same kernel (chunks
    and K chunks per block as compiled) on a few blocks, enough that every tile the node uses gets one
    and one tile a second (min(blocks, tiles + 1), at least 2 x 2 per product where it has them, each
    dimension's last block as ragged as the node's), K cut to ``SAMPLE_K_CHUNKS`` chunks of data (its
    last as ragged as the node's), the kernel's later chunks the harness's K padding. Its size does
    not depend on the batch. Each entry is the manifest's product with M, K, N, grid_m, grid_n,
    blocks and chunks of the instance."""
    gemms = [dict(g) for g in node["gemms"]]
    if full:
        return gemms
    keep = [[min(g["grid_m"], 2), min(g["grid_n"], 2)] for g in gemms]
    want = min(sum(g["grid_m"] * g["grid_n"] for g in gemms), node["tiles"] + 1)
    while sum(m * n for m, n in keep) < want:
        grow = [i for i, g in enumerate(gemms) if keep[i][0] < g["grid_m"] or keep[i][1] < g["grid_n"]]
        i = min(grow, key=lambda j: keep[j][0] * keep[j][1])
        keep[i][0 if keep[i][0] < gemms[i]["grid_m"] else 1] += 1
    for g, (gm, gn) in zip(gemms, keep):
        gk, kc = g["grid_k"], g["kc"]
        k = g["K"] if gk <= SAMPLE_K_CHUNKS else (SAMPLE_K_CHUNKS - 1) * kc + g["K"] - (gk - 1) * kc
        g.update(M=_sample_dim(g["M"], g["mc"], gm), K=k, N=_sample_dim(g["N"], g["nc"], gn), grid_m=gm, grid_n=gn,
                 blocks=gm * gn, chunks=gm * gn * gk)
    return gemms


def data_spec(node: dict, *, full: bool = False) -> dict:
    """The manifest's record of a node's data/ files: which instance (``data_gemms``), its products'
    shapes and how many beats of each PLIO stream the text files hold (None: all)."""
    return {"instance": "full" if full else "sample",
            "products": [[g["M"], g["K"], g["N"]] for g in data_gemms(node, full)],
            "plio_beats": None if full else PLIO_SAMPLES}


def data_node(node: dict) -> dict:
    """The node as its data instance has it (the products of ``data_gemms``): what the harness of
    its data/ files is rendered from."""
    spec = node.get("data") or {}
    return dict(node, gemms=data_gemms(node, spec.get("instance") == "full"))


def _operands(gemms: list, rng) -> list[dict]:
    """Random bf16 operands of each product and the emulator's result (``aie_dense_reference``), as bit
    patterns: a and b as stored (transposed where the product reads them so), bias, and c over whole
    blocks (rows and columns past M / N: what the kernel computes on the harness's padding)."""
    ops = []
    for g in gemms:
        M, K, N = g["M"], g["K"], g["N"]
        A, B = order_sensitive_operands(rng, M, K, N)
        bias = random_bf16(rng, (N,)) if g["bias"] else None
        mp, np_ = g["grid_m"] * g["mc"], g["grid_n"] * g["nc"]
        a = np.zeros((mp, K))
        a[:M] = A
        b = np.zeros((K, np_))
        b[:, :N] = B
        bb = None
        if bias is not None:
            bb = np.zeros(np_)
            bb[:N] = bias
        c = aie_dense_reference(a, b, bb, k_pad=g["grid_k"] * g["kc"] - K)
        ops.append({"a": _bf16_bits(A.T if g["at"] else A).ravel(), "b": _bf16_bits(B.T if g["bt"] else B).ravel(),
                    "bias": None if bias is None else _bf16_bits(bias), "c": _bf16_bits(c)})
    return ops


def _schedule(gemms: list, T: int) -> list:
    """Each tile's steps (product, row block, column block, K chunk), as harness.cpp.j2's run_pass."""
    steps: list[list[tuple[int, int, int, int]]] = [[] for _ in range(T)]
    j = 0
    for gi, g in enumerate(gemms):
        for mi in range(g["grid_m"]):
            for ni in range(g["grid_n"]):
                steps[j % T] += [(gi, mi, ni, ki) for ki in range(g["grid_k"])]
                j += 1
    return steps


def _packet(g: dict, op: dict, step: tuple, words: int) -> np.ndarray:
    """The IN-word packet of one K chunk as the harness packs it: A chunk, B chunk[, bias chunk],
    padded (K with -0.0 in A and +0.0 in B; rows / columns past M / N with +0.0)."""
    _, mi, ni, ki = step
    M, K, N, mc, kc, nc = g["M"], g["K"], g["N"], g["mc"], g["kc"], g["nc"]
    a = op["a"].reshape(K, M).T if g["at"] else op["a"].reshape(M, K)
    b = op["b"].reshape(N, K).T if g["bt"] else op["b"].reshape(K, N)
    r0, k0, c0 = mi * mc, ki * kc, ni * nc
    rn, kn, cn = max(0, min(mc, M - r0)), max(0, min(kc, K - k0)), max(0, min(nc, N - c0))
    ablk = np.zeros((mc, kc), np.uint16)
    ablk[:rn, :kn] = a[r0:r0 + rn, k0:k0 + kn]
    ablk[:, kn:] = NEG_ZERO_BITS
    bblk = np.zeros((kc, nc), np.uint16)
    bblk[:kn, :cn] = b[k0:k0 + kn, c0:c0 + cn]
    pkt = np.zeros(words, np.uint16)
    n = mc * kc + kc * nc
    pkt[:mc * kc] = (ablk.T if g["at"] else ablk).ravel()
    pkt[mc * kc:n] = (bblk.T if g["bt"] else bblk).ravel()
    if g["bias"]:
        pkt[n:n + cn] = op["bias"][c0:c0 + cn]
    return pkt


class _PlioText:
    """One PLIO's text file (UG1076 'TXT File Format'): 32-bit words, two per line (a 64-bit PLIO); a
    packet-switched stream starts each packet with its header and marks its last line TLAST
    (UG1079 'Packet Switching and the aiesimulator'). At most `beats` lines of data (None: all)."""

    def __init__(self, path: Path, header: bool, beats: int | None):
        self.fh = open(path, "w")  # closed by close(), once the stream is written
        self.header, self.left = header, beats

    @property
    def full(self) -> bool:
        return self.left is not None and self.left <= 0

    def add(self, pid: int, words: np.ndarray) -> None:
        if self.full:
            return
        w = np.asarray(words, dtype=np.uint16)
        if w.size % 2:
            w = np.concatenate([w, np.zeros(1, np.uint16)])  # whole 32-bit lanes
        u32 = np.ascontiguousarray(w).view("<u4").tolist()
        if self.header:
            u32.insert(0, pkt_header(pid))
        n = len(u32)
        rows = ["%d %d"] * (n // 2) + (["%d"] if n % 2 else [])
        if self.left is not None and len(rows) > self.left:  # the sample ends inside this packet: no TLAST
            rows = rows[:self.left]
            u32 = u32[:2 * self.left]
        elif self.header:
            rows.insert(len(rows) - 1, "TLAST")
        self.fh.write(("\n".join(rows) + "\n") % tuple(u32))
        if self.left is not None:
            self.left -= sum(r != "TLAST" for r in rows)

    def close(self) -> None:
        self.fh.close()


def plio_data(node: dict, rng, folder: Path, *, full: bool = False) -> list[str]:
    """Write the data/ files of one node into `folder` (``data_gemms``: its sample, or with `full` one
    whole training step) and return their names: random bf16 operands through the emulator
    (``aie_dense_reference``), as the PL data mover streams them (the harness's order: harness.cpp.j2
    ``run_pass``):

    * ``<in PLIO>.txt`` per input PLIO: each K chunk's packet (A, B[, bias] chunk, IN words, padded
      as the harness pads), in the order the movers send them; behind a pktsplit, packet i goes to
      the split's output i (header + TLAST);
    * ``<out PLIO>_expected.txt``: each released output block's MC x NC values (row-major; the rest
      of the OUT-word buffer is not compared), behind a pktmerge with its source's packet header;
    * ``<node>.in.bin`` / ``<node>.expected.bin``: the instance's operands and results in the layout
      the g++ shim harness reads and writes (``harness inputs.bin outputs.bin``: uint16 LE per product),
      whole: what ``check_aie`` runs.

    The text files hold the first ``PLIO_SAMPLES`` beats of each stream, or all of them with `full`
    (aiesimulator reads text or CSV, UG1076 'Simulation Input and Output Data Streams'); every file
    is written as it is made, so memory holds one product's operands, never a stream."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    gemms = data_gemms(node, full)
    T, P, IN = node["tiles"], node["plio_pairs"], node["packet_words"]
    ops = _operands(gemms, rng)
    cname, names = node["cname"], []
    with open(folder / f"{cname}.in.bin", "wb") as fin, open(folder / f"{cname}.expected.bin", "wb") as fexp:
        for g, op in zip(gemms, ops):
            for part in (op["a"], op["b"], op["bias"]):
                if part is not None:
                    fin.write(part.astype("<u2").tobytes())
            fexp.write(np.ascontiguousarray(op["c"][:g["M"], :g["N"]]).astype("<u2").tobytes())
    names += [f"{cname}.in.bin", f"{cname}.expected.bin"]
    steps = _schedule(gemms, T)
    beats = None if full else PLIO_SAMPLES
    for q in range(P):
        group = [t for t in range(T) if t * P // T == q]
        split = len(group) > 1
        fi, fo = node["plio_inputs"][q], node["plio_outputs"][q]
        tin = _PlioText(folder / f"{fi}.txt", split, beats)
        tout = _PlioText(folder / f"{fo}_expected.txt", split, beats)
        try:
            pos = dict.fromkeys(group, 0)
            while not (tin.full and tout.full) and any(pos[t] < len(steps[t]) for t in group):
                for pid, t in enumerate(group):  # one round: each of the PLIO's tiles sends its next chunk
                    if pos[t] == len(steps[t]):
                        continue
                    step = steps[t][pos[t]]
                    pos[t] += 1
                    g, op = gemms[step[0]], ops[step[0]]
                    if not tin.full:
                        tin.add(pid, _packet(g, op, step, IN))
                    if step[3] + 1 == g["grid_k"] and not tout.full:  # the block's last chunk: released
                        mi, ni, mc, nc = step[1], step[2], g["mc"], g["nc"]
                        tout.add(pid, op["c"][mi * mc:(mi + 1) * mc, ni * nc:(ni + 1) * nc].ravel())
        finally:
            tin.close()
            tout.close()
        names += [f"{fi}.txt", f"{fo}_expected.txt"]
    return names


def _write_folder(target: Path, files: dict, write_more=None) -> list[Path]:
    """aie/: built beside the target and published whole (fileio.staged_folder); `write_more(tmp)`
    writes the files it streams (data/) and returns their names."""
    from rlhls.core.fileio import staged_folder

    names = list(files)
    with staged_folder(target, command="aie") as tmp:
        for rel, text in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                p.write_bytes(text)
            else:
                p.write_text(text)
        if write_more is not None:
            names += [f"data/{n}" for n in write_more(tmp / "data")]
    return [target / rel for rel in names]


# ------------------------------------------------------------------ reference and host check

def aie_dense_reference(x, w, b=None, *, k_pad: int = 0) -> np.ndarray:
    """What the AIE kernels compute: bf16 x, w, b; fp32 accumulation in k order; bf16 result.

    acc = BF16(b) (or +0); for k in 0..K-1: acc = FP32(acc + FP32(x[:, k] * w[k, :])); then the
    k_pad padding terms (-0.0) * (+0.0) of the kernel's K padding; y = BF16(acc). Equals
    ``arith.dense(x, w, b, in_fmt=BF16, acc_fmt=FP32, out_fmt=BF16)`` bit for bit.
    """
    x = BF16.quantize(np.asarray(x, dtype=np.float64))
    w = BF16.quantize(np.asarray(w, dtype=np.float64))
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise RlhlsError(f"aie_dense_reference: shapes {x.shape} . {w.shape} do not multiply")
    acc = np.zeros((x.shape[0], w.shape[1]))
    if b is not None:
        acc = acc + BF16.quantize(np.asarray(b, dtype=np.float64))[None, :]
    for k in range(x.shape[1]):
        acc = FP32.quantize(acc + FP32.quantize(x[:, k, None] * w[None, k, :]))
    if k_pad:  # x + (-0.0) is x for every IEEE x (+0 stays +0): one padding term stands for all k_pad
        acc = FP32.quantize(acc + FP32.quantize(np.float64(-0.0) * np.float64(0.0)))
    return BF16.quantize(acc)


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    return (np.asarray(a, dtype=np.float64).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _from_bits(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _to_bf16_bits(x) -> np.ndarray:
    """BF16.quantize(x) as bf16 bit patterns (uint16), fast for values float32 holds exactly (one
    RNE from float32 is then one rounding of x); other values go through BF16.quantize."""
    x = np.asarray(x)
    x32 = x.astype(np.float32)
    if x.dtype != np.float32:
        with np.errstate(invalid="ignore"):
            inexact = (x32.astype(x.dtype) != x) & ~np.isnan(x)
        if inexact.any():  # not a float32: round once from x, not twice through float32
            x32 = np.where(inexact, BF16.quantize(np.asarray(x, dtype=np.float64)).astype(np.float32), x32)
    u = x32.view(np.uint32)
    nan = np.isnan(x32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    r = np.where(nan, (u >> np.uint32(16)) | np.uint32(0x0040), r)
    return np.ascontiguousarray(r.astype(np.uint16))


def random_bf16(rng, shape, *, zeros: float = 0.05, spread: int = 6) -> np.ndarray:
    """bf16 values with magnitudes about 2**-spread .. 2**spread and some +-0."""
    v = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, size=shape))
    z = rng.random(shape) < zeros
    v[z] = np.where(rng.random(int(z.sum())) < 0.5, 0.0, -0.0)
    return BF16.quantize(v)


def order_sensitive_operands(rng, M: int, K: int, N: int):
    """Random bf16 A (M x K), B (K x N) whose fp32 sums depend on the summation order.

    Plain random data rarely shows an order change after rounding to bf16, so pairs of k carry
    products +-2**16 * c that cancel exactly: whatever small partial sum they meet is absorbed into
    a big one, differently for every order (a kernel summing in another order fails the check).
    """
    A, B = random_bf16(rng, (M, K)), random_bf16(rng, (K, N))
    ks = rng.permutation(K)
    for i in range(0, min(K, 2 * max(1, K // 8)) - 1, 2):
        k1, k2 = ks[i], ks[i + 1]
        big = np.where(rng.random(M) < 0.5, -65536.0, 65536.0)
        A[:, k1] = big
        A[:, k2] = big
        c = BF16.quantize(rng.standard_normal(N))
        B[k1, :] = c
        B[k2, :] = -c
    return A, B


def _render_harness(node: dict) -> str:
    return _env().get_template("harness.cpp.j2").render(node=node)


def _write_if_changed(path: Path, text: str) -> None:
    """Atomic write, skipped when the content is already there (keeps the compile cache warm)."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def check_aie(out_dir, *, seed: int = 0, cache_dir=None) -> list[dict]:
    """Compile every emitted node's kernel with g++ against the shim, run it through the harness (the
    time-shared data mover) on the node's data instance and compare with the emulator
    (``aie_dense_reference``) bit for bit: the operands and results of ``data/<node>.in.bin`` /
    ``.expected.bin`` (``plio_data``: the sample of ``data_gemms``, or the whole step with
    ``full_data``), or, for a node emitted without data, a sample drawn here from `seed`.

    Returns one dict per product: {'node', 'kernel' (the product's name), 'shape' (M, K, N), 'checked'
    (the M, K, N run), 'data' ('sample', 'full' or 'seed'), 'chunk', 'grid', 'tiles',
    'chunks_per_kernel', 'passed', 'mismatches', 'max_abs_err', 'detail'}. The harnesses compile into
    the build cache (``cache_dir``, else ``core.toolchain.cache_dir()/aie-check``), one folder per
    kernel source and harness content: a build of the same kernels again compiles nothing.
    """
    from rlhls.core.toolchain import cache_dir as toolchain_cache_dir
    from rlhls.core.toolchain import compile_cpp

    aie = Path(out_dir) / "aie"
    mpath = aie / "manifest.json"
    if not mpath.is_file():
        raise RlhlsError(f"check_aie: {mpath} not found (run emit_aie first)")
    try:
        manifest = read_json(mpath)
    except (OSError, ValueError) as e:
        raise RlhlsError(f"check_aie: {mpath}: cannot be read ({e})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("nodes"), list):
        raise RlhlsError(f"check_aie: {mpath}: not the manifest emit_aie writes (no list of nodes)")
    base = Path(cache_dir) if cache_dir is not None else toolchain_cache_dir() / "aie-check"
    rng = np.random.default_rng(seed)
    results = []
    for node in manifest["nodes"]:
        cname = node["cname"]
        inst = data_node(node)
        # the node's own files, copied beside its harness: what is compiled is keyed by their content alone
        names = (f"{cname}.cc", f"{cname}.h", "mm_bf16.h")
        try:
            texts = {n: (aie / "kernels" / n).read_text() for n in names}
        except (OSError, UnicodeDecodeError) as e:
            raise RlhlsError(f"check_aie: {aie / 'kernels'}: the files of node {cname} cannot be read ({e})") from None
        texts[f"{cname}_harness.cpp"] = _render_harness(inst)
        key = hashlib.sha256(json.dumps(texts, sort_keys=True).encode()).hexdigest()[:16]
        work = base / f"{cname}_{key}"
        for n, text in texts.items():
            _write_if_changed(work / n, text)
        exe = compile_cpp([work / f"{cname}.cc", work / f"{cname}_harness.cpp"], work / f"{cname}_harness",
                          include_dirs=[shim_dir(), work], flags=("-DRLHLS_AIE_MAIN",))
        fdata, fexp = aie / "data" / f"{cname}.in.bin", aie / "data" / f"{cname}.expected.bin"
        written = isinstance(node.get("data"), dict) and fdata.is_file() and fexp.is_file()
        with scratch_dir("aie-check") as tmp:  # the data of this process's run alone (swept if killed)
            if written:
                source = "full" if node["data"].get("instance") == "full" else "sample"
                fin, want_all = fdata, np.fromfile(fexp, dtype="<u2")
            else:
                source, ops = "seed", _operands(inst["gemms"], rng)
                fin = tmp / "in.bin"
                with open(fin, "wb") as fh:
                    for op in ops:
                        for part in (op["a"], op["b"], op["bias"]):
                            if part is not None:
                                fh.write(part.astype("<u2").tobytes())
                want_all = np.concatenate([op["c"][:g["M"], :g["N"]].ravel() for g, op in zip(inst["gemms"], ops)])
            fout = tmp / "out.bin"
            run = procs.run([str(exe), str(fin), str(fout)], capture_output=True, text=True)
            words = np.fromfile(fout, dtype="<u2") if run.returncode == 0 and fout.is_file() else None
        pos = 0
        for g, gi in zip(node["gemms"], inst["gemms"]):
            r = {"node": node["name"], "kernel": g["fn"], "shape": (g["M"], g["K"], g["N"]),
                 "checked": (gi["M"], gi["K"], gi["N"]), "data": source,
                 "chunk": (g["mc"], g["kc"], g["nc"]), "grid": (g["grid_m"], g["grid_k"], g["grid_n"]),
                 "tiles": node["tiles"], "chunks_per_kernel": node["chunks_per_kernel"]["max"]}
            n = gi["M"] * gi["N"]
            if words is None or words.size < pos + n:
                r.update(passed=False, mismatches=None, max_abs_err=None,
                         detail=f"harness failed (exit {run.returncode}): {(run.stderr or run.stdout).strip()[:300]}")
            elif want_all.size < pos + n:
                r.update(passed=False, mismatches=None, max_abs_err=None,
                         detail=f"{fexp.name} holds {want_all.size} results, fewer than the products' {pos + n}")
            else:
                got, want = words[pos:pos + n], want_all[pos:pos + n]
                bad = int(np.count_nonzero(got != want))
                with np.errstate(invalid="ignore"):
                    err = float(np.nanmax(np.abs(_from_bits(got) - _from_bits(want)))) if n else 0.0
                r.update(passed=bad == 0, mismatches=bad, max_abs_err=err,
                         detail="bit-exact" if bad == 0 else f"{bad} of {n} outputs differ")
            pos += n
            results.append(r)
    return results


# ------------------------------------------------------------------ csim backend: one product through the shim

_GEMM_LOCK = threading.Lock()
_GEMM_FNS: dict = {}  # (shape, flags, point, cache) -> ctypes function; one load per shape per process
_U16P = ctypes.POINTER(ctypes.c_void_p)


def _gemm_node(M: int, K: int, N: int, at: bool, bt: bool, bias: bool, point: str) -> dict:
    cname = f"mm_{M}x{K}x{N}" + ("_at" if at else "") + ("_bt" if bt else "") + ("_bias" if bias else "")
    t, p = _parse_point(cname, point, None)
    g = GemmSpec(f"{cname}_c", f"C = A{'^T' if at else ''} . B{'^T' if bt else ''}{' + bias' if bias else ''}  "
                 f"({M} x {K} x {N})", M, K, N, at, bt, bias)
    return _node_json(cname, [g], str(point).strip(), t, p)


def _gemm_fn(M, K, N, at, bt, bias, point, cache_dir):
    key = (M, K, N, at, bt, bias, point, str(cache_dir))
    fn = _GEMM_FNS.get(key)
    if fn is not None:
        return fn
    with _GEMM_LOCK:
        fn = _GEMM_FNS.get(key)
        if fn is not None:
            return fn
        from rlhls.core.toolchain import cache_dir as default_cache
        from rlhls.core.toolchain import compile_cpp

        node = _gemm_node(M, K, N, at, bt, bias, point)
        env = _env()
        texts = {f"{node['cname']}.h": env.get_template("kernel.h.j2").render(node=node),
                 f"{node['cname']}.cc": env.get_template("kernel.cc.j2").render(node=node),
                 "mm_bf16.h": env.get_template("mm_bf16.h.j2").render(),
                 "harness.cpp": _render_harness(node)}
        h = hashlib.sha256()
        for name, text in sorted(texts.items()):
            h.update(name.encode() + b"\0" + text.encode() + b"\0")
        for f in sorted(shim_dir().rglob("*")):
            if f.is_file():
                h.update(f.relative_to(shim_dir()).as_posix().encode() + b"\0" + f.read_bytes())
        # a library's path names its content: a rebuilt library never hides behind one dlopen already did
        folder = Path(cache_dir) if cache_dir is not None else default_cache() / "aie"
        folder = folder / f"{node['cname']}_{point}_{h.hexdigest()[:16]}"
        for name, text in texts.items():
            _write_if_changed(folder / name, text)
        lib = compile_cpp([folder / f"{node['cname']}.cc", folder / "harness.cpp"], folder / "libaie_gemm.so",
                          include_dirs=[shim_dir(), folder], flags=("-shared", "-fPIC"))
        fn = ctypes.CDLL(str(lib)).rlhls_aie_run
        fn.argtypes = [_U16P, _U16P, _U16P, _U16P, ctypes.c_char_p, ctypes.c_uint]
        fn.restype = ctypes.c_int
        _GEMM_FNS[key] = fn
        return fn


def aie_gemm(a, b, bias=None, *, a_transposed: bool = False, b_transposed: bool = False, point: str | None = None,
             cache_dir=None) -> np.ndarray:
    """C = A . B [+ bias] through the g++-compiled AIE kernel sources (the csim backend of AIE nodes).

    `a` is A (M x K), or A^T (K x M) with a_transposed; `b` is B (K x N), or B^T (N x K) with
    b_transposed; `bias` (N,) or None. Inputs are rounded to bf16 (as ``aie_dense_reference``); the
    result (float64, M x N, bf16 values) equals ``aie_dense_reference(A, B, bias)`` and
    ``arith.dense(A, B, bias, in_fmt=BF16, acc_fmt=FP32, out_fmt=BF16)`` bit for bit. `point`: the
    node's design point (the result does not depend on it; default t1p1). Compiled once per shape
    and point (``cache_dir``, else ``core.toolchain.cache_dir()/aie``), loaded once per process.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.size == 0 or b.size == 0:
        raise RlhlsError(f"aie_gemm: operands must be non-empty 2-D arrays, got shapes {a.shape} and {b.shape}")
    M, K = (a.shape[1], a.shape[0]) if a_transposed else a.shape
    K2, N = (b.shape[1], b.shape[0]) if b_transposed else b.shape
    if K != K2:
        raise RlhlsError(f"aie_gemm: A{'^T' if a_transposed else ''} {a.shape} and B{'^T' if b_transposed else ''} "
                         f"{b.shape} do not multiply (K = {K} vs {K2})")
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (N,):
            raise RlhlsError(f"aie_gemm: bias has shape {bias.shape}, expected ({N},)")
    fn = _gemm_fn(int(M), int(K), int(N), bool(a_transposed), bool(b_transposed), bias is not None,
                  str(point or _smallest_point()).strip(), cache_dir)
    ab, bb = _to_bf16_bits(a), _to_bf16_bits(b)
    biasb = _to_bf16_bits(bias) if bias is not None else None
    c = np.empty((M, N), dtype=np.uint16)

    def ptrs(x):
        return (ctypes.c_void_p * 1)(x.ctypes.data if x is not None else None)

    err = ctypes.create_string_buffer(512)
    if fn(ptrs(ab), ptrs(bb), ptrs(biasb), ptrs(c), err, len(err)) != 0:
        raise RlhlsError(f"aie_gemm: the AIE kernel harness failed for {M}x{K}x{N}: "
                         f"{err.value.decode(errors='replace')}")
    return _from_bits(c)
