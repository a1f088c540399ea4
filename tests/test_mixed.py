"""AP-DRL hardware-aware mixed precision (host/mixed.py): loss scaling, FP32 master weights under
FP16 compute, BF16 layers, conversions at unit boundaries."""

import numpy as np
import pytest

from rlhls.designs.arith import dense
from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.network import Dense, Network, ReLU
from rlhls.designs.registry import get_design
from rlhls.host.mixed import LossScaler, MixedPrecision
from rlhls.host.optim import SGD

FP16, BF16, FP32 = parse_format("fp16"), parse_format("bf16"), parse_format("fp32")
DESIGN = get_design("apdrl-dqn-cartpole")


def _net(seed=0):
    return Network("q", (4,), [Dense(8), ReLU(), Dense(2)], seed=seed)


def _asg(units, loss="PL"):
    """units: {layer: unit} for fwd/tfwd/bwd; updates on PS unless the layer is on PL."""
    a = {"loss": loss}
    for layer, u in units.items():
        for ph in ("fwd", "tfwd", "bwd"):
            a[f"q.{layer}.{ph}"] = u
        if layer.startswith("fc"):
            a[f"q.{layer}.upd"] = "PL" if u == "PL" else "PS"
    return a


ALL_PL = _asg({"fc1": "PL", "fc1_relu": "PL", "fc2": "PL"})


def _views(net):
    return {f"q.{l.name}.{k}": (l.name, a) for l in net.layers for k, a in l.params.items()}


# ------------------------------------------------------------------ loss scaling


def test_loss_scaler_skip_shrink_grow():
    s = LossScaler(2.0 ** 15, growth_interval=3)
    assert s.update(False) == "skip_shrink" and s.scale == 2.0 ** 14
    assert [s.update(True) for _ in range(3)] == ["ok", "ok", "grow"] and s.scale == 2.0 ** 15
    s.update(True)
    assert s.update(False) == "skip_shrink" and s.scale == 2.0 ** 14 and s.good == 0  # interval restarts
    assert [s.update(True) for _ in range(2)] == ["ok", "ok"] and s.scale == 2.0 ** 14
    t = LossScaler(1.0, 5)
    assert t.update(False) == "skip_shrink" and t.scale == 1.0  # never below 1
    with pytest.raises(RlhlsError, match="power of two"):
        LossScaler(3.0)


def test_inf_gradient_skips_step_and_shrinks_scale():
    net = _net()
    mp = MixedPrecision(DESIGN, net, "q", ALL_PL, loss_scale_init=2.0 ** 15, growth_interval=2)
    opt, views = SGD(0.1), _views(net)
    before = net.get_params()
    grads = {k: np.ones_like(a) for k, (_, a) in views.items()}
    grads["q.fc1.W"][0, 0] = np.inf
    assert mp.apply(opt, views, grads) == "skip_shrink"
    after = net.get_params()
    assert all(np.array_equal(before[k], after[k]) for k in before) and opt.t == 0
    assert mp.loss_scale() == 2.0 ** 14
    c = mp.take_counts()
    assert c["skipped_steps"] == 1 and c["scale_shrinks"] == 1 and c["grad_overflows"] == 1
    # finite steps: unscaled by the current scale, applied; growth after the interval
    grads = {k: np.full_like(a, 2.0 ** 14) for k, (_, a) in views.items()}
    assert mp.apply(opt, views, grads) == "ok"
    assert np.allclose(net.get_params()["fc2.b"], before["fc2.b"] - 0.1)  # gradient 1 after unscaling
    assert mp.apply(opt, views, grads) == "grow" and mp.loss_scale() == 2.0 ** 15


def test_real_fp16_overflow_in_backward_is_caught():
    """A large loss scale overflows the FP16 weight gradient -> skipped step; the scale shrinks until it fits."""
    net = _net()
    mp = MixedPrecision(DESIGN, net, "q", ALL_PL, loss_scale_init=2.0 ** 24, growth_interval=1000)
    opt, views = SGD(1e-3), _views(net)
    x = np.full((64, 4), 3.0)
    events = []
    for _ in range(12):
        y, u = mp.forward(x)
        g = FP16.quantize(np.ones_like(y) * mp.loss_scale() / 64)
        mp.backward(g)
        grads = {k: net[l].grads[k.rsplit(".", 1)[1]] for k, (l, _) in views.items()}
        events.append(mp.apply(opt, views, grads))
    assert events[0] == "skip_shrink" and "ok" in events
    assert mp.loss_scale() < 2.0 ** 24


@pytest.mark.parametrize("ps_math", ["float32", "float64"])
def test_quantization_delay(ps_math):
    net = _net()
    mp = MixedPrecision(DESIGN, net, "q", ALL_PL, quantization_delay=2, ps_math=ps_math)
    opt, views = SGD(1e-3), _views(net)
    assert not mp.quantized and mp.loss_scale() == 1.0
    assert mp.precision_map("fwd")["fc1"].storage == FP32  # FP32 (as the PS) during the delay
    x = np.random.default_rng(0).standard_normal((5, 4))
    ref = Network("q", (4,), [Dense(8), ReLU(), Dense(2)], seed=0)
    y, _ = mp.forward(x)
    if ps_math == "float64":  # FP32 tensors, float64 sums
        q = FP32.quantize
        want = q(q(q(np.maximum(q(q(x) @ q(ref["fc1"].params["W"]) + ref["fc1"].params["b"]), 0)))
                 @ q(ref["fc2"].params["W"]) + ref["fc2"].params["b"])
    else:  # float32 throughout
        p = {k: v.astype(np.float32) for k, v in ref.get_params().items()}
        h = np.maximum(x.astype(np.float32) @ p["fc1.W"] + p["fc1.b"], np.float32(0))
        want = h @ p["fc2.W"] + p["fc2.b"]
        assert y.dtype == np.float32
    assert np.array_equal(y, want)
    for _ in range(2):
        mp.apply(opt, views, {k: np.zeros_like(a) for k, (_, a) in views.items()})
    assert mp.quantized and mp.loss_scale() == 2.0 ** 15
    assert mp.precision_map("fwd")["fc1"].storage == FP16


# ------------------------------------------------------------------ master weights


def test_fp32_master_moves_below_an_fp16_ulp_until_the_copy_steps():
    """PL layer: a step changes the FP32 master by less than an FP16 ulp; the FP16 copy the layer
    computes with stays put until the master has accumulated half an ulp."""
    net = Network("q", (1,), [Dense(1, bias=False)], seed=0)
    net["fc1"].params["W"][...] = 1.0  # FP16 ulp at 1.0 = 2**-10
    mp = MixedPrecision(DESIGN, net, "q", {"q.fc1.fwd": "PL", "q.fc1.tfwd": "PL", "q.fc1.bwd": "PL",
                                          "q.fc1.upd": "PL", "loss": "PL"})
    opt, views = SGD(2.0 ** -13), _views(net)  # one step = 1/8 ulp, exact in FP32
    x = np.ones((1, 1))
    masters, copies = [], []
    for _ in range(6):
        grads = {"q.fc1.W": np.array([[-mp.loss_scale()]])}  # gradient -1 after unscaling
        mp.apply(opt, views, grads)
        w = float(net["fc1"].params["W"][0, 0])
        masters.append(w)
        copies.append(float(mp.forward(x)[0][0, 0]))  # the PL layer's output = its FP16 weight
    ulp = 2.0 ** -10
    assert np.allclose(np.diff([1.0] + masters), ulp / 8)  # every step lands in the FP32 master
    assert FP32.quantize(np.array(masters)).tolist() == masters
    assert copies[:3] == [1.0, 1.0, 1.0]  # < half an ulp accumulated: the FP16 copy stays put
    assert copies[4:] == [1.0 + ulp, 1.0 + ulp]  # 5/8, 6/8 ulp: rounds up to the next FP16 value
    # without the master (weights stored in FP16 and updated in place) every step would be lost
    w16 = 1.0
    for _ in range(6):
        w16 = float(FP16.quantize(w16 + ulp / 8))
    assert w16 == 1.0


# ------------------------------------------------------------------ BF16 layers, conversions


def test_bf16_aie_layer_equals_format_emulation():
    net = _net(3)
    asg = _asg({"fc1": "AIE", "fc1_relu": "PL", "fc2": "AIE"})
    mp = MixedPrecision(DESIGN, net, "q", asg)
    mp.round_masters(_views(net))
    assert mp.master_fmt == {"fc1": BF16, "fc2": BF16}  # AIE layers: weights kept in BF16, no master
    W = net["fc1"].params["W"]
    assert np.array_equal(BF16.quantize(W), W)
    x = np.random.default_rng(1).standard_normal((16, 4))
    net.forward(x)  # reference chain by hand below
    h = dense(BF16.quantize(x), W, net["fc1"].params["b"], in_fmt=BF16, w_fmt=BF16, acc_fmt=FP32, out_fmt=BF16)
    h16 = FP16.quantize(h)  # AIE -> PL conversion into the ReLU
    r = FP16.quantize(np.maximum(h16, 0))
    r_bf = BF16.quantize(r)  # PL -> AIE
    want = dense(r_bf, net["fc2"].params["W"], net["fc2"].params["b"], in_fmt=BF16, w_fmt=BF16, acc_fmt=FP32,
                 out_fmt=BF16)
    y, unit = mp.forward(x)
    assert unit == "AIE" and np.array_equal(y, want)
    assert not mp.scaler.enabled or mp.loss_unit == "PL"  # loss on PL: the FP16 gradient path is scaled


def test_ps_to_pl_edge_quantizes_to_fp16():
    net = _net()
    asg = _asg({"fc1": "PS", "fc1_relu": "PS", "fc2": "PL"})
    mp = MixedPrecision(DESIGN, net, "q", asg)
    x = np.random.default_rng(2).standard_normal((8, 4))
    seen = {}
    orig = net["fc2"].forward

    def spy(inp, precision=None, **kw):
        seen["x"], seen["p"] = inp.copy(), precision
        return orig(inp, precision, **kw)

    net["fc2"].forward = spy
    mp.forward(x)
    assert seen["p"].storage == FP16
    assert np.array_equal(FP16.quantize(seen["x"]), seen["x"])  # arrives in FP16
    c = mp.take_counts()
    assert c["conv_PS_PL"] == 1 and "conv_PL_PS" not in c
    # the value on the edge is exactly the FP16 rounding of the PS layer's FP32 output
    h = FP32.quantize(np.maximum(FP32.quantize(FP32.quantize(x) @ net["fc1"].params["W"] + net["fc1"].params["b"]), 0))
    assert np.array_equal(seen["x"], FP16.quantize(h))
    # backward: PL gradient -> PS layer converted to FP32 (exact), counted
    mp.backward(np.ones((8, 2)))
    assert mp.take_counts()["conv_PL_PS"] == 1


def test_conversion_overflow_counted():
    mp = MixedPrecision(DESIGN, _net(), "q", ALL_PL)
    y = mp.convert(np.array([1.0, 1e6, -7e4]), "AIE", "PL")
    assert np.isinf(y[1]) and np.isinf(y[2]) and mp.take_counts()["conv_overflows"] == 2


def test_plan_errors():
    with pytest.raises(RlhlsError, match="no unit for node 'q.fc1.fwd'"):
        MixedPrecision(DESIGN, _net(), "q", {"loss": "PL"})
    bad = dict(ALL_PL, **{"q.fc1.upd": "AIE"})
    with pytest.raises(RlhlsError, match="AIE"):
        MixedPrecision(DESIGN, _net(), "q", bad)


# ------------------------------------------------------------------ several networks, one step


def _asg_inst(inst, units, loss, loss_unit, target=True, update=True):
    a = {loss: loss_unit}
    for layer, u in units.items():
        for ph in (("fwd", "tfwd", "bwd") if target else ("fwd", "bwd")):
            a[f"{inst}.{layer}.{ph}"] = u
        if layer.startswith("fc") and update:
            a[f"{inst}.{layer}.upd"] = "PS"
    return a


def test_linked_instances_share_scale_steps_and_skip_together():
    """Policy on the PS, value on the PL (A2C-like, no target nodes): one enabled scaler, one step
    count; a non-finite gradient in the value network skips the policy's update too."""
    pol, val = _net(0), _net(1)
    asg = {**_asg_inst("policy", {"fc1": "PS", "fc1_relu": "PS", "fc2": "PS"}, "loss", "PS", target=False),
           **_asg_inst("value", {"fc1": "PL", "fc1_relu": "PL", "fc2": "PL"}, "loss", "PS", target=False)}
    kw = dict(target=False, loss_scale_init=2.0 ** 10, quantization_delay=1)
    mp = MixedPrecision(DESIGN, pol, "policy", asg, **kw)  # no tfwd nodes in the plan: accepted
    mv = MixedPrecision(DESIGN, val, "value", asg, **kw)
    assert not mp.scaler.enabled and mv.scaler.enabled
    shared = MixedPrecision.link(mp, mv)
    assert mp.scaler is mv.scaler is shared and shared.enabled and shared.scale == 2.0 ** 10
    views = {f"policy.{l.name}.{k}": (l.name, a) for l in pol.layers for k, a in l.params.items()}
    views.update({f"value.{l.name}.{k}": (f"value.{l.name}", a) for l in val.layers for k, a in l.params.items()})
    opt = SGD(0.1)
    zeros = {k: np.zeros_like(a) for k, (_, a) in views.items()}
    assert not mv.quantized and mp.apply(opt, views, zeros) == "ok"
    assert mv.steps == 1 and mv.quantized and mv.loss_scale() == 2.0 ** 10  # the delay ended for both
    before = {k: a.copy() for k, (_, a) in views.items()}
    bad = dict(zeros, **{"value.fc2.b": np.array([np.inf, 0.0])})
    assert mp.apply(opt, views, bad) == "skip_shrink"
    assert all(np.array_equal(before[k], a) for k, (_, a) in views.items()) and mv.loss_scale() == 2.0 ** 9
    assert mp.unit("value.fc1.bwd") == "PL" and mp.unit("policy.fc1.fwd") == "PS" and mv.unit("loss") == "PS"


def test_linked_round_masters_use_each_instances_master_format():
    a_net, b_net = _net(0), _net(1)
    asg = {**_asg_inst("a", {"fc1": "PS", "fc1_relu": "PS", "fc2": "PS"}, "loss", "PS"),
           **_asg_inst("b", {"fc1": "AIE", "fc1_relu": "PL", "fc2": "PL"}, "loss", "PS")}
    ma, mb = MixedPrecision(DESIGN, a_net, "a", asg), MixedPrecision(DESIGN, b_net, "b", asg)
    MixedPrecision.link(ma, mb)
    views = {"a.fc1.W": ("fc1", a_net["fc1"].params["W"]), "b.fc1.W": ("b.fc1", b_net["fc1"].params["W"]),
             "b.fc2.W": ("b.fc2", b_net["fc2"].params["W"])}
    ma.round_masters(views)
    assert not np.array_equal(BF16.quantize(a_net["fc1"].params["W"]), a_net["fc1"].params["W"])  # FP32
    assert np.array_equal(BF16.quantize(b_net["fc1"].params["W"]), b_net["fc1"].params["W"])  # AIE: BF16
    assert not np.array_equal(BF16.quantize(b_net["fc2"].params["W"]), b_net["fc2"].params["W"])


def test_clip_hook_clips_unscaled_fp32_gradients():
    net = _net()
    mp = MixedPrecision(DESIGN, net, "q", ALL_PL, loss_scale_init=2.0 ** 4)
    views, opt = _views(net), SGD(1.0)
    mp.round_masters(views)
    before = net.get_params()
    grads = {k: np.zeros_like(a) for k, (_, a) in views.items()}
    grads["q.fc2.b"] = np.array([3.0, 4.0]) * 2.0 ** 4  # scaled: unscaled norm 5
    assert mp.apply(opt, views, grads, max_grad_norm=0.5) == "ok"
    assert mp.grad_norm == 5.0
    step = before["fc2.b"] - net.get_params()["fc2.b"]
    np.testing.assert_allclose(step, [0.3, 0.4], rtol=1e-5)  # clipped to norm 0.5 (PyTorch's 1e-6)
    assert np.array_equal(net["fc1"].params["W"], before["fc1.W"])
    grads["q.fc2.b"] = np.array([np.nan, 0.0])
    assert mp.apply(opt, views, grads, max_grad_norm=0.5) == "skip_shrink" and np.isnan(mp.grad_norm)


def test_backward_input_gradient_matches_network_backward():
    """need_input_grad: the same FP16 layer arithmetic as Network.backward with the PL precision."""
    net, ref = _net(3), _net(3)
    mp = MixedPrecision(DESIGN, net, "q", ALL_PL)
    x = FP16.quantize(np.random.default_rng(4).standard_normal((6, 4)))
    dy = FP16.quantize(np.random.default_rng(5).standard_normal((6, 2)))
    y, u = mp.forward(x)
    dx = mp.backward(dy, need_input_grad=True)
    p = mp.precision("PL")
    assert u == "PL" and np.array_equal(y, ref.forward(x, p))
    want = ref.backward(dy, p, need_input_grad=True)
    assert np.array_equal(dx, want) and mp.backward(dy) is None
    for l in net.layers:
        for k, g in l.grads.items():
            assert np.array_equal(g, ref[l.name].grads[k]), (l.name, k)


def test_backward_input_gradient_alone_on_each_unit():
    """param_grads=False, the graph's critic@pi backward: the same dx bit for bit whether the
    layers run on the PS (FP32) or the PL (FP16), and no layer keeps a weight gradient."""
    x = FP16.quantize(np.random.default_rng(4).standard_normal((6, 4)))
    dy = FP16.quantize(np.random.default_rng(5).standard_normal((6, 2)))
    for units in ({"fc1": "PS", "fc1_relu": "PS", "fc2": "PL"}, {"fc1": "PL", "fc1_relu": "PL", "fc2": "PL"}):
        net, ref = _net(3), _net(3)
        mp, mref = MixedPrecision(DESIGN, net, "q", _asg(units)), MixedPrecision(DESIGN, ref, "q", _asg(units))
        mp.forward(x)
        mref.forward(x)
        want = mref.backward(dy, need_input_grad=True)
        got = mp.backward(dy, need_input_grad=True, param_grads=False)
        assert np.array_equal(got, want), units
        assert all(not l.grads for l in net.layers) and ref["fc1"].grads, units


def test_shared_weights_instance_has_no_update_nodes():
    """DDPG's critic@pi: the critic's weights run again; no tfwd / upd nodes, the critic's master formats."""
    critic = _net()
    asg = {**_asg_inst("critic", {"fc1": "AIE", "fc1_relu": "PL", "fc2": "PL"}, "critic_loss", "PL"),
           **_asg_inst("critic@pi", {"fc1": "PL", "fc1_relu": "PL", "fc2": "PL"}, "actor_loss", "PL",
                       target=False, update=False)}
    mc = MixedPrecision(DESIGN, critic, "critic", asg, loss_node="critic_loss")
    pi = MixedPrecision(DESIGN, critic, "critic@pi", asg, loss_node="actor_loss", target=False, update=False,
                        master_of=mc)
    assert pi.master_fmt["fc1"] == BF16 and ("fc1", "upd") not in pi.nodes and ("fc1", "tfwd") not in pi.nodes
    assert pi.unit("critic@pi.fc1.fwd") == "PL" and mc.unit("critic.fc1.fwd") == "AIE"
