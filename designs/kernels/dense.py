"""Dense layer kernels of the training step: forward, input gradient, weight (and bias) gradient.

Shapes (row-major, ``W`` is (K, M) as in ``network.Dense``): x (N, K), W (K, M), b (M,),
dy (N, M). ``storage`` is the format of every array in and out, ``acc`` the accumulator.
The arithmetic is ``designs.arith.dense`` (bit for bit what the C++ does):

- ``dense_forward``   y  = S(A(b) + sum_k A(x[n,k] * W[k,m]))              k = 0..K-1 in order
- ``dense_backward``  dx = S(0 + sum_m A(dy[n,m] * W[k,m]))  = dense(dy, W.T)  m in order
- ``weight_gradient`` dW = S(0 + sum_n A(x[n,k] * dy[n,m]))  = dense(x.T, dy)  n in order
                      db = S(0 + sum_n A(dy[n,m]))            (network._sum_rows)

where every ``+`` is rounded to A (ap_fixed assignment / IEEE RNE). Parallelism: ``pf``
independent accumulators (the output dimension the C++ unrolls: M, K and M respectively), so
the reduction order, and with it every bit, does not depend on pf; ``ii`` is the PIPELINE
initiation interval of the MAC loop.

Runtime rows: parameter ``n`` is N_MAX; the HLS top takes the row count (batch, or im2col rows
of a lowered Conv2d) as the ``s_axilite`` scalar ``n`` (1 <= n <= N_MAX, loop_tripcount max
N_MAX), so x / dy / y / dx have n rows at run time; W and b (and dW, db) keep their shapes.
"""

from __future__ import annotations

import math

import numpy as np

from ..arith import dense
from .base import Array, Kernel, Param, check_formats, finish_cost, get_dev, op

__all__ = ["DenseForward", "DenseBackward", "WeightGradient", "gemm_points", "PL_MM_POINTS"]


def _common_params(pf_doc):
    return (
        Param("n", "int", 8, "maximum batch rows N_MAX (the top takes n <= N_MAX at run time)", min=1),
        Param("k", "int", 16, "input features K", min=1),
        Param("m", "int", 16, "output features M", min=1),
        Param("storage", "format", "fixed<16,6,RND,SAT>", "format of inputs, weights, outputs"),
        Param("acc", "format", "fixed<32,12,RND,SAT>", "accumulator format"),
        Param("pf", "int", 1, pf_doc, min=1),
        Param("ii", "int", 1, "PIPELINE initiation interval of the MAC loop", min=1),
    )


def _rand(fmt, shape, rng, scale=0.5):
    return fmt.quantize(rng.standard_normal(shape) * scale)


def _store_bytes(p, fm, *names_sizes):
    return sum(int(np.ceil(fm["storage"].bits / 8)) * s for s in names_sizes)


# Design points of a matrix-multiply node on the PL (AP-DRL §IV-B, Table I: TAPCA's loop unroll
# in exponential progression): MAC lanes, bounded by the unit's DSPs and the layer's k x m
PL_MM_POINTS = (1, 4, 16, 64, 256, 1024)


class _DenseBase(Kernel):
    source = "000/001/002/004: dense layers of the policy/value networks, forward and backward"
    pf_dim = "m"
    rows_param = "n"
    generic = True

    # -- a training-graph node
    def node_params(self, node, ctx):
        rows, k, m = ctx.dims(node)
        storage, acc = ctx.formats(self.name, "PL")
        p = {"n": rows, "k": k, "m": m, "storage": storage, "acc": acc}
        # the plan's design point (``pf<N>`` MAC lanes), else the design's parallelism; at most the
        # dimension this kernel unrolls
        pf = ctx.point_pf(node) or ctx.spec_params(self).get("pf")
        if pf is not None:
            p["pf"] = min(int(pf), p[self.pf_dim])
        return p

    def node_points(self, node, ctx, unit):
        return gemm_points(node, ctx)


    def validate(self, p):
        check_formats(self.name, p)
        self.check_pf(p, self.pf_dim)

    def _mm_cost(self, p, unit, device, n, k, m, extra_bytes=0):
        from . import cost as C
        dev = get_dev(device)
        fm = self.formats(p)
        nbytes = _store_bytes(p, fm, n * k, k * m, n * m) + extra_bytes
        if unit == "PL":
            c = C.pl_matmul(n, k, m, fm["storage"], dev, pf=p["pf"], ii=p["ii"], acc=fm["acc"])
        elif unit == "PS":
            c = C.ps_cost(2.0 * n * k * m, dev, nbytes=nbytes)
        elif unit == "AIE":
            c = C.aie_matmul(n, k, m, fm["storage"], dev)
        else:
            raise self._err(f"unknown unit {unit!r} (expected PS, PL or AIE)")
        return finish_cost(self.name, c, memory_bytes=nbytes)


def gemm_points(node, ctx) -> list[tuple[str, dict]]:
    """A matrix-multiply node on the PL (a forward, or a backward's input and weight gradients
    together) as one GEMM of its MACs (``ctx.gemm``) at MAC-lane design points ``pf1`` ... ``pf1024``,
    in the PL's formats."""
    from . import cost as C

    n_eff, k, m = ctx.gemm(node)
    fmt, acc = ctx.unit_formats("PL")
    pl = ctx.device.units["PL"]
    max_lanes = pl.resources["dsp"].value / C.dsp_per_mac(ctx.device, fmt) if "dsp" in pl.resources else math.inf
    clock = ctx.clock_mhz("PL")
    return [(f"pf{pf}", C.pl_matmul(n_eff, k, m, fmt, ctx.device, pf=pf, clock_mhz=clock, acc=acc))
            for pf in PL_MM_POINTS if pf <= max_lanes and (pf == 1 or pf <= k * m)]


class DenseForward(_DenseBase):
    name = "dense_forward"
    summary = "y = x @ W + b with products and sums rounded to acc, output to storage"
    implements = ("mm.fwd",)
    component_suffix = "fwd"
    layer_ops = ("forward",)

    def op_sizes(self, op, x, w, b=None):
        return {"n": x.shape[0], "k": x.shape[1], "m": w.shape[1]}

    def run_op(self, op, backend, p, x, w, b=None):
        return backend.call(self.name, p, x=x, w=w, b=np.zeros(w.shape[1]) if b is None else b)["y"]
    params = _common_params("parallel MACs per cycle (output columns M unrolled)")
    inputs = ("x", "w", "b")
    outputs = ("y",)
    template = "dense_forward.cpp.j2"

    def arrays(self, p):
        n, k, m = p["n"], p["k"], p["m"]
        return ([Array("x", (n, k), "storage", True), Array("w", (k, m), "storage"), Array("b", (m,), "storage")],
                [Array("y", (n, m), "storage", True)])

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        fm = self.formats(p)
        s = fm["storage"]
        return {"y": dense(a["x"], a["w"], a["b"], in_fmt=s, w_fmt=s, acc_fmt=fm["acc"], out_fmt=s)}

    def random_inputs(self, p, rng, rows=None):
        s = self.formats(p)["storage"]
        return {"x": _rand(s, (rows or p["n"], p["k"]), rng), "w": _rand(s, (p["k"], p["m"]), rng),
                "b": _rand(s, (p["m"],), rng)}

    def cost(self, p, unit="PL", device=None):
        return self._mm_cost(p, unit, device, p["n"], p["k"], p["m"])


class DenseBackward(_DenseBase):
    name = "dense_backward"
    summary = "input gradient dx = dy @ W.T (reduction over M), formats as dense_forward"
    params = _common_params("parallel MACs per cycle (input columns K unrolled)")
    inputs = ("dy", "w")
    outputs = ("dx",)
    template = "dense_backward.cpp.j2"
    pf_dim = "k"
    implements = ("mm.bwd",)
    component_suffix = "dx"
    layer_ops = ("input_grad",)

    def op_sizes(self, op, dy, w):
        return {"n": dy.shape[0], "k": w.shape[0], "m": w.shape[1]}

    def run_op(self, op, backend, p, dy, w):
        return backend.call(self.name, p, dy=dy, w=w)["dx"]

    def node_params(self, node, ctx):
        return super().node_params(node, ctx) if ctx.needs_input_grad(node) else None

    def arrays(self, p):
        n, k, m = p["n"], p["k"], p["m"]
        return ([Array("dy", (n, m), "storage", True), Array("w", (k, m), "storage")],
                [Array("dx", (n, k), "storage", True)])

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        fm = self.formats(p)
        s = fm["storage"]
        return {"dx": dense(a["dy"], a["w"].T, in_fmt=s, w_fmt=s, acc_fmt=fm["acc"], out_fmt=s)}

    def random_inputs(self, p, rng, rows=None):
        s = self.formats(p)["storage"]
        return {"dy": _rand(s, (rows or p["n"], p["m"]), rng), "w": _rand(s, (p["k"], p["m"]), rng)}

    def cost(self, p, unit="PL", device=None):
        return self._mm_cost(p, unit, device, p["n"], p["m"], p["k"])


class WeightGradient(_DenseBase):
    name = "weight_gradient"
    summary = "dW = x.T @ dy and db = sum over rows of dy (reduction over the batch N)"
    params = _common_params("parallel MACs per cycle (output columns M unrolled)")
    inputs = ("x", "dy")
    outputs = ("dw", "db")
    template = "weight_gradient.cpp.j2"
    implements = ("mm.bwd",)
    component_suffix = "dw"
    layer_ops = ("weight_grad",)

    def op_sizes(self, op, x, dy):
        return {"n": x.shape[0], "k": x.shape[1], "m": dy.shape[1]}

    def run_op(self, op, backend, p, x, dy):
        out = backend.call(self.name, p, x=x, dy=dy)
        return out["dw"], out["db"]

    def node_params(self, node, ctx):
        # an instance running another's weights (DDPG's critic@pi) computes no weight gradient
        return None if "@" in node.instance else super().node_params(node, ctx)

    def arrays(self, p):
        n, k, m = p["n"], p["k"], p["m"]
        return ([Array("x", (n, k), "storage", True), Array("dy", (n, m), "storage", True)],
                [Array("dw", (k, m), "storage"), Array("db", (m,), "storage")])

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        fm = self.formats(p)
        s, acc = fm["storage"], fm["acc"]
        dw = dense(a["x"].T, a["dy"], in_fmt=s, w_fmt=s, acc_fmt=acc, out_fmt=s)
        dy = s.quantize(a["dy"])
        tot = np.zeros(p["m"])
        for row in dy:  # sequential sum in acc, as network._sum_rows and the C++
            tot = op(acc, "add", tot, acc, op(acc, "cast", row, s), acc)
        return {"dw": dw, "db": s.quantize(tot)}

    def random_inputs(self, p, rng, rows=None):
        s = self.formats(p)["storage"]
        n = rows or p["n"]
        return {"x": _rand(s, (n, p["k"]), rng), "dy": _rand(s, (n, p["m"]), rng)}

    def cost(self, p, unit="PL", device=None):
        fm = self.formats(p)
        return self._mm_cost(p, unit, device, p["k"], p["n"], p["m"],
                             extra_bytes=_store_bytes(p, fm, p["m"]))
