"""HEPPO-GAE unit (seed 000, §II, §III-B/C, §IV, §V-D): N PE rows, k-step lookahead, FILO BRAM.

Semantics (the numpy model here and ``vitis/include/rlhls_gae.h`` implement exactly this)
---------------------------------------------------------------------------------------------
Arrays are in the memory layout of §IV / Fig. 6: shape (S, T) = (steps, trajectories), row t
holds every trajectory's element of timestep t. Inputs (all integers arrive as float64):

* ``reward_codes`` (S, T): uq<n> codes (``UniformFormat(bits)``) of the *dynamically
  standardized* rewards (§II-A; RunningStats runs upstream). Used in standardized form
  (§II-C.1): r = D(level(code)), level(c) = (c - 2**(n-1) + 1/2) * 2**(3-n).
* ``value_codes`` (S, T): uq<n> codes of the block-standardized values (§II-B). ONE block per
  rollout batch: all S*T values V(s_t), the T last values and the bootstrap values share one
  (mu, sigma) (``value_stats`` = [mu, sigma], already in the datapath format D, e.g. from
  ``quantize_blocks(..., stats_fmt=D)`` on the flattened batch). De-standardized in the PE:
  v = D(D(sigma * D(level)) + mu)  (§II-C.2).
* ``done`` (S, T): 0 = the episode continues after step t, 1 = *terminated* at step t (next
  value 0, no bootstrap), 2 = *truncated* at step t (bootstrap with ``bootstrap_codes[t]``,
  the value code of the final observation s_{t+1}; read only there). Either ends the
  advantage recursion (the next element of the column belongs to a new episode).
* ``last_value_codes`` (T,): value code of s_S, the bootstrap at the end of the rollout
  (ignored where done[S-1] != 0).

Datapath D (param ``datapath``: fp32, the seed's 32-bit data, or fixed<W,I,...> with W <= 32).
Every operation is one rounding to D (rl::mul/add/sub of rlhls_types.h: float ops correctly
rounded, fixed ops ap_fixed's full product/sum then assignment), in this order per element::

    g = D(gamma), l = D(lambda), C = D(g*l), Cp[1] = C, Cp[i] = D(Cp[i-1]*C)      (constants)
    r = D(level(rc));  v = deq(vc);  deq(c) = D(D(sigma*D(level(c))) + mu)
    vn = 0 if done==1 else deq(boot) if done==2 else (deq(last) if t==S-1 else v_{t+1})
    delta_t = D(D(r + D(g*vn)) - v)
    cont_t  = done_t == 0 and t < S-1;   m_0 = 1, m_i = m_{i-1} * cont_{t+i-1}
    P = term_{k-1};  P = D(P + term_i) for i = k-2 .. 0;   term_i = m_i ? D(Cp[i]*delta_{t+i}) : 0,
        term_0 = delta_t                                     (k = 1: P = delta_t)
    A_t   = D(P + (m_k ? D(Cp[k]*A_{t+k}) : 0))               (only this mul+add is in the loop)
    RTG_t = D(A_t + v);   stored: O(A_t), O(RTG_t)            (O = ``out``, default D)

This is A_t = sum_{i<k} C^i delta_{t+i} + C^k A_{t+k} (the general form of §III-B), with the
episode masks m_i. Note: the seed prints the general form with C^{(k-1)-i} delta_{t+i}; its own
eq. 10-11 and Table II give C^i delta_{t+i} (the delta nearest to t has weight 1), which is the
correct expansion of eq. 4 and the one used here. With rounding, the k-step order differs from
the 1-step recursion, so different k give slightly different bits; exact equality is between
this model and the C++ for the same parameters. Against a float64 textbook GAE the error is
bounded by ``error_bound`` (quantization half-steps through the geometric sum, plus rounding).

Speed: ``model`` runs the compiled twin of this model (``flow/native_gae.py``: the same element
recursion as one C loop, fp32 eight columns at a time) once ``rlhls.flow.native.install()`` has
built it and checked it bit for bit against ``model_numpy`` (this file's numpy loop, the
reference); without a compiler, for formats it has no path for, or with ``RLHLS_NATIVE=0`` the
numpy model runs. Same bits either way (benchmarks/bench_gae.py prints both rates).

Sizes are compile-time (``rows_param`` None): the FILO memory's row width fixes T and the
unit's schedule (issue cycles, round robin) is in S; a runtime step count would only save
testbench time, which the seed-sized default (1024 x 64) does not need.

Round robin (§III-C): trajectory j runs on PE j mod N as that PE's (j // N)-th job; PEs run
in lock step, each takes one element per II cycles, its trajectory backwards (FILO pop), so
element (t, j) enters PE j mod N at issue cycle ((j // N) * S + (S-1-t)) * II. The model returns
``pe`` (T,) and ``issue_cycle`` (S, T) too, and the C++ schedule writes the same.

Memory (§IV, Algorithm 2, Fig. 6): ``memory_layout(p)``. One FILO stack of S rows; a row holds
the T reward codes and T value codes of one timestep (pushed forward in time, popped
backwards); the PE writes A and RTG in place over them (same row, same column). A word holds
max(n, out bits) bits, so the in-place row is 2*T*max(n, out)/8 bytes: 128 B for the seed's
64 trajectories only when results are stored in 8 bits (out=fixed<8,...>) -- the seed's
figures (128 B/row, 128 KB, 256 B/cycle) count results at the code width, a 32-bit result
needs 4x. Capacity: ceil(S * row bits / 36 Kib) BRAM36 (seed: 128 KB -> 29). Bandwidth
(§V-D2): every cycle each busy PE reads one reward + one value code and writes one A + one RTG:
min(N, T) * 2 * (n + out)/8 bytes/cycle (seed: 256); a BRAM36 port moves 32 data bits (x36
mode, parity unused) = 4 bytes, two ports per block: ports = ceil(bw / 4), blocks = ceil(ports/2)
(seed: 256 B -> 64 ports -> 32 BRAM36). Discrepancy: the seed says "57 BRAM ports", which is
ceil(256 / 4.5), i.e. counting the 36-bit port (4.5 bytes with parity) -- that would give 29
blocks, not the seed's 32; its 32 follows from 4 bytes/port (64 ports), which we use, and
``memory_layout`` reports the seed's 4.5-byte figure as ``bram_ports_36bit``. The unit needs
max(capacity, bandwidth) BRAM36. The C++ unit (``vitis/include/rlhls_gae.h``) declares this
stack (``Stack``: BRAM0 / BRAM1 of S x T words, true dual-port, one bank per PE), pushes the host's
rollout into it once, lets the PEs pop it and overwrite each code with its result, and drains the
results once; push and drain are the data movement the seed's PS does into its BRAMs (§III-A),
not counted in the unit's cycles. Its episode memory (done flags and bootstrap codes, S x T words
of n + 2 bits, for truncated episodes the seed does not treat) is not in these figures.

Cycles and resources (``cost``): cycles = max_p(elements on PE p) * II + depth + k, with
II = ceil(L_loop / k): the loop mul+add takes L_loop = ceil(t_loop * f) cycles (t_loop:
fp32 6.67 ns -- the seed: 2-step lookahead is enough for 300 MHz; fixed 3.33 ns, one DSP MAC),
so II = 1 (one element per cycle per PE, §V-D1) once k >= L_loop. depth = BRAM read 2 +
de-quantize (mul, add) + delta (mul, add, sub) + feed-forward lookahead (mul, k-1 adds) + RTG
add + write 1, with float mul 4 / add 4 and fixed 1 / 1 cycles (``cost.py`` assumptions for
float). Per PE resources at lookahead k (Fig. 11: quadratic in k), anchored at Table IV's 64-PE
2-step fp32 figures (/64: 201 LUT, 849 FF, 12 DSP)::

    R_pe(k) = ceil(R_pe(2) * s_fmt * (4 + k**2) / 8)

i.e. a k-independent half (de-quantizer, delta unit, RTG adder; at k=2 two of the four fp32
multipliers of 3 DSP48E2 each) plus a lookahead half growing as k**2 (delta delay taps, masks,
deeper multiplier pipelining on the loop). s_fmt = 1 for fp32; fixed W: LUT and FF scale by
W/32, DSP by dsp(W)/3 with dsp(W) = ceil(W/27)*ceil(W/18) DSP48E2 per multiplier. These are
model assumptions anchored on one seed point; Fig. 11's exact values are only in its plot.
"""

from __future__ import annotations

import math

import numpy as np

from rlhls.core.errors import RlhlsError

from ..formats import FixedFormat, FloatFormat, UniformFormat, parse_format
from .base import Array, Kernel, Param
from .cost import provenance

__all__ = ["GaeKernel", "set_model_kernel", "memory_layout", "textbook_gae", "error_bound", "level_values",
           "TABLE_IV_PER_PE", "DONE_CONTINUE", "DONE_TERMINATED", "DONE_TRUNCATED"]

DONE_CONTINUE, DONE_TERMINATED, DONE_TRUNCATED = 0, 1, 2

# Table IV (64 PEs, 2-step lookahead, fp32): 12864 LUT, 54336 FF, 768 DSP -> per PE:
TABLE_IV_PER_PE = {"lut": 12864 / 64, "ff": 54336 / 64, "dsp": 768 / 64}
_PROVENANCE = provenance(
    cycles="derived: rows per PE x II + pipeline depth + lookahead (HEPPO-GAE §V-D)",
    latency_us="derived: cycles / clock",
    lut="fitted to HEPPO-GAE Table IV: per-PE LUT, grown with k^2 (Fig. 11)",
    ff="fitted to HEPPO-GAE Table IV: per-PE FF, grown with k^2 (Fig. 11)",
    dsp="fitted to HEPPO-GAE Table IV: per-PE DSP, grown with k^2 (Fig. 11)",
    bram36="derived: the FILO reward/value memory's rows and ports (HEPPO-GAE §V-D2)")
BRAM36_BITS = 36 * 1024  # capacity of one BRAM36 (the seed's "36 Kb")
BRAM_PORT_BYTES = 4  # 32 data bits per port (x36 mode, parity unused), as §V-D2 says
BRAM_PORT_BYTES_WITH_PARITY = 4.5  # the 36-bit port the seed's "57 ports" implies
BRAM_READ_LATENCY, WRITE_LATENCY = 2, 1
OP_LATENCY = {"float": {"mul": 4, "add": 4}, "fixed": {"mul": 1, "add": 1}}
LOOP_NS = {"float": 2 * 1000 / 300.0, "fixed": 1000 / 300.0}  # loop mul+add time (assumption)
MAX_LOOKAHEAD = 4


_model_kernel = None  # flow.native's compiled model: (kernel, p, checked arrays) -> outputs or None


def set_model_kernel(fn):
    """Register the compiled model (None: the numpy model only); returns the previous one.

    ``fn(kernel, p, arrays)`` returns the outputs bit for bit as ``model_numpy``, or None where it
    has no path (formats it does not handle, invalid inputs: the numpy model then runs)."""
    global _model_kernel
    prev, _model_kernel = _model_kernel, fn
    return prev


def level_values(codes, bits: int) -> np.ndarray:
    """uq<n> codes -> their standardized level (float64, exact)."""
    return UniformFormat(bits).decode(np.asarray(codes).astype(np.int64))


# ----------------------------------------------------------------------------- datapath ops

class _Ops:
    """One-rounding operations in a datapath format (the semantics of rl::mul/add/sub)."""

    def __init__(self, fmt):
        self.f = fmt
        self.fixed = isinstance(fmt, FixedFormat)

    def q(self, x):
        return self.f.quantize(np.asarray(x, dtype=np.float64))

    def mul(self, a, b):
        if not self.fixed:  # products of <= 26-bit mantissas are exact in float64
            return self.q(np.multiply(a, b))
        f = self.f
        ma = f.to_mantissa(np.asarray(a, dtype=np.float64))
        mb = f.to_mantissa(np.asarray(b, dtype=np.float64))
        m, _ = f.cast_mantissa(ma * mb, 2 * f.frac_bits)  # W <= 32: |product| < 2**63
        return f.from_mantissa(m)

    def add(self, a, b):  # fixed W <= 32: the float64 sum is exact, then one assignment
        return self.q(np.add(a, b))

    def sub(self, a, b):
        return self.q(np.subtract(a, b))


def _datapath(p):
    return parse_format(p["datapath"])


def _out(p):
    return parse_format(p["datapath"] if p["out"] == "datapath" else p["out"])


def _fmt_class(f) -> str:
    return "fixed" if isinstance(f, FixedFormat) else "float"


# ----------------------------------------------------------------------------- memory layout

def memory_layout(p: dict) -> dict:
    """FILO BRAM stack of §IV / Fig. 6 and the BRAM36 it needs (capacity and bandwidth §V-D2)."""
    T, S, n, N = p["trajectories"], p["steps"], p["bits"], p["pes"]
    ob = _out(p).bits
    word = max(n, ob)  # in place: a word holds a code, later a result
    row_bits = 2 * T * word
    code_row_bytes = 2 * T * n / 8
    cap_bits = S * row_bits
    bram_cap = math.ceil(cap_bits / BRAM36_BITS)
    busy = min(N, T)
    bw = busy * 2 * (n + ob) / 8  # read reward+value codes, write A+RTG, per cycle
    ports = math.ceil(bw / BRAM_PORT_BYTES)
    bram_bw = math.ceil(ports / 2)
    return {
        "rows": S, "columns": T, "order": "FILO: push t = 0..S-1, pop t = S-1..0; results in place",
        "fields": ["reward codes R[t][0..T-1] (BRAM0)", "value codes V[t][0..T-1] (BRAM1)",
                   "advantages over R, rewards-to-go over V"],
        "word_bits": word, "code_bits": n, "result_bits": ob,
        "row_bytes": row_bits / 8, "code_row_bytes": code_row_bytes,
        "capacity_bytes": cap_bits / 8,
        "bram36_capacity": bram_cap,
        "bandwidth_bytes_per_cycle": bw,
        "bram_ports": ports, "bram_ports_36bit": math.ceil(bw / BRAM_PORT_BYTES_WITH_PARITY),
        "bram36_bandwidth": bram_bw,
        "bram36": max(bram_cap, bram_bw),
    }


# ----------------------------------------------------------------------------- reference

def textbook_gae(rewards, values, done, bootstrap, last_value, gamma, lam):
    """float64 CleanRL-style backward GAE with terminated (no bootstrap) / truncated (bootstrap)."""
    r, V, d, B = (np.asarray(a, dtype=np.float64) for a in (rewards, values, done, bootstrap))
    d = np.asarray(done)
    S = r.shape[0]
    adv = np.zeros_like(r)
    last = np.zeros(r.shape[1])
    for t in reversed(range(S)):
        nv = np.asarray(last_value, dtype=np.float64) if t == S - 1 else V[t + 1]
        nv = np.where(d[t] == DONE_TERMINATED, 0.0, np.where(d[t] == DONE_TRUNCATED, B[t], nv))
        cont = (d[t] == DONE_CONTINUE) & (t < S - 1)
        delta = r[t] + gamma * nv - V[t]
        last = delta + gamma * lam * cont * last
        adv[t] = last
    return adv, adv + V


def error_bound(p: dict, sigma: float, max_abs: float, steps_left=None) -> float:
    """Bound on |kernel - textbook| for advantages and RTGs (inputs inside the clip range).

    Quantization: a reward level is within h = step/2 of the standardized reward, a value within
    sigma*h; one delta is off by at most h*(1 + sigma*(1+gamma)) and A sums deltas with weights
    (gamma*lambda)^i, so |dA| <= h*(1 + sigma*(1+gamma)) * sum_i C^i; RTG adds sigma*h.
    Rounding in D: each element does at most 8 + 2k roundings of magnitude <= max_abs (the
    largest |A|, |delta|, |V| of the batch), each <= ulp/2 (fp: 2**-24 relative; fixed: an LSB),
    propagated through the same geometric sum.
    """
    C = p["gamma"] * p["lam"]
    geo = 1.0 / (1.0 - C) if C < 1 else float(p["steps"])
    h = UniformFormat(p["bits"]).step / 2
    quant = h * (1 + sigma * (1 + p["gamma"])) * geo + sigma * h
    D, O = _datapath(p), _out(p)

    def unit(f):
        if isinstance(f, FixedFormat):
            return f.lsb
        return 2.0 ** -(f.man_bits) * max_abs
    ops = 8 + 2 * p["lookahead"]
    rnd = ops * unit(D) * geo + unit(O)
    return quant + rnd


# ----------------------------------------------------------------------------- kernel

class GaeKernel(Kernel):
    name = "gae"
    summary = ("GAE unit: N PE rows (round robin), k-step lookahead advantages and rewards-to-go "
               "from n-bit reward/value codes, FILO BRAM with in-place results")
    source = "seed 000 (HEPPO-GAE) §II, §III-B/C, §IV Alg. 2, §V-D Table IV"
    template = "gae_top.cpp.j2"
    params = (
        Param("trajectories", "int", 64, "trajectories T (memory columns)", min=1, hyperparam="num_envs"),
        Param("steps", "int", 1024, "timesteps S per trajectory (memory rows)", min=1, hyperparam="num_steps"),
        Param("bits", "int", 8, "codeword bits n of rewards and values (uq<n>, 1..16)", min=1,
              hyperparam="quant_bits"),
        Param("lookahead", "int", 2, "lookahead k (1..4) of the advantage recursion", min=1,
              hyperparam="gae_lookahead"),
        Param("pes", "int", 64, "processing rows N (PEs)", min=1),
        Param("clock_mhz", "float", 300.0, "PL clock (MHz)", min=1e-3),
        Param("gamma", "float", 0.99, "discount gamma (rounded to the datapath)", min=0.0, hyperparam="gamma"),
        Param("lam", "float", 0.95, "GAE lambda (rounded to the datapath)", min=0.0, hyperparam="gae_lambda"),
        Param("datapath", "format", "fp32", "datapath format D: fp32 or fixed<W,I,...> (W <= 32)"),
        Param("out", "str", "datapath", "format the results are stored in ('datapath' = D; fp32 or fixed)"),
    )
    inputs = ("reward_codes", "value_codes", "done", "bootstrap_codes", "last_value_codes", "value_stats")
    outputs = ("advantages", "returns", "pe", "issue_cycle")
    implements = ("gae",)

    # -- a training-graph node: the design's GAE unit, with its PPO's gamma and lambda
    def spec_params(self, spec):
        return {**spec.params, "datapath": spec.acc}  # storage: the uq<n> codes (parameter 'bits')

    def node_params(self, node, ctx):
        if ctx.spec(self.name, "PL") is None:
            return None  # a design without a GAE unit
        # the rollout's sizes, gamma and lambda from the design's hyperparameters (Param.hyperparam)
        return {**self.linked_params(ctx.design.hyperparams), **ctx.spec_params(self),
                "clock_mhz": ctx.clock_mhz("PL")}

    def node_points(self, node, ctx, unit):
        p = self.resolve(self.node_params(node, ctx))
        return [(f"pes{p['pes']}", self.cost(p, unit=unit, device=ctx.device))]

    # -- parameters
    def validate(self, p):
        if not 1 <= p["bits"] <= 16:
            raise self._err(f"parameter 'bits' = {p['bits']} must be in 1..16 (uq<n> codewords)")
        if not 1 <= p["lookahead"] <= MAX_LOOKAHEAD:
            raise self._err(f"parameter 'lookahead' = {p['lookahead']} must be in 1..{MAX_LOOKAHEAD}")
        for key in ("gamma", "lam"):
            if not 0.0 <= p[key] <= 1.0:
                raise self._err(f"parameter {key!r} = {p[key]!r} must be in [0, 1]")
        for key in ("datapath", "out"):
            text = p[key]
            if key == "out" and text == "datapath":
                continue
            try:
                f = parse_format(text)
            except RlhlsError as e:
                raise self._err(f"parameter {key!r} = {text!r}: {e}") from None
            lim = 32 if key == "datapath" else 53
            if isinstance(f, FixedFormat):
                if f.width > lim:
                    raise self._err(f"parameter {key!r} = {text!r} is wider than {lim} bits "
                                    f"(expected fp32 or fixed<W,I,...> with W <= {lim})")
            elif not (isinstance(f, FloatFormat) and str(f) == "fp32"):
                raise self._err(f"parameter {key!r} = {text!r} is not supported "
                                f"(expected fp32 or fixed<W,I,...> with W <= {lim})")
            if key == "out":
                p[key] = str(f)
        D = _datapath(p)
        if D.quantize(1.0) != 1.0:
            raise self._err(f"parameter 'datapath' = {p['datapath']!r} cannot hold 1.0 "
                            "(the lookahead weight of delta_t; expected more integer bits)")

    def formats(self, p):
        n = p["bits"]
        return {"datapath": _datapath(p), "out": _out(p), "code": FixedFormat(n, n, False),
                "done": FixedFormat(2, 2, False), "index": FixedFormat(40, 40, False)}

    def arrays(self, p):
        S, T = p["steps"], p["trajectories"]
        ins = [Array("reward_codes", (S, T), "code"), Array("value_codes", (S, T), "code"),
               Array("done", (S, T), "done"), Array("bootstrap_codes", (S, T), "code"),
               Array("last_value_codes", (T,), "code"), Array("value_stats", (2,), "datapath")]
        outs = [Array("advantages", (S, T), "out"), Array("returns", (S, T), "out"),
                Array("pe", (T,), "index"), Array("issue_cycle", (S, T), "index")]
        return ins, outs

    def cpp_constants(self, p):
        return {"GAMMA": ("datapath", p["gamma"]), "LAMBDA": ("datapath", p["lam"])}

    def cpp_ints(self, p):
        """Compile-time sizes of rlhls_gae.h's template (the ``ints`` of kernel.h.j2)."""
        return {"T": p["trajectories"], "S": p["steps"], "NB": p["bits"], "K": p["lookahead"],
                "NPE": p["pes"], "II": self.ii(p)}

    # -- numerics
    def constants(self, p):
        """(g, C powers Cp[0..k]) in D, as the PE holds them."""
        ops = _Ops(_datapath(p))
        g, l = ops.q(p["gamma"]), ops.q(p["lam"])
        C = ops.mul(g, l)
        cp = [ops.q(1.0), C]
        for _ in range(2, p["lookahead"] + 1):
            cp.append(ops.mul(cp[-1], C))
        return g, cp

    def model(self, p, **arrays):
        """The compiled loop where one is registered (``set_model_kernel``), else ``model_numpy``."""
        a = self.check_arrays(p, arrays)
        if _model_kernel is not None:
            y = _model_kernel(self, p, a)
            if y is not None:
                return y
        return self._model_numpy(p, a)

    def model_numpy(self, p, **arrays):
        """The numpy model (the reference the compiled loop is checked against)."""
        return self._model_numpy(p, self.check_arrays(p, arrays))

    def _model_numpy(self, p, a: dict):
        S, T, n, K, N = p["steps"], p["trajectories"], p["bits"], p["lookahead"], p["pes"]
        for name in ("reward_codes", "value_codes", "bootstrap_codes", "last_value_codes"):
            c = a[name]
            if c.size and (np.any(c != np.floor(c)) or c.min() < 0 or c.max() >= (1 << n)):
                raise self._err(f"input {name!r}: codes must be integers in 0..{(1 << n) - 1} (bits={n})")
        done = a["done"]
        if np.any(~np.isin(done, (0, 1, 2))):
            raise self._err("input 'done': expected 0 (continue), 1 (terminated) or 2 (truncated)")
        D, O = _datapath(p), _out(p)
        ops = _Ops(D)
        mu, sigma = D.quantize(a["value_stats"])
        g, cp = self.constants(p)

        def deq(codes):
            return ops.add(ops.mul(sigma, ops.q(level_values(codes, n))), mu)

        r = ops.q(level_values(a["reward_codes"], n))
        v = deq(a["value_codes"])
        vnext = np.empty_like(v)
        vnext[:-1] = v[1:]
        vnext[-1] = deq(a["last_value_codes"])
        vn = np.where(done == DONE_TERMINATED, 0.0,
                      np.where(done == DONE_TRUNCATED, deq(a["bootstrap_codes"]), vnext))
        delta = ops.sub(ops.add(r, ops.mul(g, vn)), v)
        cont = done == DONE_CONTINUE
        cont[-1] = False  # nothing follows the last step of the rollout

        adv = np.zeros((S + K, T))  # rows >= S: past the rollout (masked anyway)
        dpad = np.zeros((S + K, T))
        dpad[:S] = delta
        cpad = np.zeros((S + K, T), dtype=bool)
        cpad[:S] = cont
        for t in range(S - 1, -1, -1):
            m = [np.ones(T, dtype=bool)]
            for i in range(1, K + 1):
                m.append(m[-1] & cpad[t + i - 1])

            def term(i):
                return dpad[t] if i == 0 else np.where(m[i], ops.mul(cp[i], dpad[t + i]), 0.0)
            P = term(K - 1)
            for i in range(K - 2, -1, -1):
                P = ops.add(P, term(i))
            fb = np.where(m[K], ops.mul(cp[K], adv[t + K]), 0.0)
            adv[t] = ops.add(P, fb)
        A = adv[:S]
        rtg = ops.add(A, v)
        j = np.arange(T)
        s_idx = (S - 1 - np.arange(S))[:, None]
        issue = ((j // N)[None, :] * S + s_idx) * self.ii(p)
        return {"advantages": O.quantize(A), "returns": O.quantize(rtg),
                "pe": (j % N).astype(np.float64), "issue_cycle": issue.astype(np.float64)}

    def random_inputs(self, p, rng):
        """Codes from standard-normal rewards/values (inside the clip range) with random
        terminated/truncated ends, and (mu, sigma) of the value block in D."""
        S, T, n = p["steps"], p["trajectories"], p["bits"]
        uq = UniformFormat(n)
        clipn = lambda shape: np.clip(rng.standard_normal(shape), -3.9, 3.9)  # noqa: E731
        done = np.zeros((S, T))
        u = rng.random((S, T))
        done[u < 0.04] = DONE_TERMINATED
        done[(u >= 0.04) & (u < 0.08)] = DONE_TRUNCATED
        D = _datapath(p)
        mu, sigma = D.quantize(rng.normal(0.0, 2.0)), D.quantize(rng.uniform(0.5, 3.0))
        return {"reward_codes": uq.encode(clipn((S, T))).astype(np.float64),
                "value_codes": uq.encode(clipn((S, T))).astype(np.float64),
                "done": done,
                "bootstrap_codes": uq.encode(clipn((S, T))).astype(np.float64),
                "last_value_codes": uq.encode(clipn(T)).astype(np.float64),
                "value_stats": np.array([mu, sigma], dtype=np.float64)}

    # -- cost
    def loop_latency(self, p) -> int:
        ns = LOOP_NS[_fmt_class(_datapath(p))]
        return max(1, math.ceil(ns * p["clock_mhz"] / 1000.0 - 1e-9))

    def ii(self, p) -> int:
        return math.ceil(self.loop_latency(p) / p["lookahead"])

    def depth(self, p) -> int:
        lat = OP_LATENCY[_fmt_class(_datapath(p))]
        k = p["lookahead"]
        muls = 1 + 1 + 1  # de-quantize, gamma*V, feed-forward C^i*delta (parallel taps)
        adds = 1 + 2 + (k - 1) + 1  # +mu, r+gV, -V, feed-forward sum, RTG
        return BRAM_READ_LATENCY + muls * lat["mul"] + adds * lat["add"] + WRITE_LATENCY

    def pe_resources(self, p) -> dict:
        """Per-PE LUT/FF/DSP (module docstring formula)."""
        k = p["lookahead"]
        D = _datapath(p)
        if isinstance(D, FixedFormat):
            w = D.width
            s = {"lut": w / 32, "ff": w / 32, "dsp": math.ceil(w / 27) * math.ceil(w / 18) / 3}
        else:
            s = {"lut": 1.0, "ff": 1.0, "dsp": 1.0}
        return {r: math.ceil(round(TABLE_IV_PER_PE[r] * s[r] * (4 + k * k) / 8, 9))
                for r in ("lut", "ff", "dsp")}

    def cost(self, p, unit="PL", device=None):
        S, T, N = p["steps"], p["trajectories"], p["pes"]
        mem = memory_layout(p)
        if unit == "PS":
            from .base import get_dev
            from .cost import ps_cost
            flops = S * T * (10 + 2 * p["lookahead"])
            c = ps_cost(flops, get_dev(device), nbytes=mem["capacity_bytes"] * 2)
            out = {"cycles": c["cycles"], "latency_us": c["latency_us"],
                   "throughput_el_per_s": S * T / (c["latency_us"] * 1e-6),
                   "memory_bytes": int(math.ceil(mem["capacity_bytes"])),
                   "resources": {k: 0 for k in ("lut", "ff", "dsp", "bram36", "uram", "aie_tiles")},
                   "source": c.get("source", ""), "provenance": c["provenance"]}
            return out
        if unit != "PL":
            raise self._err(f"unit {unit!r} is not supported (expected PL or PS)")
        ii = self.ii(p)
        per_pe = [math.ceil((T - q) / N) * S for q in range(min(N, T))]
        cycles = max(per_pe) * ii + self.depth(p) + p["lookahead"]
        f = p["clock_mhz"]
        pe = self.pe_resources(p)
        res = {r: N * pe[r] for r in ("lut", "ff", "dsp")}
        res.update(bram36=mem["bram36"], uram=0, aie_tiles=0)
        return {"cycles": int(cycles), "latency_us": cycles / f,
                "throughput_el_per_s": min(N, T) * f * 1e6 / ii,
                "memory_bytes": int(math.ceil(mem["capacity_bytes"])),
                "resources": res, "pe_resources": pe, "ii": ii, "depth": self.depth(p),
                "memory": mem,
                "source": "HEPPO-GAE §V-D: Table IV per PE, Fig. 11 k^2 growth, §V-D2 BRAM (see gae.py)",
                "provenance": _PROVENANCE}
