"""HEPPO-GAE standardizer + quantizer kernel: numpy model == the trainer's numpy path
(designs/quantizer.py, host/ppo.gae_stage) bit for bit in float64, == its C++ under g++ bit for bit
(csim and the csim backend, n = 3..10, edge cases), cost model terms, graph hooks, bad input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.kernels import KernelContext, get_kernel, kernels_for
from rlhls.designs.kernels.gae import GaeKernel
from rlhls.designs.kernels.standardizer import OPS, Standardizer, moments, pairwise_sum
from rlhls.designs.quantizer import RunningStats, quantize_blocks, quantize_standardized
from rlhls.designs.registry import get_design
from rlhls.flow.csim import run_csim
from rlhls.flow.kernels import render_kernel
from rlhls.host.backends import CsimBackend, EmuBackend
from rlhls.host.gae import EXPERIMENTS, gae_stage

from cpp_util import CACHE

K = Standardizer()
GAE_IN = ("reward_codes", "value_codes", "bootstrap_codes", "last_value_codes", "value_stats")


def f32(a):
    return np.asarray(a, dtype=np.float64).astype(np.float32).astype(np.float64)


def _f32_inputs(p, seed):
    """Random inputs already fp32 words (what the trainer path and the kernel then share)."""
    x = K.random_inputs(p, np.random.default_rng(seed))
    return {k: (v if k in ("done", "state_in") else f32(v)) for k, v in x.items()}


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def _same(a: dict, b: dict):
    assert set(a) == set(b)
    for k in a:
        assert np.array_equal(_bits(a[k]), _bits(b[k])), k


# ----------------------------------------------------------------------------- float64 statistics

def test_pairwise_sum_is_numpys_sum():
    rng = np.random.default_rng(0)
    sizes = list(range(1, 300)) + [1000, 4097, 8191, 8192, 8193, 65600, 100003]
    for n in sizes:
        x = f32(rng.normal(rng.normal(0, 100), 10 ** rng.uniform(-3, 3), n))
        assert pairwise_sum(x) == np.sum(x), n
        mean, m2 = moments(x)
        assert mean == x.mean() and math.sqrt(m2 / n) == x.std(), n


# ----------------------------------------------------------------------------- the trainer's path

@pytest.mark.parametrize("rewards", ["dynamic", "block"])
def test_fp64_model_equals_trainer_quantizer(rewards):
    """Three rollouts in a row (state out -> state in), n = 3..10: the Welford state, (mu, sigma),
    every code and the overflow counts are the trainer's (quantize_standardized / quantize_blocks)."""
    S, T = 37, 11
    for bits in range(3, 11):
        p = K.resolve(dict(steps=S, trajectories=T, bits=bits, rewards=rewards, datapath="fp64"))
        fmt = parse_format(f"uq<{bits}>")
        rs = RunningStats()
        state = np.zeros(3)
        for seed in range(3):
            x = {**_f32_inputs(p, 100 * bits + seed), "state_in": state}
            y = K.model(p, **x)
            if rewards == "dynamic":
                rc, rovf = quantize_standardized(x["rewards"], rs, fmt, update=True, return_overflow=True)
                assert [rs.n, rs.m, rs.s] == y["state_out"].tolist()
                assert y["reward_stats"].tolist() == [rs.mean, rs.std]
            else:
                q = quantize_blocks(x["rewards"].reshape(1, -1), fmt)
                rc, rovf = q.codes.reshape(S, T), q.overflow
                assert y["reward_stats"].tolist() == [q.mu[0], q.sigma[0]]
                assert np.array_equal(y["state_out"], state)
            trunc = x["done"] == 2
            blk = np.concatenate([x["values"].ravel(), x["bootstrap"], x["trunc_values"][trunc]])
            q = quantize_blocks(blk[None], fmt)
            c = q.codes.ravel()
            boot = np.zeros((S, T))
            boot[trunc] = c[(S + 1) * T:]
            assert np.array_equal(y["reward_codes"], rc)
            assert np.array_equal(y["value_codes"], c[:S * T].reshape(S, T))
            assert np.array_equal(y["last_value_codes"], c[S * T:(S + 1) * T])
            assert np.array_equal(y["bootstrap_codes"], boot)
            assert y["value_stats"].tolist() == [q.mu[0], q.sigma[0]]
            assert y["overflow"].tolist() == [rovf, q.overflow]
            assert trunc.any() and q.overflow > 0  # the data exercise truncations and saturation
            state = y["state_out"]


@pytest.mark.parametrize("exp", [5, 4])
def test_standardizer_then_gae_equals_gae_stage(exp):
    """The unit chain (standardizer fp64 -> GAE kernel) gives the PPO trainer's advantages and
    returns bit for bit (host/ppo.gae_stage with the emu backend, Table III exp 5 and 4)."""
    S, T, bits = 64, 16, 8
    p = K.resolve(dict(steps=S, trajectories=T, bits=bits, datapath="fp64",
                       rewards="dynamic" if exp == 5 else "block"))
    x = _f32_inputs(p, exp)
    rs = RunningStats(int(x["state_in"][0]), x["state_in"][1], x["state_in"][2])
    adv, rtg, info = gae_stage(EmuBackend(), x["rewards"], x["values"], x["done"], x["bootstrap"], gamma=0.99,
                               lam=0.95, mode=EXPERIMENTS[exp], bits=bits, reward_stats=rs, lookahead=2,
                               trunc_values=x["trunc_values"])
    y = K.model(p, **x)
    g = GaeKernel()
    gp = g.resolve(dict(steps=S, trajectories=T, bits=bits, lookahead=2, gamma=0.99, lam=0.95))
    out = g.model(gp, done=x["done"], **{k: y[k] for k in GAE_IN})
    assert np.array_equal(_bits(out["advantages"].ravel()), _bits(adv))
    assert np.array_equal(_bits(out["returns"].ravel()), _bits(rtg))
    assert info["value_overflow"] == y["overflow"][1] and info["reward_overflow"] == y["overflow"][0]
    if exp == 5:
        assert [rs.n, rs.m, rs.s] == y["state_out"].tolist()


def test_fp32_datapath_within_one_level_of_trainer():
    """fp32 per-element standardization: statistics identical, codes at most one level off, and
    rarely (design-sized rollouts; measured about 1e-6 of the codes at n = 8)."""
    off = total = 0
    for bits in (8, 10):
        p32 = K.resolve(dict(steps=256, trajectories=64, bits=bits))
        p64 = K.resolve({**p32, "datapath": "fp64"})
        for seed in range(3):
            x = K.random_inputs(p32, np.random.default_rng(seed))
            a, b = K.model(p32, **x), K.model(p64, **x)
            for key in ("state_out", "reward_stats", "value_stats"):
                assert np.array_equal(a[key], b[key]), key
            for key in ("reward_codes", "value_codes", "last_value_codes"):
                d = np.abs(a[key] - b[key])
                assert d.max() <= 1, key
                off += int(np.count_nonzero(d))
                total += d.size
    assert off <= 1e-4 * total, (off, total)


def _edge_candidates(p, sigma0=3.0, m0=0.1):
    """A rollout of fp32 rewards next to level edges of a fixed running (m0, sigma0) (n0 = 2**40
    keeps the statistics there) where the fp32 datapath picks another level than float64: the
    first such rollout of the candidates x = fp32(sigma0 * edge + m0) +- 1 ulp, taken S*T at a time."""
    S, T, bits = p["steps"], p["trajectories"], p["bits"]
    edges = np.arange(-(1 << (bits - 1)) + 1, 1 << (bits - 1)) * 2.0 ** (3 - bits)
    xs = (sigma0 * edges + m0).astype(np.float32).view(np.int32)
    cand = np.concatenate([(xs + d).view(np.float32) for d in (-1, 0, 1)]).astype(np.float64)
    n0 = 2.0 ** 40
    p32, p64 = {**p, "datapath": "fp32"}, {**p, "datapath": "fp64"}
    for i in range(0, cand.size, S * T):
        x = {"rewards": np.resize(cand[i:i + S * T], S * T).reshape(S, T),
             "values": np.arange(S * T, dtype=float).reshape(S, T), "done": np.zeros((S, T)),
             "trunc_values": np.zeros((S, T)), "bootstrap": np.zeros(T),
             "state_in": np.array([n0, m0, n0 * sigma0 ** 2])}
        d = K.model(p32, **x)["reward_codes"] - K.model(p64, **x)["reward_codes"]
        if np.count_nonzero(d):
            assert np.abs(d).max() == 1
            return x
    return None


def test_fp32_and_fp64_datapaths_differ_next_to_level_edges():
    for bits in range(3, 11):
        assert _edge_candidates(K.resolve(dict(steps=3, trajectories=8, bits=bits))) is not None, bits


# ----------------------------------------------------------------------------- C++ (g++)

CSIM_SETS = [
    dict(steps=13, trajectories=7, bits=3),
    dict(steps=9, trajectories=5, bits=10, rewards="block", datapath="fp64"),
    dict(steps=17, trajectories=16, bits=8, storage="fp16", lanes=4),  # 272 elements: the pairwise tree
]


@pytest.mark.parametrize("ps", CSIM_SETS, ids=lambda ps: f"b{ps['bits']}-{ps.get('datapath', 'fp32')}")
def test_model_equals_cpp_csim(ps):
    for seed in (1, 2):  # one build, two sets of tb data
        src = render_kernel("standardizer", ps, seed=seed)
        res = run_csim(src, CACHE / f"standardizer-{src.digest()[:16]}", CACHE / "standardizer")
        assert res.passed, res.detail


def test_design_sized_csim():
    """The heppo-ppo instance (64 x 1024 rollout, 65 600-value block) through the generated testbench."""
    d = get_design("heppo-ppo")
    ctx = KernelContext(d)
    node = next(n for n in ctx.graph.nodes if n.kind == "gae")
    p = K.node_params(node, ctx)
    src = render_kernel("standardizer", p, seed=7)
    res = run_csim(src, CACHE / f"standardizer-{src.digest()[:16]}", CACHE / "standardizer")
    assert res.passed, res.detail


# one shared library per bits n = 3..10, varying datapath, reward mode and storage
LIB_SETS = {
    3: dict(datapath="fp32", rewards="dynamic"),
    4: dict(datapath="fp64", rewards="dynamic"),
    5: dict(datapath="fp32", rewards="block", storage="fp16"),
    6: dict(datapath="fp64", rewards="block"),
    7: dict(datapath="fp32", rewards="dynamic", storage="bf16"),
    8: dict(datapath="fp32", rewards="dynamic"),
    9: dict(datapath="fp64", rewards="dynamic"),
    10: dict(datapath="fp32", rewards="block"),
}
S_E, T_E = 3, 8  # 24 rewards; 24 values + 8 bootstrap = a 32-value block


@pytest.fixture(scope="module")
def csim():
    return CsimBackend(cache_dir=CACHE / "csim-lib")


def level(z, bits):
    """uq<n> code of a standardized z (floor, saturate): the expectation, from the definition."""
    h = 1 << (bits - 1)
    return int(np.clip(np.floor(z * 2.0 ** (bits - 3)), -h, h - 1)) + h


def _edge_cases(p):
    """(name, inputs, expectations) with outputs known from the definition."""
    bits, S, T = p["bits"], S_E, T_E
    H, top = 1 << (bits - 1), (1 << bits) - 1
    dyn = p["rewards"] == "dynamic"
    zeros = np.zeros((S, T))
    cases = []
    # zero variance: sigma' = 1, every code the level just above 0
    x = dict(rewards=np.full((S, T), 0.5), values=np.full((S, T), 1.25), done=zeros, trunc_values=zeros,
             bootstrap=np.full(T, 1.25), state_in=np.zeros(3))
    exp = dict(reward_codes=np.full((S, T), H), value_codes=np.full((S, T), H), last_value_codes=np.full(T, H),
               reward_stats=[0.5, 1.0], value_stats=[1.25, 1.0], overflow=[0, 0],
               state_out=[S * T, 0.5, 0.0] if dyn else [0, 0, 0])
    cases.append(("zero-variance", x, exp))
    # exactly +-4 sigma: +4 saturates (an overflow), -4 is level 0 (not one)
    r = np.zeros((S, T))
    r[0, 0], r[1, 3] = 4.0, -4.0
    v = np.zeros((S, T))
    v[2, 5], v[0, 1] = 2.0, -2.0  # block of 32: mu 0, sigma 0.5
    x = dict(rewards=r, values=v, done=zeros, trunc_values=zeros, bootstrap=np.zeros(T),
             state_in=np.array([8.0, 0.0, 0.0]))  # merged: n 32, mean 0, S 32 -> sigma 1
    zr = 1.0 if dyn else math.sqrt(32 / 24)  # a block of 24 has sigma sqrt(32/24)
    rc = np.full((S, T), H)
    rc[0, 0], rc[1, 3] = level(4.0 / zr, bits), level(-4.0 / zr, bits)
    vc = np.full((S, T), H)
    vc[2, 5], vc[0, 1] = top, 0
    exp = dict(reward_codes=rc, value_codes=vc, value_stats=[0.0, 0.5],
               overflow=[1 if dyn else 0, 1], state_out=[32, 0.0, 32.0] if dyn else [8, 0, 0])
    if dyn:
        assert rc[0, 0] == top and rc[1, 3] == 0
    cases.append(("four-sigma", x, exp))
    # deep saturation: +-1e4 rewards against a running sigma of 1 (n0 = 2**40); one 1e4 value
    # in the bootstrap row: z = sqrt(31), the others -1/sqrt(31)
    r = np.zeros((S, T))
    r[0, :2], r[2, 6:] = 1e4, -1e4
    boot = np.zeros(T)
    boot[3] = 1e4
    n0 = 2.0 ** 40
    x = dict(rewards=r, values=zeros, done=zeros, trunc_values=zeros, bootstrap=boot,
             state_in=np.array([n0, 0.0, n0]))
    word = parse_format(p["storage"]).quantize(1e4)
    zr = 1.0 if dyn else math.sqrt(6.0)  # block: +-w twice each in 24 -> z = +-sqrt(6)
    rc = np.full((S, T), H)
    rc[0, :2], rc[2, 6:] = (top, 0) if dyn else (level(zr, bits), level(-zr, bits))
    lv = np.full(T, level(-1 / math.sqrt(31), bits))
    lv[3] = top
    exp = dict(reward_codes=rc, value_codes=np.full((S, T), level(-1 / math.sqrt(31), bits)), last_value_codes=lv,
               overflow=[4 if dyn else 0, 1], value_stats=[word / 32, None])
    cases.append(("saturation", x, exp))
    return cases


@pytest.mark.parametrize("bits", sorted(LIB_SETS))
def test_csim_backend_equals_emu(bits, csim):
    p = K.resolve(dict(steps=S_E, trajectories=T_E, bits=bits, **LIB_SETS[bits]))
    emu = EmuBackend()
    for seed in range(3):
        x = K.random_inputs(p, np.random.default_rng(seed))
        _same(emu.call("standardizer", p, **x), csim.call("standardizer", p, **x))
    if p["storage"] == "fp32":  # a 16-bit word is too coarse to fall within an fp32 rounding of an edge
        x = _edge_candidates({**p, "rewards": "dynamic"})  # next to level edges: fp32 and fp64 differ
        _same(emu.call("standardizer", p, **x), csim.call("standardizer", p, **x))
    for name, x, exp in _edge_cases(p):
        y = emu.call("standardizer", p, **x)
        _same(y, csim.call("standardizer", p, **x))
        for key, want in exp.items():
            got = y[key].tolist()
            if key == "value_stats" and want[1] is None:  # sigma: not a round number
                assert got[0] == want[0], (name, key)
            else:
                assert np.array_equal(y[key], np.asarray(want, dtype=np.float64)), (name, key, got, want)


def test_truncations_join_the_value_block(csim):
    """A truncated step's final-observation value is encoded in the value block (its code sits at
    that step of bootstrap_codes, 0 elsewhere); trunc_values is read only where done == 2."""
    p = K.resolve(dict(steps=S_E, trajectories=T_E, bits=8))
    x = K.random_inputs(p, np.random.default_rng(5))
    x["done"] = np.zeros((S_E, T_E))
    x["done"][1, 2] = x["done"][2, 7] = 2
    x["trunc_values"] = np.full((S_E, T_E), np.nan)
    x["trunc_values"][1, 2], x["trunc_values"][2, 7] = x["values"][0, 0], x["bootstrap"][4]
    y = K.model(p, **x)
    _same(y, csim.call("standardizer", p, **x))
    assert y["bootstrap_codes"][1, 2] == y["value_codes"][0, 0]
    assert y["bootstrap_codes"][2, 7] == y["last_value_codes"][4]
    mask = np.ones((S_E, T_E), dtype=bool)
    mask[1, 2] = mask[2, 7] = False
    assert not y["bootstrap_codes"][mask].any()
    blk = f32(np.concatenate([x["values"].ravel(), x["bootstrap"], [x["values"][0, 0], x["bootstrap"][4]]]))
    assert y["value_stats"].tolist() == [blk.mean(), blk.std()]


# ----------------------------------------------------------------------------- cost

def _design_params():
    d = get_design("heppo-ppo")
    ctx = KernelContext(d)
    node = next(n for n in ctx.graph.nodes if n.kind == "gae")
    return d, ctx, node, K.resolve(K.node_params(node, ctx))


def test_cost_terms_of_the_design():
    d, ctx, node, p = _design_params()
    S, T, L = p["steps"], p["trajectories"], p["lanes"]
    c = K.cost(p, device=ctx.device)
    t = c["terms"]
    assert t["total"] == c["cycles"] == t["pass1"] + t["pass2"] + t["stats"] + t["pass3"]
    assert c["latency_us"] == pytest.approx(c["cycles"] / 300.0)
    # the words come once over the catalogue's PS->PL link (one 128-bit port: 16 B per cycle)
    assert t["link_bytes_per_cycle"] == 16.0
    assert t["bytes_in"] == (2 * S * T + T) * 4 + S * T
    assert t["load"] == math.ceil(t["bytes_in"] / 16) and t["stream"] == math.ceil((S + 1) * T / L)
    # three passes: pass 1 waits for the link (it dominates here), passes 2-3 stream the buffer;
    # everything else is a fixed pipeline latency
    floor = max(t["load"], t["stream"]) + 2 * t["stream"]
    assert t["load"] > t["stream"] and floor <= c["cycles"] < floor + 600
    # resources: per stream L lanes of (dadd, dsub, dmul, fsub, fmul) + scalar unit + tree adder
    lane = 2 * OPS["dadd"]["dsp"] + OPS["dmul"]["dsp"] + OPS["fadd"]["dsp"] + OPS["fmul"]["dsp"]
    scalar = 2 * OPS["dadd"]["dsp"] + OPS["dmul"]["dsp"]
    assert c["resources"]["dsp"] == 2 * (L * lane + scalar)
    assert c["resources"]["uram"] > 0 and c["resources"]["bram36"] < 10  # the ZU7EV has UltraRAM
    cap = {k: ctx.device.units["PL"].resources[k].value for k in ("lut", "dsp", "uram")}
    assert all(c["resources"][k] < cap[k] for k in cap)


def test_cost_scaling():
    base = dict(steps=1024, trajectories=64)
    c = {L: K.cost(K.resolve({**base, "lanes": L}))["terms"] for L in (1, 2, 4, 8, 16)}
    for a, b in zip((1, 2, 4, 8), (2, 4, 8, 16)):
        assert c[b]["stream"] == math.ceil(c[a]["stream"] / 2) and c[b]["total"] < c[a]["total"]
    # pass 1 stops improving once the link is the bound
    assert c[8]["pass1"] == c[16]["pass1"]
    # fixed latencies grow only with the pairwise tree's depth (log2), not with the rollout
    small = K.cost(K.resolve({**base, "steps": 256}))["terms"]
    big = K.cost(K.resolve({**base, "steps": 4096}))["terms"]
    over = lambda t: t["total"] - max(t["load"], t["stream"]) - 2 * t["stream"]  # noqa: E731
    assert 0 < over(big) - over(small) <= 2 * OPS["dadd"]["lat"] * math.log2(4096 / 256)  # 2 reductions
    # the fp64 datapath divides per element: no fp32 units, a divider per lane
    r32 = K.cost(K.resolve(base))["resources"]
    r64 = K.cost(K.resolve({**base, "datapath": "fp64"}))["resources"]
    assert r64["lut"] > r32["lut"] and r64["dsp"] < r32["dsp"]
    # a device without UltraRAM keeps the rollout in BRAM36
    r102 = K.cost(K.resolve(base), device="zcu102")["resources"]
    assert r102["uram"] == 0 and r102["bram36"] > r32["bram36"]
    ps = K.cost(K.resolve(base), unit="PS")
    assert ps["latency_us"] > 0 and not any(ps["resources"].values())
    with pytest.raises(RlhlsError, match="unit 'AIE'"):
        K.cost(K.resolve(base), unit="AIE")


# ----------------------------------------------------------------------------- graph hooks

def test_graph_hooks():
    assert get_kernel("standardizer") is not None
    assert K.implements == ("gae",) and K.units == ("PL",) and not K.generic
    d, ctx, node, p = _design_params()
    d.check_kernels()
    chosen = {k.name: q for k, q in kernels_for(node, ctx, "PL")}
    assert "standardizer" in chosen and "gae" in chosen
    g = GaeKernel().resolve(chosen["gae"])
    assert (p["steps"], p["trajectories"], p["bits"]) == (g["steps"], g["trajectories"], g["bits"])
    assert (p["rewards"], p["values"], p["storage"], p["datapath"], p["clock_mhz"]) == \
        ("dynamic", "block", "fp32", "fp32", 300.0)
    [(name, cost)] = K.node_points(node, ctx, "PL")
    assert name == "lanes8" and cost == K.cost(p, device=ctx.device)
    # a design without the unit: no parameters, not chosen
    plain = dataclasses.replace(d, kernels=tuple(k for k in d.kernels if k.name != "standardizer"))
    pctx = KernelContext(plain)
    pnode = next(n for n in pctx.graph.nodes if n.kind == "gae")
    assert K.node_params(pnode, pctx) is None
    assert "standardizer" not in {k.name for k, _ in kernels_for(pnode, pctx, "PL")}
    # codes narrower than the GAE unit reads: one value given twice, refused in one line
    with pytest.raises(RlhlsError, match="kernel 'standardizer' sets quant_bits = 6 where kernel 'gae' set 8"):
        dataclasses.replace(d, kernels=tuple(dataclasses.replace(k, params={**k.params, "bits": 6})
                                             if k.name == "standardizer" else k for k in d.kernels))


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("over, what", [
    ({"bits": 2}, "'bits' = 2 must be in 3..16"), ({"bits": 17}, "'bits' = 17"),
    ({"lanes": 65}, "'lanes' = 65"), ({"lanes": 0}, "'lanes' = 0 must be >= 1"),
    ({"datapath": "fp16"}, "'datapath' = 'fp16' is not supported"),
    ({"storage": "uq<8>"}, "'storage'"), ({"rewards": "running"}, "'rewards'"),
    ({"values": "dynamic"}, "'values'"),
])
def test_resolve_rejects(over, what):
    with pytest.raises(RlhlsError, match=what.replace("(", r"\(").replace(")", r"\)")) as e:
        K.resolve(over)
    assert "\n" not in str(e.value)


def test_bad_arrays_rejected():
    p = K.resolve(dict(steps=S_E, trajectories=T_E, bits=8))
    good = K.random_inputs(p, np.random.default_rng(0))
    cases = [
        ("done", lambda x: x["done"].__setitem__((0, 0), 3), "input 'done'"),
        ("rewards", lambda x: x["rewards"].__setitem__((1, 1), np.nan), "input 'rewards': 1 value"),
        ("values", lambda x: x["values"].__setitem__((1, 1), 1e39), "input 'values': 1 value(s) not finite in fp32"),
        ("trunc", lambda x: (x["done"].__setitem__((2, 2), 2), x["trunc_values"].__setitem__((2, 2), np.inf)),
         "input 'trunc_values'"),
        ("count", lambda x: x["state_in"].__setitem__(0, 2.5), "input 'state_in': count n = 2.5"),
        ("S", lambda x: x["state_in"].__setitem__(2, -1.0), "input 'state_in'"),
        ("shape", lambda x: x.__setitem__("bootstrap", np.zeros(T_E + 1)), "input 'bootstrap' has shape"),
    ]
    for name, spoil, what in cases:
        x = {k: np.array(v, dtype=np.float64) for k, v in good.items()}
        spoil(x)
        for backend in (EmuBackend(), CsimBackend(cache_dir=CACHE / "csim-lib")):
            with pytest.raises(RlhlsError, match=what.replace("(", r"\(").replace(")", r"\)")) as e:
                backend.call("standardizer", p, **x)
            assert "\n" not in str(e.value), name
    # trunc_values outside truncated steps are not read: NaN there changes nothing
    x = {k: np.array(v, dtype=np.float64) for k, v in good.items()}
    x["trunc_values"][x["done"] != 2] = np.nan
    _same(K.model(p, **x), K.model(p, **good))
