"""F-DDPG's gradient kernel (seed 002 §III, §V-A, Tables I-VI): the whole DDPG gradient of one minibatch
in fixed point, the host keeping the optimizer.

What the kernel computes (one call = one gradient step of Lillicrap et al.'s DDPG, §II-A): the host
streams the online and target parameters of the actor mu and the critic Q and a minibatch
``(s, a, r, s2, done)``; the kernel returns the critic gradient of ``mean (Q(s, a) - y)^2`` with
``y = r + gamma (1 - done) Q'(s2, mu'(s2))`` and the actor gradient of ``-mean Q(s, mu(s))`` (through
the critic's action inputs), both of the parameters *before* this step's update (the seed's FPGA
returns both, then the CPU updates), and ``Q(s, a)``, ``y`` and ``Q(s, mu(s))`` for the losses.
Actions are ``tanh`` outputs: the action box is [-1, 1] (the seed's arm).

Architecture (§III), as the cycle model and the C++ (``vitis/include/rlhls_ddpg_gradient.h``) lay it out:

* Layers alternate between two processing elements (PEs). **Odd layers** (§III-A, Fig. 1): ``R x C``
  multiply-and-add (MADD) trees of width ``T`` (``rows``, ``cols``, ``tree``); a tree multiplies ``T``
  elements of a weight row by the same ``T`` elements of an input column (one sample) and the
  tree's sum is added to that output's accumulator; the weight matrix is walked column-major
  (every row block against the ``C`` input columns before the next columns), so an odd layer needs
  whole input columns. **Even layers** (§III-B): the input of a sample arrives in pieces; the
  weight selector walks rows first, ``C`` trees of width ``T`` update one output row per cycle in a
  bank of accumulators, so a bank is revisited every ``M`` cycles: the output dimension is padded
  to at least the accumulator loop latency ``acc_latency`` (24: the seed's "output layers require
  a minimum of 24 nodes", model 2), and an even layer releases a burst per column block.
* The critic's first layer is split into a state half and an action half (no bias, linear) joined
  by a **fusion layer** that adds the bias and applies the activation (§III-C): the state half runs
  from the minibatch while the action half waits for the actor.
* The activation unit stores each activation's gradient on chip (ReLU: its mask; tanh: ``1 - t^2``)
  for the backward pass (§III-A). Backward PEs swap types (an odd layer's backward is an even PE
  and vice versa, §III-C); node deltas first, then the weight gradients through the same trees
  (the pair of 2-input multiplexers), reduced over the batch.
* One network set (actor + critic layers) computes the actor-learning forward (``mu(s)``, then
  ``Q(s, mu(s))``), then the target parameters are streamed through the same layers
  (``mu'(s2)``, ``Q'(s2, mu'(s2))``); a critic-only half set (the "separate network" of §V-A, about
  1.5x one set in all) computes ``Q(s, a)``, the temporal difference, and the critic's backward.
* ``fpgas = 2`` is model 3 (§V-A: "two FPGAs, one each for the actor and critic learning process ...
  run concurrently"): each FPGA holds one set; the critic FPGA streams the target pass and then
  ``Q(s, a)`` through its set.
* Stream padding: the output layers are padded to ``out_pad`` nodes and every dimension to the
  parallelism; padded weights are zero, so padding never changes a result (the model computes
  unpadded, the C++ padded: the same bits).

Arithmetic (bit for bit the C++; ``S`` = ``storage``, the seed's ``fixed<32,8>``, and ``A`` = ``acc``,
which must be ``fixed<2W, 2I, *, SAT>`` of S: a product of two S values is exact in A):

* every array in and out is in S (the host's floats rounded once, as the C++'s double constructor);
* a matrix product output: ``acc = A(b)`` (0 without bias); for each chunk of ``T`` terms along the
  reduction (ascending), ``acc = A(acc + sum of the chunk's exact products)`` (a MADD tree's sum is
  exact, the accumulator saturates); ``y = S(acc)`` (one rounding). Forward: over the inputs;
  input gradient ``dx = S(dy W^T)``: over the outputs; weight gradient ``dW = S(x^T dy)`` and bias
  gradient ``db = S(sum_n dy)``: over the batch. With no saturation this is the exact sum rounded
  once (the model's fast path; it checks a bound and otherwise replays the chunks);
* ReLU: ``max(y, 0)``, mask ``y > 0``; tanh: hls4ml's table (``table_size`` entries over [-4, 4), the
  C library's ``tanhf`` stored in S; ``designs/lut.py``), gradient ``g = S(1 - t*t)``; the fusion:
  ``S(zs + za + b)`` of the two halves' S outputs;
* temporal difference: ``y = S(r + (1 - done) S(S(gamma) Q'))``; critic loss gradient
  ``S(S(Q - y) * S(2/B))`` at output 0 (0 at padded outputs); actor loss gradient ``S(-1/B)``;
  ``d tanh``: ``S(da * g)``; elementwise products round once to S.

The model (``gradient_model``) runs compiled where it can (``ddpg_gradient_native``: the same steps in
C++, one call per gradient step, checked bit for bit against the numpy model below when first
loaded); ``RLHLS_NATIVE=0``, no compiler or a failed check: the numpy model, the same bits.

Cycle model (``cost``; ``schedule``), derived from the architecture above with these timing
assumptions: ``C`` samples form a column block; an odd PE takes ``ceil(M/R) ceil(K/T)`` cycles per
column block and can start a block only when the whole input column is there; an even PE takes
``ceil(K/T) max(M, acc_latency)`` cycles per block, starts as soon as the first ``T`` inputs of the
block arrive (``ceil(T/R) ceil(K'/T)`` cycles into the odd layer before it) and cannot finish before
its last input + one pass over its bank; each layer hop adds the pipeline latency ``hop =
mult_latency + ceil(log2 T) + acc_latency`` (multiplier, tree, accumulator loop); a weight
gradient takes ``ceil(M/R) ceil(K/C) ceil(B/T)`` cycles in its PE (all layers at once, after the
deltas); the loss layer is one hop. Phases: one FPGA: ``max(A + B, C) + hop + max(Da, Dc) + W`` with
A/B the actor-learning and target passes through the main set, C the critic forward on the half
set, Da the actor learning's deltas (the critic's layers L..2, the action half's input gradient,
the actor's layers L..2), Dc the critic's deltas; two FPGAs: ``max(A + hop + Da + Wa, B + C + hop +
Dc + Wc)``. The designs' parallelism (R = C = 4: Fig. 1's 4 x 4 trees; T = 16) gives 5408 cycles
for models 1 and 2 and 16733 for model 3 (Table VI: 5450 and 17,000; -0.8 % and -1.6 %). The
multipliers this needs (odd PE ``R C T``, even PE ``C T``) are 2176 per FPGA for models 1-2 and the
same for model 3's actor-learning FPGA, as Tables I and II use nearly the same DSPs (1913 and 1896
blocks). At the catalogue's two blocks per 32x32 product that would be 4352 blocks, more than the
5SGSD8's 1963: the designs take ``dsp_per_mult`` = 1913 / 2176 = 0.88 from Table I (the seed does not
say how its products map onto DSP blocks; Table VI is its theoretical figure). With T = 8 (1088
multipliers, two blocks each: 2176) the model gives 10376 cycles, 0.052 ms at 200 MHz, against Table
V's measured 0.0492 ms of computation without transmission (+5 %).

Resource model (``hardware``), derived from the same PEs (``_pes``: the main set's forward and
backward PEs, the critic-only half set on one FPGA), not fitted to Tables I-II:

* logic, in LUT equivalents (two per Stratix V ALM; an ALM adds two bits): every MADD tree's
  ``T - 1`` adders of the accumulator's ``A`` bits, every accumulator lane ``2A`` (adder and
  saturating select; odd PE ``R C`` lanes, even ``C``), the pair of 2-input multiplexers of ``W`` bits
  on every backward multiplier (§III-C), one ``W``-bit activation unit per output lane;
* registers: per multiplier its two operands and its product (``2W + A``), one ``A``-bit register per
  tree adder, the odd PE's accumulators;
* block memory, one bank per word read in a cycle: a layer's weights in ``R T`` (odd) or ``T`` (even)
  banks, twice on the main set's forward PEs (online and target parameters, FMEM); each forward
  PE's inputs (``C T`` banks) and activation gradients (one bank per output lane) kept for the
  backward pass; the even PE's ``C`` accumulator banks of ``max(M, acc_latency)`` ``A``-bit words.
  On the Stratix V each bank takes whole M20K blocks (512 x 40 ... 16K x 1), else 36 Kb BRAMs.

Against the seed (``rlhls kernel ddpg_gradient --design fddpg-arm-m1|m3 --json``: ``alm``, ``ff``,
``m20k``): models 1-2 115,776 ALMs, 416,256 FFs, 1488 M20K against Table I's 143,569, 318,246
(primary + secondary) and 1913 (-19 %, +31 %, -22 %); model 3 (one FPGA of two) 99,392, 416,256,
1552 against Table II's 129,013, 280,123 and 1930 (-23 %, +49 %, -20 %). Model 3 has less logic and
more memory than models 1-2, as in the tables. DSP blocks stay fitted (``dsp_per_mult``, above).

Transfer model (``transfer``; Tables III-V): per gradient step the host streams the online and
target parameters (padded) and the minibatch, and reads the gradients back: ``t = cycles / f +
transfers * latency + bytes / bandwidth`` on the device's PS<->PL link (the MAX4's PCIe 2.0 x4).
"""

from __future__ import annotations

import math

import numpy as np

from rlhls.core.native import enabled
from rlhls.core.registry import LazyLoad

from ..devices import Link
from ..formats import FixedFormat, parse_format
from .base import Array, Kernel, Param, check_formats, get_dev

__all__ = ["DdpgGradient", "net_dims", "packed_layout", "pack", "unpack", "schedule", "transfer", "multipliers",
           "hardware"]


# ----------------------------------------------------------------------------- geometry

def net_dims(p) -> tuple[list, list]:
    """(actor dims, critic dims): [in, hidden..., out] of each network (unpadded)."""
    h = list(p["hidden"])
    return [p["obs"], *h, p["act"]], [p["obs"] + p["act"], *h, 1]


def packed_layout(dims) -> list[tuple[int, int, int, int]]:
    """Per layer (W offset, K, M, b offset) of a network packed as W1 (K x M row-major), b1, W2, b2, ...
    (``Network`` parameter order); the total is the last b offset + M."""
    out, off = [], 0
    for k, m in zip(dims[:-1], dims[1:]):
        out.append((off, k, m, off + k * m))
        off += k * m + m
    return out


def _size(dims) -> int:
    w, k, m, b = packed_layout(dims)[-1]
    return b + m


def pack(net) -> np.ndarray:
    """A Network's Dense parameters as the kernel's packed vector."""
    parts = []
    for layer in net.layers:
        if layer.kind == "Dense":
            parts += [np.asarray(layer.params["W"], dtype=np.float64).ravel(),
                      np.asarray(layer.params["b"], dtype=np.float64).ravel()]
    return np.concatenate(parts)


def unpack(vec, net) -> dict:
    """{layer name: {'W': ..., 'b': ...}} of a packed vector, shaped as `net`'s Dense layers."""
    out, off = {}, 0
    for layer in net.layers:
        if layer.kind == "Dense":
            k, m = layer.params["W"].shape
            out[layer.name] = {"W": np.asarray(vec[off:off + k * m]).reshape(k, m),
                               "b": np.asarray(vec[off + k * m:off + k * m + m])}
            off += k * m + m
    return out


# ----------------------------------------------------------------------------- fixed-point model

_NATIVE: list = [None]  # ddpg_gradient_native's checked library (None: not loaded, False: unavailable)


def _load_native() -> None:
    from . import ddpg_gradient_native

    _NATIVE[0] = ddpg_gradient_native.load(lambda st, acc, T: _Fx({"storage": st, "acc": acc, "tree": T},
                                                                   native=False), _native_cases,
                                           lambda p: _arith(p, numpy=True)) or False


def _native_cases():
    """The compiled model's self-check: (p, inputs, the numpy model's outputs) for model 1 and 3's
    networks, a batch below B, saturating values in a small network without fusion layer, TRN
    storage, and done flags and rewards at S's ends."""
    k = DdpgGradient()
    rng = np.random.default_rng(43)
    cases = []
    for over, rows, scale in (({}, 32, 1.0), ({"hidden": [108, 108]}, 7, 1.0),
                              ({"hidden": [5, 7], "batch": 5, "tree": 3, "fusion": False, "rows": 3, "cols": 2,
                                "out_pad": 8}, 5, 150.0),
                              ({"hidden": [6], "obs": 3, "act": 2, "tree": 4, "storage": "fixed<16,6,TRN,SAT>",
                                "acc": "fixed<32,12,TRN,SAT>", "table_size": 64}, 9, 20.0)):
        p = k.resolve(over)
        x = k.random_inputs(p, rng)
        x = {key: (v[:rows] if v.ndim and v.shape[0] == p["batch"] else v) for key, v in x.items()}
        if scale != 1.0:  # parameters and states toward S's ends: sums saturate A chunk by chunk
            for key in ("actor", "critic", "target_actor", "target_critic"):
                x[key] = x[key] * rng.uniform(0, scale, x[key].shape)
            for key in ("s", "s2", "r"):
                x[key] = x[key] * scale
        x["done"][:2] = (1.0, 1e-12)
        fx, table = _arith(p, numpy=True)
        cases.append((p, x, _gradient_numpy(p, fx, table, **x)))
    return cases


_native_once = LazyLoad(_load_native)


class _Fx:
    """The model's arithmetic on int64 mantissas (module docstring): S = storage, A = exact products.
    ``dense``, ``rowsum_s`` and ``q`` run compiled (``ddpg_gradient_native``, the same bits) unless
    `native` is False, ``RLHLS_NATIVE=0`` or the library is unavailable."""

    def __init__(self, p, native=True):
        self.S, self.A = parse_format(p["storage"]), parse_format(p["acc"])
        self.F = self.S.frac_bits
        self.T = p["tree"]
        self.amax, self.amin = self.A.max_mantissa, self.A.min_mantissa
        self.smax, self.smin = self.S.max_mantissa, self.S.min_mantissa
        self.fast = self.S.quant in ("RND", "TRN") and self.S.overflow == "SAT"
        self._want_native = native
        self._nat = None  # this format's ddpg_gradient_native.Native, once loaded (False: none)

    def native(self):
        """The compiled operations for these formats, or None (numpy's; ``_arith`` hands out a numpy
        ``_Fx`` under RLHLS_NATIVE=0)."""
        if not self._want_native:
            return None
        if self._nat is None:
            from . import ddpg_gradient_native

            _native_once()
            lib = _NATIVE[0]
            self._nat = ddpg_gradient_native.Native(lib, self) if lib and ddpg_gradient_native.supports(self) else False
        return self._nat or None

    def q(self, x):
        """S mantissas of float64 values (ap_fixed's double constructor). RND/TRN with SAT of finite
        values inline: x 2^F is exact, and so is floor(x 2^F + 1/2) once clipped to S's range."""
        if (nat := self.native()) is not None and (y := nat.q(x)) is not None:
            return y
        x = np.asarray(x, dtype=np.float64)
        if not self.fast or not np.isfinite(x).all():
            return self.S.quantize_mantissa(x)
        y = np.clip(np.ldexp(x, self.F), self.smin - 1.0, self.smax + 1.0)
        m = np.floor(y + 0.5 if self.S.quant == "RND" else y).astype(np.int64)
        return np.minimum(np.maximum(m, self.smin), self.smax)

    def val(self, m):
        return self.S.from_mantissa(m)

    def _cast(self, m, shift):
        """S of exact mantissas m with `shift` more fractional bits than S (RND/TRN then SAT: the
        common modes inline; others through the format)."""
        if not self.fast:
            return self.S.cast_mantissa(m, self.F + shift)[0]
        if shift:  # RND: floor(m / 2^s + 1/2) = (m >> s) + bit s-1 of m (no int64 overflow near A's max)
            t = np.right_shift(m, shift)
            m = t + np.bitwise_and(np.right_shift(m, shift - 1), 1) if self.S.quant == "RND" else t
        return np.minimum(np.maximum(m, self.smin), self.smax)

    def to_s(self, acc):
        return self._cast(acc, self.F)

    def mul(self, a, b):
        """S(a * b) of S mantissas (broadcasting)."""
        return self._cast(np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64), self.F)

    def sat(self, m):
        """S of an exact sum of S mantissas (overflow only)."""
        return self._cast(m, 0)

    def dot(self, x, w, b=None):
        """A mantissas of ``b + x @ w`` (x (N, K), w (K, M) and b (M,) S mantissas), the chunked
        saturating sum of the module docstring. Exact paths: one float64 product when every partial
        sum stays below 2^52, two (x split at 16 bits) when each half does, else int64 products."""
        xa = np.abs(x).max(axis=0).astype(np.float64)
        wa = np.abs(w).max(axis=1).astype(np.float64)
        bias = None if b is None else np.left_shift(np.asarray(b, dtype=np.int64), self.F)
        bound = float(xa @ wa) + (0.0 if bias is None else float(np.abs(bias).max(initial=0)))
        if bound >= self.amax * (1 - 1e-9):
            return self._dot_slow(x, w, np.zeros(w.shape[1], dtype=np.int64) if bias is None else bias)
        wf = w.astype(np.float64)
        if bound < 2.0 ** 52:
            s = (x.astype(np.float64) @ wf).astype(np.int64)
        elif bound < 2.0 ** 68 and 65536.0 * float(wa.sum()) < 2.0 ** 52:
            s = np.left_shift((np.right_shift(x, 16).astype(np.float64) @ wf).astype(np.int64), 16)
            s += (np.bitwise_and(x, 0xFFFF).astype(np.float64) @ wf).astype(np.int64)
        else:  # exact int64 products (|sum| < 2^63: bound above)
            s = (x[:, :, None] * w[None, :, :]).sum(axis=1)
        return s if bias is None else s + bias[None, :]

    def _dot_slow(self, x, w, bias):
        """Chunks of T exact products added to a saturating accumulator, in Python ints."""
        N, K = x.shape
        xo, wo = x.astype(object), w.astype(object)
        acc = np.tile(bias.astype(object), (N, 1))
        for c in range(0, K, self.T):
            part = (xo[:, c:c + self.T, None] * wo[None, c:c + self.T, :]).sum(axis=1)
            acc = np.clip(acc + part, self.amin, self.amax)
        return acc.astype(np.int64)

    def dense(self, x, w, b=None):
        if (nat := self.native()) is not None and (y := nat.dense(x, w, b)) is not None:
            return y
        return self.to_s(self.dot(x, w, b))

    def rowsum_s(self, d):
        """S of ``rowsum(d)``."""
        if (nat := self.native()) is not None and (y := nat.rowsum_s(d)) is not None:
            return y
        return self.to_s(self.rowsum(d))

    def rowsum(self, d):
        """A mantissas of the sum over rows of S mantissas d (N, M), chunks of T (saturating)."""
        s = np.left_shift(d.astype(np.int64), self.F)
        if d.shape[0] * float(np.abs(d).max(initial=0)) * 2.0 ** self.F < self.amax:
            return s.sum(axis=0)
        acc = np.zeros(d.shape[1], dtype=object)
        so = s.astype(object)
        for c in range(0, d.shape[0], self.T):
            acc = np.clip(acc + so[c:c + self.T].sum(axis=0), self.amin, self.amax)
        return acc.astype(np.int64)


_FX: dict = {}


def _arith(p, numpy=False) -> tuple:
    """(_Fx, tanh table mantissas) of a parameter set (cached: the model runs every training step);
    the _Fx with compiled operations unless `numpy` or RLHLS_NATIVE=0."""
    key = (p["storage"], p["acc"], p["tree"], p["table_size"])
    if key not in _FX:
        from ..lut import lut_tables

        fx, fx_numpy = _Fx(p), _Fx(p, native=False)
        (t,) = lut_tables("Tanh", p["table_size"], fx.S)
        _FX[key] = (fx, fx_numpy, fx.S.quantize_mantissa(t))
    fx, fx_numpy, table = _FX[key]
    return (fx if enabled() and not numpy else fx_numpy), table


def _tanh(z, p, fx, table):
    """hls4ml's tanh table at S mantissas z: index trunc(z N / 8) + N/2, clipped."""
    N = p["table_size"]
    r = np.trunc(fx.val(z) * (N / 8.0)).astype(np.int64)
    return table[np.clip(r + N // 2, 0, N - 1)]


def _layers(vec_m, dims):
    return [(vec_m[w:w + k * m].reshape(k, m), vec_m[b:b + m]) for w, k, m, b in packed_layout(dims)]


def gradient_model(p, s, a, r, s2, done, actor, critic, target_actor, target_critic) -> dict:
    """The kernel's outputs (float64 values of S) for float64 inputs (rounded to S first): the
    compiled model in one call where there is one (``ddpg_gradient_native``, the same bits), else
    the numpy model below."""
    fx, table = _arith(p)
    if (nat := fx.native()) is not None:
        B = np.shape(s)[0]
        out = nat.gradient(p, table, fx.q(p["gamma"]), fx.q(2.0 / B), fx.q(-1.0 / B),
                           dict(s=s, a=a, r=r, s2=s2, done=done, actor=actor, critic=critic,
                                target_actor=target_actor, target_critic=target_critic))
        if out is not None:
            return out
    return _gradient_numpy(p, fx, table, s, a, r, s2, done, actor, critic, target_actor, target_critic)


def _gradient_numpy(p, fx, table, s, a, r, s2, done, actor, critic, target_actor, target_critic) -> dict:
    S = p["obs"]
    da_dims, dc_dims = net_dims(p)
    q = fx.q
    sm, am, rm, s2m, dm = q(s), q(a), q(r), q(s2), q(done)
    A_, C_, TA, TC = (_layers(q(v), d) for v, d in ((actor, da_dims), (critic, dc_dims),
                                                   (target_actor, da_dims), (target_critic, dc_dims)))

    def actor_fwd(x, layers):
        hs, masks = [x], []
        for i, (w, b) in enumerate(layers):
            z = fx.dense(hs[-1], w, b)
            if i < len(layers) - 1:
                masks.append(z > 0)
                hs.append(np.maximum(z, 0))
            else:
                t = _tanh(z, p, fx, table)
                g = fx.to_s((np.int64(1) << (2 * fx.F)) - t * t)
                hs.append(t)
                masks.append(g)
        return hs, masks

    def critic_fwd(x_s, x_a, layers):
        w1, b1 = layers[0]
        if p["fusion"]:  # two halves (no bias, S outputs), the fusion adds them and the bias
            zs, za = fx.dense(x_s, w1[:S]), fx.dense(x_a, w1[S:])
            z = fx.sat(zs + za + b1[None, :])
        else:
            z = fx.dense(np.concatenate([x_s, x_a], axis=1), w1, b1)
        hs, masks = [np.concatenate([x_s, x_a], axis=1)], []
        for i, (w, b) in enumerate(layers[1:], start=1):
            masks.append(z > 0)
            hs.append(np.maximum(z, 0))
            z = fx.dense(hs[-1], w, b)
        return z[:, 0], hs, masks

    # actor learning forward, target stream, critic forward on (s, a)
    ha, ga = actor_fwd(sm, A_)
    qpi, _, mpi = critic_fwd(sm, ha[-1], C_)
    ht, _ = actor_fwd(s2m, TA)
    qt, _, _ = critic_fwd(s2m, ht[-1], TC)
    qv, hc, mc = critic_fwd(sm, am, C_)
    B = sm.shape[0]
    gamma, c2, c1 = q(p["gamma"]), q(2.0 / B), q(-1.0 / B)
    y = fx.sat(rm + (1 - (dm != 0)) * fx.mul(qt, gamma))
    delta = fx.mul(fx.sat(qv - y), c2)[:, None]

    def backward(dz, hs, masks, layers):
        """Weight and bias gradients of every layer, node deltas from the last layer down (layer 1
        computes no input gradient)."""
        grads = [None] * len(layers)
        for i in range(len(layers) - 1, -1, -1):
            grads[i] = (fx.dense(hs[i].T, dz), fx.rowsum_s(dz))
            if i:
                dz = fx.dense(dz, layers[i][0].T) * masks[i - 1]
        return grads

    gc = backward(delta, hc, mc, C_)
    # actor learning: dQ/da through the online critic (no weight gradients), then the actor
    dz = np.full((B, 1), c1, dtype=np.int64)
    for i in range(len(C_) - 1, 0, -1):
        dz = fx.dense(dz, C_[i][0].T) * mpi[i - 1]
    da = fx.dense(dz, C_[0][0][S:].T)
    dzl = fx.mul(da, ga[-1])
    g_a = backward(dzl, ha, ga, A_)

    def flat(grads):
        return fx.val(np.concatenate([np.concatenate([gw.ravel(), gb]) for gw, gb in grads]))

    return {"grad_actor": flat(g_a), "grad_critic": flat(gc), "q": fx.val(qv), "y": fx.val(y), "qpi": fx.val(qpi)}


# ----------------------------------------------------------------------------- cycles

def _ce(a, b):
    return -(-int(a) // int(b))


def _hop(p) -> int:
    return p["mult_latency"] + max(1, math.ceil(math.log2(p["tree"]))) + p["acc_latency"]


def _padded(p):
    """Padded dims of the hardware: output layers to out_pad, the critic's action half to the actor's
    padded output."""
    da, dc = net_dims(p)
    pad = p["out_pad"]
    a = da[:-1] + [max(da[-1], pad)]
    c = [dc[0] - p["act"] + a[-1]] + dc[1:-1] + [max(1, pad)]
    return a, c


def _kinds(n):
    return ["odd" if i % 2 == 0 else "even" for i in range(n)]


def _chain(p, layers, t0: int = 0) -> int:
    """End cycle of a chain of layers [(kind, K, M)] streaming B samples in column blocks of C."""
    R, C, T, LAT, B = p["rows"], p["cols"], p["tree"], p["acc_latency"], p["batch"]
    hop = _hop(p)
    nb = _ce(B, C)
    p_st, p_en, p_kind, p_k = [t0] * nb, [t0] * nb, None, None
    for i, (kind, K, M) in enumerate(layers):
        if kind == "odd":
            tau = _ce(M, R) * _ce(K, T)
            tail = tau
        else:
            mp = max(M, LAT)
            tau, tail = _ce(K, T) * mp, mp
        st, en = [0] * nb, [0] * nb
        for j in range(nb):
            free = en[j - 1] if j else t0
            if i == 0:
                s = max(t0, free)
                e = s + tau
            elif kind == "odd":
                s = max(p_en[j] + hop, free)
                e = s + tau
            else:
                lag = _ce(T, R) * _ce(p_k, T) if p_kind == "odd" else 0
                s = max(p_st[j] + lag + hop, free)
                e = max(s + tau, p_en[j] + hop + tail)
            st[j], en[j] = s, e
        p_st, p_en, p_kind, p_k = st, en, kind, K
    return p_en[-1]


def _wgrad(p, K, M) -> int:
    return _ce(M, p["rows"]) * _ce(K, p["cols"]) * _ce(p["batch"], p["tree"])


def schedule(p) -> dict:
    """Cycles of one gradient step by phase (module docstring)."""
    a, c = _padded(p)
    n = len(a) - 1
    k = _kinds(n)
    hop = _hop(p)
    sw = {"odd": "even", "even": "odd"}
    actor = [(k[i], a[i], a[i + 1]) for i in range(n)]
    crit_pi = [(k[0], a[-1], c[1])] + [(k[i], c[i], c[i + 1]) for i in range(1, n)]  # action half first
    fwd = _chain(p, actor + crit_pi) + hop  # + the fusion layer
    crit = _chain(p, [(k[i], c[i], c[i + 1]) for i in range(n)]) + hop
    d_pi = [(sw[k[i]], c[i + 1], c[i] if i else a[-1]) for i in range(n - 1, -1, -1)]
    d_a = [(sw[k[i]], a[i + 1], a[i]) for i in range(n - 1, 0, -1)]
    da = _chain(p, d_pi + d_a)
    dc = _chain(p, [(sw[k[i]], c[i + 1], c[i]) for i in range(n - 1, 0, -1)]) if n > 1 else 0
    wa = max(_wgrad(p, a[i], a[i + 1]) for i in range(n))
    wc = max(_wgrad(p, c[i], c[i + 1]) for i in range(n))
    ph: dict[str, int | list[int]] = {"actor_forward": fwd, "target_forward": fwd, "critic_forward": crit, "loss": hop,
          "actor_deltas": da, "critic_deltas": dc, "actor_wgrad": wa, "critic_wgrad": wc}
    if p["fpgas"] == 1:
        total = max(2 * fwd, crit) + hop + max(da, dc) + max(wa, wc)
        ph["fpga_cycles"] = [total]
    else:
        af, cf = fwd + hop + da + wa, fwd + crit + hop + dc + wc
        total = max(af, cf)
        ph["fpga_cycles"] = [af, cf]
    ph["total"] = total
    return ph


def multipliers(p) -> dict:
    """32x32 multipliers of the PEs: odd R*C*T, even C*T (module docstring)."""
    a, c = _padded(p)
    n = len(a) - 1
    k = _kinds(n)
    odd, even = p["rows"] * p["cols"] * p["tree"], p["cols"] * p["tree"]
    mult = {"odd": odd, "even": even}
    sw = {"odd": "even", "even": "odd"}
    main_fwd = sum(mult[k[i]] for i in range(n)) * 2 + mult[k[0]]  # actor + critic (two first-layer halves)
    main_bwd = sum(mult[sw[k[i]]] for i in range(n)) * 2  # critic@pi and actor backward PEs
    half = sum(mult[k[i]] + mult[sw[k[i]]] for i in range(n))  # the critic-only set
    per_fpga = main_fwd + main_bwd + half if p["fpgas"] == 1 else main_fwd + main_bwd
    return {"main_set": main_fwd + main_bwd, "critic_set": half, "per_fpga": per_fpga,
            "total": per_fpga * p["fpgas"]}


def _pes(p) -> list[tuple[str, str, int, int]]:
    """The PEs of one FPGA as ``(role, kind, K, M)``, in the order ``multipliers`` counts them."""
    a, c = _padded(p)
    n = len(a) - 1
    k = _kinds(n)
    sw = {"odd": "even", "even": "odd"}
    pes = [("main_fwd", k[i], a[i], a[i + 1]) for i in range(n)]
    pes += [("main_fwd", k[0], c[0] - a[-1], c[1]), ("main_fwd", k[0], a[-1], c[1])]  # state, action halves
    pes += [("main_fwd", k[i], c[i], c[i + 1]) for i in range(1, n)]
    pes += [("main_bwd", sw[k[i]], d[i + 1], d[i]) for d in (a, c) for i in range(n)]
    if p["fpgas"] == 1:
        pes += [("critic_set", kk, K, M) for i in range(n)
                for kk, K, M in ((k[i], c[i], c[i + 1]), (sw[k[i]], c[i + 1], c[i]))]
    return pes


def hardware(p) -> dict:
    """Logic, registers and on-chip memory of one FPGA, derived from the PEs (module docstring,
    "Resource model"): ``{'lut', 'ff', 'alm', 'm20k', 'terms'}``."""
    from .fvp import _m20k

    R, C, T, B = p["rows"], p["cols"], p["tree"], p["batch"]
    W, A = parse_format(p["storage"]).bits, parse_format(p["acc"]).bits
    lut = ff = m20k = 0
    terms = {"tree_adders_lut": 0, "accumulators_lut": 0, "muxes_lut": 0, "act_lut": 0, "pipeline_ff": 0,
             "weights_m20k": 0, "activations_m20k": 0, "acc_banks_m20k": 0}
    memories = []  # (term, banks, depth, width bits)

    def mem(term, banks, depth, width, copies=1):
        memories.extend([(term, banks, depth, width)] * copies)
        terms[term] += copies * banks * _m20k(depth, width)
    for role, kind, K, M in _pes(p):
        trees, lanes = (R * C, R * C) if kind == "odd" else (C, C)
        mults = trees * T
        terms["tree_adders_lut"] += trees * (T - 1) * A
        terms["accumulators_lut"] += lanes * 2 * A  # adder + saturating select
        if role != "main_fwd":  # the pair of 2-input multiplexers on each backward multiplier (§III-C)
            terms["muxes_lut"] += mults * 2 * W
        terms["act_lut"] += (R if kind == "odd" else C) * W
        # operand and product registers per multiplier, one register per tree adder, accumulators
        terms["pipeline_ff"] += mults * (2 * W + A) + trees * (T - 1) * A + (lanes * A if kind == "odd" else 0)
        wbanks = R * T if kind == "odd" else T
        copies = 2 if role == "main_fwd" else 1  # the main set also holds the target parameters (FMEM)
        mem("weights_m20k", wbanks, _ce(K * M, wbanks), W, copies)
        if role != "main_bwd":  # inputs and activation gradients kept for the backward pass
            mem("activations_m20k", C * T, _ce(B * K, C * T), W)
            mem("activations_m20k", lanes, _ce(B * M, lanes), W)
        if kind == "even":
            mem("acc_banks_m20k", C, max(M, p["acc_latency"]), A)
    lut = sum(v for k_, v in terms.items() if k_.endswith("_lut"))
    ff = terms["pipeline_ff"]
    m20k = sum(v for k_, v in terms.items() if k_.endswith("_m20k"))
    return {"lut": lut, "ff": ff, "alm": _ce(lut, 2), "m20k": m20k, "terms": terms, "memories": memories}


def stream_words(p) -> dict:
    """32-bit words crossing the link per gradient step (padded parameters, minibatch, gradients)."""
    a, c = _padded(p)
    pa, pc = _size(a), _size(c)
    batch = p["batch"] * (2 * p["obs"] + p["act"] + 2)
    return {"params_in": 2 * (pa + pc), "batch_in": batch, "grads_out": pa + pc,
            "total": 3 * (pa + pc) + batch}


def transfer(p, device=None, *, bytes_per_us=None, latency_us=None, transfers: int = 3,
             link: str | None = None) -> dict:
    """Time of one gradient step with the parameters and gradients streamed over the link (Tables
    III-IV): compute + ``transfers`` link latencies + bytes / bandwidth; defaults: the device's PS->PL
    link (the MAX4: PCIe 2.0 x4, 2000 B/us, 10 us), or the one called `link` (``"infiniband"``)."""
    dev = get_dev(device)
    if link is not None:
        chosen: Link | None = dev.link("PS", "PL", link)
    else:
        chosen = next((l for l in dev.links if (l.src, l.dst) == ("PS", "PL")), None)
    bw = float(bytes_per_us if bytes_per_us is not None else (chosen.bytes_per_us.value if chosen else 2000.0))
    lat = float(latency_us if latency_us is not None else (chosen.latency_us.value if chosen else 10.0))
    words = stream_words(p)
    nbytes = words["total"] * _ce(parse_format(p["storage"]).bits, 8)
    compute_us = schedule(p)["total"] / p["clock_mhz"]
    io_us = transfers * lat + nbytes / bw
    return {"bytes": nbytes, "compute_us": compute_us, "io_us": io_us, "total_us": compute_us + io_us,
            "io_share": io_us / (compute_us + io_us), "bytes_per_us": bw, "latency_us": lat,
            "transfers": transfers, "words": words}


# ----------------------------------------------------------------------------- the kernel

class DdpgGradient(Kernel):
    name = "ddpg_gradient"
    summary = ("F-DDPG's whole DDPG gradient (actor and critic, with the target pass) in fixed point: odd/even "
               "MADD-tree layers, fusion layer, stored activation gradients; the host keeps the optimizer")
    source = "seed 002 (F-DDPG) §III (Fig. 1, 2), §V-A models 1-3, Tables I-VI"
    template = "ddpg_gradient.cpp.j2"
    units = ("PL",)
    implements = ("mm.fwd", "mm.bwd", "act.fwd", "act.bwd", "loss")
    generic = False
    replaces = ("dense_forward", "dense_backward", "weight_gradient")
    # the training hook (host/algorithms/ddpg.py): a DDPG trainer whose plan puts these nodes on this kernel's unit
    # takes each step's gradients from one call of it (``train_step``), the optimizer staying on the host
    train_step = "ddpg"
    params = (
        Param("obs", "int", 17, "state inputs (the arm: 17)", min=1),
        Param("act", "int", 5, "actions (tanh outputs; the arm: 5)", min=1),
        Param("hidden", "ints", [108], "hidden ReLU layers of each network (models 1-2: 108; model 3: 108,108)",
              min=1),
        Param("batch", "int", 32, "minibatch B (§V-A: 32)", min=1),
        Param("out_pad", "int", 0, "output layers padded to at least this many nodes (model 2, 3: 24); 0: none",
              min=0),
        Param("rows", "int", 4, "R: weight rows per odd PE (Fig. 1: 4 x 4 MADD trees)", min=1),
        Param("cols", "int", 4, "C: samples per column block (Fig. 1: 4 x 4 MADD trees)", min=1),
        Param("tree", "int", 16, "T: products per MADD tree (the seed does not give it)", min=1),
        Param("acc_latency", "int", 24, "accumulator loop latency: even-layer outputs padded to it (§III-C: 24)",
              min=1),
        Param("mult_latency", "int", 4, "multiplier pipeline cycles", min=0),
        Param("gamma", "float", 0.99, "discount of the temporal difference (Lillicrap et al.)",
              hyperparam="gamma"),
        Param("table_size", "int", 1024, "tanh table entries (hls4ml's table over [-4, 4))", min=8),
        Param("storage", "format", "fixed<32,8,RND,SAT>", "every array and stored value (§V-A: 32 bits, 8 integer)"),
        Param("acc", "format", "fixed<64,16,RND,SAT>", "accumulator: the exact product format fixed<2W,2I> of "
              "storage, saturating"),
        Param("clock_mhz", "float", 200.0, "kernel clock (§V-A: 200 MHz)", min=1e-3),
        Param("fpgas", "int", 1, "FPGAs: 1 (models 1-2) or 2 (model 3: actor and critic learning apart)",
              choices=(1, 2)),
        Param("fusion", "bool", True, "the critic's first layer as state and action halves + a fusion layer"),
        Param("dsp_per_mult", "float", 0.0, "DSP blocks per tree multiplier; 0: the device catalogue's figure "
              "for the storage width", min=0.0),
    )
    inputs = ("s", "a", "r", "s2", "done", "actor", "critic", "target_actor", "target_critic")
    outputs = ("grad_actor", "grad_critic", "q", "y", "qpi")

    def validate(self, p):
        check_formats(self.name, p, keys=("storage",))
        S, A = parse_format(p["storage"]), parse_format(p["acc"])
        if not isinstance(S, FixedFormat) or not S.signed or S.width > 32:
            raise self._err(f"parameter 'storage' = {p['storage']!r}: expected a signed fixed<W,I> with W <= 32 "
                            "(products are exact in 64 bits)")
        if not (isinstance(A, FixedFormat) and A.signed and A.width == 2 * S.width and A.int_bits == 2 * S.int_bits
                and A.overflow == "SAT"):
            raise self._err(f"parameter 'acc' = {p['acc']!r}: expected fixed<{2 * S.width},{2 * S.int_bits},*,SAT> "
                            f"(the exact product of two {S} values, saturating)")
        if not p["hidden"]:
            raise self._err("parameter 'hidden' is empty: each network needs at least one hidden layer")
        n = p["table_size"]
        if n & (n - 1):
            raise self._err(f"parameter 'table_size' = {n}: expected a power of two")
        if not math.isfinite(p["gamma"]) or not 0.0 <= p["gamma"] <= 1.0:
            raise self._err(f"parameter 'gamma' = {p['gamma']}: expected 0 <= gamma <= 1")

    def formats(self, p):
        return {"storage": parse_format(p["storage"]), "acc": parse_format(p["acc"])}

    def sizes(self, p) -> tuple[int, int]:
        da, dc = net_dims(p)
        return _size(da), _size(dc)

    def arrays(self, p):
        B, S, A = p["batch"], p["obs"], p["act"]
        pa, pc = self.sizes(p)
        st = "storage"
        ins = [Array("s", (B, S), st), Array("a", (B, A), st), Array("r", (B,), st), Array("s2", (B, S), st),
               Array("done", (B,), st), Array("actor", (pa,), st), Array("critic", (pc,), st),
               Array("target_actor", (pa,), st), Array("target_critic", (pc,), st)]
        outs = [Array("grad_actor", (pa,), st), Array("grad_critic", (pc,), st), Array("q", (B,), st),
                Array("y", (B,), st), Array("qpi", (B,), st)]
        return ins, outs

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        return gradient_model(p, **a)

    def random_inputs(self, p, rng):
        B, S, A = p["batch"], p["obs"], p["act"]
        st = parse_format(p["storage"])
        da, dc = net_dims(p)

        def params(dims):
            parts = []
            for k, m in zip(dims[:-1], dims[1:]):
                parts += [rng.uniform(-1, 1, k * m) / math.sqrt(k), rng.uniform(-0.1, 0.1, m)]
            return st.quantize(np.concatenate(parts))

        actor, critic = params(da), params(dc)
        return {"s": st.quantize(rng.uniform(-1, 1, (B, S))), "a": st.quantize(rng.uniform(-1, 1, (B, A))),
                "r": st.quantize(rng.uniform(-1.5, 0, B)), "s2": st.quantize(rng.uniform(-1, 1, (B, S))),
                "done": (rng.uniform(size=B) < 0.2).astype(np.float64), "actor": actor, "critic": critic,
                "target_actor": st.quantize(actor + rng.normal(0, 0.01, actor.shape)),
                "target_critic": st.quantize(critic + rng.normal(0, 0.01, critic.shape))}

    def cpp_ints(self, p):
        a, c = _padded(p)
        da, dc = net_dims(p)
        ints = {"B": p["batch"], "S_OBS": p["obs"], "A_ACT": p["act"], "L": len(da) - 1, "R": p["rows"],
                "C": p["cols"], "T": p["tree"], "NTAB": p["table_size"], "FUSION": int(p["fusion"]),
                "PA": self.sizes(p)[0], "PC": self.sizes(p)[1]}
        for i, (x, y) in enumerate(zip(a, c)):
            ints[f"AD{i}"], ints[f"CD{i}"] = x, y  # padded dims
        for i, (x, y) in enumerate(zip(da, dc)):
            ints[f"AU{i}"], ints[f"CU{i}"] = x, y  # unpadded dims
        for net, dims in (("A", da), ("C", dc)):  # offsets in the packed vectors
            for l, (w, _, _, b) in enumerate(packed_layout(dims), start=1):
                ints[f"{net}OW{l}"], ints[f"{net}OB{l}"] = w, b
        ints["MAXD"] = max(a + c)
        return ints

    def cpp_constants(self, p):
        B = p["batch"]
        return {"GAMMA": ("storage", p["gamma"]), "C2": ("storage", 2.0 / B), "C1": ("storage", -1.0 / B)}

    # -- a training-graph node: the whole kernel, one component for every node it takes
    _NETS = ("actor", "critic", "critic@pi")

    def node_params(self, node, ctx):
        spec = ctx.spec_params(self)
        if not spec and ctx.spec(self.name, "PL") is None:
            return None
        if node.kind == "loss":
            if node.name not in ("critic_loss", "actor_loss"):
                return None
        elif node.instance not in self._NETS:
            return None
        nets = ctx.nets
        if "actor" not in nets or "critic" not in nets:
            return None
        actor = nets["actor"]
        dense = [l for l in actor.layers if l.kind == "Dense"]
        p = {**self.linked_params(ctx.design.hyperparams), **spec}
        p.update(obs=int(actor.input_shape[0]), hidden=[int(l.out_shape[0]) for l in dense[:-1]],
                 batch=int(ctx.batch), clock_mhz=ctx.clock_mhz("PL"))
        p.setdefault("act", int(ctx.design.action_dim))
        out = int(dense[-1].out_shape[0])
        if out > p["act"]:  # a design that pads its output layers in the network (model 2)
            p["out_pad"] = max(int(p.get("out_pad", 0)), out)
        g = ctx.hyperparam("gamma")
        if g is not None:
            p["gamma"] = float(g)
        return p

    def node_points(self, node, ctx, unit):
        """The kernel's cycles shared over the nodes it takes, by FLOPs (the profile's rows add up to it)."""
        p = self.resolve(self.node_params(node, ctx))
        whole = self.cost(p, unit=unit, device=ctx.device)
        nodes = [n for n in ctx.graph.nodes if n.kind in self.implements and self.node_params(n, ctx) is not None]
        flops = [max(1.0, float(n.flops)) for n in nodes]
        tot = sum(flops)
        idx = next(i for i, n in enumerate(nodes) if n.name == node.name)
        rest = whole["cycles"] - len(nodes)  # every node at least one cycle, the rest by FLOPs
        shares = [1 + math.floor(rest * f / tot) for f in flops]
        shares[int(np.argmax(flops))] += whole["cycles"] - sum(shares)
        c = {k: v for k, v in whole.items() if k in ("cycles", "latency_us", "memory_bytes", "resources", "provenance")}
        c["cycles"] = shares[idx]
        c["latency_us"] = shares[idx] / p["clock_mhz"]
        if idx:
            c["resources"] = {k: 0 for k in whole["resources"]}
            c["memory_bytes"] = 0
        return [(f"r{p['rows']}c{p['cols']}t{p['tree']}", c)]

    # -- cost
    def cost(self, p, unit="PL", device=None):
        if unit != "PL":
            raise self._err(f"unit {unit!r}: the gradient kernel is PL logic (expected PL)")
        from .cost import bram36_for, dsp_per_mac, format_key, provenance, tag

        dev = get_dev(device or "max4-5sgsd8")
        sch = schedule(p)
        mult = multipliers(p)
        S = parse_format(p["storage"])
        a, c = _padded(p)
        words = 2 * (_size(a) + _size(c)) * 2  # online + target parameters, and their gradients
        words += p["batch"] * (sum(a[1:]) + 2 * sum(c[1:]) + 2 * p["obs"] + p["act"]) * 2  # activations, masks
        nbytes = words * _ce(S.bits, 8)
        hw = hardware(p)
        if "m20k" in dev.units["PL"].resources:  # Stratix V: M20K blocks as 36 Kb equivalents (profile)
            from .fvp import BRAM36_BITS, M20K_BITS

            bram = math.ceil(hw["m20k"] * M20K_BITS / BRAM36_BITS)
        else:
            bram = sum(bram36_for(b * d, w, b)[0] for _, b, d, w in hw["memories"])
        per = p["dsp_per_mult"] or dsp_per_mac(dev, S)
        dsp = math.ceil(mult["per_fpga"] * per - 1e-9)
        cycles = sch["total"]
        if p["dsp_per_mult"]:
            dsp_why = "fitted to F-DDPG Table I: dsp_per_mult (1913 DSP blocks / 2176 multipliers)"
        else:
            pl_perf, dsp_key = dev.units["PL"].perf, "dsp_per_mac_" + format_key(S)
            dsp_tag = tag(pl_perf[dsp_key]) if dsp_key in pl_perf else "assumed"
            dsp_why = f"{dsp_tag}: multipliers x dsp_per_mac (catalogue)"
        return {"cycles": cycles, "latency_us": cycles / p["clock_mhz"], "memory_bytes": nbytes,
                "resources": {"lut": float(hw["lut"]), "ff": float(hw["ff"]), "dsp": float(dsp), "bram36": float(bram),
                              "uram": 0.0, "aie_tiles": 0.0},
                "alm": hw["alm"], "m20k": hw["m20k"], "hardware": hw["terms"],
                "provenance": provenance(
                    cycles="derived: the PE schedule of §III (module docstring; Table VI within 2 %)",
                    latency_us="derived: cycles / clock",
                    lut="derived: MADD-tree adders, saturating accumulators, the backward PEs' 2-input multiplexers, "
                        "activation units (hardware())",
                    ff="derived: operand, product, tree and accumulator registers (hardware())",
                    dsp=dsp_why,
                    bram36="derived: weight banks (online + target on the main set), inputs and activation "
                           "gradients kept for the backward pass, even-PE accumulator banks (hardware())"),
                "multipliers": mult, "phases": {k: v for k, v in sch.items() if k != "total"},
                "transfer": transfer(p, dev),
                "source": f"ddpg_gradient schedule: R={p['rows']} C={p['cols']} T={p['tree']} trees, hop "
                          f"{_hop(p)} cycles, {p['fpgas']} FPGA(s) at {p['clock_mhz']:g} MHz (designs/kernels/"
                          "ddpg_gradient.py)"}
