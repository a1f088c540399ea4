"""CPP's FVP unit (seed 001 §III-C/D/E, Fig. 1, Fig. 2, Tables I/II): the Fisher-vector product
of TRPO's diagonal-Gaussian tanh-MLP policy by Customised Pearlmutter Propagation.

The network (parameter ``layers`` = [n_0, ..., n_L]) maps an observation to the mean mu of an
m = n_L dimensional Gaussian; hidden layers are tanh, the output layer is linear; log-std is a
separate parameter vector. With the KL of eq. 16-17 as loss, every first derivative is zero
(eq. 18), so one sample's Hessian-vector product needs only the Combined Forward Propagation
(eq. 12 and eq. 14 side by side), the DIFF module (eq. 20) and the Pearlmutter Back
Propagation (eq. 19); the log-std block is eq. 21.

Arrays (every parameter vector in one layout, ``layout(layers)``: for l = 1..L the weights W_l
(n_{l-1} x n_l, row-major: y = x @ W + b as ``network.Dense``) then b_l; log-std last)::

    obs     (n, n_0)   samples, n <= N_MAX = parameter ``samples`` (the top's runtime row count)
    theta   (P,)       network parameters (W_1, b_1, ..., W_L, b_L)
    v       (P + m,)   the CG direction: V_l, v_b,l per layer, then v_logstd
    inv_var (m,)       1 / sigma^2 = exp(-2 logstd) (the host computes it once per call)
    fvp     (P + m,)   sum over the n samples of the per-sample FVP (accumulator format)

The hardware accumulates; the host averages and adds CG damping as the seed's C CG solver does:
``host_fvp(fvp, v, n, damping) = fvp / n + damping * v``.

Semantics (fixed point; S = ``storage``, A = ``acc``; S(.) / A(.) one ap_fixed assignment, i.e.
quantization then overflow of the exact value; the numpy model and ``vitis/include/rlhls_fvp.h``
compute exactly this). Inputs are rounded to S. Per sample, with y_0 = obs row and R{y_0} = 0::

    dot_p(x, W, init)[j] = A-recursion over the blocking of the input (p = its parallelism,
        c = ceil(n_in / p), input i = k*c + t sits in block k at step t):
        acc = A(init_j);  for t = 0..c-1:  acc = A(acc + sum_k A(x_i * W_ij))   (sum_k exact)
    forward, l = 1..L (eq. 12, 14):
        x_l  = S(dot_p(y_{l-1}, W_l, b_l))
        Rx_l = S(dot_p over the pairs (R{y_{l-1}}, W_l) and (y_{l-1}, V_l), init v_b,l)
               (both products of a term rounded to A, the 2p of a step summed exactly; l = 1 has
               no R{y_0} W_1 term: R{y_0} = 0 and the unit has no such multipliers)
        hidden: y_l = tanh_S(x_l), d_l = S(1 - y_l*y_l) (= sigma'), R{y_l} = S(Rx_l * d_l)
        output: mu = x_L, R{mu} = Rx_L
    DIFF (eq. 20): r_L = S(R{mu} * inv_var)
    backward, l = L..1 (eq. 19): r_l = S(d_l * R{dE/dy_l}) for hidden l, and
        R{dE/dy_{l-1}} = S(dot_p(r_l, W_l^T, 0))       (p = the parallelism of n_l; l > 1 only)
        F_W,l[i,j] = A(F + A(y_{l-1,i} * r_l,j)),   F_b,l[j] = A(F + A(r_l,j))   (sample by sample)
    log-std (eq. 21): F_ls = A(F + A(v_ls + v_ls)) per sample

tanh_S is a table of T[k] = S(tanh(k 2^-TB)), k = 0 .. 2^(I-1+TB)+1 (TB = ``tanh_bits``, I the
integer bits of S; C library ``tanh`` on both sides) with linear interpolation on |x|:
k, f = the bits of |x| above / below 2^-TB, y = S(T[k] + f 2^-(F-TB) (T[k+1] - T[k])), odd
symmetry (``tanh_fixed``). With TB = 10 on fixed<27,4> its error is below 2 LSBs: interpolation
(2^-20 |tanh''| / 8 < 0.8 LSB), the table's and the result's roundings.

The sums over a step are exact and the accumulator adds them in step order, so Type A and Type B
blocks (same blocking, other loop order) give the same bits; the blocking decides where the
accumulator may saturate. ``fp64=True`` is the float64 reference path: the same propagation
with no rounding and an exact tanh (vectorised over the samples with BLAS). It is the exact
Hessian-vector product of the KL summed over the samples, i.e. of eq. 6-7 times n (tested
against finite differences of the KL gradient); it has no C++.

Architecture (Fig. 1, Fig. 2) and cycle model (``schedule``, ``cost``)
---------------------------------------------------------------------
Parallelism [p_0, ..., p_L] blocks every vector: n_l in p_l blocks of c_l = ceil(n_l / p_l)
steps (stream padding fills the last block with zeros). Layer l's blocks run p_{l-1} x p_l MACs
per cycle over c_{l-1} x c_l cycles. Odd layers: Type A forward (inner loop over the input, output
step u final after its inner loop) and Type B backward (outer loop over the input, partial
results buffered, outputs final in the last inner loop); even layers the reverse, so the blocks
cascade A-B-A-B. Timing, per sample (a handoff costs no cycle; operator latency is the fill
term below): a Type A block consumes input step t no earlier than it arrives, one step per cycle
in its first outer iteration, and its output step u is ready at the end of outer iteration u; a
Type B block starts outer iteration t once input step t is ready and streams output u in cycle u
of its last outer iteration, where the next Type A consumes it. The samples enter layer 1 p_0
values per cycle. The backward cascade (L..1) starts from the DIFF outputs. Coarse-grained
pipeline (§III-E): the forward of sample i+1 starts when that of sample i ends, overlapping the
backward of sample i, so one sample takes II = max(forward makespan, backward span) cycles.
Per FVP call::

    cycles_call = (P + m)            theta and v in, side by side, one value each per cycle
                + (n - 1) II + T_s   n samples, T_s = one sample's forward + backward latency
                + depth              operator fill (multiplier 3, adder tree, accumulator 1 per
                                     block, tanh 4, elementwise multiply 3)
                + (P + m)            the accumulated FVP out, one value per cycle
    cycles = iterations * cycles_call,   latency_us = cycles / clock_mhz

For Ant (111-64-32-8, [16,8,5,8]): c = [7,8,7,1], II = 56 + 7 = 63; Humanoid (376-128-64-17,
[48,4,8,2]): c = [8,32,8,9], II = 256 + 72 = 328. With 50000 samples and 10 CG iterations at
200 MHz: 0.1585 s and 0.8258 s against Table II's 0.158 s and 0.823 s (+0.3 %, +0.3 %). The
seed's figures fit n II + P per call to their three printed digits (one parameter stream); we
also count the FVP read-back. The launch overhead is left out, as the seed's "Model" column does (its measured
0.182 s / 0.852 s include it).

Resources
---------
Multipliers (each ``dsp_per_mac(device, storage)`` DSPs: one Stratix V DSP block per 27x27):
forward of layer l: W y and V y (2 M_l, M_l = p_{l-1} p_l), W R{y} (M_l, l > 1); backward: y r
(M_l) and W^T r (M_l, l > 1); per hidden lane (p_l of them): sigma' (y*y), R{y}, r, and the tanh
unit; per output lane the DIFF multiply. The seed does not describe its tanh unit; Table I implies
about 42 DSP blocks per lane (``SEED_TANH_DSP``, the one figure fitted: Ant exact, Humanoid
predicted 1358 vs 1368, -0.7 %). ``act_unit='table'`` counts this kernel's own unit instead (one
multiplier and its ROM).

Block RAM (M20K blocks of 512x40 / 1Kx20 / 2Kx10 / 4Kx5 / 8Kx2 / 16Kx1, each bank its cheapest
mode; other devices: 36 Kb BRAMs through ``cost.bram36_for``): per layer W (forward copy), V, the
backward copy of W (l > 1: a second reader of the same words), the FVP accumulators F (A wide),
b, v_b and F_b, the Type B partial sums; per sample and ping-pong (the coarse pipeline) the
inputs y_{l-1} the backward needs and sigma'. The seed's tanh unit adds ``SEED_TANH_M20K`` per
lane (fitted on both rows: Ant 1825 vs 1846, -1.1 %; Humanoid 1916 vs 1888, +1.5 %).
``bram36`` is the M20K bits in 36 Kb units, as ``partition.profile.device_capacity`` counts them.

Logic and FF are not derivable from the seed. They are estimated in proportion to the MAC-array
multipliers (accumulator adders, operand registers and the stream padding muxes scale with
them): ``ALM_PER_MAC`` and ``FF_PER_MAC`` are one ratio each, fitted on both Table I rows (each
row within 0.7 %); ``lut`` = 2 ALMs (an ALM is two adaptive LUTs, as the device capacity counts).

Without a device the cost is on the seed's ``max4-5sgsd8`` (Stratix V 5SGSD8, 200 MHz).

Graph hooks: CPP's training graph has per-layer nodes ``policy.<layer>.fvp_fwd`` / ``fvp_bwd``
(activation layers included); they are one unit. ``node_params`` gives every node the same
parameters (one component in the build): the design's KernelSpec (layers, parallelism, formats),
the graph's batch as ``samples``, ``cg_iters`` as ``iterations``, ``cg_damping`` as ``damping``
and the PL clock. ``node_points`` splits the unit's cycles over the nodes in proportion to their
FLOPs (the last node takes the rounding remainder, so the rows sum to the unit's time exactly);
the first fvp node of the graph carries the unit's resources, the others zero, so the
partitioner counts them once.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..formats import FixedFormat, _round_right, parse_format, parse_format_as
from .base import Array, Kernel, Param, get_dev

__all__ = ["FvpKernel", "layout", "pack", "unpack", "host_fvp", "tanh_table", "tanh_fixed", "schedule", "inventory",
           "SEED_TANH_DSP", "SEED_TANH_M20K", "ALM_PER_MAC", "FF_PER_MAC"]

SEED_DEVICE = "max4-5sgsd8"
# Fitted on Table I (module docstring): the seed's tanh unit per lane, logic and FF per MAC.
SEED_TANH_DSP = 42
SEED_TANH_M20K = 55
ALM_PER_MAC = 170.8
FF_PER_MAC = 328.6
# Operator latencies (cycles) of the fill term: multiplier, accumulator add, tanh unit.
MUL_DEPTH, ACC_DEPTH, TANH_DEPTH = 3, 1, 4
M20K_MODES = ((512, 40), (1024, 20), (2048, 10), (4096, 5), (8192, 2), (16384, 1))
M20K_BITS = 20 * 1024
BRAM36_BITS = 36 * 1024
MAX_TANH_ENTRIES = 1 << 20
CHUNK = 1 << 18  # products formed at once (bounds temporary memory, stays in cache)


# ----------------------------------------------------------------------------- parameter layout

def layout(layers) -> dict:
    """Offsets of the flat parameter vector: ``{'w': [(offset, shape)], 'b': [(offset, n)],
    'P': network parameters, 'm': log-std entries}``."""
    w, b, off = [], [], 0
    for n_in, n_out in zip(layers[:-1], layers[1:]):
        w.append((off, (n_in, n_out)))
        off += n_in * n_out
        b.append((off, n_out))
        off += n_out
    return {"w": w, "b": b, "P": off, "m": int(layers[-1])}


def pack(weights, biases, logstd=None) -> np.ndarray:
    """[W_1, b_1, ..., W_L, b_L (, logstd)] as one float64 vector in ``layout`` order."""
    parts = []
    for W, b in zip(weights, biases):
        parts += [np.asarray(W, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()]
    if logstd is not None:
        parts.append(np.asarray(logstd, dtype=np.float64).ravel())
    return np.concatenate(parts)


def unpack(vec, layers):
    """(weights, biases, logstd or None) of a vector in ``layout`` order (P or P + m long)."""
    lay = layout(layers)
    vec = np.asarray(vec)
    ws = [vec[o:o + s[0] * s[1]].reshape(s) for o, s in lay["w"]]
    bs = [vec[o:o + n] for o, n in lay["b"]]
    ls = vec[lay["P"]:lay["P"] + lay["m"]] if vec.size > lay["P"] else None
    return ws, bs, ls


def host_fvp(fvp_sum, v, n: int, damping: float = 0.0) -> np.ndarray:
    """What the host hands CG: the hardware's sum averaged over n samples, plus damping * v."""
    return np.asarray(fvp_sum, dtype=np.float64) / n + damping * np.asarray(v, dtype=np.float64)


# ----------------------------------------------------------------------------- tanh unit

@functools.lru_cache(maxsize=1)
def _libm_tanh():
    """The C library's double tanh (what std::tanh calls in the csim), or numpy's."""
    try:
        import ctypes
        import ctypes.util

        f = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6").tanh
        f.restype, f.argtypes = ctypes.c_double, [ctypes.c_double]
        return f
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=16)
def tanh_table(storage: str, tanh_bits: int) -> np.ndarray:
    """int64 mantissas of T[k] = S(tanh(k 2^-TB)), k = 0 .. 2^(I-1+TB)+1 (read-only)."""
    S = parse_format_as(storage, FixedFormat)
    nt = (1 << (S.int_bits - 1 + tanh_bits)) + 2
    k = np.arange(nt, dtype=np.float64) * 2.0 ** -tanh_bits
    f = _libm_tanh()
    t = np.array([f(float(x)) for x in k]) if f is not None else np.tanh(k)
    out = S.quantize_mantissa(t)
    out.setflags(write=False)
    return out


def tanh_fixed(x, storage: str = "fixed<27,4,RND,SAT>", tanh_bits: int = 10) -> np.ndarray:
    """The unit's tanh of values x (rounded to S first), as float64."""
    S = parse_format_as(storage, FixedFormat)
    fx = _Fx(S, S, tanh_bits)
    return S.from_mantissa(fx.tanh(S.quantize_mantissa(np.asarray(x, dtype=np.float64))))


# ----------------------------------------------------------------------------- fixed-point model

class _Fx:
    """Mantissa arithmetic of the datapath (int64; storage W <= 31 keeps products exact)."""

    def __init__(self, S: FixedFormat, A: FixedFormat, tanh_bits: int):
        self.S, self.A, self.tb = S, A, tanh_bits
        self.fs, self.fa = S.frac_bits, A.frac_bits
        self.table = tanh_table(str(S), tanh_bits)
        self.amax = A.max_mantissa
        self.shift = 2 * self.fs - self.fa  # product -> A
        top = (1 << (2 * S.width - 2)) >> max(0, self.shift)
        # A(x * w) cannot overflow: round only (one int64 pass instead of a full cast) or, where A
        # has at least the product's fraction bits, shift left exactly
        self.fast_prod = self.shift > 0 and top + 1 <= self.amax
        self.shl_prod = self.shift <= 0 and top << -self.shift <= self.amax

    def fits(self, abs_sums) -> bool:
        """Every partial sum stays in A: float64 sums of |terms| (no int64 overflow), with a
        margin for their rounding."""
        return bool(np.all(abs_sums <= self.amax * (1 - 1e-9)))

    def s_of(self, m, frac):  # S(value of mantissa m at `frac` fractional bits)
        return self.S.cast_mantissa(m, frac)[0]

    def a_of(self, m, frac):
        return self.A.cast_mantissa(m, frac)[0]

    def prod_a(self, a, b):  # A(a * b), a and b in S
        if self.fast_prod:
            if self.A.quant == "RND":
                return (a * b + (1 << (self.shift - 1))) >> self.shift
            return _round_right(a * b, self.shift, self.A.quant)
        if self.shl_prod:
            return (a * b) << -self.shift
        return self.a_of(a * b, 2 * self.fs)

    def prod_bound(self, a, b) -> int:  # |A(a * b)| over all pairs, from the operand maxima
        big = int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0))
        return (big >> max(0, self.shift)) + 1 if self.shift > 0 else big << -self.shift

    def mul_s(self, a, b):  # S(a * b), a and b in S
        return self.s_of(a * b, 2 * self.fs)

    def tanh(self, x):
        sh = self.fs - self.tb
        a = np.abs(x)
        k = a >> sh
        f = a & ((1 << sh) - 1)
        t = self.table
        y = self.s_of((t[k] << sh) + f * (t[k + 1] - t[k]), 2 * self.fs - self.tb)
        return np.where(x < 0, -y, y)

    def dsigma(self, y):  # S(1 - y*y)
        return self.s_of((np.int64(1) << (2 * self.fs)) - y * y, 2 * self.fs)

    def dot(self, pairs, init, p: int):
        """A mantissas of dot_p (module docstring): pairs [(x (N, n_in), W (n_in, n_out))] of S
        mantissas sharing the input index, init (n_out,) A mantissas, blocking p of n_in."""
        n, n_in = pairs[0][0].shape
        n_out = pairs[0][1].shape[1]
        c = -(-n_in // p)
        out = np.empty((n, n_out), dtype=np.int64)
        step = max(1, CHUNK // max(1, n_in * n_out))
        init_max = int(np.abs(init).max(initial=0))
        for s0 in range(0, n, step):
            prods = None
            bound = init_max
            for x, w in pairs:
                xs = x[s0:s0 + step]
                q = self.prod_a(xs[:, :, None], w[None, :, :])
                prods = q if prods is None else prods + q
                bound += n_in * self.prod_bound(xs, w)
            assert prods is not None  # pairs is never empty
            if bound > self.amax and not self.fits(np.abs(init) + np.abs(prods).sum(axis=1, dtype=np.float64)):
                # a partial sum may leave A: the step recursion decides (blocking matters)
                pad = np.zeros((prods.shape[0], p * c, n_out), dtype=np.int64)
                pad[:, :n_in] = prods
                steps = pad.reshape(prods.shape[0], p, c, n_out).sum(axis=1)
                acc = np.broadcast_to(init, (prods.shape[0], n_out)).copy()
                for t in range(c):
                    acc = self.a_of(acc + steps[:, t], self.fa)
                out[s0:s0 + step] = acc
            else:  # no partial sum can leave A: any order is exact
                out[s0:s0 + step] = init + prods.sum(axis=1)
        return out

    def accumulate(self, F, q, bound=None):
        """F = A(F + q[s]) for each sample s in order; q (N, ...) A mantissas (|q| <= bound)."""
        fmax = int(np.abs(F).max(initial=0))
        if bound is not None and fmax + q.shape[0] * bound <= self.amax:
            return F + q.sum(axis=0)
        if self.fits(np.abs(F) + np.abs(q).sum(axis=0, dtype=np.float64)):
            return F + q.sum(axis=0)
        for row in q:
            F = self.a_of(F + row, self.fa)
        return F

    def outer_acc(self, F, y, r):
        """F = A(F + A(y_i r_j)) over the samples (y (N, n_in), r (N, n_out))."""
        step = max(1, CHUNK // max(1, F.size))
        for s0 in range(0, y.shape[0], step):
            ys, rs = y[s0:s0 + step], r[s0:s0 + step]
            F = self.accumulate(F, self.prod_a(ys[:, :, None], rs[:, None, :]), self.prod_bound(ys, rs))
        return F


def _model_fixed(p, obs, theta, v, inv_var) -> np.ndarray:
    S, A = parse_format_as(p["storage"], FixedFormat), parse_format_as(p["acc"], FixedFormat)
    fx = _Fx(S, A, p["tanh_bits"])
    dims, par = p["layers"], p["parallelism"]
    L = len(dims) - 1
    m_ = lambda x: S.quantize_mantissa(x)  # noqa: E731
    Ws, bs, _ = unpack(m_(theta), dims)
    Vs, vbs, vls = unpack(m_(v), dims)
    iv = m_(inv_var)
    y = m_(obs)
    n = y.shape[0]
    ys, ds = [y], []
    ry = None
    for l in range(L):
        x = fx.s_of(fx.dot([(y, Ws[l])], fx.a_of(bs[l], fx.fs), par[l]), fx.fa)
        pairs = [(y, Vs[l])] if ry is None else [(ry, Ws[l]), (y, Vs[l])]
        rx = fx.s_of(fx.dot(pairs, fx.a_of(vbs[l], fx.fs), par[l]), fx.fa)
        if l == L - 1:
            y, ry = x, rx
        else:
            y = fx.tanh(x)
            d = fx.dsigma(y)
            ry = fx.mul_s(rx, d)
            ys.append(y)
            ds.append(d)
    r = fx.mul_s(ry, iv[None, :])  # DIFF (eq. 20)
    lay = layout(dims)
    out = np.zeros(lay["P"] + dims[-1], dtype=np.int64)
    rdy = None  # R{dE/dy} of the layer above
    for l in range(L - 1, -1, -1):
        if l < L - 1:
            r = fx.mul_s(ds[l], rdy)
        F = fx.outer_acc(np.zeros(Ws[l].shape, dtype=np.int64), ys[l], r)
        Fb = fx.accumulate(np.zeros(dims[l + 1], dtype=np.int64), fx.a_of(r, fx.fs))
        o = lay["w"][l][0]
        out[o:o + F.size] = F.ravel()
        ob, nb = lay["b"][l]
        out[ob:ob + nb] = Fb
        if l > 0:
            rdy = fx.s_of(fx.dot([(r, Ws[l].T)], np.zeros(dims[l], dtype=np.int64), par[l + 1]), fx.fa)
    two_v = fx.a_of(vls + vls, fx.fs)  # eq. 21, once per sample
    out[lay["P"]:] = fx.accumulate(np.zeros(dims[-1], dtype=np.int64),
                                   np.broadcast_to(two_v, (n, dims[-1])))
    return A.from_mantissa(out)


def _model_fp64(p, obs, theta, v, inv_var) -> np.ndarray:
    dims = p["layers"]
    L = len(dims) - 1
    Ws, bs, _ = unpack(theta, dims)
    Vs, vbs, vls = unpack(v, dims)
    y = np.asarray(obs, dtype=np.float64)
    ys, ds = [y], []
    ry = np.zeros_like(y)
    for l in range(L):
        x = y @ Ws[l] + bs[l]
        rx = ry @ Ws[l] + y @ Vs[l] + vbs[l]
        if l == L - 1:
            y, ry = x, rx
        else:
            y = np.tanh(x)
            d = 1.0 - y * y
            ry = rx * d
            ys.append(y)
            ds.append(d)
    r = ry * inv_var[None, :]
    parts = [None] * (2 * L)
    rdy = None
    for l in range(L - 1, -1, -1):
        if l < L - 1:
            r = ds[l] * rdy
        parts[2 * l] = (ys[l].T @ r).ravel()
        parts[2 * l + 1] = r.sum(axis=0)
        if l > 0:
            rdy = r @ Ws[l].T
    n = y.shape[0]
    return np.concatenate(parts + [2.0 * n * vls])


# ----------------------------------------------------------------------------- cycle model

def _steps(p) -> list[int]:
    return [-(-n // q) for n, q in zip(p["layers"], p["parallelism"])]


def _block(kind: str, arr, c_in: int, c_out: int):
    """(start, end, output-step ready times) of a Type A / B block (module docstring timing)."""
    tau = 0
    if kind == "A":
        for t in range(c_in):
            tau = max(tau, arr[t]) + 1
        out = [tau + u * c_in for u in range(c_out)]
        return arr[0], out[-1], out
    last = 0
    for t in range(c_in):
        last = max(tau, arr[t])
        tau = last + c_out
    return arr[0], tau, [last + u for u in range(c_out)]


def schedule(p: dict) -> dict:
    """Per-sample timing of the A-B-A-B cascade (module docstring): block kinds and spans,
    forward makespan, backward span, sample interval II and one sample's latency."""
    c = _steps(p)
    L = len(c) - 1
    arr = list(range(c[0]))  # the sample streams in p_0 values per cycle
    fwd, bwd = [], []
    for l in range(1, L + 1):
        kind = "A" if l % 2 else "B"
        s, e, arr = _block(kind, arr, c[l - 1], c[l])
        fwd.append({"layer": l, "type": kind, "start": s, "end": e, "busy": c[l - 1] * c[l]})
    fp_end = max(b["end"] for b in fwd)
    bp_start = arr[0]
    for l in range(L, 0, -1):
        kind = "B" if l % 2 else "A"
        s, e, arr = _block(kind, arr, c[l], c[l - 1])
        bwd.append({"layer": l, "type": kind, "start": s, "end": e, "busy": c[l - 1] * c[l]})
    bp_end = max(b["end"] for b in bwd)
    ii = max(fp_end, bp_end - bp_start)
    return {"steps": c, "forward": fwd, "backward": bwd, "forward_cycles": fp_end,
            "backward_cycles": bp_end - bp_start, "ii": ii, "sample_latency": bp_end}


def _depth(p) -> int:
    """Operator fill of one call: per block multiplier + adder tree + accumulator, tanh units."""
    par = p["parallelism"]
    L = len(par) - 1
    blocks = sum(2 * (MUL_DEPTH + math.ceil(math.log2(2 * par[l])) + ACC_DEPTH) for l in range(L))
    return blocks + (L - 1) * (TANH_DEPTH + 2 * MUL_DEPTH) + MUL_DEPTH


# ----------------------------------------------------------------------------- resources

def _m20k(depth: int, width: int) -> int:
    return min(math.ceil(depth / d) * math.ceil(width / w) for d, w in M20K_MODES)


def inventory(p: dict) -> dict:
    """Multipliers ``{name: count}`` and memories ``[(name, banks, depth, width bits)]`` of the
    unit (module docstring)."""
    S, A = parse_format_as(p["storage"], FixedFormat), parse_format_as(p["acc"], FixedFormat)
    ws, wa = S.bits, A.bits
    par, c = p["parallelism"], _steps(p)
    L = len(par) - 1
    mults = {"forward W y, V y": 0, "forward W R{y}": 0, "backward y r": 0, "backward W^T r": 0,
             "sigma', R{y}, r (hidden lanes)": 0, "tanh (hidden lanes)": 0, "DIFF (output lanes)": par[-1]}
    mems = []
    seed_act = p["act_unit"] == "seed"
    for l in range(1, L + 1):
        M, D = par[l - 1] * par[l], c[l - 1] * c[l]
        mults["forward W y, V y"] += 2 * M
        mults["backward y r"] += M
        if l > 1:
            mults["forward W R{y}"] += M
            mults["backward W^T r"] += M
        mems += [(f"W{l}", M, D, ws), (f"V{l}", M, D, ws), (f"F{l}", M, D, wa),
                 (f"b{l}, vb{l}", 2 * par[l], c[l], ws), (f"Fb{l}", par[l], c[l], wa)]
        if l > 1:
            mems.append((f"W{l} (backward copy)", M, D, ws))
        if l % 2 == 0:  # Type B forward: x and R{x} partial sums
            mems.append((f"forward partial sums {l}", 2 * par[l], c[l], wa))
        elif l > 1:  # Type B backward with an input gradient
            mems.append((f"backward partial sums {l}", par[l - 1], c[l - 1], wa))
        mems.append((f"y{l - 1} (ping-pong)", 2 * par[l - 1], c[l - 1], ws))
        if l < L:
            mems.append((f"sigma'{l} (ping-pong)", 2 * par[l], c[l], ws))
            mults["sigma', R{y}, r (hidden lanes)"] += 3 * par[l]
            if seed_act:
                mults["tanh (hidden lanes)"] += SEED_TANH_DSP * par[l]
            else:
                mults["tanh (hidden lanes)"] += par[l]
                mems.append((f"tanh table {l}", par[l], (1 << (S.int_bits - 1 + p["tanh_bits"])) + 2, ws))
    hidden = sum(par[1:-1])
    return {"multipliers": mults, "memories": mems,
            "mac_array": sum(v for k, v in mults.items() if k.startswith(("forward", "backward"))),
            "seed_act_m20k": SEED_TANH_M20K * hidden if seed_act else 0}


# ----------------------------------------------------------------------------- the kernel

class FvpKernel(Kernel):
    name = "fvp"
    summary = ("Fisher-vector product of a tanh-MLP Gaussian policy by Customised Pearlmutter "
               "Propagation: Type A/B blocked layers cascaded A-B-A-B, DIFF, per-sample accumulation")
    source = "seed 001 (CPP) §III-C/D/E eq. 12, 14, 19-21, Fig. 1-2, Tables I-II"
    template = "fvp.cpp.j2"
    rows_param = "samples"
    units = ("PL",)
    implements = ("fvp_fwd", "fvp_bwd")
    generic = False
    params = (
        Param("layers", "ints", [111, 64, 32, 8], "policy layer sizes n_0 (observation) .. n_L (action)", min=1),
        Param("parallelism", "ints", [16, 8, 5, 8], "blocks p_l of each vector (Table I), 1 <= p_l <= n_l", min=1),
        Param("samples", "int", 50000, "samples per FVP call: N_MAX of the runtime row count and the cost's n", min=1),
        Param("iterations", "int", 10, "FVP calls the cost counts (CG iterations per TRPO update)", min=1,
              hyperparam="cg_iters"),
        Param("storage", "format", "fixed<27,4,RND,SAT>", "signed fixed format of every stored value (W <= 31)"),
        Param("acc", "format", "fixed<48,16,RND,SAT>", "accumulator format (W <= 53)"),
        Param("tanh_bits", "int", 10, "tanh table step 2^-tanh_bits (linear interpolation)", min=1),
        Param("damping", "float", 0.1, "CG damping the host adds (host_fvp); not in the hardware", min=0.0,
              hyperparam="cg_damping"),
        Param("clock_mhz", "float", 200.0, "PL clock (MHz)", min=1e-3),
        Param("act_unit", "str", "seed", "tanh unit the resource model counts: 'seed' (Table I's) or 'table' "
              "(this kernel's table + interpolation)", choices=("seed", "table")),
        Param("fp64", "bool", False, "float64 reference path (exact tanh, no rounding; emulator only)"),
    )
    inputs = ("obs", "theta", "v", "inv_var")
    outputs = ("fvp",)

    # -- parameters
    def validate(self, p):
        dims, par = p["layers"], p["parallelism"]
        if len(dims) < 2:
            raise self._err(f"parameter 'layers' = {dims} needs at least an input and an output size")
        if len(par) != len(dims):
            raise self._err(f"parameter 'parallelism' = {par} must have one entry per layer size "
                            f"({len(dims)} for layers = {dims})")
        for i, (n, q) in enumerate(zip(dims, par)):
            if q > n:
                raise self._err(f"parameter 'parallelism' = {par}: entry {i} ({q}) exceeds layers[{i}] = {n}")
        fm = {}
        for key, lim in (("storage", 31), ("acc", 53)):
            f = parse_format(p[key])
            if not isinstance(f, FixedFormat) or not f.signed or f.width > lim:
                raise self._err(f"parameter {key!r} = {p[key]!r} must be a signed fixed<W,I,...> with W <= {lim}")
            fm[key] = f
        S, A = fm["storage"], fm["acc"]
        if S.int_bits < 2 or S.frac_bits < 1:
            raise self._err(f"parameter 'storage' = {p['storage']!r} must hold 1.0 and fractions "
                            "(integer bits >= 2, fraction bits >= 1)")
        if not 1 <= p["tanh_bits"] < S.frac_bits:
            raise self._err(f"parameter 'tanh_bits' = {p['tanh_bits']} must be in 1..{S.frac_bits - 1} "
                            f"(below the {S.frac_bits} fraction bits of the storage format)")
        if (1 << max(0, S.int_bits - 1 + p["tanh_bits"])) + 2 > MAX_TANH_ENTRIES:
            raise self._err(f"parameter 'tanh_bits' = {p['tanh_bits']}: the tanh table would exceed "
                            f"{MAX_TANH_ENTRIES} entries")
        guard = math.ceil(math.log2(2 * max(par))) + 1
        if A.width + guard > 62 or S.width + S.frac_bits + guard > 62:
            raise self._err(f"formats {p['storage']} / {p['acc']} with parallelism up to {max(par)} overflow "
                            "the model's 64-bit sums (narrower accumulator or less parallelism)")

    def spec_params(self, spec):
        blocks = spec.notes.get("blocks", "A-B-A-B") if isinstance(spec.notes, dict) else "A-B-A-B"
        if blocks != "A-B-A-B":
            raise self._err(f"design KernelSpec notes blocks = {blocks!r}: the unit cascades 'A-B-A-B' only")
        return super().spec_params(spec)

    # -- a training-graph node: the whole unit, one component for every fvp node
    def node_params(self, node, ctx):
        p = ctx.spec_params(self)
        if not p:
            return None
        p.update(samples=ctx.batch, iterations=int(ctx.hyperparam("cg_iters", default=10)),
                 damping=float(ctx.hyperparam("cg_damping", default=0.1)), clock_mhz=ctx.clock_mhz("PL"))
        return p

    def node_points(self, node, ctx, unit):
        p = self.resolve(self.node_params(node, ctx))
        whole = self.cost(p, unit=unit, device=ctx.device)
        nodes = [n for n in ctx.graph.nodes if n.kind in self.implements]
        flops = [max(0.0, float(n.flops)) for n in nodes]
        tot = sum(flops) or float(len(nodes))
        idx = next(i for i, n in enumerate(nodes) if n.name == node.name)
        shares = [round(whole["cycles"] * (f / tot if sum(flops) else 1.0 / len(nodes))) for f in flops]
        shares[-1] = whole["cycles"] - sum(shares[:-1])
        c = dict(whole)
        c["cycles"] = shares[idx]
        c["latency_us"] = shares[idx] / p["clock_mhz"]
        if idx:
            c["resources"] = {k: 0 for k in whole["resources"]}
            c["memory_bytes"] = 0
        c["unit_cycles"] = whole["cycles"]
        name = "p" + "-".join(map(str, p["parallelism"]))
        return [(name, c)]

    # -- arrays and numerics
    def arrays(self, p):
        lay = layout(p["layers"])
        P, m = lay["P"], lay["m"]
        ins = [Array("obs", (p["samples"], p["layers"][0]), "storage", True), Array("theta", (P,), "storage"),
               Array("v", (P + m,), "storage"), Array("inv_var", (m,), "storage")]
        return ins, [Array("fvp", (P + m,), "acc")]

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        fn = _model_fp64 if p["fp64"] else _model_fixed
        return {"fvp": fn(p, a["obs"], a["theta"], a["v"], a["inv_var"])}

    def random_inputs(self, p, rng, rows=None):
        dims = p["layers"]
        lay = layout(dims)
        S = parse_format(p["storage"])
        q = (lambda x: x) if p["fp64"] else S.quantize
        n = rows or p["samples"]
        ws = [rng.standard_normal(s) / math.sqrt(s[0]) for _, s in lay["w"]]
        bs = [rng.standard_normal(k) * 0.1 for _, k in lay["b"]]
        vw = [rng.standard_normal(s) * 0.3 / math.sqrt(s[0]) for _, s in lay["w"]]
        vb = [rng.standard_normal(k) * 0.2 for _, k in lay["b"]]
        logstd = rng.uniform(-0.4, 0.4, lay["m"])
        return {"obs": q(np.clip(rng.standard_normal((n, dims[0])), -3.0, 3.0)),
                "theta": q(pack(ws, bs)),
                "v": q(pack(vw, vb, rng.standard_normal(lay["m"]) * 0.3)),
                "inv_var": q(np.exp(-2.0 * logstd))}

    def cpp_ints(self, p):
        if p["fp64"]:
            raise self._err("parameter 'fp64' = true is the float64 reference path: it has no C++")
        dims, par = p["layers"], p["parallelism"]
        lay = layout(dims)
        ints = {"N": p["samples"], "L": len(dims) - 1, "M": lay["m"], "P": lay["P"], "TANH_BITS": p["tanh_bits"]}
        for i, (n, q) in enumerate(zip(dims, par)):
            ints[f"D{i}"], ints[f"B{i}"] = n, q
        for l, ((ow, _), (ob, _)) in enumerate(zip(lay["w"], lay["b"]), start=1):
            ints[f"OW{l}"], ints[f"OB{l}"] = ow, ob
        return ints

    # -- cost
    def cost(self, p, unit="PL", device=None):
        if unit != "PL":
            raise self._err(f"unit {unit!r} is not supported (the FVP unit runs on the PL)")
        from .cost import bram36_for, dsp_per_mac, format_key, provenance, tag

        dev = get_dev(device or SEED_DEVICE)
        sch = schedule(p)
        lay = layout(p["layers"])
        words = lay["P"] + lay["m"]
        n = p["samples"]
        per_call = words + (n - 1) * sch["ii"] + sch["sample_latency"] + _depth(p) + words
        cycles = p["iterations"] * per_call
        inv = inventory(p)
        S = parse_format(p["storage"])
        mults = sum(inv["multipliers"].values())
        dsp = mults * dsp_per_mac(dev, S)
        bits = sum(b * d * w for _, b, d, w in inv["memories"])
        stratix = "m20k" in dev.units["PL"].resources
        if stratix:
            m20k = sum(b * _m20k(d, w) for _, b, d, w in inv["memories"]) + inv["seed_act_m20k"]
            bram36 = math.ceil(m20k * M20K_BITS / BRAM36_BITS)
        else:
            m20k = None
            bram36 = sum(bram36_for(b * d, w, b)[0] for _, b, d, w in inv["memories"])
            bram36 += math.ceil(inv["seed_act_m20k"] * M20K_BITS / BRAM36_BITS)
        alm = ALM_PER_MAC * inv["mac_array"]
        ff = FF_PER_MAC * inv["mac_array"]
        f = p["clock_mhz"]
        res = {"lut": math.ceil(2 * alm), "ff": math.ceil(ff), "dsp": math.ceil(dsp), "bram36": bram36,
               "uram": 0, "aie_tiles": 0}
        latency_us = cycles / f
        pl_perf, dsp_key = dev.units["PL"].perf, "dsp_per_mac_" + format_key(S)
        dsp_tag = tag(pl_perf[dsp_key]) if dsp_key in pl_perf else "assumed"
        return {"cycles": int(cycles), "latency_us": latency_us, "memory_bytes": int(math.ceil(bits / 8)),
                "resources": res, "throughput_el_per_s": n * p["iterations"] / (latency_us * 1e-6),
                "cycles_per_call": int(per_call), "ii": sch["ii"], "schedule": sch, "model_s": latency_us * 1e-6,
                "multipliers": inv["multipliers"], "m20k": m20k, "alm": math.ceil(alm),
                "source": "CPP §III-E Fig. 1-2 cascade timing; Table I fitted tanh unit, logic/FF ratios (fvp.py)",
                "provenance": provenance(
                    cycles="derived: CPP §III-E cascade timing (Fig. 1-2) per call x CG iterations",
                    latency_us="derived: cycles / clock",
                    lut="fitted to CPP Table I: ALM_PER_MAC x MACs, two LUTs per ALM",
                    ff="fitted to CPP Table I: FF_PER_MAC x MACs",
                    dsp=f"{dsp_tag}: multipliers x dsp_per_mac (catalogue)",
                    bram36=("fitted to CPP Table I: vector memories + the seed's tanh unit's M20K"
                            if inv["seed_act_m20k"] else "derived: the vector memories in block RAM"))}
