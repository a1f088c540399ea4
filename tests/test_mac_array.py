"""mac_array (seed 004's compute element): numpy model == C++ (g++ csim) bit for bit, its stages
equal the dense kernels, the FSM's state sequence follows the seed's listing, the cycle model
(the seed's 5808 iterations, more MACs -> fewer cycles) and its place in the a2c-traffic graph."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rlhls.designs.arith import conv2d, im2col
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KernelContext, get_kernel, kernels_for
from rlhls.designs.kernels.mac_array import STAGE_IO, STAGES, fsm_walk, stage_cycles
from rlhls.designs.network import Dense, Flatten, Network, ReLU
from rlhls.designs.registry import get_design
from rlhls.flow.csim import run_csim
from rlhls.flow.kernels import render_kernel
from rlhls.flow.mapping import map_design
from rlhls.host.backends import CsimBackend, get_backend
from rlhls.partition.profile import profile_design

from cpp_util import CACHE

K = get_kernel("mac_array")
# a small conv -> fc trunk: K = 3 filters x 4 x 2 positions = 24 fc inputs, 5 outputs, batch 3
SMALL = dict(batch=3, in_shape=[2, 5, 4], filters=3, kernel=[2, 3], fc_out=5, out_depth=7, trace_depth=2000)


@pytest.fixture(scope="module")
def csim():
    return CsimBackend(cache_dir=CACHE / "csim-lib")


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def _raw_ops(p, rng, stages=STAGES):
    """Unrounded float64 operands: both backends round them to the storage format."""
    return {s: {n: rng.standard_normal(K.operand_shapes(p, s)[n]) * 1.3 for n in STAGE_IO[s][0]} for s in stages}


# -- bit-exactness --------------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [
    dict(macs=3),  # 3 MACs: padded groups (3 filters fit, 24 fc inputs = 8 groups, 5 outputs = 2 groups)
    dict(macs=4, storage="fixed<16,6,RND,SAT>", acc="fixed<32,12,RND,SAT>"),
    dict(macs=2, storage="bf16", acc="fp32", stride=2),
], ids=["fp32-macs3", "fixed-macs4", "bf16-macs2-stride2"])
def test_emu_equals_csim_and_counts_the_fsm_cycles(extra, csim):
    p = K.resolve({**SMALL, **extra})
    order = ["bwd_wgrad", "fwd_conv", "fwd_fc", "bwd_conv_wgrad", "bwd_delta"]  # any order the PS likes
    for seed in (1, 2):
        ops = _raw_ops(p, np.random.default_rng(seed), order)
        a = K.run(p, ops, call=get_backend("emu").call)
        b = K.run(p, ops, call=csim.call)
        for key in ("out", "counters", "trace"):
            assert np.array_equal(_bits(a["raw"][key]), _bits(b["raw"][key])), key
    # the C++ FSM, stepped state by state with its PS driver, counts the cycle model's cycles
    cost = {s["name"]: s for s in K.cost(p, stages=order)["stages"]}
    assert any(c["transfers"] for c in b["counters"].values())
    for stage, c in b["counters"].items():
        assert (c["cycles"], c["transfers"], c["iterations"]) == (
            cost[stage]["cycles"], cost[stage]["transfers"], cost[stage]["iterations"])
        assert c["valid_in"] == cost[stage]["iterations"] * cost[stage]["accumulations"]


def test_seed_program_csim_bit_exact_and_tb_checks_the_trace(tmp_path):
    """The seed's element (defaults: 4 MACs, the 12x12 -> conv -> 484 -> 48 trunk, batch 32), all
    five stages through the rendered top and testbench; the testbench compares the FSM trace too."""
    src = render_kernel("mac_array", seed=5)
    top = src.files["mac_array.cpp"]
    assert "s_axilite port=prog" in top and "m_axi port=in0" in top and "rlmac::run<" in top
    res = run_csim(src, tmp_path / "a", CACHE)
    assert res.passed and "bit-exact" in res.detail, res.detail
    trace = np.frombuffer(src.tb_data["expected_trace.bin"], dtype="<f8")
    assert list(trace[:10]) == [0, 1, 2, 3, 4, 5, 6, 7, 9, 2]  # stage set-up, then iterations
    bad = bytearray(src.tb_data["expected_trace.bin"])
    bad[8 * 3:8 * 4] = np.float64(5.0).tobytes()  # claim state 5 where the FSM loads (3)
    src.tb_data["expected_trace.bin"] = bytes(bad)
    res = run_csim(src, tmp_path / "b", CACHE)
    assert not res.passed and res.detail.startswith("FAIL trace[3]"), res.detail


@pytest.mark.parametrize("fmt", [("fp32", "fp32"), ("fixed<14,5,RND,SAT>", "fixed<30,10,RND,SAT>")])
def test_stages_equal_the_dense_kernels(fmt):
    """Each stage's buffer layout and accumulation order give the dense kernels' bits."""
    p = K.resolve({**SMALL, "macs": 3, "storage": fmt[0], "acc": fmt[1]})
    s, acc = K.formats(p)["storage"], K.formats(p)["acc"]
    g = K.geometry(p)
    ops = {st: {n: s.quantize(v) for n, v in o.items()} for st, o in _raw_ops(p, np.random.default_rng(4)).items()}
    res = K.run(p, ops)["results"]
    dims = {"n": g["B"], "k": g["K"], "m": g["M"], "storage": fmt[0], "acc": fmt[1]}
    fwd = get_kernel("dense_forward").model(get_kernel("dense_forward").resolve(dims), x=ops["fwd_fc"]["h"],
                                            w=ops["fwd_fc"]["w"], b=ops["fwd_fc"]["b"])["y"]
    dx = get_kernel("dense_backward").model(get_kernel("dense_backward").resolve(dims),
                                            dy=ops["bwd_delta"]["dy"], w=ops["bwd_delta"]["w"])["dx"]
    dw = get_kernel("weight_gradient").model(get_kernel("weight_gradient").resolve(dims),
                                             x=ops["bwd_wgrad"]["h"], dy=ops["bwd_wgrad"]["dy"])["dw"]
    c = ops["fwd_conv"]
    z = conv2d(c["x"], c["w"], c["b"], 1, in_fmt=s, acc_fmt=acc, out_fmt=s)
    # conv weight gradient = weight_gradient over the im2col rows (b, position), per filter
    c = ops["bwd_conv_wgrad"]
    cols = im2col(c["x"], g["KH"], g["KW"], g["S"])
    rows = c["dz"].transpose(0, 2, 3, 1).reshape(-1, g["F"])
    wg = get_kernel("weight_gradient")
    dwc = wg.model(wg.resolve({"n": len(cols), "k": g["T"], "m": g["F"], "storage": fmt[0], "acc": fmt[1]}),
                   x=cols, dy=rows)["dw"].T.reshape(g["F"], g["C"], g["KH"], g["KW"])
    for got, want in ((res["fwd_fc"]["y"], fwd), (res["bwd_delta"]["dh"], dx), (res["bwd_wgrad"]["dw"], dw),
                      (res["fwd_conv"]["z"], z), (res["bwd_conv_wgrad"]["dw"], dwc)):
        assert got.shape == want.shape and np.array_equal(_bits(got), _bits(want))


# -- the FSM --------------------------------------------------------------------------------------

IT = [2, 3, 4, 5, 6, 7, 9]      # an iteration: start, load, valid_in..valid_last, wait, write, check, last?
FULL = [2, 3, 4, 5, 6, 7, 8, 9]  # one whose write fills the output BRAMs with iterations left: pl_full


@pytest.mark.parametrize("depth, listing, transfers", [
    (4, [0, 1] + IT * 3 + FULL + IT * 2 + [10, 0], 1),
    (3, [0, 1] + IT * 2 + FULL + IT * 3 + [10, 0], 1),  # full again on the last one: done reads it
    (6, [0, 1] + IT * 6 + [10, 0], 0),
])
def test_fsm_state_sequence_of_a_small_stage(depth, listing, transfers, csim):
    """bwd_wgrad of a tiny trunk: 8 fc inputs / 4 MACs = 2 groups x 3 outputs = 6 iterations of
    batch 2 accumulations, with `depth`-word output BRAMs."""
    p = K.resolve(dict(batch=2, in_shape=[1, 3, 3], filters=2, kernel=[2, 2], fc_out=3, macs=4, out_depth=depth,
                       trace_depth=64))
    ops = _raw_ops(p, np.random.default_rng(0), ["bwd_wgrad"])
    emu, cpp = K.run(p, ops), K.run(p, ops, call=csim.call)
    assert emu["trace"] == cpp["trace"] == listing
    walk = list(fsm_walk(p, K.prog_rows(p, K.program(p, ops)["prog"])))
    assert [w[0] for w in walk] == listing
    stage = K.cost(p, stages=["bwd_wgrad"])["stages"][0]
    assert cpp["counters"]["bwd_wgrad"] == {"iterations": 6, "valid_in": 12, "transfers": transfers,
                                            "cycles": sum(w[1] for w in walk)}
    assert stage["cycles"] == sum(w[1] for w in walk) and stage["transfers"] == transfers
    assert np.array_equal(_bits(emu["results"]["bwd_wgrad"]["dw"]), _bits(cpp["results"]["bwd_wgrad"]["dw"]))


@pytest.mark.parametrize("iters, repeat, full, transfers", [(1, 1, 1, 0), (12, 3, 4, 2), (12, 4, 12, 0),
                                                            (13, 13, 5, 2), (7, 1, 1, 6)])
def test_walk_equals_the_closed_form(iters, repeat, full, transfers):
    p = K.resolve({"out_depth": 16, "ii": 2, "mac_latency": 3, "ps_latency": 7, "axi_bytes": 8})
    r = {"accfreq": 5, "iternum": iters, "repeat": repeat, "full_reg": full, "bias": 1}
    walk = list(fsm_walk(p, [r]))
    c = stage_cycles(p, r)
    assert sum(w[1] for w in walk) == c["cycles"]
    assert [w[0] for w in walk].count(8) == c["transfers"] == transfers
    assert [w[0] for w in walk].count(2) == iters and walk[-1][:2] == (0, 0)


# -- the cycle model ------------------------------------------------------------------------------

def test_seed_weight_gradient_iterations():
    d = get_design("a2c-traffic")
    g = build_graph(d)
    ctx = KernelContext(d, g)
    node = g.node("trunk.fc1.bwd")
    (point, c), = K.node_points(node, ctx, "PL")
    stages = {s["name"]: s for s in c["stages"]}
    assert list(stages) == ["bwd_delta", "bwd_wgrad"] and point == "macs4"
    w = stages["bwd_wgrad"]
    assert w["iterations"] == d.seed_figures["fc1_weight_gradient_iterations"] == 48 * 484 // 4
    assert w["accumulations"] == d.batch_size
    assert c["cycles"] == sum(s["cycles"] for s in c["stages"])
    assert c["latency_us"] == pytest.approx(c["cycles"] / d.clocks_mhz["PL"])
    # the stage costs of the whole element, one node at a time
    full = {s["name"]: s for s in K.cost(K.resolve(K.node_params(node, ctx)))["stages"]}
    assert w == full["bwd_wgrad"]
    assert w["transfers"] == 5  # 5808 results per 1024-word BRAM: 5 pl_full transfers, 688 read at done


def test_more_macs_fewer_iterations_and_cycles():
    prev = None
    for macs in (1, 2, 4, 8, 16):
        p = K.resolve({"macs": macs})
        c = K.cost(p, device="zcu106")
        it = {s["name"]: s["iterations"] for s in c["stages"]}
        assert it["bwd_wgrad"] == -(-484 // macs) * 48
        if prev is not None:
            assert all(it[s] <= prev["it"][s] for s in STAGES) and it["bwd_wgrad"] < prev["it"]["bwd_wgrad"]
            assert c["cycles"] < prev["cycles"] and c["resources"]["dsp"] > prev["dsp"]
        prev = {"it": it, "cycles": c["cycles"], "dsp": c["resources"]["dsp"]}


# -- the a2c-traffic graph ------------------------------------------------------------------------

def test_trunk_on_the_mac_array_heads_elsewhere():
    d = get_design("a2c-traffic")
    d.check_kernels()
    g = build_graph(d)
    ctx = KernelContext(d, g)
    mm = [n for n in g.nodes if n.mm]
    trunk = [n.name for n in mm if n.name.startswith("trunk.")]
    assert trunk == ["trunk.conv1.fwd", "trunk.fc1.fwd", "trunk.fc1.bwd", "trunk.conv1.bwd"]
    params = set()
    for n in mm:
        ks = kernels_for(n, ctx, "PL")
        if n.name in trunk:  # the dense kernels it replaces are not asked
            assert [k.name for k, _ in ks] == ["mac_array"]
            params.add(repr(sorted(ks[0][1].items())))
        else:
            assert K.node_params(n, ctx) is None and "mac_array" not in [k.name for k, _ in ks]
    assert len(params) == 1  # one compute element for the four nodes
    stages = {n: K.node_stages(g.node(n), ctx) for n in trunk}
    assert stages == {"trunk.conv1.fwd": ["fwd_conv"], "trunk.fc1.fwd": ["fwd_fc"],
                      "trunk.fc1.bwd": ["bwd_delta", "bwd_wgrad"], "trunk.conv1.bwd": ["bwd_conv_wgrad"]}
    comps = map_design(d, g, {n.name: "PL" for n in g.nodes}, hls4ml=False).components
    mac = [c for c in comps if c.kernel == "mac_array"]
    assert len(mac) == 1 and mac[0].name == "mac_array" and mac[0].nodes == trunk
    rows = [r for r in profile_design(d) if r.node in trunk]
    assert {(r.node, r.unit) for r in rows} == {(n, "PL") for n in trunk}
    whole = K.cost(K.resolve(K.node_params(g.node(trunk[0]), ctx)))
    assert sum(r.cycles for r in rows) == whole["cycles"]


def test_bad_input_is_one_line():
    p = K.resolve(SMALL)
    arrays = K.program(p, _raw_ops(p, np.random.default_rng(0), ["fwd_fc"]))
    arrays["prog"][0][2] = 4  # repeat 4 does not divide the iterations
    cases = [
        (lambda: K.model(p, **arrays), "prog row 0: iternum = 6 must be a positive multiple of repeat = 4"),
        (lambda: K.program(p, {"fwd_fc": {"h": np.zeros((3, 24)), "w": np.zeros((5, 24)), "b": np.zeros(5)}}),
         r"stage 'fwd_fc': operand 'w' has shape \(5, 24\), expected \(24, 5\)"),
        (lambda: K.program(p, {"bwd_bias": {}}), "unknown stage 'bwd_bias'"),
        (lambda: K.resolve({"kernel": [13, 2]}), "'kernel' = 13x2 does not fit the 12x12 input"),
        (lambda: K.cost(p, unit="PS"), "the MAC array is PL logic"),
    ]
    for fn, text in cases:
        with pytest.raises(RlhlsError, match=text) as e:
            fn()
        assert "\n" not in str(e.value) and str(e.value).startswith("kernel 'mac_array'")
    arrays["prog"][0][2] = 2
    arrays["prog"][0][8] = K.layout(p)["words"]["out"] - 1  # the results would run past the out array
    with pytest.raises(RlhlsError, match="out_addr .* runs past the out array"):
        K.model(p, **arrays)
    # a design naming the MAC array for a trunk that is not the seed's conv -> fc
    d = get_design("a2c-traffic")
    dense_trunk = lambda s: Network("trunk", (1, 12, 12), [Flatten(), Dense(48), ReLU()], seed=s)  # noqa: E731
    nets = tuple(dataclasses.replace(n, factory=dense_trunk) if n.name == "trunk" else n for n in d.networks)
    bad = dataclasses.replace(d, name="traffic-dense-trunk", networks=nets)
    g = build_graph(bad)
    with pytest.raises(RlhlsError, match=r"network 'trunk' has matrix multiplies \['Dense'\]"):
        K.node_params(g.node("trunk.fc1.fwd"), KernelContext(bad, g))
