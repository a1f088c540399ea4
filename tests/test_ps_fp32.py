"""The PS's float32 path (host/mixed.py ``ps_math='float32'``, the default): float32 tensors and
BLAS on the PS, the PL / AIE layers' bits untouched, the float32 optimizer, the float64 path kept."""

import numpy as np
import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.network import Conv2d, Dense, Flatten, Network, ReLU, Sigmoid, Softmax, Tanh
from rlhls.designs.registry import get_design
from rlhls.host.algorithms.dqn import DQN
from rlhls.host.mixed import MixedPrecision, ps_forward
from rlhls.host.optim import Adam, RMSprop, clip_grad_norm

FP32 = parse_format("fp32")
DESIGN = get_design("apdrl-dqn-cartpole")


def _views(net, inst="q"):
    return {f"{inst}.{l.name}.{k}": (l.name, a) for l in net.layers for k, a in l.params.items()}


def _asg(units, inst="q", loss="PS"):
    a = {"loss": loss}
    for (layer, ph), u in units.items():
        a[f"{inst}.{layer}.{ph}"] = u
    return a


@pytest.mark.parametrize("act", [ReLU, Tanh, Sigmoid, Softmax])
def test_ps_layers_compute_in_float32_close_to_float64(act):
    """Forward, input and weight gradients of Dense + activation on the PS: float32 arrays, within
    float32 rounding of the float64 network (the same math)."""
    net = Network("q", (6,), [Dense(16), act(), Dense(3)], seed=1)
    ref = Network("q", (6,), [Dense(16), act(), Dense(3)], seed=1)
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((32, 6)), rng.standard_normal((32, 3))
    mp = MixedPrecision(DESIGN, net, "q", None, target=False)
    y, unit = mp.forward(x)
    dx = mp.backward(dy, need_input_grad=True)
    assert unit == "PS" and y.dtype == np.float32 and dx.dtype == np.float32
    np.testing.assert_allclose(y, ref.forward(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, ref.backward(dy, need_input_grad=True), rtol=1e-4, atol=1e-6)
    for l in net.layers:
        for k, g in l.grads.items():
            assert g.dtype == np.float32
            np.testing.assert_allclose(g, ref[l.name].grads[k], rtol=1e-4, atol=1e-5)


def test_ps_dense_relu_is_float32_blas_arithmetic():
    """The PS forward is exactly relu(x32 @ W32 + b32) @ W32 + b32 in float32, and acting
    (ps_forward) gives those values as float64; ps_math='float64' keeps the FP32-rounded float64 sums."""
    net = Network("q", (4,), [Dense(8), ReLU(), Dense(2)], seed=0)
    for l in net.layers:
        for a in l.params.values():
            a[...] = FP32.quantize(a + 0.01)
    x = np.random.default_rng(1).standard_normal((5, 4))
    p = {k: v.astype(np.float32) for k, v in net.get_params().items()}
    want = np.maximum(x.astype(np.float32) @ p["fc1.W"] + p["fc1.b"], np.float32(0)) @ p["fc2.W"] + p["fc2.b"]
    y, _ = MixedPrecision(DESIGN, net, "q", None).forward(x)
    assert np.array_equal(y, want)
    act = ps_forward(net, x)
    assert act.dtype == np.float64 and np.array_equal(act, want.astype(np.float64))
    q = FP32.quantize
    old = q(q(np.maximum(q(q(x) @ net["fc1"].params["W"] + net["fc1"].params["b"]), 0)) @ net["fc2"].params["W"]
            + net["fc2"].params["b"])
    assert np.array_equal(ps_forward(net, x, "float64"), old)
    y64, _ = MixedPrecision(DESIGN, net, "q", None, ps_math="float64").forward(x)
    assert y64.dtype == np.float64 and np.array_equal(y64, old)


def test_ps_conv_net_close_to_float64():
    net = Network("q", (2, 9, 9), [Conv2d(3, 3, stride=2), ReLU(), Flatten(), Dense(4)], seed=2)
    ref = Network("q", (2, 9, 9), [Conv2d(3, 3, stride=2), ReLU(), Flatten(), Dense(4)], seed=2)
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((5, 2, 9, 9)), rng.standard_normal((5, 4))
    mp = MixedPrecision(DESIGN, net, "q", None, target=False)
    y, _ = mp.forward(x)
    dx = mp.backward(dy, need_input_grad=True)
    np.testing.assert_allclose(y, ref.forward(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, ref.backward(dy, need_input_grad=True), rtol=1e-4, atol=1e-5)
    assert dx.dtype == np.float32 and dx.shape == x.shape
    for k in ("W", "b"):
        np.testing.assert_allclose(net["conv1"].grads[k], ref["conv1"].grads[k], rtol=1e-4, atol=1e-5)


def test_pl_nodes_next_to_ps_nodes_keep_their_bits():
    """A plan mixing the units layer by layer (a PS forward whose backward runs on the PL, and the
    reverse): with sums that are exact in FP32 the two PS paths agree, so every PL result -- FP16
    arithmetic, the PS forward's cache read by a PL backward -- must be the same bits either way."""
    units = {("fc1", "fwd"): "PS", ("fc1_relu", "fwd"): "PS", ("fc2", "fwd"): "PL",
             ("fc1", "bwd"): "PL", ("fc1_relu", "bwd"): "PS", ("fc2", "bwd"): "PL",
             ("fc1", "upd"): "PS", ("fc2", "upd"): "PS"}
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, (6, 4)).astype(np.float64)
    dy = rng.integers(-4, 5, (6, 2)) / 8.0
    out = {}
    for pm in ("float32", "float64"):
        net = Network("q", (4,), [Dense(8), ReLU(), Dense(2)], seed=0)
        for l in net.layers:  # small dyadic weights: every sum exact in FP32 and FP16
            for k, a in l.params.items():
                a[...] = np.random.default_rng(7).integers(-4, 5, a.shape) / 4.0
        mp = MixedPrecision(DESIGN, net, "q", _asg(units), target=False, ps_math=pm)
        y, u = mp.forward(x)
        dx = mp.backward(dy, src="PL", need_input_grad=True)
        out[pm] = (y, dx, {f"{l.name}.{k}": g for l in net.layers for k, g in l.grads.items()}, u)
    (y32, dx32, g32, u32), (y64, dx64, g64, u64) = out["float32"], out["float64"]
    assert u32 == u64 == "PL" and y32.dtype == dx32.dtype == np.float64  # PL results: float64 arrays
    assert np.array_equal(y32, y64) and np.array_equal(dx32, dx64)
    assert g32.keys() == g64.keys() and all(np.array_equal(g32[k], g64[k]) for k in g32)
    assert np.abs(g32["fc1.W"]).sum() > 0


def test_float32_apply_steps_adam_in_float32_and_resumes_exactly():
    """apply: float32 gradients, Adam state kept in float32, masters stay float64 arrays of FP32
    values; 3 steps, a state_dict round trip into a fresh network and optimizer, 3 more steps =
    6 steps straight, bit for bit."""
    rng = np.random.default_rng(11)
    data = [(rng.standard_normal((16, 4)), rng.standard_normal((16, 2)) / 16) for _ in range(6)]

    def make(state=None):
        net = Network("q", (4,), [Dense(8), ReLU(), Dense(2)], seed=0)
        mp, opt = MixedPrecision(DESIGN, net, "q", None), Adam(1e-2)
        if state is not None:
            net.set_params(state[0])
            opt.load_state_dict(state[1])
        views = _views(net)
        mp.round_masters(views)
        return net, mp, opt, views

    def steps(net, mp, opt, views, batches):
        for x, dy in batches:
            mp.forward(x)
            mp.backward(dy)
            mp.apply(opt, views, {k: net[v[0]].grads[k.rsplit(".", 1)[1]] for k, v in views.items()})

    straight = make()
    steps(*straight, data)
    half = make()
    steps(*half, data[:3])
    net, _, opt, _ = half
    assert all(a.dtype == np.float32 for d in opt.slots.values() for a in d.values())
    for a in net.get_params().values():
        assert a.dtype == np.float64 and np.array_equal(FP32.quantize(a), a)
    resumed = make((net.get_params(), opt.state_dict()))
    steps(*resumed, data[3:])
    a, b = straight[0].get_params(), resumed[0].get_params()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["fc1.W"], net.get_params()["fc1.W"])  # the last 3 steps moved it
    # the float32 step stays within float32 rounding of a float64 Adam step
    p32, p64, a32, a64 = {"w": np.ones(5)}, {"w": np.ones(5)}, Adam(1e-2), Adam(1e-2)
    g = np.linspace(-1, 1, 5)
    for _ in range(3):
        a32.step(p32, {"w": g.astype(np.float32)})
        a64.step(p64, {"w": g})
    assert a32.slots["m"]["w"].dtype == np.float32 and a64.slots["m"]["w"].dtype == np.float64
    np.testing.assert_allclose(p32["w"], p64["w"], rtol=1e-6)


def test_optimizer_slot_follows_the_gradient_dtype():
    """A slot from the other path (a float64 checkpoint) is converted once; RMSprop as Adam."""
    opt = RMSprop(1e-2)
    p = {"w": np.ones(3)}
    opt.step(p, {"w": np.full(3, 0.5)})
    assert opt.slots["v"]["w"].dtype == np.float64
    opt.step(p, {"w": np.full(3, 0.5, dtype=np.float32)})
    assert opt.slots["v"]["w"].dtype == np.float32


def test_clip_grad_norm_float32():
    g = {"a": np.array([3.0, 0.0], dtype=np.float32), "b": np.array([[4.0]], dtype=np.float32)}
    n = clip_grad_norm(g, 1.0)
    assert n == 5.0 and g["a"].dtype == np.float32
    np.testing.assert_allclose(np.concatenate([g["a"], g["b"].ravel()]), [0.6, 0.0, 0.8], rtol=1e-6)


def test_ps_math_hyperparameter():
    """--set ps_math=float64 reaches every MixedPrecision of a trainer (and its acting); a bad value fails."""
    hp = {"learning_starts": 0, "steps_per_update": 50, "buffer_size": 100, "batch_size": 8}
    t64 = DQN(DESIGN, seed=0, hyperparams={**hp, "ps_math": "float64"})
    t32 = DQN(DESIGN, seed=0, hyperparams=hp)
    try:
        assert t32.hp["ps_math"] == "float32" and t32.mp.ps32 and not t64.mp.ps32
        r32, r64 = t32.train_update(1, 2), t64.train_update(1, 2)
        assert r32["train_steps"] == r64["train_steps"] > 0
        # the two paths differ only in float32 vs float64 sums: close, not equal
        p32, p64 = t32.q.get_params(), t64.q.get_params()
        assert any(not np.array_equal(p32[k], p64[k]) for k in p32)
        assert all(np.allclose(p32[k], p64[k], rtol=1e-3, atol=1e-4) for k in p32)
    finally:
        t32.close()
        t64.close()
    with pytest.raises(RlhlsError, match="ps_math"):
        DQN(DESIGN, seed=0, hyperparams={**hp, "ps_math": "float16"})
    with pytest.raises(RlhlsError, match="ps_math"):
        MixedPrecision(DESIGN, Network("q", (4,), [Dense(2)]), "q", None, ps_math="double")
