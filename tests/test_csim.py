"""csim: every kernel's HLS C++ + testbench under g++ equals the numpy model bit for bit."""

import time

import pytest

from rlhls.flow.csim import run_csim
from rlhls.flow.kernels import render_kernel

from cpp_util import CACHE

CASES = [
    ("dense_forward", {"storage": "fixed<10,3,TRN,WRAP>", "acc": "fixed<14,4,RND_CONV,WRAP>", "pf": 4, "ii": 2}),
    ("dense_backward", {"storage": "bf16", "acc": "fp32", "pf": 2}),
    ("weight_gradient", {"storage": "fp16", "acc": "fp16", "n": 6, "k": 5, "m": 9, "pf": 3}),
    ("weight_update", {"optimizer": "adam", "storage": "fixed<16,6,RND,SAT>", "acc": "fixed<32,8,RND,SAT>", "pf": 8}),
]


@pytest.mark.parametrize("name, params", CASES, ids=[c[0] for c in CASES])
def test_csim_passes(name, params, tmp_path):
    src = render_kernel(name, params, seed=7)
    top = src.files[f"{name}.cpp"]
    pf = params["pf"]
    assert f"#pragma HLS UNROLL factor={pf}" in top and f"cyclic factor={pf}" in top
    assert f"#pragma HLS PIPELINE II={params.get('ii', 1)}" in top
    assert "offset=slave bundle=gmem0" in top and "s_axilite port=return" in top
    assert "hls_stream" not in "".join(src.files.values()) + "".join(src.tb_files.values())
    res = run_csim(src, tmp_path, CACHE)
    assert res.passed, res.detail
    assert "bit-exact" in res.detail


def test_csim_cache_and_corrupted_expectation(tmp_path):
    cache = tmp_path / "cache"
    src = render_kernel("weight_update", {"optimizer": "sgd", "storage": "bf16", "acc": "fp32", "n": 16}, seed=1)
    cold = run_csim(src, tmp_path / "a", cache)
    assert cold.passed and not cold.cached, cold.detail
    t0 = time.perf_counter()
    warm = run_csim(src, tmp_path / "b", cache)
    assert warm.passed and warm.cached and time.perf_counter() - t0 < cold.seconds / 3
    # Flip the lowest bit of one expected value: the testbench must report it and fail.
    data = bytearray(src.tb_data["expected_w_new.bin"])
    data[8 * 5] ^= 1
    src.tb_data["expected_w_new.bin"] = bytes(data)
    bad = run_csim(src, tmp_path / "c", cache)
    assert not bad.passed and bad.cached
    assert bad.detail.startswith("FAIL w_new[5]")


def test_render_is_deterministic_and_component_named():
    a = render_kernel("dense_forward", {"pf": 2}, seed=3)
    b = render_kernel("dense_forward", {"pf": "2"}, seed=3)
    assert a.files == b.files and a.tb_data == b.tb_data and a.digest() == b.digest()
    c = render_kernel("dense_forward", {"pf": 2}, seed=3, component="policy_fc1_fwd")
    assert c.top == "policy_fc1_fwd" and "void policy_fc1_fwd(" in c.files["policy_fc1_fwd.cpp"]
    assert render_kernel("dense_forward", {"pf": 2}, seed=4).tb_data != a.tb_data
