"""The AIE matrix multiply (AP-DRL §II-B, §IV-A/D): C = A . B [+ bias] on AI Engine tiles in
bf16 with fp32 accumulation, the layers a plan puts on the AIE (forward, target forward, and a
backward's input and weight gradients).

Arithmetic (bit for bit what the AIE kernel sources compute under the shim of
``vitis/aie_shim``; flow/aie.py ``aie_dense_reference``): ``acc = bias (or +0); for k in order:
acc = fp32(acc + fp32(a*b)); out = bf16(acc)``, which is ``arith.dense`` with storage bf16 and
accumulator fp32. Its C++ binding is not an HLS top: ``flow/aie.py`` emits the node's ADF
kernels and graph (``emit_aie``) and checks them under g++ (``check_aie``).

Cost: ``cost.aie_matmul`` on ``tiles`` tiles with ``plios`` PL<->AIE stream pairs; a node's
design points are 1, 4, 16, 64 tiles x 1, 2, 4, ... 32 stream pairs (at most two per tile and
the device's pairs), ``t<tiles>p<plios>``.
"""

from __future__ import annotations

import numpy as np

from ..arith import dense
from .base import Array, Kernel, Param, check_formats, finish_cost, get_dev

__all__ = ["MmAie", "AIE_TILE_POINTS", "AIE_PLIO_POINTS"]

AIE_TILE_POINTS = (1, 4, 16, 64)
AIE_PLIO_POINTS = (1, 2, 4, 8, 16, 32)


class MmAie(Kernel):
    name = "mm_aie"
    summary = "C = A @ B (+ bias) on AIE tiles: bf16 operands, fp32 accumulation in k order, bf16 result"
    source = "seed 003 (AP-DRL) §II-B, §IV-A, §IV-D: matrix multiplies on the AIE-ML in BF16"
    units = ("AIE",)
    implements = ("mm.fwd", "mm.bwd")
    generic = True
    params = (
        Param("n", "int", 8, "rows of A (batch, or im2col rows)", min=1),
        Param("k", "int", 16, "reduction length K", min=1),
        Param("m", "int", 16, "columns of B", min=1),
        Param("storage", "format", "bf16", "operand and result format (the AIE-ML computes bf16)"),
        Param("acc", "format", "fp32", "accumulator format"),
        Param("tiles", "int", 1, "AIE tiles", min=1),
        Param("plios", "int", 1, "PL<->AIE stream pairs (at most two per tile)", min=1),
    )
    inputs = ("a", "b", "bias")
    outputs = ("c",)
    # a layer's products; its bias gradient (a column sum) is the data mover's (the host model's)
    layer_ops = ("forward", "input_grad", "weight_grad")

    def op_sizes(self, op, **arrays):
        a, b = self._operands(op, **arrays)
        return {"n": a.shape[0], "k": a.shape[1], "m": b.shape[1]}

    @staticmethod
    def _operands(op, x=None, w=None, b=None, dy=None):
        if op == "forward":
            return x, w
        return (dy, w.T) if op == "input_grad" else (x.T, dy)

    def run_op(self, op, backend, p, **arrays):
        a, b = self._operands(op, **arrays)
        bias = arrays.get("b") if op == "forward" else None
        c = backend.call(self.name, p, a=a, b=b, bias=np.zeros(b.shape[1]) if bias is None else bias)["c"]
        return (c, None) if op == "weight_grad" else c

    def validate(self, p):
        fm = check_formats(self.name, p)
        if str(fm["storage"]) != "bf16" or str(fm["acc"]) != "fp32":
            raise self._err(f"formats storage={p['storage']}, acc={p['acc']}: the AIE kernel computes bf16 with "
                            "fp32 accumulation (expected storage=bf16, acc=fp32)")
        if p["plios"] > 2 * p["tiles"]:
            raise self._err(f"parameter 'plios' = {p['plios']} must be <= 2 x tiles = {2 * p['tiles']}")

    def spec_params(self, spec):
        return {**spec.params, "storage": spec.storage, "acc": spec.acc}

    def node_params(self, node, ctx):
        rows, k, m = ctx.dims(node)
        return {"n": rows, "k": k, "m": m}

    def node_points(self, node, ctx, unit):
        from . import cost as C

        n_eff, k, m = ctx.gemm(node)
        fmt, _ = ctx.unit_formats("AIE")
        cap = ctx.device.units["AIE"].resources["aie_tiles"].value
        pcap = C.aie_plio_pairs(ctx.device)
        return [(f"t{t}p{q}", C.aie_matmul(n_eff, k, m, fmt, ctx.device, tiles=t, plios=q))
                for t in AIE_TILE_POINTS for q in AIE_PLIO_POINTS if t <= cap and q <= min(2 * t, pcap)]

    def arrays(self, p):
        n, k, m = p["n"], p["k"], p["m"]
        return ([Array("a", (n, k), "storage"), Array("b", (k, m), "storage"), Array("bias", (m,), "storage")],
                [Array("c", (n, m), "storage")])

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        fm = self.formats(p)
        s = fm["storage"]
        return {"c": dense(a["a"], a["b"], a["bias"], in_fmt=s, w_fmt=s, acc_fmt=fm["acc"], out_fmt=s)}

    def random_inputs(self, p, rng):
        s = self.formats(p)["storage"]
        return {"a": s.quantize(rng.standard_normal((p["n"], p["k"])) * 0.5),
                "b": s.quantize(rng.standard_normal((p["k"], p["m"])) * 0.5),
                "bias": s.quantize(rng.standard_normal(p["m"]) * 0.5)}

    def cost(self, p, unit="AIE", device=None):
        from . import cost as C

        if unit != "AIE":
            raise self._err(f"unit {unit!r}: the AIE matrix multiply runs on the AIE")
        dev = get_dev(device or "vek280")
        fm = self.formats(p)
        c = C.aie_matmul(p["n"], p["k"], p["m"], fm["storage"], dev, tiles=p["tiles"], plios=p["plios"])
        out = finish_cost(self.name, c, memory_bytes=int(c["memory_bytes"]))
        out["plio"] = c["plio"]
        return out


