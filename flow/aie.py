"""AIE emission: an ADF project (graph, kernels, aie.cfg, Makefile) for the matrix-multiply nodes
a plan places on the AI Engines, and a host check of the exact kernel sources under g++.

``emit_aie(design, nodes, out_dir, *, batch=None) -> list[Path]`` writes ``out_dir/aie/``:

    graph.h            one ``adf::graph`` subclass per node (kernels, ``input_plio`` /
                       ``output_plio``, ``connect<>`` nets, ``runtime<ratio>``, ``source()``)
                       and a top graph ``rlhls_top`` holding them all
    graph.cpp          the top graph instance and ``main()`` (init / run / end) for x86sim / aiesim
    kernels/mm_bf16.h  the bf16 ``aie::mmul<4, 8, 4>`` core every kernel calls
    kernels/<node>.h/.cc   the node's kernel functions (``input_buffer`` / ``output_buffer`` with
                       ``adf::extents``, cascade ports between K chunks)
    aie.cfg, Makefile  ``v++ -c --mode aie`` compile (hw / x86sim) and the simulators
    manifest.json      what was generated from what: shapes, chunks, grid, PLIO names and layouts

What a node computes (one kernel source per node; C = A . B [+ bias], all in bf16 with fp32
accumulation, AP-DRL §II-B: AIE-ML computes BF16):

    fwd / tfwd   y  = x . W + b                     A = x (batch x in), B = W (in x out)
    bwd          dX = dY . W^T  (if the node has an input gradient)   A = dY, B = W read transposed
                 dW = X^T . dY  (if it has weight gradients)           A = X read transposed, B = dY
    Conv2d nodes are the same products on im2col columns (rows n, oh, ow; columns c, kh, kw); im2col
    / col2im and the bias gradient (a sum over the batch) stay with the data mover on PL / PS.
    Other nodes (activations, losses, updates, TRPO's fvp passes) raise RlhlsError.

Accumulation order (kernels/mm_bf16.h, the shim ``vitis/aie_shim`` and ``aie_dense_reference`` agree
on it bit for bit): acc = bf16 bias (or +0); for k = 0 .. K-1 in order: acc = fp32(acc + fp32(a*b));
out = bf16(acc) (round to nearest even). Inside the kernel that is: per 4x4 output block, one
``mac`` per 4x8x4 block over k in order (the shim's mac takes its 8 products in order); a layer split
over several tiles along K passes the fp32 partial sums down a cascade chain, so the order is still
k = 0 .. K-1. This is exactly ``arith.dense(x, w, b, in_fmt=BF16, acc_fmt=FP32, out_fmt=BF16)``
(bias as the first accumulator value, one rounding per product and per add), so the two agree bit
for bit on every input, signed zeros included: the K padding is -0.0 in A and +0.0 in B, and
(-0)*(+0) = -0 leaves every IEEE sum unchanged. Caveat: real AIE-ML hardware sums the products of
one mac in its own adder tree and flushes fp32 subnormals, so silicon may differ in the last bits;
the shim defines the reference semantics (documented in vitis/aie_shim/aie_api/aie.hpp).

Large layers. One AIE-ML tile has 64 KB of data memory; each kernel's buffers (A, B, bias, C chunks,
double-buffered) are kept within ``TILE_BUFFER_BYTES``. A product that does not fit is split into a
grid of equal chunks: rows of A (grid_m), columns of B (grid_n) and K (grid_k). The K chunks of one
output block form a cascade chain (first: starts at the bias, mid: continues, last: rounds to bf16).
An A chunk is broadcast from one PLIO to every column kernel, a B chunk to every row kernel. Not done
(documented limitation): packing the many PLIOs of a big grid (e.g. 3136x512) into memory-tile DMAs
or packet switching; the emitted graph is functionally complete but may exceed the device's PLIO
count, which ``manifest.json`` reports.

``check_aie(out_dir) -> list[dict]`` compiles each node's kernel source with g++ against the shim
(``rlhls.flow.toolchain.compile_cpp``, content-hash cache) together with a generated harness that
plays the data mover (chunking, padding, cascade FIFOs), feeds random bf16 data and compares the
result with ``aie_dense_reference`` bit for bit: one dict per kernel function.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rlhls.designs.errors import RlhlsError
from rlhls.designs.formats import BF16, FP32, parse_format
from rlhls.designs.graph import build_graph

__all__ = ["emit_aie", "aie_fit", "check_aie", "aie_dense_reference", "plan_chunks", "node_gemms", "GemmSpec",
           "TILE_BUFFER_BYTES", "MMUL_SHAPE", "random_bf16",
           "order_sensitive_operands"]

MMUL_SHAPE = (4, 8, 4)  # aie::mmul<M, K, N, bfloat16, bfloat16> on AIE-ML
TILE_BUFFER_BYTES = 48 * 1024  # of a tile's 64 KB: all buffers x2 (ping-pong); rest stack / heap
RUNTIME_RATIO = 0.9  # one kernel per tile
PLIO_WIDTH = "adf::plio_64_bits"  # 4 bf16 per beat


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
    roles: list = field(default_factory=list)

    @property
    def kernels(self) -> int:
        return self.grid_m * self.grid_k * self.grid_n


def _ceil_to(v: int, unit: int) -> int:
    return max(unit, -(-v // unit) * unit)


def plan_chunks(M: int, K: int, N: int, bias: bool, budget_bytes: int = TILE_BUFFER_BYTES):
    """Chunk (mc, kc, nc), multiples of the 4x8x4 mmul block, whose buffers fit one tile.

    Halves, one at a time, the dimension whose halving saves the most buffer bytes (ties: N, M, K,
    so cascades are the last resort) until 2 x 2 bytes x (A + B + bias + C) <= budget.
    """
    um, uk, un = MMUL_SHAPE
    c = {"m": _ceil_to(M, um), "k": _ceil_to(K, uk), "n": _ceil_to(N, un)}
    unit = {"m": um, "k": uk, "n": un}

    def nbytes(d):
        e = d["m"] * d["k"] + d["k"] * d["n"] + (d["n"] if bias else 0) + d["m"] * d["n"]
        return 2 * 2 * e

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
        if best is None:  # cannot happen: a single 4x8x4 block is tiny
            raise RlhlsError(f"AIE chunking: {M}x{K}x{N} does not fit {budget_bytes} bytes per tile")
        c = best[1]
    return c["m"], c["k"], c["n"]


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


def _plan(g: GemmSpec) -> GemmSpec:
    g.mc, g.kc, g.nc = plan_chunks(g.M, g.K, g.N, g.bias)
    g.grid_m, g.grid_k, g.grid_n = (-(-g.M // g.mc), -(-g.K // g.kc), -(-g.N // g.nc))
    g.roles = ["single"] if g.grid_k == 1 else (["first", "last"] + (["mid"] if g.grid_k > 2 else []))
    return g


def _role(ki: int, nk: int) -> str:
    if nk == 1:
        return "single"
    return "first" if ki == 0 else ("last" if ki == nk - 1 else "mid")


def _graph_of(node_name: str, gemms: list) -> dict:
    """Kernels, PLIOs and nets of one node's subgraph (all names global: prefixed by the node)."""
    kernels, inputs, outputs, nets = [], [], [], []
    idx = {}
    for g in gemms:
        for mi in range(g.grid_m):
            for ni in range(g.grid_n):
                for ki in range(g.grid_k):
                    idx[(g.fn, mi, ni, ki)] = len(kernels)
                    kernels.append({"fn": f"{g.fn}_{_role(ki, g.grid_k)}", "gemm": g.fn, "mi": mi, "ni": ni,
                                    "ki": ki})
        a_ports, b_ports, bias_ports = {}, {}, {}
        for mi in range(g.grid_m):
            for ki in range(g.grid_k):
                a_ports[(mi, ki)] = len(inputs)
                inputs.append({"name": f"{g.fn}_a_m{mi}_k{ki}", "what": "A chunk"})
        for ki in range(g.grid_k):
            for ni in range(g.grid_n):
                b_ports[(ki, ni)] = len(inputs)
                inputs.append({"name": f"{g.fn}_b_k{ki}_n{ni}", "what": "B chunk"})
        if g.bias:
            for ni in range(g.grid_n):
                bias_ports[ni] = len(inputs)
                inputs.append({"name": f"{g.fn}_bias_n{ni}", "what": "bias chunk"})
        for mi in range(g.grid_m):
            for ni in range(g.grid_n):
                o = len(outputs)
                outputs.append({"name": f"{g.fn}_c_m{mi}_n{ni}", "what": "C chunk"})
                for ki in range(g.grid_k):
                    k = idx[(g.fn, mi, ni, ki)]
                    # kernel ports in signature order: in: a, b, [bias | cin]; out: c | cout
                    nets.append((f"in[{a_ports[(mi, ki)]}].out[0]", f"k[{k}].in[0]"))
                    nets.append((f"in[{b_ports[(ki, ni)]}].out[0]", f"k[{k}].in[1]"))
                    if ki == 0 and g.bias:
                        nets.append((f"in[{bias_ports[ni]}].out[0]", f"k[{k}].in[2]"))
                    if ki > 0:
                        nets.append((f"k[{idx[(g.fn, mi, ni, ki - 1)]}].out[0]", f"k[{k}].in[2]"))
                    if ki == g.grid_k - 1:
                        nets.append((f"k[{k}].out[0]", f"out[{o}].in[0]"))
    return {"kernels": kernels, "inputs": inputs, "outputs": outputs, "nets": nets}


def _env():
    import jinja2
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(_vitis_dir() / "aie")),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=False, lstrip_blocks=False)


def _check_formats(design):
    for role, want in (("aie", BF16), ("aie_acc", FP32)):
        text = design.formats.get(role)
        if text is not None and parse_format(text) != want:
            raise RlhlsError(f"AIE emission: design '{design.name}' format '{role}' = {text!r}, but the AIE "
                             f"kernels compute bf16 x bf16 with fp32 accumulation (expected '{want}')")


def aie_fit(design, nodes: list[str], graph, device=None) -> list[str]:
    """Check that the AIE graph of `nodes` fits the device's tiles and PL<->AIE streams; raises
    RlhlsError naming the first node that does not fit, the resource and the capacity. Returns
    warnings (none so far)."""
    from rlhls.designs.devices import get_device
    from rlhls.designs.kernels.cost import aie_plio_pairs

    dev = get_device(device or design.device)
    if "AIE" not in dev.units:
        raise RlhlsError(f"AIE emission: device {dev.id} of design '{design.name}' has no AI Engines "
                         f"(nodes {', '.join(nodes[:3])} are planned there)")
    caps = {"tiles": int(dev.units["AIE"].resources["aie_tiles"].value), "plio": aie_plio_pairs(dev)}
    used = {"tiles": 0, "plio": 0}
    nets = design.build_networks()
    for name in nodes:
        sub = _graph_of(name, [_plan(g) for g in node_gemms(design, graph, name, nets)])
        used["tiles"] += len(sub["kernels"])
        used["plio"] += max(len(sub["inputs"]), len(sub["outputs"]))
        for res, cap in caps.items():
            if used[res] > cap:
                what = "AIE tiles" if res == "tiles" else "PL<->AIE stream pairs (PLIOs)"
                raise RlhlsError(f"AIE emission: node '{name}' brings the graph of design '{design.name}' to "
                                 f"{used[res]} {what}, over the {cap} of {dev.id}; plan fewer nodes on the AIE")
    return []


def emit_aie(design, nodes: list[str], out_dir, *, batch: int | None = None, graph=None) -> list[Path]:
    """Write ``out_dir/aie/`` for the given mm nodes (module docstring); returns the files written."""
    if isinstance(nodes, str):
        nodes = [nodes]
    nodes = list(nodes)
    if not nodes:
        raise RlhlsError("AIE emission: no nodes given (expected the names of mm nodes placed on AIE)")
    if len(set(nodes)) != len(nodes):
        raise RlhlsError(f"AIE emission: node names repeat: {nodes}")
    _check_formats(design)
    graph = graph if graph is not None else build_graph(design, batch)
    nets = design.build_networks()
    env = _env()
    node_ctx = []
    for name in nodes:
        gemms = [_plan(g) for g in node_gemms(design, graph, name, nets)]
        if not gemms:
            raise RlhlsError(f"AIE emission: node '{name}' computes no matrix product")
        sub = _graph_of(name, gemms)
        node_ctx.append({"name": name, "cname": _cname(name), "gemms": gemms, **sub,
                         "summary": "; ".join(g.what for g in gemms)})
    n_tiles = sum(len(n["kernels"]) for n in node_ctx)
    n_plio_in = sum(len(n["inputs"]) for n in node_ctx)
    n_plio_out = sum(len(n["outputs"]) for n in node_ctx)
    ctx = {"design": design, "batch": graph.batch, "nodes": node_ctx, "ratio": RUNTIME_RATIO,
           "plio_width": PLIO_WIDTH, "pl_freq": design.clocks_mhz.get("PL", 300.0),
           "platform": f"xilinx_{design.device}_base_202420_1", "tiles": n_tiles}
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
    manifest = {
        "design": design.name, "batch": graph.batch, "device": design.device,
        "order": "acc = bf16 bias (or +0); for k in 0..K-1: acc = fp32(acc + fp32(a*b)); out = bf16 RNE; "
                 "K padding -0.0 in A, +0.0 in B; K chunks chained by cascade in k order",
        "mmul": list(MMUL_SHAPE), "tile_buffer_bytes": TILE_BUFFER_BYTES,
        "tiles": n_tiles, "plio_inputs": n_plio_in, "plio_outputs": n_plio_out,
        "nodes": [{"name": n["name"], "cname": n["cname"],
                   "gemms": [dict(asdict(g), kernels=g.kernels) for g in n["gemms"]],
                   "plio_inputs": [p["name"] for p in n["inputs"]],
                   "plio_outputs": [p["name"] for p in n["outputs"]]} for n in node_ctx],
    }
    files["manifest.json"] = json.dumps(manifest, indent=1) + "\n"
    return _write_folder(Path(out_dir) / "aie", files)


def _write_folder(target: Path, files: dict) -> list[Path]:
    """Build the folder beside the target, then swap it in (no half-written aie/)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".aie.tmp", dir=target.parent))
    try:
        for rel, text in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        old = None
        if target.exists():
            old = target.with_name(f".aie.old{os.getpid()}")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [target / rel for rel in files]


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
    pad = FP32.quantize(np.float64(-0.0) * np.float64(0.0))
    for _ in range(k_pad):
        acc = FP32.quantize(acc + pad)
    return BF16.quantize(acc)


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    return (np.asarray(a, dtype=np.float64).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _from_bits(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


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


def _pad(a, rows, cols, fill):
    out = np.full((rows, cols), fill)
    out[: a.shape[0], : a.shape[1]] = a
    return out


def _inputs_blob(g: dict, A, B, bias) -> bytes:
    """Chunks in the harness's order: gemm -> mi -> ni -> ki: A(mi,ki), B(ki,ni), [bias(ni) at ki=0]."""
    mc, kc, nc = g["mc"], g["kc"], g["nc"]
    Ap = _pad(A, g["grid_m"] * mc, g["grid_k"] * kc, -0.0)  # K padding must be -0.0 (see docstring)
    Bp = _pad(B, g["grid_k"] * kc, g["grid_n"] * nc, 0.0)
    bp = _pad(bias[None, :], 1, g["grid_n"] * nc, 0.0)[0] if bias is not None else None
    parts = []
    for mi in range(g["grid_m"]):
        for ni in range(g["grid_n"]):
            for ki in range(g["grid_k"]):
                a = Ap[mi * mc:(mi + 1) * mc, ki * kc:(ki + 1) * kc]
                bb = Bp[ki * kc:(ki + 1) * kc, ni * nc:(ni + 1) * nc]
                parts.append(_bf16_bits(a.T if g["at"] else a).ravel())
                parts.append(_bf16_bits(bb.T if g["bt"] else bb).ravel())
                if bp is not None and ki == 0:
                    parts.append(_bf16_bits(bp[ni * nc:(ni + 1) * nc]))
    return np.concatenate(parts).astype("<u2").tobytes()


def _assemble(g: dict, words: np.ndarray) -> np.ndarray:
    mc, nc = g["mc"], g["nc"]
    C = np.zeros((g["grid_m"] * mc, g["grid_n"] * nc), dtype=np.uint16)
    pos = 0
    for mi in range(g["grid_m"]):
        for ni in range(g["grid_n"]):
            C[mi * mc:(mi + 1) * mc, ni * nc:(ni + 1) * nc] = words[pos:pos + mc * nc].reshape(mc, nc)
            pos += mc * nc
    return C[: g["M"], : g["N"]]


def _render_harness(node: dict) -> str:
    return _env().get_template("harness.cpp.j2").render(node=node)


def check_aie(out_dir, *, seed: int = 0, cache_dir=None) -> list[dict]:
    """Compile every emitted node's kernels with g++ against the shim, run them on random bf16 data
    and compare with ``aie_dense_reference`` bit for bit.

    Returns one dict per kernel function: {'node', 'kernel', 'shape' (M, K, N), 'chunk', 'grid',
    'passed', 'mismatches', 'max_abs_err', 'detail'}. Build products go to ``out_dir/aie/shim_test/``
    (or ``cache_dir``), cached by content hash.
    """
    from rlhls.flow.toolchain import compile_cpp

    aie = Path(out_dir) / "aie"
    mpath = aie / "manifest.json"
    if not mpath.is_file():
        raise RlhlsError(f"check_aie: {mpath} not found (run emit_aie first)")
    manifest = json.loads(mpath.read_text())
    work = Path(cache_dir) if cache_dir is not None else aie / "shim_test"
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    results = []
    for node in manifest["nodes"]:
        cname = node["cname"]
        src = work / f"{cname}_harness.cpp"
        text = _render_harness(node)
        if not src.is_file() or src.read_text() != text:
            src.write_text(text)
        exe = compile_cpp([aie / "kernels" / f"{cname}.cc", src], work / f"{cname}_harness",
                          include_dirs=[shim_dir(), aie / "kernels"])
        data, refs = [], []
        for g in node["gemms"]:
            A, B = order_sensitive_operands(rng, g["M"], g["K"], g["N"])
            bias = random_bf16(rng, (g["N"],)) if g["bias"] else None
            data.append(_inputs_blob(g, A, B, bias))
            refs.append(aie_dense_reference(A, B, bias, k_pad=g["grid_k"] * g["kc"] - g["K"]))
        fin, fout = work / f"{cname}.in.bin", work / f"{cname}.out.bin"
        fin.write_bytes(b"".join(data))
        run = subprocess.run([str(exe), str(fin), str(fout)], capture_output=True, text=True, check=False)
        words = np.frombuffer(fout.read_bytes(), dtype="<u2") if run.returncode == 0 and fout.is_file() else None
        pos = 0
        for g, ref in zip(node["gemms"], refs):
            r = {"node": node["name"], "kernel": g["fn"], "shape": (g["M"], g["K"], g["N"]),
                 "chunk": (g["mc"], g["kc"], g["nc"]), "grid": (g["grid_m"], g["grid_k"], g["grid_n"])}
            n = g["grid_m"] * g["grid_n"] * g["mc"] * g["nc"]
            if words is None or words.size < pos + n:
                r.update(passed=False, mismatches=None, max_abs_err=None,
                         detail=f"harness failed (exit {run.returncode}): {(run.stderr or run.stdout).strip()[:300]}")
            else:
                got = _assemble(g, words[pos:pos + n])
                want = _bf16_bits(ref)
                bad = int(np.count_nonzero(got != want))
                err = float(np.nanmax(np.abs(_from_bits(got) - ref))) if ref.size else 0.0
                r.update(passed=bad == 0, mismatches=bad, max_abs_err=err,
                         detail="bit-exact" if bad == 0 else f"{bad} of {want.size} outputs differ")
            pos += n
            results.append(r)
    return results
