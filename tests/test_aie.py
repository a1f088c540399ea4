"""AIE emission (flow/aie.py): ADF project contents at the plan's design points (time-shared tiles,
shared PLIOs, the device's capacity), the emitted kernel sources compiled with g++ against our shim
(vitis/aie_shim) agreeing bit for bit with the bf16 reference and arith.dense, and aie_gemm (the csim
backend of AIE nodes) through the same sources."""

import json
import re

import numpy as np
import pytest

import rlhls.core.toolchain as toolchain
from rlhls.designs.arith import dense
from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import BF16, FP32
from rlhls.designs.graph import build_graph
from rlhls.designs.registry import get_design
from rlhls.flow.aie import (TILE_BUFFER_BYTES, aie_dense_reference, aie_fit, aie_gemm, check_aie, emit_aie,
                            order_sensitive_operands, plan_chunks, random_bf16)

VEK280_TILES, VEK280_PAIRS = 304, 126  # 3/4 of the 168 AIE->PL streams: the routable budget (designs/devices.py)


def _bits(a):
    return np.asarray(a, dtype=np.float64).astype(np.float32).view(np.uint32)


def _manifest(out):
    return json.loads((out / "aie" / "manifest.json").read_text())


def _point(text):
    t, p = re.fullmatch(r"t(\d+)p(\d+)", text).groups()
    return int(t), int(p)


def _check_layout(m, points):
    """Every node within its point; kernels cover each product's blocks once; totals add up."""
    for n in m["nodes"]:
        t, p = _point(points.get(n["name"], "t1p1"))
        assert n["point"] == points.get(n["name"], "t1p1")
        assert 1 <= n["tiles"] <= t and 1 <= n["plio_pairs"] <= p
        assert len(n["kernels"]) == n["tiles"] and len(n["plio_inputs"]) == len(n["plio_outputs"]) == n["plio_pairs"]
        for i, g in enumerate(n["gemms"]):
            assert sum(k["blocks"][i] for k in n["kernels"]) == g["grid_m"] * g["grid_n"] == g["blocks"]
        for k in n["kernels"]:
            assert k["chunks"] == sum(b * g["grid_k"] for b, g in zip(k["blocks"], n["gemms"]))
            assert 0 <= k["plio"] < n["plio_pairs"]
        assert n["chunks_per_kernel"]["max"] == max(k["chunks"] for k in n["kernels"])
        assert n["tile_bytes"] <= TILE_BUFFER_BYTES
    assert m["tiles"] == sum(n["tiles"] for n in m["nodes"])
    assert m["plio_pairs"] == sum(n["plio_pairs"] for n in m["nodes"])


def test_emitted_project_has_the_adf_constructs(tmp_path):
    d = get_design("apdrl-dqn-cartpole")
    points = {"q.fc2.fwd": "t1p1", "q.fc3.bwd": "t4p2"}
    files = emit_aie(d, ["q.fc2.fwd", "q.fc3.bwd"], tmp_path, batch=4, points=points)
    aie = tmp_path / "aie"
    names = {p.relative_to(aie).as_posix() for p in files}
    assert {n for n in names if not n.startswith("data/")} == {
        "graph.h", "graph.cpp", "aie.cfg", "Makefile", "manifest.json", "kernels/mm_bf16.h",
        "kernels/q_fc2_fwd.h", "kernels/q_fc2_fwd.cc", "kernels/q_fc3_bwd.h", "kernels/q_fc3_bwd.cc"}
    # simulation data: every PLIO's input stream and its expected output, the harness's vectors
    assert {n for n in names if n.startswith("data/")} == {
        f"data/{f}" for node, q in (("q_fc2_fwd", 1), ("q_fc3_bwd", 2))
        for f in [f"{node}.in.bin", f"{node}.expected.bin"] + [f"{node}_in{i}.txt" for i in range(q)]
        + [f"{node}_out{i}_expected.txt" for i in range(q)]}
    assert all(p.is_file() for p in files)
    g = (aie / "graph.h").read_text()
    for construct in ("public adf::graph", "adf::kernel::create_object<q_fc2_fwd_tile>(1)",
                      "adf::kernel::create_object<q_fc3_bwd_tile>(", "adf::input_plio::create(",
                      "adf::output_plio::create(", "adf::connect<>(", "adf::runtime<adf::ratio>(",
                      "adf::repetition_count(k[0])", "adf::async_repetition(k[0].out[0])",
                      'adf::source(k[0]) = "kernels/q_fc2_fwd.cc"', "class rlhls_top",
                      "adf::pktsplit<2> split0", "adf::pktmerge<2> merge1", "split1.out[1]"):
        assert construct in g, construct
    main = (aie / "graph.cpp").read_text()
    assert re.search(r"top\.init\(\);\s*top\.run\(1\);\s*top\.end\(\);", main)
    kh = (aie / "kernels" / "q_fc3_bwd.h").read_text()
    for construct in ("class q_fc3_bwd_tile", "q_fc3_bwd_tile(unsigned blocks_dx, unsigned blocks_dw);",
                      "adf::input_buffer<bfloat16, adf::extents<IN>>& in",
                      "adf::output_async_buffer<bfloat16, adf::extents<OUT>>& out",
                      "REGISTER_FUNCTION(q_fc3_bwd_tile::run)", "float acc_[ACC]"):
        assert construct in kh, construct
    core = (aie / "kernels" / "mm_bf16.h").read_text()
    for construct in ("aie::mmul<4, 8, 4, bfloat16, bfloat16, accfloat>", "aie::load_v<", "aie::store_v(",
                      "to_vector<bfloat16>()", "to_vector<float>()", "out.acquire();", "out.release();"):
        assert construct in core, construct
    cfg = (aie / "aie.cfg").read_text()
    assert "[aie]" in cfg and "include=kernels" in cfg and "pl-freq=245.0" in cfg
    mk = (aie / "Makefile").read_text()
    assert "v++ -c --mode aie" in mk and "--config aie.cfg" in mk and "x86simulator" in mk and "aiesimulator" in mk
    m = _manifest(tmp_path)
    assert [n["name"] for n in m["nodes"]] == ["q.fc2.fwd", "q.fc3.bwd"]
    # the last layer's backward has both products: dX = dY.W^T (B transposed) and dW = X^T.dY (A transposed)
    dx, dw = m["nodes"][1]["gemms"]
    assert (dx["M"], dx["K"], dx["N"], dx["bt"]) == (4, 2, 64, True)
    assert (dw["M"], dw["K"], dw["N"], dw["at"]) == (64, 4, 2, True)
    # t4p2: the small products are split into blocks so that 4 tiles share 2 PLIO pairs
    assert (m["nodes"][1]["tiles"], m["nodes"][1]["plio_pairs"]) == (4, 2)
    assert (m["tiles"], m["plio_pairs"], m["capacity"]["tiles"], m["capacity"]["plio_pairs"]) == (5, 3, 304, 126)
    _check_layout(m, points)


def test_cartpole_kernels_bit_exact_under_the_shim(tmp_path):
    d = get_design("apdrl-dqn-cartpole")
    nodes = ["q.fc1.fwd", "q.fc2.tfwd", "q.fc3.fwd", "q.fc2.bwd", "q.fc1.bwd"]
    emit_aie(d, nodes, tmp_path, batch=4)  # no points: every node at t1p1
    assert _manifest(tmp_path)["tiles"] == 5
    res = check_aie(tmp_path, seed=1)
    # q.fc1.bwd is the first layer: weight gradient only (no input gradient)
    assert [(r["node"], r["kernel"]) for r in res] == [
        ("q.fc1.fwd", "q_fc1_fwd_y"), ("q.fc2.tfwd", "q_fc2_tfwd_y"), ("q.fc3.fwd", "q_fc3_fwd_y"),
        ("q.fc2.bwd", "q_fc2_bwd_dx"), ("q.fc2.bwd", "q_fc2_bwd_dw"), ("q.fc1.bwd", "q_fc1_bwd_dw")]
    assert all(r["passed"] and r["mismatches"] == 0 for r in res), res


def test_time_shared_kernels_bit_exact(tmp_path):
    d = get_design("apdrl-ddpg-lunarcont")
    points = {"actor.fc2.fwd": "t1p1", "critic.fc2.bwd": "t4p2", "critic@pi.fc1.bwd": "t1p1", "actor.fc3.bwd": "t16p4"}
    emit_aie(d, list(points), tmp_path, batch=4, points=points)
    m = _manifest(tmp_path)
    _check_layout(m, points)
    nodes = {n["name"]: n for n in m["nodes"]}
    fc2 = nodes["actor.fc2.fwd"]
    g = fc2["gemms"][0]
    assert g["grid_k"] > 1 and g["blocks"] > 1  # 400x300 weights: one tile takes every block, K chunk by K chunk
    assert fc2["tiles"] == 1 and fc2["kernels"][0]["chunks"] == g["blocks"] * g["grid_k"]
    bwd = nodes["critic.fc2.bwd"]
    assert bwd["tiles"] == 4 and all(min(k["blocks"]) > 0 for k in bwd["kernels"])  # both products on every tile
    assert bwd["chunks_per_kernel"]["min"] > 1
    assert nodes["actor.fc3.bwd"]["tiles"] == 16 and nodes["actor.fc3.bwd"]["plio_pairs"] == 4
    assert [gg["fn"] for gg in nodes["critic@pi.fc1.bwd"]["gemms"]] == ["critic_pi_fc1_bwd_dx"]  # input gradient only
    res = check_aie(tmp_path, seed=2)
    assert len(res) == 6
    assert all(r["passed"] for r in res), res


def test_large_layer_time_shared_bit_exact(tmp_path):
    d = get_design("apdrl-dqn-breakout")
    emit_aie(d, ["q.fc1.fwd"], tmp_path, batch=2, points={"q.fc1.fwd": "t4p2"})  # 3136 x 512
    m = _manifest(tmp_path)
    n = m["nodes"][0]
    g = n["gemms"][0]
    assert (g["M"], g["K"], g["N"]) == (2, 3136, 512)
    assert g["grid_k"] > 2 and g["blocks"] > 4
    assert (m["tiles"], m["plio_pairs"]) == (4, 2) and n["chunks_per_kernel"]["min"] > 2 * g["grid_k"]
    res = check_aie(tmp_path, seed=3)
    assert len(res) == 1 and res[0]["passed"], res


def _breakout_plan():
    d = get_design("apdrl-dqn-breakout")
    graph = build_graph(d)
    return d, graph, [n.name for n in graph.mm_nodes]


def test_breakout_plan_fits_the_vek280(tmp_path):
    d, graph, mm = _breakout_plan()
    assert len(mm) == 15
    # every mm node on the AIE at a modest point: 15 x 16 tiles, 15 x 8 stream pairs
    points = {n: "t16p8" for n in mm}
    assert aie_fit(d, mm, graph, points=points) == []
    emit_aie(d, mm, tmp_path, graph=graph, points=points, data=False)  # the layout (data: ~400 MB of streams)
    m = _manifest(tmp_path)
    _check_layout(m, points)
    assert m["tiles"] <= VEK280_TILES and m["plio_pairs"] <= VEK280_PAIRS
    assert m["capacity"] == {"device": "vek280", "tiles": VEK280_TILES, "plio_pairs": VEK280_PAIRS}
    big = [n for n in m["nodes"] if not n["name"].startswith("q.fc2.")]
    assert all(n["tiles"] == 16 and n["plio_pairs"] == 8 for n in big)  # the big layers use their whole point
    assert all(n["chunks_per_kernel"]["max"] > 1 for n in big)  # time-shared
    # one PLIO pair feeds at most 32 tiles (pktsplit<n>, n <= 32): t64p1 runs on 32
    emit_aie(d, ["q.fc1.fwd"], tmp_path / "fanout", graph=graph, points={"q.fc1.fwd": "t64p1"}, data=False)
    assert (_manifest(tmp_path / "fanout")["tiles"], _manifest(tmp_path / "fanout")["plio_pairs"]) == (32, 1)
    assert "adf::pktsplit<32> split0" in (tmp_path / "fanout" / "aie" / "graph.h").read_text()
    # the partitioner's own plan (its points sum to at most the device) fits as emitted
    from rlhls.partition.design_plan import partition_design

    plan = partition_design(d, graph=graph)
    aie = [n for n, u in plan.assignment.items() if u == "AIE"]
    if aie:
        pts = {n: plan.point[n] for n in aie}
        assert aie_fit(d, aie, graph, points=pts) == []
        emit_aie(d, aie, tmp_path / "plan", graph=graph, points=pts, data=False)
        mp = _manifest(tmp_path / "plan")
        _check_layout(mp, pts)
        assert mp["tiles"] <= VEK280_TILES and mp["plio_pairs"] <= VEK280_PAIRS


def test_graph_over_the_device_is_refused(tmp_path):
    d, graph, mm = _breakout_plan()
    big = [n for n in mm if not n.startswith("q.fc2.")]  # 12 nodes with >= 64 output blocks each
    with pytest.raises(RlhlsError, match=rf"node '{re.escape(big[4])}' \(at t64p4\) brings .* to 320 AIE tiles, "
                                         rf"over the 304 of vek280"):
        aie_fit(d, big, graph, points={n: "t64p4" for n in big})
    with pytest.raises(RlhlsError, match=rf"node '{re.escape(big[7])}' .* 128 PL<->AIE stream pairs \(PLIOs\), "
                                         rf"over the routable budget 126 of vek280"):
        aie_fit(d, big, graph, points={n: "t16p16" for n in big})
    for point, msg in [("t512p1", r"512 AIE tiles, over the 304 of vek280"), ("t1p4", r"at most two per tile"),
                       ("t128p200", r"200 PL<->AIE stream pairs \(PLIOs\), over the routable budget 126"),
                       ("16 tiles", r"not of the form t<tiles>p<plios>"), ("t0p1", r"not of the form")]:
        with pytest.raises(RlhlsError, match=rf"node 'q\.fc1\.fwd': .*{msg}"):
            aie_fit(d, ["q.fc1.fwd"], graph, points={"q.fc1.fwd": point})
    with pytest.raises(RlhlsError) as e:
        emit_aie(d, big, tmp_path, graph=graph, points={n: "t64p4" for n in big})
    assert "\n" not in str(e.value)
    assert not (tmp_path / "aie").exists()  # nothing written
    # without points (t1p1) nothing is over, and the caller is told the points are missing
    (warning,) = aie_fit(d, big, graph)
    assert "no design point" in warning and "t1p1" in warning


def test_check_catches_a_kernel_with_another_accumulation_order(tmp_path):
    d = get_design("apdrl-dqn-cartpole")
    emit_aie(d, ["q.fc2.fwd"], tmp_path, batch=4)
    core = tmp_path / "aie" / "kernels" / "mm_bf16.h"
    text = core.read_text()
    old = "for (unsigned kb = 0; kb < KC / 8; ++kb)"
    assert old in text
    core.write_text(text.replace(old, "for (unsigned kb = KC / 8; kb-- > 0;)"))  # K blocks reversed
    (res,) = check_aie(tmp_path, seed=4)
    assert not res["passed"] and res["mismatches"] > 0


@pytest.mark.parametrize("old, new, detail", [
    ("if (ki > 0) {", "if (false) {", r"outputs differ"),  # partial sums dropped between K chunks
    ("const bool last = ki + 1 == GK;", "const bool last = true;", r"released its output at K chunk 0 of"),
])
def test_check_catches_a_broken_time_shared_kernel(tmp_path, old, new, detail):
    d = get_design("apdrl-ddpg-lunarcont")
    emit_aie(d, ["actor.fc2.fwd"], tmp_path, batch=4, points={"actor.fc2.fwd": "t4p1"})
    assert _manifest(tmp_path)["nodes"][0]["gemms"][0]["grid_k"] > 1
    (res,) = check_aie(tmp_path, seed=5)
    assert res["passed"]
    core = tmp_path / "aie" / "kernels" / "mm_bf16.h"
    text = core.read_text()
    assert old in text
    core.write_text(text.replace(old, new))
    (res,) = check_aie(tmp_path, seed=5)
    assert not res["passed"] and re.search(detail, res["detail"]), res


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
        # packet and C block double-buffered in bf16, plus the block's fp32 partial sums
        assert 4 * (mc * kc + kc * nc + (nc if bias else 0) + mc * nc) + 4 * mc * nc <= TILE_BUFFER_BYTES
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


# ------------------------------------------------------------------ aie_gemm: the csim backend of AIE nodes

@pytest.fixture(scope="module")
def gemm_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("aie_gemm")


def _ref(a, b, bias, at, bt):
    A = np.asarray(a, dtype=np.float64)
    B = np.asarray(b, dtype=np.float64)
    return aie_dense_reference(A.T if at else A, B.T if bt else B, bias)


@pytest.mark.parametrize("M, K, N, bias, at, bt", [
    (5, 37, 6, True, False, False),
    (3, 1, 9, True, True, False),
    (7, 300, 13, False, False, True),   # dX = dY . W^T
    (2, 3136, 20, True, True, True),    # K = 3136: several K chunks carried through the partial sums
])
def test_aie_gemm_equals_the_reference_bit_for_bit(gemm_cache, M, K, N, bias, at, bt):
    rng = np.random.default_rng(M * K + N)
    a = rng.standard_normal((K, M) if at else (M, K)) * 3.0  # float64, not bf16: rounded on the way in
    b = rng.standard_normal((N, K) if bt else (K, N))
    bv = rng.standard_normal(N) if bias else None
    got = aie_gemm(a, b, bv, a_transposed=at, b_transposed=bt, cache_dir=gemm_cache)
    A, B = (a.T if at else a), (b.T if bt else b)
    assert got.shape == (M, N) and got.dtype == np.float64
    assert np.array_equal(_bits(got), _bits(_ref(a, b, bv, at, bt)))
    assert np.array_equal(_bits(got), _bits(dense(A, B, bv, in_fmt=BF16, acc_fmt=FP32, out_fmt=BF16)))
    if K == 3136:
        assert plan_chunks(M, K, N, bias)[1] < K
    # float32 operands (the fast bf16 path) give the same bits as their float64 values
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    got32 = aie_gemm(a32, b32, bv, a_transposed=at, b_transposed=bt, cache_dir=gemm_cache)
    assert np.array_equal(_bits(got32), _bits(_ref(a32, b32, bv, at, bt)))


def test_aie_gemm_order_signed_zeros_and_subnormals(gemm_cache):
    rng = np.random.default_rng(11)
    M, K, N = 6, 260, 10
    A, B = order_sensitive_operands(rng, M, K, N)
    bias = random_bf16(rng, (N,), zeros=0.5)
    ref = aie_dense_reference(A, B, bias)
    assert np.array_equal(_bits(aie_gemm(A, B, bias, cache_dir=gemm_cache)), _bits(ref))
    # signed zeros: all products -0 (or +0) and a bias of -0 / +0 keep the sign the IEEE sum gives
    Az = np.where(rng.random((M, K)) < 0.5, -0.0, 0.0)
    Bz = np.where(rng.random((K, N)) < 0.5, -0.0, 0.0)
    bz = np.where(np.arange(N) % 2 == 0, -0.0, 0.0)
    got = aie_gemm(Az, Bz, bz, cache_dir=gemm_cache)
    assert np.array_equal(_bits(got), _bits(aie_dense_reference(Az, Bz, bz)))
    # every product -0: the result is the bias's zero, sign included
    got = aie_gemm(np.full((M, K), -0.0), np.zeros((K, N)), bz, cache_dir=gemm_cache)
    assert np.array_equal(np.signbit(got), np.broadcast_to(np.signbit(bz), (M, N))) and not got.any()
    # products in the fp32 subnormal range (2**-140) and bf16 subnormal inputs
    As = random_bf16(rng, (M, K)) * 2.0 ** -70
    Bs = random_bf16(rng, (K, N)) * 2.0 ** -70
    As[0, :4] = 2.0 ** -130
    got = aie_gemm(As, Bs, None, cache_dir=gemm_cache)
    want = aie_dense_reference(As, Bs)
    assert np.array_equal(_bits(got), _bits(want)) and (np.abs(want[want != 0]) < 2.0 ** -126).any()


def test_aie_gemm_loads_once_and_ignores_the_point(gemm_cache, monkeypatch):
    rng = np.random.default_rng(3)
    a, b = random_bf16(rng, (4, 50)), random_bf16(rng, (50, 12))
    first = aie_gemm(a, b, cache_dir=gemm_cache)
    tiled = aie_gemm(a, b, point="t4p2", cache_dir=gemm_cache)  # the same bits on 4 time-shared tiles
    assert np.array_equal(_bits(first), _bits(tiled))

    def no_compile(*args, **kw):
        raise AssertionError("compiled again")

    monkeypatch.setattr(toolchain, "compile_cpp", no_compile)
    a2, b2 = random_bf16(rng, (4, 50)), random_bf16(rng, (50, 12))
    assert np.array_equal(_bits(aie_gemm(a2, b2, cache_dir=gemm_cache)), _bits(aie_dense_reference(a2, b2)))


def test_aie_gemm_bad_input_raises(gemm_cache):
    a, b = np.ones((3, 4)), np.ones((5, 2))
    for kw, msg in [({}, r"do not multiply \(K = 4 vs 5\)"), ({"b_transposed": True}, r"do not multiply"),
                    ({"bias": np.ones(3)}, r"bias has shape \(3,\), expected \(2,\)")]:
        bb = np.ones((4, 2)) if "bias" in kw else b
        with pytest.raises(RlhlsError, match=msg):
            aie_gemm(a, bb, cache_dir=gemm_cache, **kw)
    with pytest.raises(RlhlsError, match=r"non-empty 2-D"):
        aie_gemm(np.ones(3), b, cache_dir=gemm_cache)
    with pytest.raises(RlhlsError, match=r"at most two per tile"):
        aie_gemm(np.ones((3, 4)), np.ones((4, 2)), point="t1p8", cache_dir=gemm_cache)
