"""CPP's FVP unit (seed 001): the float64 path is the exact Hessian-vector product of the mean KL,
the fixed-point model follows its documented semantics and equals the C++ under g++ bit for bit
(padding, saturation, 1..4 layers, the seed's own networks), the cycle / resource model against
Tables I and II, and the training-graph hooks."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KernelContext, get_kernel, kernels_for
from rlhls.designs.kernels.fvp import host_fvp, layout, pack, schedule, tanh_fixed, unpack
from rlhls.designs.registry import get_design
from rlhls.flow.csim import run_csim
from rlhls.flow.kernels import render_kernel
from rlhls.flow.mapping import map_design
from rlhls.host.backends import CsimBackend, get_backend
from rlhls.partition.profile import profile_design

from cpp_util import CACHE

K = get_kernel("fvp")
DESIGNS = ("cpp-trpo-ant", "cpp-trpo-humanoid")
NARROW = {"storage": "fixed<14,3,RND,SAT>", "acc": "fixed<20,5,RND,SAT>", "tanh_bits": 5}
WRAP = {"storage": "fixed<12,3,TRN,WRAP>", "acc": "fixed<18,4,RND_CONV,WRAP>", "tanh_bits": 4}
# the accumulator holds a product's fraction bits and more (narrow storage under fixed<53,21>): products
# shift left, exactly; the partial sums still saturate
SHL = {"storage": "fixed<10,3,RND,SAT>", "acc": "fixed<22,6,RND,SAT>", "tanh_bits": 4}
SHL0 = {"storage": "fixed<10,3,RND,SAT>", "acc": "fixed<20,6,RND,SAT>", "tanh_bits": 4}


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


# ----------------------------------------------------------------------------- float64 path

def _kl_grad(dims, th, th_old, obs):
    """Gradient of the mean KL(pi_old || pi_theta) (eq. 6, 17) over (network, log-std), by backprop."""
    def fwd(t):
        Ws, bs, ls = unpack(t, dims)
        ys = [obs]
        for l in range(len(Ws)):
            x = ys[-1] @ Ws[l] + bs[l]
            ys.append(np.tanh(x) if l < len(Ws) - 1 else x)
        return Ws, ls, ys
    Ws, ls, ys = fwd(th)
    _, ls0, ys0 = fwd(th_old)
    mu, mu0, var, var0 = ys[-1], ys0[-1], np.exp(2 * ls), np.exp(2 * ls0)
    g = (mu - mu0) / var / obs.shape[0]
    g_ls = (1 - (var0 + (mu - mu0) ** 2) / var).mean(axis=0)
    gW, gb = [None] * len(Ws), [None] * len(Ws)
    for l in range(len(Ws) - 1, -1, -1):
        if l < len(Ws) - 1:
            g = g * (1 - ys[l + 1] ** 2)
        gW[l], gb[l] = ys[l].T @ g, g.sum(axis=0)
        g = g @ Ws[l].T
    return pack(gW, gb, g_ls)


def _float_case(dims, n, seed):
    p = K.resolve({"layers": dims, "parallelism": [1] * len(dims), "samples": n, "fp64": True})
    rng = np.random.default_rng(seed)
    x = K.random_inputs(p, rng, rows=n)
    ls = rng.uniform(-0.4, 0.4, dims[-1])
    x["inv_var"] = np.exp(-2 * ls)
    return p, x, np.concatenate([x["theta"], ls])


@pytest.mark.parametrize("dims", [[5, 4], [7, 5, 6, 3], [6, 9, 4, 5, 2]], ids=lambda d: f"{len(d) - 1}layers")
def test_float_path_is_the_hessian_vector_product_of_the_mean_kl(dims):
    n, eps = 20, 1e-3
    p, x, th = _float_case(dims, n, 1)
    z = host_fvp(K.model(p, **x)["fvp"], x["v"], n)
    g = lambda e: _kl_grad(dims, th + e * x["v"], th, x["obs"])  # noqa: E731
    fd = (8 * (g(eps) - g(-eps)) - (g(2 * eps) - g(-2 * eps))) / (12 * eps)  # O(eps^4)
    assert np.max(np.abs(z - fd)) <= 1e-9 * np.max(np.abs(fd))
    # the log-std block is eq. 21 exactly; damping is the host's
    m = dims[-1]
    assert np.allclose(z[-m:], 2 * x["v"][-m:], rtol=1e-15, atol=0)
    assert np.allclose(host_fvp(K.model(p, **x)["fvp"], x["v"], n, 0.1) - z, 0.1 * x["v"], rtol=0, atol=1e-12)


def test_float_path_matches_torch_autograd():
    # torch comes with the bench extra (CI has none); benchmarks/bench_fvp.py checks the same
    torch = pytest.importorskip("torch")
    dims, n = [7, 5, 6, 3], 12
    p, x, th = _float_case(dims, n, 2)
    lay = layout(dims)
    obs = torch.tensor(x["obs"], dtype=torch.float64)
    t0 = torch.tensor(th, dtype=torch.float64)

    def kl(t):
        def mean(u):
            y = obs
            for l, ((ow, (a, b)), (ob, _)) in enumerate(zip(lay["w"], lay["b"])):
                y = y @ u[ow:ow + a * b].reshape(a, b) + u[ob:ob + b]
                y = torch.tanh(y) if l < len(lay["w"]) - 1 else y
            return y
        mu, mu0 = mean(t), mean(t0).detach()
        ls, ls0 = t[lay["P"]:], t0[lay["P"]:]
        return (ls - ls0 + (torch.exp(2 * ls0) + (mu - mu0) ** 2) / (2 * torch.exp(2 * ls)) - 0.5).sum(1).mean()

    _, hv = torch.autograd.functional.hvp(kl, t0, torch.tensor(x["v"], dtype=torch.float64))
    z = host_fvp(K.model(p, **x)["fvp"], x["v"], n)
    assert np.max(np.abs(z - hv.numpy())) <= 1e-12 * np.max(np.abs(z))


# ----------------------------------------------------------------------------- fixed point

def _naive(p, a):
    """The module docstring's semantics, scalar by scalar on exact Python-int mantissas."""
    S, A = parse_format(p["storage"]), parse_format(p["acc"])
    fs, fa, tb = S.frac_bits, A.frac_bits, p["tanh_bits"]
    dims, par = p["layers"], p["parallelism"]
    L = len(dims) - 1

    def cast(f, m, frac):
        return int(f.cast_mantissa(np.array([m], dtype=object), frac)[0][0])

    def q(v):
        return [int(m) for m in S.quantize_mantissa(np.ravel(v))]

    table = [int(S.quantize_mantissa(np.array([math.tanh(k * 2.0 ** -tb)]))[0])
             for k in range((1 << (S.int_bits - 1 + tb)) + 2)]

    def tanh(x):
        sh = fs - tb
        k, f = abs(x) >> sh, abs(x) & ((1 << sh) - 1)
        y = cast(S, (table[k] << sh) + f * (table[k + 1] - table[k]), 2 * fs - tb)
        return -y if x < 0 else y

    def dot(pairs, init, blocks, n_out):
        n_in = len(pairs[0][0])
        c = -(-n_in // blocks)
        out = []
        for j in range(n_out):
            acc = init[j]
            for t in range(c):
                s = sum(cast(A, xv[k * c + t] * w(k * c + t, j), 2 * fs)
                        for k in range(blocks) if k * c + t < n_in for xv, w in pairs)
                acc = cast(A, acc + s, fa)
            out.append(acc)
        return out

    th, v = q(a["theta"]), q(a["v"])
    iv = q(a["inv_var"])
    lay = layout(dims)
    W = [lambda i, j, o=o, s=s: th[o + i * s[1] + j] for o, s in lay["w"]]
    Vw = [lambda i, j, o=o, s=s: v[o + i * s[1] + j] for o, s in lay["w"]]
    Wt = [lambda j, i, o=o, s=s: th[o + i * s[1] + j] for o, s in lay["w"]]
    b = [[cast(A, th[o + j], fs) for j in range(k)] for o, k in lay["b"]]
    vb = [[cast(A, v[o + j], fs) for j in range(k)] for o, k in lay["b"]]
    F = [[0] * (s[0] * s[1]) for _, s in lay["w"]]
    Fb = [[0] * k for _, k in lay["b"]]
    Fls = [0] * dims[-1]
    for row in np.atleast_2d(a["obs"]):
        y, ry, ys, ds = q(row), None, [], []
        for l in range(L):
            ys.append(y)
            x = [cast(S, m, fa) for m in dot([(y, W[l])], b[l], par[l], dims[l + 1])]
            pairs = [(y, Vw[l])] + ([(ry, W[l])] if ry is not None else [])
            rx = [cast(S, m, fa) for m in dot(pairs, vb[l], par[l], dims[l + 1])]
            if l < L - 1:
                y = [tanh(m) for m in x]
                d = [cast(S, (1 << 2 * fs) - m * m, 2 * fs) for m in y]
                ry = [cast(S, e * f, 2 * fs) for e, f in zip(rx, d)]
                ds.append(d)
            else:
                ry = rx
        r, rdy = [cast(S, e * f, 2 * fs) for e, f in zip(ry, iv)], None
        for l in range(L - 1, -1, -1):
            if l < L - 1:
                r = [cast(S, e * f, 2 * fs) for e, f in zip(ds[l], rdy)]
            n_out = dims[l + 1]
            for i in range(dims[l]):
                for j in range(n_out):
                    F[l][i * n_out + j] = cast(A, F[l][i * n_out + j] + cast(A, ys[l][i] * r[j], 2 * fs), fa)
            Fb[l] = [cast(A, f + cast(A, e, fs), fa) for f, e in zip(Fb[l], r)]
            if l > 0:
                rdy = [cast(S, m, fa) for m in dot([(r, Wt[l])], [0] * dims[l], par[l + 1], dims[l])]
        two = [cast(A, 2 * e, fs) for e in v[lay["P"]:]]
        Fls = [cast(A, f + e, fa) for f, e in zip(Fls, two)]
    out = []
    for l in range(L):
        out += F[l] + Fb[l]
    return A.from_mantissa(np.array(out + Fls, dtype=np.int64))


@pytest.mark.parametrize("extra, scale", [({}, 1.0), (NARROW, 3.0), (WRAP, 3.0), (SHL, 3.0), (SHL0, 3.0)],
                         ids=["design", "saturating", "wrap", "shift-left", "no-shift"])
def test_model_follows_its_semantics(extra, scale):
    p = K.resolve({"layers": [5, 4, 3, 2], "parallelism": [2, 3, 2, 1], "samples": 4, **extra})
    x = {k: v * scale for k, v in K.random_inputs(p, np.random.default_rng(4), rows=4).items()}
    assert np.array_equal(_bits(K.model(p, **x)["fvp"]), _bits(_naive(p, x)))


def test_tanh_unit_within_two_lsb():
    S = parse_format("fixed<27,4,RND,SAT>")
    x = S.quantize(np.concatenate([np.linspace(-8, 8, 200001), [-8.0, S.max_value]]))
    y = tanh_fixed(x)
    assert np.max(np.abs(y - np.tanh(x))) < 2 * S.lsb
    inner = x[np.abs(x) < 8]
    assert np.array_equal(tanh_fixed(-inner), -tanh_fixed(inner))  # odd symmetry


def test_fixed_point_close_to_exact_on_the_seed_network():
    """fixed<27,4> / fixed<48,16> against the float64 path on Ant's network (the seed reports
    0.007 % MAPE on the CG result)."""
    d = get_design("cpp-trpo-ant")
    spec = KernelContext(d).spec_params(K)
    p = K.resolve({**spec, "samples": 64})
    x = K.random_inputs(p, np.random.default_rng(5), rows=64)
    z, ref = K.model(p, **x)["fvp"], K.model(K.resolve({**spec, "samples": 64, "fp64": True}), **x)["fvp"]
    assert np.max(np.abs(z - ref)) <= 1e-6 * np.max(np.abs(ref))


@pytest.mark.parametrize("design", DESIGNS)
def test_design_component_csim_bit_exact(design, tmp_path):
    """The component the build emits for the seed's network (Table I parallelism, 50000-sample
    N_MAX) equals the model bit for bit under g++ (8 testbench samples)."""
    d = get_design(design)
    ctx = KernelContext(d)
    params = K.node_params(ctx.graph.node("policy.fc1.fvp_fwd"), ctx)
    src = render_kernel("fvp", params, seed=3)
    assert "const int N = 50000;" in src.files["fvp.h"]
    res = run_csim(src, tmp_path, CACHE / "fvp")
    assert res.passed and "bit-exact" in res.detail, res.detail


def test_padded_network_csim_bit_exact(tmp_path):
    src = render_kernel("fvp", {"layers": [7, 5, 6, 3], "parallelism": [3, 2, 4, 2], "samples": 16}, seed=1)
    top = src.files["fvp.cpp"]
    # odd layers Type A forward / Type B backward, even layers the reverse (Fig. 2)
    for call in ("lay1.fwd_a<false>", "lay2.fwd_b<true>", "lay3.fwd_a<true>",
                 "lay3.bwd_b<true>", "lay2.bwd_a<true>", "lay1.bwd_b<false>"):
        assert call in top
    res = run_csim(src, tmp_path, CACHE / "fvp")
    assert res.passed, res.detail


@pytest.fixture(scope="module")
def csim():
    return CsimBackend(cache_dir=CACHE / "csim-lib")


@pytest.mark.parametrize("params", [
    {"layers": [6, 9, 4, 5, 2], "parallelism": [4, 2, 3, 5, 1]},
    {"layers": [5, 4], "parallelism": [2, 3]},
    {"layers": [9, 7, 3], "parallelism": [2, 3, 2], **NARROW},
    {"layers": [9, 7, 3], "parallelism": [4, 1, 3], **NARROW},
    {"layers": [9, 7, 3], "parallelism": [2, 3, 2], **WRAP},
    {"layers": [9, 7, 3], "parallelism": [2, 3, 2], **SHL},
], ids=["4layers", "1layer", "sat-2-3-2", "sat-4-1-3", "wrap", "shift-left"])
def test_emu_equals_csim(params, csim):
    p = K.resolve({**params, "samples": 12})
    emu = get_backend("emu")
    rng = np.random.default_rng(6)
    scale = 3.0 if "storage" in params else 1.0  # narrow formats: make them saturate / wrap
    for rows in (12, 5):
        x = {k: v * scale for k, v in K.random_inputs(p, rng, rows=rows).items()}
        a, b = emu.call("fvp", p, **x)["fvp"], csim.call("fvp", p, **x)["fvp"]
        assert a.shape == (layout(p["layers"])["P"] + p["layers"][-1],)
        assert np.array_equal(_bits(a), _bits(b)), np.flatnonzero(_bits(a) != _bits(b))[:5]


def test_blocking_decides_saturated_sums(csim):
    """Where a partial sum saturates, the blocking (which products share an accumulator step)
    decides the bits, in the model as in the C++. Layer 1's weights are +3.9 on inputs 0..4 and
    -3.9 on 5..8: in 2 blocks every step is exact (15.2 plus the bias); in 4 blocks the second
    step saturates the accumulator at 16 and the last one leaves 0.8 plus the bias."""
    ps = [K.resolve({"layers": [9, 7, 3], "parallelism": par, "samples": 12, **NARROW})
          for par in ([2, 3, 2], [4, 1, 3])]
    x = K.random_inputs(ps[0], np.random.default_rng(7), rows=6)
    x["obs"][:] = 3.9
    x["theta"][:63] = np.repeat(np.where(np.arange(9) < 5, 3.9, -3.9), 7)
    out = []
    for p in ps:
        a, b = get_backend("emu").call("fvp", p, **x)["fvp"], csim.call("fvp", p, **x)["fvp"]
        assert np.array_equal(_bits(a), _bits(b))
        out.append(a)
    assert not np.array_equal(out[0], out[1])


# ----------------------------------------------------------------------------- cost

@pytest.mark.parametrize("design", DESIGNS)
def test_cost_reproduces_tables_i_and_ii(design):
    d = get_design(design)
    spec = KernelContext(d).spec_params(K)
    p = K.resolve({**spec, "samples": 50000, "iterations": 10})
    c = K.cost(p)
    t1, t2 = d.seed_figures["table_i"], d.seed_figures["table_ii"]
    assert abs(c["latency_us"] * 1e-6 / t2["model_s"] - 1) <= 0.05
    assert c["model_s"] < t2["fvp_fpga_s"]  # the measured time adds the API latency
    # the coarse pipeline's interval is the A-B-A cascade's c0 c1 + c2 c3 (§III-E)
    st = [math.ceil(n / q) for n, q in zip(spec["layers"], spec["parallelism"])]
    assert c["ii"] == st[0] * st[1] + st[2] * st[3] == c["schedule"]["backward_cycles"]
    assert abs(c["resources"]["dsp"] / t1["dsp"] - 1) <= 0.02
    assert abs(c["m20k"] / t1["bram_m20k"] - 1) <= 0.02
    # logic and FF: one ratio each to the MAC array, fitted on both rows (fvp.py docstring)
    assert abs(c["alm"] / t1["logic"] - 1) <= 0.01 and abs(c["resources"]["ff"] / t1["ff"] - 1) <= 0.01
    assert c["resources"]["bram36"] == math.ceil(c["m20k"] * 20 / 36)


def test_cost_scales_with_the_architecture():
    base = {"layers": [111, 64, 32, 8], "parallelism": [16, 8, 5, 8]}
    c = K.cost(K.resolve(base))
    # stream padding: 111 inputs in 16 blocks take the 7 steps of 112
    assert K.cost(K.resolve({**base, "layers": [112, 64, 32, 8]}))["ii"] == c["ii"] == 63
    # twice the samples, twice the streaming; twice the CG iterations, twice the calls
    c2 = K.cost(K.resolve({**base, "samples": 100000}))
    assert c2["cycles_per_call"] - c["cycles_per_call"] == 50000 * 63
    assert K.cost(K.resolve({**base, "iterations": 20}))["cycles"] == 2 * c["cycles"]
    # halving layer 1's blocks doubles its cascade stage: II = 7*16 + 7
    assert K.cost(K.resolve({**base, "parallelism": [16, 4, 5, 8]}))["ii"] == 7 * 16 + 7
    # this kernel's own tanh unit (one multiplier, a ROM) instead of the seed's
    t = K.cost(K.resolve({**base, "act_unit": "table"}))
    assert c["resources"]["dsp"] - t["resources"]["dsp"] == (42 - 1) * (8 + 5)  # hidden lanes p_1 + p_2
    # a 4-layer net: A-B-A-B forward, its backward mirrors it
    s = schedule(K.resolve({"layers": [8, 8, 8, 8, 8], "parallelism": [2, 2, 2, 2, 2]}))
    assert [b["type"] for b in s["forward"]] == ["A", "B", "A", "B"]
    assert [b["type"] for b in s["backward"]] == ["A", "B", "A", "B"]
    assert s["forward_cycles"] == s["backward_cycles"] == s["ii"]


# ----------------------------------------------------------------------------- graph hooks

def test_graph_hooks_one_unit_profiled_once():
    assert K.implements == ("fvp_fwd", "fvp_bwd") and K.units == ("PL",) and not K.generic
    d = get_design("cpp-trpo-ant")
    ctx = KernelContext(d)
    nodes = [n for n in ctx.graph.nodes if n.kind in K.implements]
    assert len(nodes) == 10  # fc1, fc1_tanh, fc2, fc2_tanh, fc3: forward and backward
    params = [K.node_params(n, ctx) for n in nodes]
    assert all(q == params[0] for q in params)
    assert params[0]["samples"] == 50000 and params[0]["iterations"] == 10 and params[0]["damping"] == 0.1
    whole = K.cost(K.resolve(params[0]), device=ctx.device)
    rows = [r for r in profile_design(d) if r.node in {n.name for n in nodes}]
    assert {r.unit for r in rows} == {"PL"} and len(rows) == 10
    assert sum(r.cycles for r in rows) == whole["cycles"]
    assert math.isclose(sum(r.latency_us for r in rows), whole["latency_us"], rel_tol=1e-12)
    first = [r for r in rows if r.resources]
    assert [r.node for r in first] == [nodes[0].name] and first[0].resources["dsp"] == whole["resources"]["dsp"]
    # FLOP shares: layer 1's forward is the largest node
    assert max(rows, key=lambda r: r.latency_us).node == "policy.fc1.fvp_fwd"
    # the build: one component for every fvp node
    g = build_graph(d)
    asg = {n.name: "PL" if n.kind in K.implements else "PS" for n in g.nodes}
    comps = map_design(d, g, asg, hls4ml=False).components
    assert [(c.name, c.kernel, len(c.nodes)) for c in comps] == [("fvp", "fvp", 10)]
    # a TRPO design that does not name the unit: no kernel for its fvp nodes
    bare = dataclasses.replace(d, kernels=())
    bctx = KernelContext(bare)
    assert K.node_params(nodes[0], bctx) is None and kernels_for(nodes[0], bctx, "PL") == []


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("params, needle", [
    ({"parallelism": [16, 8, 5]}, "parameter 'parallelism' = [16, 8, 5] must have one entry per layer size"),
    ({"parallelism": [16, 80, 5, 8]}, "entry 1 (80) exceeds layers[1] = 64"),
    ({"layers": [4]}, "parameter 'layers' = [4] needs at least an input and an output size"),
    ({"layers": "4,x"}, "parameter 'layers' = '4,x' is not a list of integers"),
    ({"storage": "fp32"}, "parameter 'storage' = 'fp32' must be a signed fixed<W,I,...> with W <= 31"),
    ({"acc": "fixed<60,20>"}, "parameter 'acc' = 'fixed<60,20>' must be a signed fixed<W,I,...> with W <= 53"),
    ({"tanh_bits": 23}, "parameter 'tanh_bits' = 23 must be in 1..22"),
    ({"act_unit": "cordic"}, "parameter 'act_unit' = 'cordic' is not one of seed, table"),
])
def test_bad_parameters_one_line(params, needle):
    with pytest.raises(RlhlsError) as e:
        K.resolve(params)
    assert needle in str(e.value) and str(e.value).startswith("kernel 'fvp': ") and "\n" not in str(e.value)


def test_refusals():
    with pytest.raises(RlhlsError, match=r"'fp64' = true is the float64 reference path: it has no C\+\+$"):
        render_kernel("fvp", {"fp64": True})
    with pytest.raises(RlhlsError, match="unit 'AIE' is not supported"):
        K.cost(K.resolve({}), unit="AIE")
    p = K.resolve({"layers": [5, 4], "parallelism": [1, 1], "samples": 4})
    with pytest.raises(RlhlsError, match="input 'theta' has shape"):
        K.model(p, obs=np.zeros((2, 5)), theta=np.zeros(3), v=np.zeros(28), inv_var=np.ones(4))
