"""F-DDPG's gradient kernel (designs/kernels/ddpg_gradient.py, vitis/include/rlhls_ddpg_gradient.h):
the numpy model equals its C++ under g++ bit for bit (the designs' models, saturating inputs, other
geometries); in float-like precision it is DDPG's exact gradient; Table VI's cycles within 10 %; the
transfer model; the graph nodes it takes; parameter checks."""

import json

import numpy as np
import pytest

from rlhls.cli import main as cli_main
from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import build_graph
from rlhls.designs.kernels import KernelContext, get_kernel, kernels_for
from rlhls.designs.kernels.ddpg_gradient import net_dims, pack, schedule, transfer, unpack
from rlhls.designs.nets import mlp
from rlhls.designs.registry import get_design
from rlhls.host.backends import CsimBackend, EmuBackend

K = get_kernel("ddpg_gradient")


@pytest.fixture(scope="module")
def csim():
    return CsimBackend()  # the per-user build cache: unchanged sources are not compiled again


def _design_params(name):
    d = get_design(name)
    ctx = KernelContext(d)
    node = ctx.graph.node("critic.fc1.bwd")
    return K.resolve(K.node_params(node, ctx))


def _same(a, b):
    return all(np.array_equal(a[k], b[k]) for k in a) and set(a) == set(b)


@pytest.mark.parametrize("design", ["fddpg-arm-m2", "fddpg-arm-m3"])
def test_emu_equals_csim_bit_for_bit_on_the_designs(csim, design):
    p = _design_params(design)
    x = K.random_inputs(p, np.random.default_rng(11))
    got, want = csim.call("ddpg_gradient", p, **x), EmuBackend().call("ddpg_gradient", p, **x)
    assert _same(got, want)
    assert np.abs(want["grad_actor"]).max() > 0 and np.abs(want["grad_critic"]).max() > 0


def test_emu_equals_csim_when_the_accumulator_saturates(csim):
    # small trees, no fusion layer, odd batch, padded outputs; values near fixed<32,8>'s range so that
    # sums leave fixed<64,16>'s +-32768 and saturate chunk by chunk (the model's slow path)
    for pp in ({"hidden": [5, 7], "batch": 5, "tree": 3, "fusion": False, "rows": 3, "cols": 2, "out_pad": 8},):
        p = K.resolve(pp)
        rng = np.random.default_rng(5)
        x = K.random_inputs(p, rng)
        for key in ("actor", "critic", "target_actor", "target_critic"):
            x[key] = np.clip(x[key] * rng.uniform(0, 190, x[key].shape), -127, 127)
        for key in ("s", "s2"):
            x[key] = np.clip(x[key] * 150, -128, 127)
        x["r"] = x["r"] * 150
        want = EmuBackend().call("ddpg_gradient", p, **x)
        assert np.abs(want["grad_critic"]).max() == 128.0  # saturated somewhere
        assert _same(csim.call("ddpg_gradient", p, **x), want)


def _float_ddpg(p, x):
    """DDPG's gradients in float64 through the house's Network (the reference)."""
    da, dc = net_dims(p)
    nets = {}
    for key, dims, act in (("actor", da, "tanh"), ("critic", dc, None), ("target_actor", da, "tanh"),
                           ("target_critic", dc, None)):
        n = mlp(key, dims[0], dims[1:-1], dims[-1], act="relu", out_act=act, init="uniform")
        for name, d in unpack(x[key], n).items():
            n[name].params.update(W=d["W"].copy(), b=d["b"].copy())
        nets[key] = n
    A, C = nets["actor"], nets["critic"]
    B, S = x["s"].shape
    qt = nets["target_critic"].forward(np.hstack([x["s2"], nets["target_actor"].forward(x["s2"])]))[:, 0]
    y = x["r"] + p["gamma"] * (1 - x["done"]) * qt
    q = C.forward(np.hstack([x["s"], x["a"]]))[:, 0]
    C.backward((2 * (q - y) / B)[:, None])
    gc = np.concatenate([np.concatenate([l.grads["W"].ravel(), l.grads["b"]]) for l in C.mm_layers])
    qpi = C.forward(np.hstack([x["s"], A.forward(x["s"])]))[:, 0]
    dx = C.backward(np.full((B, 1), -1.0 / B), need_input_grad=True, param_grads=False)
    A.backward(dx[:, S:])
    ga = np.concatenate([np.concatenate([l.grads["W"].ravel(), l.grads["b"]]) for l in A.mm_layers])
    return {"grad_actor": ga, "grad_critic": gc, "q": q, "y": y, "qpi": qpi}


@pytest.mark.parametrize("hidden", [[108], [32, 24]])
def test_model_is_ddpgs_gradient_with_a_fine_tanh_table(hidden):
    # with 2^18 table entries the only differences left are fixed<32,8>'s roundings
    p = K.resolve({"hidden": hidden, "out_pad": 24, "table_size": 2 ** 18})
    x = K.random_inputs(p, np.random.default_rng(1))
    got, ref = K.model(p, **x), _float_ddpg(p, x)
    for key in got:
        rel = np.abs(got[key] - ref[key]).max() / np.abs(ref[key]).max()
        assert rel < 1e-4, (key, rel)
    # hls4ml's 1024-entry table (the designs'): the actor's tanh is off by up to a table step
    p = K.resolve({"hidden": hidden, "out_pad": 24})
    got = K.model(p, **x)
    assert np.abs(got["q"] - ref["q"]).max() < 1e-6 and np.abs(got["qpi"] - ref["qpi"]).max() < 0.03


def test_fusion_layer_rounds_the_halves():
    # state and action halves rounded to fixed<32,8> before the fusion adds them: not always the bits of
    # one dense layer over the concatenation, always within two LSBs of it
    p = K.resolve({"hidden": [108]})
    x = K.random_inputs(p, np.random.default_rng(2))
    fused, whole = K.model(p, **x), K.model(K.resolve({"hidden": [108], "fusion": False}), **x)
    lsb = 2.0 ** -24
    assert np.abs(fused["q"] - whole["q"]).max() <= 64 * lsb
    assert not all(np.array_equal(fused[k], whole[k]) for k in fused)


@pytest.mark.parametrize("design,cycles", [("fddpg-arm-m1", 5450), ("fddpg-arm-m2", 5450), ("fddpg-arm-m3", 17000)])
def test_table_vi_cycles_within_10_percent(design, cycles, capsys):
    assert cli_main(["kernel", "ddpg_gradient", "--design", design, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert abs(rep["cycles"] / cycles - 1) < 0.10, rep["cycles"]
    assert rep["latency_us"] == pytest.approx(rep["cycles"] / 200.0)
    assert rep["resources"]["dsp"] <= 1963  # the 5SGSD8's DSP blocks (Table I: 1913 used)
    assert get_design(design).seed_figures["table_vi_cycles"] == cycles


def test_cycle_model_follows_the_architecture():
    p = _design_params("fddpg-arm-m1")
    base = schedule(p)["total"]
    assert schedule({**p, "tree": 8})["total"] > base  # narrower trees: slower
    assert schedule({**p, "rows": 8})["total"] < base
    assert schedule({**p, "out_pad": 0})["total"] < base  # the padded outputs cost cycles
    m3 = _design_params("fddpg-arm-m3")
    two, one = schedule(m3), schedule({**m3, "fpgas": 1})
    assert len(two["fpga_cycles"]) == 2 and two["total"] != one["total"]
    # Table V: with 8-product trees the cycles at 200 MHz are within 10 % of the measured 0.0492 ms
    assert abs(schedule({**p, "tree": 8})["total"] / 200.0 / 49.2 - 1) < 0.10


def test_transfer_model_makes_the_step_io_bound():
    p = _design_params("fddpg-arm-m1")
    t = transfer(p, "max4-5sgsd8")
    assert t["io_share"] > 0.6 and t["total_us"] > 3 * t["compute_us"]  # Table III vs Table VI
    w = t["words"]
    assert w["total"] == w["params_in"] + w["batch_in"] + w["grads_out"] and t["bytes"] == 4 * w["total"]
    assert transfer(p, "max4-5sgsd8", bytes_per_us=1e9)["io_share"] < t["io_share"]


def test_the_kernel_takes_the_fddpg_gradient_nodes_and_is_costed_on_the_pl_only():
    d = get_design("fddpg-arm-m1")
    ctx = KernelContext(d, build_graph(d))
    taken = {n.name for n in ctx.graph.nodes if any(k.name == "ddpg_gradient" for k, _ in kernels_for(n, ctx, "PL"))}
    assert {"critic.fc1.fwd", "critic.fc1.tfwd", "critic@pi.fc1.bwd", "actor.fc2_tanh.fwd", "critic_loss",
            "actor_loss", "actor.fc1.bwd"} <= taken
    assert not any(n.endswith((".upd", ".soft")) for n in taken)
    node = ctx.graph.node("actor.fc1.fwd")
    assert [k.name for k, _ in kernels_for(node, ctx, "PL")] == ["ddpg_gradient"]  # dense_forward replaced
    pts = sum(K.node_points(ctx.graph.node(n), ctx, "PL")[0][1]["cycles"] for n in taken)
    assert pts == schedule(_design_params("fddpg-arm-m1"))["total"]  # the nodes' rows add up to the kernel
    other = get_design("apdrl-ddpg-lunarcont")
    octx = KernelContext(other)
    assert K.node_params(octx.graph.node("critic.fc1.fwd"), octx) is None  # a design that does not name it


def test_pack_unpack_round_trip_and_parameter_checks():
    net = mlp("actor", 17, (108,), 5, act="relu", out_act="tanh", init="uniform")
    v = pack(net)
    assert v.size == 17 * 108 + 108 + 108 * 5 + 5
    back = unpack(v, net)
    assert np.array_equal(back["fc1"]["W"], net["fc1"].params["W"]) and np.array_equal(back["fc2"]["b"],
                                                                                         net["fc2"].params["b"])
    with pytest.raises(RlhlsError, match="acc"):
        K.resolve({"acc": "fixed<48,16,RND,SAT>"})  # products would not be exact
    with pytest.raises(RlhlsError, match="hidden"):
        K.resolve({"hidden": []})
    with pytest.raises(RlhlsError, match="fpgas"):
        K.resolve({"fpgas": 3})
