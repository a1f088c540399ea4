"""HEPPO-GAE reward/value standardizer + n-bit quantizer (seed 000 §II-A/B/C, §III-A).

It prepares the GAE unit's memory image (``gae.py``) from one rollout: rewards -> dynamic
standardization with the running Welford statistics (eq. 6-9; state in, state out) -> uq<n>
codes; the rollout's values, the bootstrap row and the values of truncated episodes' final
observations -> ONE block (mu, sigma) (§II-B) -> uq<n> codes. Outputs are named as the GAE
kernel's inputs (``reward_codes``, ``value_codes``, ``last_value_codes``, ``bootstrap_codes``,
``value_stats``), so they feed it unchanged.

Semantics (the numpy model here and ``vitis/include/rlhls_standardizer.h`` compute exactly this)
-------------------------------------------------------------------------------------------------
Inputs, shape (S, T) = (steps, trajectories) in the row layout of gae.py, plus:
``rewards``, ``values`` (S, T); ``done`` (S, T) 0 continue / 1 terminated / 2 truncated;
``trunc_values`` (S, T), V(final observation), read only where done == 2; ``bootstrap`` (T,),
V(s_S); ``state_in`` (3,) = [n, M_n, S_n] of the running reward statistics (n an integer).
Each array is first rounded to ``storage`` (fp32: the PS writes fp32 words); from there:

float64 (always; the trainer's numbers, designs/quantizer.py, bit for bit):
  * block sums are numpy's pairwise summation, in numpy's order (``pairwise_sum``): leaves of
    <= 128 consecutive elements, each summed in 8 interleaved partial sums (element i into
    partial i mod 8), reduced ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)), the last < 8 elements added
    in order (a leaf of < 8 elements: in order from -0.0); a longer range splits at
    h = n/2 rounded down to a multiple of 8 and sums left + right; the total is 0.0 + tree.
  * moments of a block x of M elements: mean = sum(x) / M, m2 = sum((x - mean)^2) (two passes).
  * rewards ``dynamic`` (RunningStats.update, Chan's merge of the batch): with (n0, M0, S0) in,
    d = mean - M0, n = n0 + M, M' = M0 + d*M/n, S' = S0 + m2 + d*d*n0*M/n (left to right),
    state out (n, M', S'), mu = M', sigma = sqrt(S'/n) (eq. 9).
    rewards ``block`` (Table III exp 3-4): the rewards are one block (next item); state passes.
  * a block (values always): mu = mean, sigma = sqrt(m2 / M) (population std, np.std).
    The value block is values (row-major), then bootstrap, then trunc_values where done == 2
    (row-major): the trainer's ``np.concatenate([values, bootstrap, tv[trunc]])``.
  * sigma' = sigma if finite and > 0 else 1 (a zero-variance block is standardized by 1).

per element, in ``datapath`` D:
  * fp64: z = (x - mu) / sigma' (float64: the trainer's quantize_standardized / quantize_blocks).
  * fp32 (the design's): constants m = D(mu), g = D(1/sigma') (1/sigma' in float64, one
    rounding); z = D(D(D(x) - m) * g): one fp32 subtract and one fp32 multiply per element, no
    divider. The codes can differ from the float64 path by one level where z lies within an
    fp32 rounding of a level edge: on 20 random design-sized rollouts (2.6e6 codes) 0 at n = 3,
    3 at n = 8, 16 at n = 10, never more than one level.
  * code = uq<n>.encode(z): floor(z * 2**(n-3)) saturated to [-2**(n-1), 2**(n-1) - 1], plus
    2**(n-1) (ap_fixed<n,3,AP_TRN,AP_SAT> bits, offset binary): clip range [-4, 4) sigma;
    z >= 4 or z < -4 counts as an overflow (z = -4 is code 0, no overflow; NaN -> code
    2**(n-1), an overflow, as formats.py). bits n in 3..16 (the seed's 3..10 and more; from 3 the
    scaling by 2**(n-3) is exact, below it a step would be 2 sigma or more).

Outputs: ``reward_codes`` (S, T); ``value_codes`` (S, T), ``last_value_codes`` (T,) (the
bootstrap row), ``bootstrap_codes`` (S, T) (codes of trunc_values where done == 2, else 0);
``state_out`` (3,); ``reward_stats`` = [mu, sigma'] the rewards were standardized with;
``value_stats`` = [mu, sigma'] of the value block (float64; the GAE unit rounds it to its D);
``overflow`` = [rewards, values] clipped to the outermost levels (the trainer's info counts).

Cycles (``cost``): two streams (rewards, value block) run side by side, ``lanes`` L elements
per cycle each, three passes per stream over its block: sum, sum of squared deviations,
standardize + encode. The rollout words come once from the PS over the PS->PL link
(catalogue: one 128-bit HP port at the PL clock, 16 B/cycle) into an on-chip rollout buffer
(UltraRAM where the device has it, else BRAM36; L banks, the value buffer sized for the worst
case of every step truncated); pass 1 consumes them as they arrive, passes 2-3 read the
buffer. With M_r = S*T rewards and M_v = (S+1)*T (+ truncations, 0 in this static model)
values, B link bytes/cycle, ``op`` latencies below, red(M) = ADD*(3 + 7 + levels(M)) the
reduction tail (a leaf's 3-level partial-sum reduction, <= 7 tail adds, the tree's levels)::

    pass 1 = max(ceil(bytes_in / B), ceil(M_v / L)) + READ + red(M_v)
    mean   = DIV
    pass 2 = ceil(M_v / L) + READ + SUB + MUL + red(M_v)
    stats  = dynamic: 3 MUL + DIV + ADD + DIV + SQRT (Welford merge, S'/n, sqrt), block: DIV + SQRT;
             fp32 adds DIV + 1 (1/sigma', the casts)
    pass 3 = ceil(M_v / L) + READ + (fp32: FSUB + FMUL | fp64: SUB + DIV) + ENC + WRITE

(M_v > M_r: the value stream sets the pace; leaves are independent, so a lane's adder takes a
new element every cycle by interleaving leaves, and the leaf sums combine on one adder off the
streaming path.) Design (S=1024, T=64, L=8, fp32, dynamic, ZCU106): 590 080 bytes in ->
pass 1 = 36 880 + 142 (link-bound), pass 2 = 8 386, stats = 150, pass 3 = 8 212: 53 770 cycles =
179 us at 300 MHz (the GAE unit itself: 1 061 cycles; the PS cost model: 787 us). With fewer
lanes the streams set the pace (L = 1: 658 us); with more, pass 1 stays link-bound (L = 16: 152 us).

Resources per stream: per lane one fp64 adder (partial sums), one fp64 subtracter and one fp64
multiplier (pass 2, the fp64 pass 3 subtract), the pass-3 datapath (fp32: fsub + fmul; fp64:
ddiv), 8 partial-sum registers and an n-bit encoder; per stream one scalar unit (dadd, dmul,
ddiv, dsqrt) and one tree adder; one control block (cost.py LUT_BASE / FF_BASE). Operator
figures (``OPS``) are assumptions of the order of AMD PG060 / Vitis HLS reports at 300 MHz
(fp32 DSPs as the catalogue's dsp_per_mac_fp32 split: fmul 3, fadd 2), not measurements.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rlhls.core.errors import RlhlsError

from ..formats import FixedFormat, FloatFormat, UniformFormat, parse_format
from ..quantizer import EXPERIMENTS
from .base import Array, Kernel, Param, check_formats, get_dev

__all__ = ["Standardizer", "pairwise_sum", "moments", "FP64", "OPS", "DONE_TRUNCATED"]

DONE_CONTINUE, DONE_TERMINATED, DONE_TRUNCATED = 0, 1, 2
PW_BLOCK, PW_UNROLL = 128, 8  # numpy's PW_BLOCKSIZE and its 8-way unrolled leaf
MIN_BITS, MAX_BITS = 3, 16
MAX_LANES = 64
COUNT_LIMIT = 2 ** 53  # n crosses the C ABI as float64

# Operator latency (cycles at 300 MHz) and resources: assumptions (module docstring).
OPS = {
    "dadd": {"lat": 7, "lut": 700, "ff": 1000, "dsp": 3},
    "dmul": {"lat": 6, "lut": 200, "ff": 350, "dsp": 10},
    "ddiv": {"lat": 31, "lut": 3200, "ff": 5500, "dsp": 0},
    "dsqrt": {"lat": 31, "lut": 1900, "ff": 3300, "dsp": 0},
    "fadd": {"lat": 4, "lut": 220, "ff": 350, "dsp": 2},
    "fmul": {"lat": 4, "lut": 80, "ff": 150, "dsp": 3},
}
READ_LATENCY, WRITE_LATENCY, ENC_LATENCY = 2, 1, 1
LUT_BASE, FF_BASE = 1200, 1800  # control + AXI (as cost.py)
URAM_ROWS, URAM_WIDTH = 4096, 72  # one UltraRAM: 4K x 72 bits
LINK_BYTES_PER_CYCLE = 16  # fallback without a catalogue link: one 128-bit port


class _Binary64(FloatFormat):
    """IEEE binary64 as an array format (C++ ``double``): the statistics cross as they are."""

    @property
    def cpp_type(self):
        return "double"

    def __str__(self):
        return "fp64"

    def quantize(self, x, *, return_overflow=False):
        y = np.array(x, dtype=np.float64)
        return (y, 0) if return_overflow else y


FP64 = _Binary64(11, 52)
FP32 = parse_format("fp32")
_DATAPATHS = {"fp32": "fp32", "float<8,23>": "fp32", "fp64": "fp64", "float<11,52>": "fp64",
              "float64": "fp64", "double": "fp64"}


# ----------------------------------------------------------------------------- float64 statistics

@functools.lru_cache(maxsize=64)
def _pw_plan(n: int):
    """numpy's pairwise tree over n elements: leaves (start, length) in order and the tree
    (a leaf index, or a (left, right) pair)."""
    leaves = []

    def split(s, m):
        if m <= PW_BLOCK:
            leaves.append((s, m))
            return len(leaves) - 1
        h = m // 2
        h -= h % PW_UNROLL
        return (split(s, h), split(s + h, m - h))

    tree = split(0, n)
    return tuple(leaves), tree


def _leaf_sums(a: np.ndarray, leaves) -> np.ndarray:
    out = np.empty(len(leaves))
    starts = np.array([s for s, _ in leaves], dtype=np.int64)
    lens = np.array([m for _, m in leaves], dtype=np.int64)
    for m in np.unique(lens).tolist():
        sel = np.nonzero(lens == m)[0]
        X = a[starts[sel, None] + np.arange(m)]
        if m < PW_UNROLL:
            res = np.full(len(sel), -0.0)
            for i in range(m):
                res = res + X[:, i]
        else:
            r = X[:, :8].copy()
            k = m - m % 8
            for i in range(8, k, 8):
                r += X[:, i:i + 8]
            res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
            for i in range(k, m):
                res = res + X[:, i]
        out[sel] = res
    return out


def pairwise_sum(x) -> float:
    """Sum of a 1-D float64 array in numpy's pairwise order (module docstring): np.sum's bits."""
    a = np.ascontiguousarray(x, dtype=np.float64).ravel()
    if a.size == 0:
        return 0.0
    leaves, tree = _pw_plan(int(a.size))
    ls = _leaf_sums(a, leaves).tolist()

    def ev(t):
        return ls[t] if isinstance(t, int) else ev(t[0]) + ev(t[1])
    return 0.0 + ev(tree)


def _tree_levels(n: int) -> int:
    _, tree = _pw_plan(n)

    def depth(t):
        return 0 if isinstance(t, int) else 1 + max(depth(t[0]), depth(t[1]))
    return depth(tree)


def moments(x) -> tuple[float, float]:
    """(mean, sum of squared deviations) of a block, two passes in numpy's order."""
    a = np.ascontiguousarray(x, dtype=np.float64).ravel()
    mean = pairwise_sum(a) / a.size
    d = a - mean
    return mean, pairwise_sum(d * d)


def _safe(sigma: float) -> float:
    return sigma if math.isfinite(sigma) and sigma > 0 else 1.0


# ----------------------------------------------------------------------------- kernel

class Standardizer(Kernel):
    name = "standardizer"
    summary = ("reward/value standardizer + uq<n> quantizer: Welford dynamic standardization of "
               "rewards (state in/out), one (mu, sigma) block of values; the GAE unit's memory image")
    source = "seed 000 (HEPPO-GAE) §II-A eq. 6-9, §II-B, §II-C, §III-A"
    template = "standardizer.cpp.j2"
    params = (
        Param("trajectories", "int", 64, "trajectories T (columns of the rollout)", min=1, hyperparam="num_envs"),
        Param("steps", "int", 1024, "timesteps S per trajectory (rows of the rollout)", min=1, hyperparam="num_steps"),
        Param("bits", "int", 8, f"codeword bits n (uq<n>, {MIN_BITS}..{MAX_BITS})", min=1, hyperparam="quant_bits"),
        Param("rewards", "str", "dynamic", "reward standardization: dynamic (running Welford, §II-A) "
              "or block (one (mu, sigma) per rollout, Table III exp 3-4)", choices=("dynamic", "block")),
        Param("values", "str", "block", "value standardization: block (§II-B; the seed's dynamic "
              "standardization of values failed)", choices=("block",)),
        Param("storage", "format", "fp32",
              "format of the reward / value words the PS writes (fp32, fp16, bf16, fixed)"),
        Param("datapath", "str", "fp32", "per-element standardization: fp32 (z = (x - m) * (1/sigma) in "
              "fp32) or fp64 (z = (x - mu) / sigma in float64, the trainer's path)"),
        Param("lanes", "int", 8, f"elements per cycle per stream (1..{MAX_LANES})", min=1),
        Param("clock_mhz", "float", 300.0, "PL clock (MHz)", min=1e-3),
    )
    inputs = ("rewards", "values", "done", "trunc_values", "bootstrap", "state_in")
    outputs = ("reward_codes", "value_codes", "last_value_codes", "bootstrap_codes", "state_out",
               "reward_stats", "value_stats", "overflow")
    units = ("PL",)
    implements = ("gae",)  # it writes the GAE unit's memory image: part of the node

    # -- a training-graph node
    def spec_params(self, spec):
        return {**spec.params, "storage": spec.storage, "datapath": spec.acc}

    def node_params(self, node, ctx):
        if ctx.spec(self.name, "PL") is None:
            return None  # the design has no standardizer
        # the rollout's sizes and the code bits from the hyperparameters (Param.hyperparam), else the GAE unit's
        p = {**self.linked_params(ctx.design.hyperparams), **ctx.spec_params(self)}
        gae = ctx.spec("gae", "PL")
        gp = gae.params if gae is not None else {}
        for key in ("steps", "trajectories", "bits"):
            if key not in p and key in gp:
                p[key] = gp[key]
        if "bits" in gp and "bits" in p and int(gp["bits"]) != int(p["bits"]):
            raise RlhlsError(f"design '{ctx.design.name}': standardizer bits = {p['bits']} but the gae "
                             f"unit reads {gp['bits']}-bit codes (expected the same codeword width)")
        p.setdefault("clock_mhz", ctx.clock_mhz("PL"))
        return p

    def bind_params(self, params, hp):
        """The run's Table III experiment sets how rewards are standardized (block: exp 3-4)."""
        out = super().bind_params(params, hp)
        mode = EXPERIMENTS.get(hp.get("experiment"), {})
        if mode.get("quant"):
            out["rewards"] = "dynamic" if mode["reward"] == "dynamic" else "block"
        return out

    def node_points(self, node, ctx, unit):
        p = self.resolve(self.node_params(node, ctx))
        return [(f"lanes{p['lanes']}", self.cost(p, unit=unit, device=ctx.device))]

    # -- parameters
    def validate(self, p):
        if not MIN_BITS <= p["bits"] <= MAX_BITS:
            raise self._err(f"parameter 'bits' = {p['bits']} must be in {MIN_BITS}..{MAX_BITS} (uq<n> codewords)")
        if p["lanes"] > MAX_LANES:
            raise self._err(f"parameter 'lanes' = {p['lanes']} must be in 1..{MAX_LANES}")
        dp = _DATAPATHS.get(str(p["datapath"]).strip().lower())
        if dp is None:
            raise self._err(f"parameter 'datapath' = {p['datapath']!r} is not supported (expected fp32 or fp64)")
        p["datapath"] = dp
        check_formats(self.name, p, keys=("storage",))
        if p["steps"] * p["trajectories"] * 3 >= 2 ** 31:
            raise self._err(f"rollout {p['steps']} x {p['trajectories']} is too large (expected fewer than "
                            f"{2 ** 31 // 3} elements: C++ int indices)")

    def formats(self, p):
        n = p["bits"]
        return {"storage": parse_format(p["storage"]), "datapath": FP32 if p["datapath"] == "fp32" else FP64,
                "stats": FP64, "code": FixedFormat(n, n, False), "done": FixedFormat(2, 2, False),
                "count": FixedFormat(40, 40, False)}

    def arrays(self, p):
        S, T = p["steps"], p["trajectories"]
        ins = [Array("rewards", (S, T), "storage"), Array("values", (S, T), "storage"),
               Array("done", (S, T), "done"), Array("trunc_values", (S, T), "storage"),
               Array("bootstrap", (T,), "storage"), Array("state_in", (3,), "stats")]
        outs = [Array("reward_codes", (S, T), "code"), Array("value_codes", (S, T), "code"),
                Array("last_value_codes", (T,), "code"), Array("bootstrap_codes", (S, T), "code"),
                Array("state_out", (3,), "stats"), Array("reward_stats", (2,), "stats"),
                Array("value_stats", (2,), "stats"), Array("overflow", (2,), "count")]
        return ins, outs

    def cpp_ints(self, p):
        return {"S": p["steps"], "T": p["trajectories"], "NB": p["bits"], "L": p["lanes"],
                "DYN": int(p["rewards"] == "dynamic"), "RECIP": int(p["datapath"] == "fp32")}

    def check_arrays(self, p, arrays):
        """Shapes (base) and values: finite words after rounding to storage (trunc_values where
        done == 2), done in {0, 1, 2}, a valid Welford state."""
        a = super().check_arrays(p, arrays)
        st = parse_format(p["storage"])
        done = a["done"]
        if np.any(~np.isin(done, (DONE_CONTINUE, DONE_TERMINATED, DONE_TRUNCATED))):
            raise self._err("input 'done': expected 0 (continue), 1 (terminated) or 2 (truncated)")
        for name in ("rewards", "values", "bootstrap", "trunc_values"):
            v = st.quantize(a[name])
            if name == "trunc_values":
                v = v[done == DONE_TRUNCATED]
            bad = ~np.isfinite(v)
            if np.any(bad):
                raise self._err(f"input {name!r}: {int(bad.sum())} value(s) not finite in {p['storage']} "
                                "(expected finite rewards and values)")
        n0, m0, s0 = (float(x) for x in a["state_in"])
        if not (n0 == math.floor(n0) and 0 <= n0 and n0 + p["steps"] * p["trajectories"] < COUNT_LIMIT):
            raise self._err(f"input 'state_in': count n = {n0!r} must be an integer in 0..2**53 - S*T")
        if not (math.isfinite(m0) and math.isfinite(s0) and s0 >= 0):
            raise self._err(f"input 'state_in': mean {m0!r} and S {s0!r} must be finite, S >= 0")
        return a

    # -- numerics
    def _codes(self, p, x, mu, sigma):
        """Standardize x (float64 words) with (mu, sigma') in the datapath and encode: (codes, overflow)."""
        if p["datapath"] == "fp32":
            m, g = FP32.quantize(mu), FP32.quantize(1.0 / sigma)
            z = FP32.quantize(FP32.quantize(FP32.quantize(x) - m) * g)
        else:
            z = (x - mu) / sigma
        codes, ovf = UniformFormat(p["bits"]).encode(z, return_overflow=True)
        return codes.astype(np.float64), int(ovf)

    def model(self, p, **arrays):
        a = self.check_arrays(p, arrays)
        S, T = p["steps"], p["trajectories"]
        st = parse_format(p["storage"])
        r = st.quantize(a["rewards"]).ravel()
        done = a["done"].ravel()
        trunc = done == DONE_TRUNCATED
        n0, m0, s0 = (float(x) for x in a["state_in"])
        mb, m2 = moments(r)
        if p["rewards"] == "dynamic":  # RunningStats.update: Chan's merge of the batch
            nb = r.size
            n = int(n0) + nb
            d = mb - m0
            m_new = m0 + d * nb / n
            s_new = s0 + m2 + d * d * n0 * nb / n
            state = [float(n), m_new, s_new]
            r_mu, r_sigma = m_new, _safe(float(np.sqrt(s_new / n)))
        else:
            state = [n0, m0, s0]
            r_mu, r_sigma = mb, _safe(float(np.sqrt(m2 / r.size)))
        r_codes, r_ovf = self._codes(p, r, r_mu, r_sigma)
        blk = np.concatenate([st.quantize(a["values"]).ravel(), st.quantize(a["bootstrap"]),
                              st.quantize(a["trunc_values"]).ravel()[trunc]])
        v_mu, v_m2 = moments(blk)
        v_sigma = _safe(float(np.sqrt(v_m2 / blk.size)))
        v_codes, v_ovf = self._codes(p, blk, v_mu, v_sigma)
        boot = np.zeros(S * T)
        boot[trunc] = v_codes[(S + 1) * T:]
        return {"reward_codes": r_codes.reshape(S, T), "value_codes": v_codes[:S * T].reshape(S, T),
                "last_value_codes": v_codes[S * T:(S + 1) * T], "bootstrap_codes": boot.reshape(S, T),
                "state_out": np.array(state), "reward_stats": np.array([r_mu, r_sigma]),
                "value_stats": np.array([v_mu, v_sigma]),
                "overflow": np.array([r_ovf, v_ovf], dtype=np.float64)}

    def random_inputs(self, p, rng):
        """A rollout with an offset and scale, a few +-(5..12) sigma outliers (saturation), random
        terminated / truncated ends, and a running state from two earlier rollouts."""
        from ..quantizer import RunningStats

        S, T = p["steps"], p["trajectories"]

        def data(shape):
            loc, scale = rng.normal(0.0, 3.0), 10.0 ** rng.uniform(-1.0, 1.0)
            x = loc + scale * rng.standard_normal(shape)
            out = rng.random(shape) < 0.03
            x[out] = loc + scale * rng.choice([-1.0, 1.0], int(out.sum())) * rng.uniform(5.0, 12.0, int(out.sum()))
            return x
        done = np.zeros((S, T))
        u = rng.random((S, T))
        done[u < 0.05] = DONE_TERMINATED
        done[(u >= 0.05) & (u < 0.1)] = DONE_TRUNCATED
        prior = RunningStats()
        for _ in range(2):
            prior.update(parse_format(p["storage"]).quantize(data((S, T))))
        tv = np.where(done == DONE_TRUNCATED, data((S, T)), 0.0)
        return {"rewards": data((S, T)), "values": data((S, T)), "done": done, "trunc_values": tv,
                "bootstrap": data(T), "state_in": np.array([float(prior.n), prior.m, prior.s])}

    # -- cost
    def _lat(self, op):
        return OPS[op]["lat"]

    def cycles(self, p, device=None, n_trunc: int = 0) -> dict:
        """Cycle terms of one rollout (module docstring); n_trunc truncated steps join the value block."""
        S, T, L = p["steps"], p["trajectories"], p["lanes"]
        w = parse_format(p["storage"]).bits
        Mv = (S + 1) * T + n_trunc
        bytes_in = math.ceil((2 * S * T + T + n_trunc) * w / 8) + S * T  # words + one done byte per step
        B = _link_bytes_per_cycle(get_dev(device), p["clock_mhz"])
        ADD, MUL, DIV, SQRT = (self._lat(o) for o in ("dadd", "dmul", "ddiv", "dsqrt"))
        red = ADD * (3 + 7 + _tree_levels(Mv))
        stream = math.ceil(Mv / L)
        load = math.ceil(bytes_in / B)
        p1 = max(load, stream) + READ_LATENCY + red
        p2 = DIV + stream + READ_LATENCY + ADD + MUL + red
        stats = 3 * MUL + DIV + ADD + DIV + SQRT if p["rewards"] == "dynamic" else DIV + SQRT
        if p["datapath"] == "fp32":
            stats += DIV + 1
            ew = self._lat("fadd") + self._lat("fmul")
        else:
            ew = ADD + DIV
        p3 = stream + READ_LATENCY + ew + ENC_LATENCY + WRITE_LATENCY
        return {"pass1": p1, "pass2": p2, "stats": stats, "pass3": p3, "load": load, "stream": stream,
                "bytes_in": bytes_in, "link_bytes_per_cycle": B, "total": p1 + p2 + stats + p3}

    def resources(self, p, device=None) -> dict:
        """LUT / FF / DSP / BRAM36 / URAM of the unit (module docstring)."""
        from .cost import bram36_for

        S, T, L, n = p["steps"], p["trajectories"], p["lanes"], p["bits"]
        w = parse_format(p["storage"]).bits
        lane = ["dadd", "dadd", "dmul"] + (["fadd", "fmul"] if p["datapath"] == "fp32" else ["ddiv"])
        scalar = ["dadd", "dmul", "ddiv", "dsqrt", "dadd"]  # + the tree adder
        res = {"lut": LUT_BASE, "ff": FF_BASE, "dsp": 0}
        for r in ("lut", "ff", "dsp"):
            res[r] += 2 * (L * sum(OPS[o][r] for o in lane) + sum(OPS[o][r] for o in scalar))
        res["ff"] += 2 * L * 8 * 64 + 2 * 3 * 64  # partial sums, Welford state / stats registers
        res["lut"] += 2 * L * 2 * n  # encoder: compare + shift per code bit
        dev = get_dev(device)
        pl = dev.units.get("PL")
        has_uram = pl is not None and "uram" in pl.resources
        buffers = [(S * T, w), ((2 * S + 1) * T, w)]  # rewards; values + bootstrap + truncations (worst case)
        uram = bram = 0
        for elements, width in buffers:
            if has_uram:
                per_row = max(1, URAM_WIDTH // width)
                uram += L * math.ceil(math.ceil(elements / L) / (URAM_ROWS * per_row))
            else:
                b, lut = bram36_for(elements, width, L)
                bram += b
                res["lut"] += lut
        b, lut = bram36_for(S * T, 2, 1)  # done flags
        res.update(bram36=bram + b, uram=uram, aie_tiles=0)
        res["lut"] += lut
        return {k: int(v) for k, v in res.items()}

    def cost(self, p, unit="PL", device=None):
        S, T = p["steps"], p["trajectories"]
        elements = S * T + (S + 1) * T
        if unit == "PS":
            from .cost import ps_cost
            c = ps_cost(8 * elements, get_dev(device), nbytes=self.cycles(p, device)["bytes_in"])
            return {"cycles": c["cycles"], "latency_us": c["latency_us"],
                    "throughput_el_per_s": elements / (c["latency_us"] * 1e-6),
                    "memory_bytes": int(c["memory_bytes"]),
                    "resources": {k: 0 for k in ("lut", "ff", "dsp", "bram36", "uram", "aie_tiles")},
                    "source": c.get("source", ""), "provenance": c["provenance"]}
        if unit != "PL":
            raise self._err(f"unit {unit!r} is not supported (expected PL or PS)")
        cyc = self.cycles(p, device)
        f = p["clock_mhz"]
        return {"cycles": int(cyc["total"]), "latency_us": cyc["total"] / f,
                "throughput_el_per_s": elements * f * 1e6 / cyc["total"],
                "memory_bytes": int(cyc["bytes_in"]), "resources": self.resources(p, device),
                "terms": cyc,
                "source": "standardizer.py: 3 pipelined passes x 2 streams, PS->PL link load, "
                          "assumed fp64/fp32 operator figures (OPS)",
                "provenance": _provenance()}


def _provenance() -> dict:
    from .cost import provenance

    ops = "assumed: the fp64/fp32 operators' figures (OPS) per lane and pass"
    return provenance(cycles="derived: three pipelined passes over two streams + the PS->PL load",
                      latency_us="derived: cycles / clock", lut=ops, ff=ops, dsp=ops,
                      bram36="derived: the statistics and code buffers", uram="derived: the stream buffers")


def _link_bytes_per_cycle(device, clock_mhz: float) -> float:
    """PS->PL link bytes per PL cycle (catalogue), else one 128-bit port."""
    link = next((l for l in getattr(device, "links", ()) if l.src == "PS" and l.dst == "PL"), None)
    if link is None:
        return float(LINK_BYTES_PER_CYCLE)
    return link.bytes_per_us.value / clock_mhz
