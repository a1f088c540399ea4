"""AIE emission (flow/aie.py): ADF project contents, and the emitted kernel sources compiled with g++
against our shim (vitis/aie_shim) agreeing bit for bit with the bf16 reference and arith.dense."""

import json
import re

import numpy as np
import pytest

from rlhls.designs.arith import dense
from rlhls.designs.errors import RlhlsError
from rlhls.designs.formats import BF16, FP32
from rlhls.designs.registry import get_design
from rlhls.flow.aie import (TILE_BUFFER_BYTES, aie_dense_reference, check_aie, emit_aie, order_sensitive_operands,
                            plan_chunks, random_bf16)


def _bits(a):
    return np.asarray(a, dtype=np.float64).astype(np.float32).view(np.uint32)


def test_emitted_project_has_the_adf_constructs(tmp_path):
    d = get_design("apdrl-dqn-cartpole")
    files = emit_aie(d, ["q.fc2.fwd", "q.fc3.bwd"], tmp_path, batch=4)
    aie = tmp_path / "aie"
    names = {p.relative_to(aie).as_posix() for p in files}
    assert names == {"graph.h", "graph.cpp", "aie.cfg", "Makefile", "manifest.json", "kernels/mm_bf16.h",
                     "kernels/q_fc2_fwd.h", "kernels/q_fc2_fwd.cc", "kernels/q_fc3_bwd.h", "kernels/q_fc3_bwd.cc"}
    assert all(p.is_file() for p in files)
    g = (aie / "graph.h").read_text()
    for construct in ("public adf::graph", "adf::kernel::create(q_fc2_fwd_y_single)", "adf::input_plio::create(",
                      "adf::output_plio::create(", "adf::connect<>(", "adf::runtime<adf::ratio>(",
                      'adf::source(k[0]) = "kernels/q_fc2_fwd.cc"', "class rlhls_top", "q_fc3_bwd_dx_single",
                      "q_fc3_bwd_dw_single"):
        assert construct in g, construct
    main = (aie / "graph.cpp").read_text()
    assert re.search(r"top\.init\(\);\s*top\.run\(1\);\s*top\.end\(\);", main)
    kh = (aie / "kernels" / "q_fc2_fwd.h").read_text()
    assert "adf::input_buffer<bfloat16, adf::extents<256>>& a" in kh  # 4 x 64 chunk of x
    assert "adf::output_buffer<bfloat16, adf::extents<256>>& c" in kh
    core = (aie / "kernels" / "mm_bf16.h").read_text()
    for construct in ("aie::mmul<4, 8, 4, bfloat16, bfloat16, accfloat>", "aie::load_v<", "aie::store_v(",
                      "to_vector<bfloat16>()", "readincr_v<16>(cin)", "writeincr(cout"):
        assert construct in core, construct
    cfg = (aie / "aie.cfg").read_text()
    assert "[aie]" in cfg and "include=kernels" in cfg and "pl-freq=245.0" in cfg
    mk = (aie / "Makefile").read_text()
    assert "v++ -c --mode aie" in mk and "--config aie.cfg" in mk and "x86simulator" in mk and "aiesimulator" in mk
    m = json.loads((aie / "manifest.json").read_text())
    assert [n["name"] for n in m["nodes"]] == ["q.fc2.fwd", "q.fc3.bwd"]
    # the last layer's backward has both products: dX = dY.W^T (B transposed) and dW = X^T.dY (A transposed)
    dx, dw = m["nodes"][1]["gemms"]
    assert (dx["M"], dx["K"], dx["N"], dx["bt"]) == (4, 2, 64, True)
    assert (dw["M"], dw["K"], dw["N"], dw["at"]) == (64, 4, 2, True)


def test_cartpole_kernels_bit_exact_under_the_shim(tmp_path):
    d = get_design("apdrl-dqn-cartpole")
    nodes = ["q.fc1.fwd", "q.fc2.tfwd", "q.fc3.fwd", "q.fc2.bwd", "q.fc1.bwd"]
    emit_aie(d, nodes, tmp_path, batch=4)
    res = check_aie(tmp_path, seed=1)
    # q.fc1.bwd is the first layer: weight gradient only (no input gradient)
    assert [(r["node"], r["kernel"]) for r in res] == [
        ("q.fc1.fwd", "q_fc1_fwd_y"), ("q.fc2.tfwd", "q_fc2_tfwd_y"), ("q.fc3.fwd", "q_fc3_fwd_y"),
        ("q.fc2.bwd", "q_fc2_bwd_dx"), ("q.fc2.bwd", "q_fc2_bwd_dw"), ("q.fc1.bwd", "q_fc1_bwd_dw")]
    assert all(r["passed"] and r["mismatches"] == 0 for r in res), res


def test_ddpg_kernels_bit_exact_including_cascades(tmp_path):
    d = get_design("apdrl-ddpg-lunarcont")
    nodes = ["actor.fc2.fwd", "critic.fc2.bwd", "critic@pi.fc1.bwd", "actor.fc3.bwd"]
    emit_aie(d, nodes, tmp_path, batch=4)
    m = json.loads((tmp_path / "aie" / "manifest.json").read_text())
    grids = {g["fn"]: g for n in m["nodes"] for g in n["gemms"]}
    assert grids["actor_fc2_fwd_y"]["grid_k"] > 1  # 400x300 weights: K split over a cascade chain
    assert grids["critic_fc2_bwd_dw"]["grid_m"] > 1
    assert "critic_pi_fc1_bwd_dw" not in grids  # the actor's pass through the critic: input gradient only
    g = (tmp_path / "aie" / "graph.h").read_text()
    assert "actor_fc2_fwd_y_first" in g and "actor_fc2_fwd_y_last" in g
    res = check_aie(tmp_path, seed=2)
    assert len(res) == 6
    assert all(r["passed"] for r in res), res


def test_large_layer_split_over_tiles_bit_exact(tmp_path):
    d = get_design("apdrl-dqn-breakout")
    emit_aie(d, ["q.fc1.fwd"], tmp_path, batch=2)  # 3136 x 512
    m = json.loads((tmp_path / "aie" / "manifest.json").read_text())
    g = m["nodes"][0]["gemms"][0]
    assert (g["M"], g["K"], g["N"]) == (2, 3136, 512)
    assert g["grid_k"] > 2 and g["grid_n"] > 1 and m["tiles"] == g["kernels"] > 100
    assert 4 * (g["mc"] * g["kc"] + g["kc"] * g["nc"] + g["nc"] + g["mc"] * g["nc"]) <= TILE_BUFFER_BYTES
    res = check_aie(tmp_path, seed=3)
    assert len(res) == 1 and res[0]["passed"], res


def test_check_catches_a_kernel_with_another_accumulation_order(tmp_path):
    d = get_design("apdrl-dqn-cartpole")
    emit_aie(d, ["q.fc2.fwd"], tmp_path, batch=4)
    core = tmp_path / "aie" / "kernels" / "mm_bf16.h"
    text = core.read_text()
    old = "for (unsigned ki = 0; ki < KC / 8; ++ki)"
    assert old in text
    core.write_text(text.replace(old, "for (unsigned ki = KC / 8; ki-- > 0;)"))  # K blocks reversed
    (res,) = check_aie(tmp_path, seed=4)
    assert not res["passed"] and res["mismatches"] > 0


@pytest.mark.parametrize("shape, bias, k_pad", [((5, 37, 6), True, 3), ((8, 200, 4), False, 0),
                                                 ((3, 1, 9), True, 7)])
def test_reference_equals_arith_dense_bit_for_bit(shape, bias, k_pad):
    rng = np.random.default_rng(sum(shape))
    n, k, m = shape
    x, w = order_sensitive_operands(rng, n, k, m)
    x[rng.random(x.shape) < 0.2] = -0.0  # signed zeros
    b = random_bf16(rng, (m,), zeros=0.3) if bias else None
    ref = aie_dense_reference(x, w, b, k_pad=k_pad)
    want = dense(x, w, b, in_fmt=BF16, acc_fmt=FP32, out_fmt=BF16)
    assert np.array_equal(_bits(ref), _bits(want))  # signed zeros too


def test_reference_depends_on_the_order():
    # the check data cancels big products: an fp32 sum in 8 interleaved lanes (as a vector or BLAS
    # kernel sums) differs from the sequential one. The lanes are summed here, in float32, so the
    # order is the test's own and not whatever this CPU's BLAS kernel happens to use.
    rng = np.random.default_rng(7)
    x, w = order_sensitive_operands(rng, 16, 64, 16)
    ref = aie_dense_reference(x, w)
    x32, w32 = x.astype(np.float32), w.astype(np.float32)
    lanes = np.zeros((8, 16, 16), np.float32)
    for k in range(64):
        lanes[k % 8] += x32[:, k, None] * w32[None, k, :]
    blocked = BF16.quantize(lanes.sum(axis=0, dtype=np.float32).astype(np.float64))
    assert not np.array_equal(_bits(ref), _bits(blocked))
    # the sequential fp32 order, summed the same way, is the reference
    acc = np.zeros((16, 16), np.float32)
    for k in range(64):
        acc += x32[:, k, None] * w32[None, k, :]
    assert np.array_equal(_bits(ref), _bits(BF16.quantize(acc.astype(np.float64))))


def test_plan_chunks_fit_and_cover():
    for M, K, N, bias in [(4, 4, 64, True), (128, 64, 64, True), (32, 3136, 512, True), (3136, 32, 512, False)]:
        mc, kc, nc = plan_chunks(M, K, N, bias)
        assert mc % 4 == 0 and kc % 8 == 0 and nc % 4 == 0
        assert 4 * (mc * kc + kc * nc + (nc if bias else 0) + mc * nc) <= TILE_BUFFER_BYTES
        assert mc <= max(4, -(-M // 4) * 4) and kc <= max(8, -(-K // 8) * 8)


def test_non_mm_and_unknown_nodes_raise(tmp_path):
    d = get_design("apdrl-dqn-cartpole")
    with pytest.raises(RlhlsError, match=r"'q\.fc1_relu\.fwd'.*not a matrix multiply"):
        emit_aie(d, ["q.fc1.fwd", "q.fc1_relu.fwd"], tmp_path, batch=4)
    with pytest.raises(RlhlsError, match=r"'q\.fc1\.upd'"):
        emit_aie(d, ["q.fc1.upd"], tmp_path, batch=4)
    with pytest.raises(RlhlsError, match=r"'q\.fc9\.fwd' is not in the training graph"):
        emit_aie(d, ["q.fc9.fwd"], tmp_path, batch=4)
    assert not (tmp_path / "aie").exists()  # nothing half-written
