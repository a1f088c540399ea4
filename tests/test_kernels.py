"""Kernel registry, parameter validation, numpy models against independent references, cost."""

import json

import numpy as np
import pytest

from rlhls.designs.arith import dense
from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.kernels import KERNELS, adam_alpha, get_kernel, kernel_names
from rlhls.designs.network import _sum_rows, Precision


def test_registry():
    assert {"dense_forward", "dense_backward", "weight_gradient", "weight_update", "gae", "mm_aie"} <= set(kernel_names())
    with pytest.raises(RlhlsError, match="unknown.*dense_forward"):
        get_kernel("nope")
    for k in KERNELS.values():
        json.dumps(k.describe())


@pytest.mark.parametrize("over, msg", [
    ({"pf": 0}, "kernel 'dense_forward': parameter 'pf' = 0 must be >= 1"),
    ({"pf": "17"}, "parameter 'pf' = 17 must be <= m = 16"),
    ({"bogus": 1}, "unknown parameter 'bogus'"),
    ({"n": "x"}, "parameter 'n' = 'x' is not an integer"),
    ({"storage": "fixed<60,10>", "acc": "fixed<60,10>"}, "wider than 53 bits"),
    ({"storage": "fp32"}, "mix fixed and float"),
    ({"storage": "float<6,9>", "acc": "fp32"}, "has no C++ type"),
    ({"storage": "fixed<16"}, "parameter 'storage'"),
])
def test_resolve_errors(over, msg):
    with pytest.raises(RlhlsError) as e:
        get_kernel("dense_forward").resolve(over)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_resolve_parses_strings_and_canonicalises():
    k = get_kernel("dense_forward")
    p = k.resolve({"pf": "4", "storage": "ap_fixed<16,6,AP_RND,AP_SAT>", "ii": "2"})
    assert p["pf"] == 4 and p["ii"] == 2 and p["storage"] == "fixed<16,6,RND,SAT>"
    u = get_kernel("weight_update")
    with pytest.raises(RlhlsError, match="'optimizer' = 'lamb' is not one of"):
        u.resolve({"optimizer": "lamb"})
    with pytest.raises(RlhlsError, match="'eps' = 1e-08 rounds to 0.0"):
        u.resolve({"eps": 1e-8, "acc": "fixed<32,8,RND,SAT>"})
    with pytest.raises(RlhlsError, match="'pf' = 65 must be <= n = 64"):
        u.resolve({"pf": 65})


def _inputs(k, p, seed, scale=1.5):
    rng = np.random.default_rng(seed)
    ins, _ = k.arrays(p)
    return {a.name: rng.standard_normal(a.shape) * scale for a in ins}


@pytest.mark.parametrize("fmt", [("fixed<12,4,RND,SAT>", "fixed<24,8,RND,SAT>"), ("fp16", "fp32"), ("bf16", "bf16")])
def test_dense_models_match_arith_and_network(fmt):
    s, acc = fmt
    over = {"n": 5, "k": 7, "m": 3, "storage": s, "acc": acc}
    S, A = parse_format(s), parse_format(acc)
    f = get_kernel("dense_forward")
    p = f.resolve(over)
    a = _inputs(f, p, 1)
    y = f.model(p, **a)["y"]
    ref = dense(S.quantize(a["x"]), S.quantize(a["w"]), S.quantize(a["b"]), in_fmt=S, acc_fmt=A, out_fmt=S)
    assert np.array_equal(y, ref) and np.array_equal(S.quantize(y), y)

    bk = get_kernel("dense_backward")
    a = _inputs(bk, p, 2)
    dx = bk.model(bk.resolve(over), **a)["dx"]
    assert dx.shape == (5, 7)
    assert np.array_equal(dx, dense(a["dy"], a["w"].T, in_fmt=S, acc_fmt=A, out_fmt=S))

    g = get_kernel("weight_gradient")
    a = _inputs(g, p, 3)
    out = g.model(g.resolve(over), **a)
    assert np.array_equal(out["dw"], dense(a["x"].T, a["dy"], in_fmt=S, acc_fmt=A, out_fmt=S))
    assert np.array_equal(out["db"], _sum_rows(a["dy"], Precision(S, A)))


def test_dense_model_close_to_float64():
    k = get_kernel("dense_forward")
    p = k.resolve({"storage": "fp32", "acc": "fp32", "n": 4, "k": 32, "m": 8})
    a = _inputs(k, p, 4, scale=0.5)
    assert np.allclose(k.model(p, **a)["y"], a["x"] @ a["w"] + a["b"], rtol=1e-5, atol=1e-5)


def _adam_ref(w, g, m, v, lr, b1, b2, eps, t):
    m1 = b1 * m + (1 - b1) * g
    v1 = b2 * v + (1 - b2) * g * g
    return w - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m1 / (np.sqrt(v1) + eps), m1, v1


@pytest.mark.parametrize("fmt, tol", [(("fp32", "fp32"), 1e-6), (("fixed<24,8,RND,SAT>", "fixed<40,8,RND,SAT>"), 2e-5)])
def test_optimizers_follow_float64_reference(fmt, tol):
    k = get_kernel("weight_update")
    rng = np.random.default_rng(5)
    for opt in ("sgd", "adam", "rmsprop"):
        p = k.resolve({"optimizer": opt, "storage": fmt[0], "acc": fmt[1], "n": 200, "lr": 0.01})
        a = k.random_inputs(p, rng, t=3) if opt == "adam" else k.random_inputs(p, rng)
        out = k.model(p, **a)
        w, g = a["w"], a["g"]
        if opt == "sgd":
            ref = w - 0.01 * g
        elif opt == "adam":
            assert a["alpha"][0] == pytest.approx(adam_alpha(p, 3), rel=1e-6)
            ref, m1, v1 = _adam_ref(w, g, a["m"], a["v"], 0.01, 0.9, 0.999, 1e-5, 3)
            assert np.allclose(out["m_new"], m1, atol=tol) and np.allclose(out["v_new"], v1, atol=tol)
        else:
            v1 = 0.99 * a["v"] + 0.01 * g * g
            ref = w - 0.01 * g / (np.sqrt(v1) + 1e-5)
            assert np.allclose(out["v_new"], v1, atol=tol)
        S = parse_format(fmt[0])
        lsb = S.lsb if hasattr(S, "lsb") else 1e-6  # fp32: a few ulps of |w| < 4
        assert np.max(np.abs(out["w_new"] - ref)) <= 4 * lsb
        assert not np.array_equal(out["w_new"], w)  # the step moved the weights


def test_cost_shapes_and_scaling():
    for name in ("dense_forward", "dense_backward", "weight_gradient", "weight_update"):
        k = get_kernel(name)
        c1 = k.cost(k.resolve({"pf": 1}), "PL", "zcu106")
        c4 = k.cost(k.resolve({"pf": 4}), "PL", "zcu106")
        assert set(c1["resources"]) == {"lut", "ff", "dsp", "bram36", "uram", "aie_tiles"}
        assert c4["cycles"] < c1["cycles"] and c1["latency_us"] > 0 and c1["memory_bytes"] > 0
        assert k.cost(k.resolve({}), "PS", "zcu106")["latency_us"] > 0
    u = get_kernel("weight_update")
    assert u.cost(u.resolve({}), "PL")["throughput_el_per_s"] > 0
    with pytest.raises(RlhlsError, match="no cost model"):
        u.cost(u.resolve({}), "AIE", "vek280")
    assert get_kernel("dense_forward").cost(get_kernel("dense_forward").resolve({}), "AIE", "vek280")["resources"]["aie_tiles"] > 0


@pytest.mark.parametrize("opt", ["sgd", "adam", "rmsprop"])
def test_fp32_update_fast_path_equals_the_op_by_op_model(opt, monkeypatch):
    """The fp32 update computes in binary32 directly; it equals the one-rounding-per-op model, on
    edge values too (fp32 subnormals, overflow to inf)."""
    from rlhls.designs.kernels.update import WeightUpdate

    k = get_kernel("weight_update")
    p = k.resolve({"optimizer": opt, "storage": "fp32", "acc": "fp32", "n": 4000, "lr": 0.003, "eps": 1e-8})
    rng = np.random.default_rng(11)
    a = k.random_inputs(p, rng, t=2) if opt == "adam" else k.random_inputs(p, rng)
    a["g"] = rng.standard_normal(4000) * 10.0 ** rng.integers(-44, 38, 4000)  # subnormal .. near overflow
    fast = k.model(p, **a)
    monkeypatch.setattr(WeightUpdate, "fast_fp32", False)
    slow = k.model(p, **a)
    assert fast.keys() == slow.keys()
    for key in fast:
        np.testing.assert_array_equal(fast[key].view(np.uint64), slow[key].view(np.uint64))
    assert np.isinf(fast["w_new"]).any() or opt == "sgd" or np.isinf(fast["v_new"]).any()
