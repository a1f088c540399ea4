"""The network language: shapes, names, init, float64 gradients vs finite differences,
FLOP counts, formats (against arith composed by hand) and bad-parameter errors."""

import math

# Two xdist workers each running multi-threaded OpenBLAS on 2 CPUs make the QR of the
# orthogonal init 20-50x slower; one BLAS thread per worker (only if numpy is not loaded yet).

import numpy as np  # noqa: E402
import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.network import (
    Conv2d, Dense, Flatten, Identity, Network, Precision, ReLU, Sigmoid, Softmax, Tanh, col2im, im2col,
)


def apdrl_convnet(**kw):
    return Network("q", (4, 84, 84), [
        Conv2d(32, 8, stride=4), ReLU(),
        Conv2d(64, 4, stride=2), ReLU(),
        Conv2d(64, 3, stride=1), ReLU(),
        Flatten(), Dense(512), ReLU(), Dense(4),
    ], **kw)


@pytest.fixture(scope="module")
def convnet():
    """Built once per module: orthogonal init of fc1 (3136 x 512) is the costly part."""
    return apdrl_convnet()


def small_convnet(**kw):
    """Every layer kind, a stride-2 conv and a softmax head."""
    return Network("small", (2, 7, 7), [
        Conv2d(3, 3, stride=2), Tanh(),
        Conv2d(2, (2, 1), bias=False), Sigmoid(),
        Flatten(), Dense(5), ReLU(), Dense(4), Identity(), Dense(3), Softmax(),
    ], **kw)


# ---------------------------------------------------------------- shapes and names


def test_mlp_shapes_and_names():
    net = Network("pi", (8,), [Dense(64), Tanh(), Dense(64), Tanh(), Dense(2, gain=0.01)])
    assert [l.name for l in net.layers] == ["fc1", "fc1_tanh", "fc2", "fc2_tanh", "fc3"]
    assert [l.out_shape for l in net.layers] == [(64,), (64,), (64,), (64,), (2,)]
    assert net.output_shape == (2,)
    assert net.n_params == 8 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2
    assert [l.name for l in net.mm_layers] == ["fc1", "fc2", "fc3"]
    assert net.forward(np.zeros((5, 8))).shape == (5, 2)
    assert len(net.summary().splitlines()) == len(net.layers)


def test_apdrl_convnet_shapes(convnet):
    net = convnet
    names = [l.name for l in net.layers]
    assert names == ["conv1", "conv1_relu", "conv2", "conv2_relu", "conv3", "conv3_relu",
                     "flatten", "fc1", "fc1_relu", "fc2"]
    shapes = {l.name: l.out_shape for l in net.layers}
    assert shapes["conv1"] == (32, 20, 20)
    assert shapes["conv2"] == (64, 9, 9)
    assert shapes["conv3"] == (64, 7, 7)
    assert shapes["flatten"] == (3136,)
    assert shapes["fc1"] == (512,)
    assert net.output_shape == (4,)
    d = net.describe()[0]
    assert d["kind"] == "Conv2d" and d["out_channels"] == 32 and d["kernel"] == (8, 8) and d["stride"] == 4
    assert d["params"] == 32 * 4 * 8 * 8 + 32 and d["init"] == "orthogonal"
    assert net.layers[7].describe()["units"] == 512


def test_layer_specs_are_copied_so_one_list_builds_two_networks():
    layers = [Dense(6), ReLU(), Dense(2)]
    a = Network("a", (3,), layers, seed=1)
    b = Network("b", (5,), layers, seed=2)
    assert a.layers[0] is not b.layers[0]
    assert a["fc1"].params["W"].shape == (3, 6) and b["fc1"].params["W"].shape == (5, 6)


def test_conv_forward_matches_direct_loop():
    rng = np.random.default_rng(3)
    net = Network("c", (2, 7, 6), [Conv2d(3, (3, 2), stride=2, init="uniform")])
    x = rng.standard_normal((2, 2, 7, 6))
    W, b = net["conv1"].params["W"], net["conv1"].params["b"]
    y = net.forward(x)
    ref = np.zeros((2, 3, 3, 3))
    for oh in range(3):
        for ow in range(3):
            patch = x[:, :, 2 * oh:2 * oh + 3, 2 * ow:2 * ow + 2]
            ref[:, :, oh, ow] = np.einsum("nchw,ochw->no", patch, W) + b
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


def test_col2im_is_adjoint_of_im2col():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 8))
    cols = im2col(x, 3, 2, 2)
    c = rng.standard_normal(cols.shape)
    assert np.isclose((cols * c).sum(), (x * col2im(c, x.shape, 3, 2, 2)).sum())


def test_conv_backward_reuses_forward_patches_only_for_that_forward():
    """The float64 forward keeps its im2col patches for backward; a forward in a Precision (or
    a new forward) replaces them, and the gradients equal a fresh layer's."""
    from rlhls.designs.network import Precision

    rng = np.random.default_rng(4)
    spec = [Conv2d(3, (3, 2), stride=2), ReLU(), Flatten(), Dense(2)]
    a, b = Network("c", (2, 7, 6), spec, seed=1), Network("c", (2, 7, 6), spec, seed=1)
    x1, x2 = rng.standard_normal((3, 2, 7, 6)), rng.standard_normal((3, 2, 7, 6))
    dy = rng.standard_normal((3, 2))
    a.forward(x1)
    a.forward(x2)  # the last forward counts
    b.forward(x2)
    assert np.array_equal(a.backward(dy, need_input_grad=True), b.backward(dy, need_input_grad=True))
    assert all(np.array_equal(a.grads[k], b.grads[k]) for k in b.grads)
    p = Precision("fp16", "fp32")
    a.forward(x1)
    a.forward(x1, p)
    b.forward(x1, p)
    a.backward(dy, p)
    b.backward(dy, p)
    assert all(np.array_equal(a.grads[k], b.grads[k]) for k in b.grads)


def test_input_gradient_alone_equals_full_backward():
    """param_grads=False (DDPG's critic@pi): the same input gradient bit for bit, in float64 and
    in a Precision, through conv and dense layers, and no parameter gradients left behind."""
    from rlhls.designs.network import Precision

    rng = np.random.default_rng(6)
    spec = [Conv2d(3, (3, 2), stride=2), ReLU(), Flatten(), Dense(4), Tanh(), Dense(2)]
    a, b = Network("c", (2, 7, 6), spec, seed=2), Network("c", (2, 7, 6), spec, seed=2)
    x, dy = rng.standard_normal((3, 2, 7, 6)), rng.standard_normal((3, 2))
    for p in (None, Precision("fp16", "fp32")):
        a.forward(x, p)
        b.forward(x, p)
        want = a.backward(dy, p, need_input_grad=True)
        got = b.backward(dy, p, need_input_grad=True, param_grads=False)
        assert a.grads and not b.grads
        assert np.array_equal(got, want), p


# ---------------------------------------------------------------- gradients


def _fd_check(net, x, rng, eps=1e-6):
    r = rng.standard_normal((x.shape[0],) + net.output_shape)
    loss = lambda: float((net.forward(x) * r).sum())  # noqa: E731
    net.forward(x)
    dx = net.backward(r, need_input_grad=True)
    grads = {k: v.copy() for k, v in net.grads.items()}
    assert set(grads) == set(net.get_params())

    def numeric(arr, idx):
        old = arr[idx]
        arr[idx] = old + eps
        up = loss()
        arr[idx] = old - eps
        down = loss()
        arr[idx] = old
        return (up - down) / (2 * eps)

    for layer in net.layers:
        for k, p in layer.params.items():
            g = grads[f"{layer.name}.{k}"]
            assert g.shape == p.shape
            for idx in list(np.ndindex(p.shape))[:: max(1, p.size // 12)]:
                assert numeric(p, idx) == pytest.approx(g[idx], rel=1e-5, abs=1e-7), (layer.name, k, idx)
    for idx in list(np.ndindex(x.shape))[:: max(1, x.size // 25)]:
        assert numeric(x, idx) == pytest.approx(dx[idx], rel=1e-5, abs=1e-7), ("input", idx)


@pytest.mark.parametrize("init", ["orthogonal", "uniform"])
def test_backward_matches_finite_differences_convnet(init):
    rng = np.random.default_rng(7)
    net = small_convnet(seed=4, init=init)
    for layer in net.mm_layers:  # non-zero biases so their gradients are exercised
        if "b" in layer.params:
            layer.params["b"][:] = rng.uniform(-0.3, 0.3, layer.params["b"].shape)
    _fd_check(net, rng.standard_normal((3, 2, 7, 7)), rng)


def test_backward_matches_finite_differences_mlp():
    rng = np.random.default_rng(8)
    net = Network("mlp", (5,), [Dense(7, init="uniform"), ReLU(), Dense(6, bias=False), Tanh(),
                                Dense(4), Sigmoid(), Dense(3), Identity()], seed=2)
    _fd_check(net, rng.standard_normal((4, 5)), rng)


def test_backward_skips_first_input_gradient_unless_asked():
    net = small_convnet()
    x = np.random.default_rng(0).standard_normal((2, 2, 7, 7))
    y = net.forward(x)
    assert net.backward(np.ones_like(y)) is None
    g1 = net.grads["conv1.W"].copy()
    dx = net.backward(np.ones_like(y), need_input_grad=True)
    assert dx.shape == x.shape
    np.testing.assert_array_equal(net.grads["conv1.W"], g1)  # backward overwrites, not accumulates
    net.zero_grads()
    assert all(not g.any() for g in net.grads.values())


# ---------------------------------------------------------------- FLOPs


def test_flops_of_known_layers(convnet):
    net = convnet
    fl = dict(net.flops(batch=3))
    conv1 = 20 * 20 * 32 * 8 * 8 * 4
    conv2 = 9 * 9 * 64 * 4 * 4 * 32
    conv3 = 7 * 7 * 64 * 3 * 3 * 64
    for name, macs in [("conv1", conv1), ("conv2", conv2), ("conv3", conv3),
                       ("fc1", 3136 * 512), ("fc2", 512 * 4)]:
        assert net[name].macs_per_sample == macs
        assert fl[name] == {"forward": 2 * 3 * macs, "backward_input": 2 * 3 * macs,
                            "backward_weight": 2 * 3 * macs}
    assert fl["conv1_relu"] == {"forward": 3 * 32 * 20 * 20, "backward_input": 3 * 32 * 20 * 20,
                                "backward_weight": 0}
    assert fl["flatten"] == {"forward": 0, "backward_input": 0, "backward_weight": 0}
    soft = Network("pi", (6,), [Dense(5), Softmax()])
    assert dict(soft.flops(2))["fc1_softmax"]["forward"] == 4 * 2 * 5


# ---------------------------------------------------------------- initialisation


def test_orthogonal_init_is_orthogonal_with_gain_and_zero_bias():
    net = Network("pv", (6,), [Dense(16), Tanh(), Dense(3, gain=0.01)], seed=5)
    W1, W2 = net["fc1"].params["W"], net["fc2"].params["W"]  # (6,16): rows orthonormal
    np.testing.assert_allclose(W1 @ W1.T, 2.0 * np.eye(6), atol=1e-12)
    np.testing.assert_allclose(W2.T @ W2, 1e-4 * np.eye(3), atol=1e-15)  # (16,3): columns
    assert not net["fc1"].params["b"].any()
    conv = Network("c", (3, 8, 8), [Conv2d(4, 3, gain=1.0)])["conv1"].params["W"].reshape(4, -1)
    np.testing.assert_allclose(conv @ conv.T, np.eye(4), atol=1e-12)


def test_init_is_deterministic_per_seed():
    a, b, c = (small_convnet(seed=s).get_params() for s in (1, 1, 2))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["fc1.W"], c["fc1.W"])
    u1, u2 = (small_convnet(seed=1, init="uniform").get_params() for _ in range(2))
    assert all(np.array_equal(u1[k], u2[k]) for k in u1)


def test_uniform_init_bounds():
    net = Network("u", (50,), [Dense(40, init="uniform"), ReLU(), Dense(3)], seed=0, init="uniform")
    for layer, fan_in in [(net["fc1"], 50), (net["fc2"], 40)]:
        for p in layer.params.values():
            assert np.abs(p).max() <= 1 / math.sqrt(fan_in)
        assert np.abs(layer.params["W"]).max() > 0.9 / math.sqrt(fan_in)
    mixed = Network("m", (4,), [Dense(3, init="uniform"), Dense(2)])
    assert mixed["fc1"].params["b"].any() and not mixed["fc2"].params["b"].any()


def test_get_set_params_roundtrip():
    a, b = small_convnet(seed=0), small_convnet(seed=1)
    b.set_params(a.get_params())
    x = np.random.default_rng(0).random((2, 2, 7, 7))
    np.testing.assert_array_equal(a.forward(x), b.forward(x))
    p = a.get_params()
    p["fc1.W"][:] = 0  # a copy: the network is untouched
    assert a["fc1"].params["W"].any()


# ---------------------------------------------------------------- formats


@pytest.fixture
def fmts():
    formats = pytest.importorskip("rlhls.designs.formats")
    arith = pytest.importorskip("rlhls.designs.arith")
    return formats, arith


def test_forward_in_precision_equals_arith_by_hand(fmts):
    formats, arith = fmts
    s, a = formats.FP16, formats.FP32
    p = Precision(s, a)
    net = Network("m", (6,), [Dense(8), Tanh(), Dense(3), Softmax()], init="uniform", seed=3)
    x = np.random.default_rng(1).standard_normal((4, 6))
    W1, b1, W2, b2 = (net.get_params()[k] for k in ("fc1.W", "fc1.b", "fc2.W", "fc2.b"))
    kw = dict(in_fmt=s, w_fmt=s, acc_fmt=a, out_fmt=s)
    z1 = arith.dense(x, W1, s.quantize(b1), **kw)
    h = s.quantize(np.tanh(z1))
    z = arith.dense(h, W2, s.quantize(b2), **kw)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    ref = s.quantize(e / e.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(net.forward(x, p), ref)
    # a per-layer dict: layers it does not name run in float64
    y = net.forward(x, {"fc1": p})
    np.testing.assert_allclose(y, net.layers[3].forward(net.layers[2].forward(
        net.layers[1].forward(z1))), rtol=1e-14)


@pytest.mark.parametrize("storage, acc", [("bf16", "fp32"), ("fixed<16,6,RND,SAT>", "fixed<32,12>")])
def test_backward_in_precision_equals_arith_by_hand(fmts, storage, acc):
    formats, arith = fmts
    s, a = formats.parse_format(storage), formats.parse_format(acc)
    p = Precision(s, a)
    net = Network("d", (5,), [Dense(4, init="uniform")], seed=2)
    rng = np.random.default_rng(2)
    x, dy = rng.standard_normal((6, 5)), rng.standard_normal((6, 4))
    net.forward(x, p)
    dx = net.backward(dy, p, need_input_grad=True)
    W = net["fc1"].params["W"]
    kw = dict(in_fmt=s, w_fmt=s, acc_fmt=a, out_fmt=s)
    np.testing.assert_array_equal(dx, arith.dense(dy, W.T, **kw))
    np.testing.assert_array_equal(net.grads["fc1.W"], arith.dense(s.quantize(x).T, dy, **kw))
    db = np.zeros(4)
    for row in s.quantize(dy):
        db = a.quantize(db + a.quantize(row))
    np.testing.assert_array_equal(net.grads["fc1.b"], s.quantize(db))


def test_conv_in_precision_equals_arith_by_hand(fmts):
    formats, arith = fmts
    s, a = formats.FP16, formats.FP32
    p = Precision(s, a)
    net = Network("c", (2, 6, 6), [Conv2d(3, 3, stride=2, init="uniform")], seed=1)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 6, 6))
    W, b = net["conv1"].params["W"], net["conv1"].params["b"]
    kw = dict(in_fmt=s, w_fmt=s, acc_fmt=a, out_fmt=s)
    y = net.forward(x, p)
    np.testing.assert_array_equal(y, arith.conv2d(x, W, s.quantize(b), 2, **kw))
    dy = rng.standard_normal(y.shape)
    dx = net.backward(dy, p, need_input_grad=True)
    dy2 = dy.transpose(0, 2, 3, 1).reshape(-1, 3)
    cols = im2col(s.quantize(x), 3, 3, 2)
    dW = arith.dense(cols.T, dy2, **kw).T.reshape(W.shape)
    np.testing.assert_array_equal(net.grads["conv1.W"], dW)
    # the input-gradient kernel's patches in storage (dense_backward), col2im on the host, one rounding
    dcols = arith.dense(dy2, W.reshape(3, -1), **kw)
    np.testing.assert_array_equal(dx, s.quantize(col2im(dcols, x.shape, 3, 3, 2)))


def test_fp32_precision_is_close_to_float64(fmts):
    formats, _ = fmts
    p = Precision(formats.FP32, formats.FP32)
    net = small_convnet(seed=1)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 7, 7))
    y64 = net.forward(x)
    dy = rng.standard_normal(y64.shape)
    dx64 = net.backward(dy, need_input_grad=True)
    g64 = {k: v.copy() for k, v in net.grads.items()}
    y32 = net.forward(x, p)
    dx32 = net.backward(dy, p, need_input_grad=True)
    np.testing.assert_allclose(y32, y64, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx32, dx64, rtol=1e-4, atol=1e-6)
    for k, g in net.grads.items():
        np.testing.assert_allclose(g, g64[k], rtol=1e-4, atol=1e-6, err_msg=k)
    assert np.array_equal(formats.FP32.quantize(y32), y32)


def test_precision_accepts_format_text(fmts):
    formats, _ = fmts
    p = Precision("fp16", "fp32")
    assert p == Precision(formats.FP16, formats.FP32)
    net = Network("m", (3,), [Dense(2)])
    with pytest.raises(RlhlsError, match="^network 'm': layer fc1: dense: unsupported format combination"):
        net.forward(np.ones((1, 3)), Precision("fp16", "fixed<32,12>"))


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("make, message", [
    (lambda: Network("q", (4,), [Dense(0)]), "network 'q': layer fc1: units 0"),
    (lambda: Network("q", (64, 7, 7), [Conv2d(8, 8)]),
     "network 'q': layer conv1: kernel 8x8 larger than input 7x7"),
    (lambda: Network("q", (4, 84, 84), [Conv2d(32, 8, stride=4), Conv2d(64, 4, stride=2),
                                        Conv2d(64, 3), Conv2d(64, 8)]),
     "network 'q': layer conv4: kernel 8x8 larger than input 7x7"),
    (lambda: Network("q", (1, 5, 5), [Conv2d(2, 3, stride=0)]), "network 'q': layer conv1: stride 0"),
    (lambda: Network("q", (3, 5, 5), [Conv2d(2, 3), Dense(4)]),
     "network 'q': layer fc1: Dense needs a 1-D input"),
    (lambda: Network("q", (4,), [Conv2d(2, 3)]), "network 'q': layer conv1: Conv2d needs a 3-D"),
    (lambda: Network("q", (4,), [Dense(3, init="xavier")]), "network 'q': layer fc1: unknown init 'xavier'"),
    (lambda: Network("q", (4,), [Dense(3)], init="he"), "network 'q': unknown init 'he'"),
    (lambda: Network("q", (4, 5), [Dense(3)]), "network 'q': input_shape (4, 5)"),
    (lambda: Network("q", (2, 4, 4), [Softmax()]), "network 'q': layer softmax: Softmax needs a 1-D"),
    (lambda: Network("q", (4,), [Dense(3), "relu"]), "network 'q': layer 1 is 'relu'"),
])
def test_bad_parameters_raise_one_line(make, message):
    with pytest.raises(RlhlsError) as err:
        make()
    text = str(err.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_bad_calls_raise():
    net = Network("q", (4,), [Dense(3), ReLU()])
    with pytest.raises(RlhlsError, match=r"network 'q': input has shape \(2, 5\), expected \(N, 4\)"):
        net.forward(np.zeros((2, 5)))
    with pytest.raises(RlhlsError, match="network 'q': layer fc1_relu: backward called before forward"):
        net.backward(np.zeros((2, 3)))
    net.forward(np.zeros((2, 4)))
    with pytest.raises(RlhlsError, match="layer fc1_relu: output gradient has shape"):
        net.backward(np.zeros((3, 3)))
    with pytest.raises(RlhlsError, match="precision given for unknown layer 'fc9'"):
        net.forward(np.zeros((2, 4)), {"fc9": None})
    with pytest.raises(RlhlsError, match=r"layer fc1: W has shape \(3, 3\), expected \(4, 3\)"):
        net.set_params({"fc1.W": np.zeros((3, 3)), "fc1.b": np.zeros(3)})
    with pytest.raises(RlhlsError, match="missing: \\['fc1.b'\\]"):
        net.set_params({"fc1.W": np.zeros((4, 3))})


# ---------------------------------------------------------------- table activations (hls4ml LUTs)

LUT = Precision("fixed<16,6,RND,SAT>", "fixed<32,12,RND,SAT>", table_size=1024)


def _act(kind, n=1):
    layer = {"Tanh": Tanh, "Sigmoid": Sigmoid, "Softmax": Softmax}[kind]()
    return Network("a", (n,), [layer])


@pytest.mark.parametrize("kind, half", [("Tanh", 4.0), ("Sigmoid", 8.0)])
def test_lut_activation_is_hls4ml_table(kind, half):
    # Every input code of the storage format: index = trunc(x N / (2 half)) + N/2 clipped, entry =
    # f at the left end of its bin rounded to the table format (float32 libm within 1 table LSB).
    s, N = LUT.storage, LUT.lut_size
    x = s.from_mantissa(np.arange(s.min_mantissa, s.max_mantissa + 1))[:, None]
    y = _act(kind).forward(x, LUT)[:, 0]
    idx = np.clip(np.trunc(x[:, 0] * N / (2 * half)) + N // 2, 0, N - 1)
    centre = 2 * half * (idx - N / 2) / N
    f = np.tanh(centre) if kind == "Tanh" else 1 / (1 + np.exp(-centre))
    assert np.abs(y - s.quantize(f)).max() <= s.lsb
    assert np.all(np.diff(y) >= 0)  # monotone, as the tables
    step = 2 * half / N * (1.0 if kind == "Tanh" else 0.25)
    g = np.tanh(x[:, 0]) if kind == "Tanh" else 1 / (1 + np.exp(-x[:, 0]))
    inside = np.abs(x[:, 0]) < half - 2 * half / N
    assert np.abs(y - g)[inside].max() <= step + s.lsb
    assert np.abs(y - _act(kind).forward(x, Precision(s, LUT.acc))[:, 0]).max() >= 3 * s.lsb  # not float64


def test_lut_softmax_close_to_softmax_and_backward_is_analytic():
    net = _act("Softmax", 6)
    x = LUT.storage.quantize(np.random.default_rng(0).uniform(-6, 6, (50, 6)))
    y = net.forward(x, LUT)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    assert np.abs(y - p).max() < 0.05 and np.abs(y - p).max() > 0  # table steps, not exact
    assert np.array_equal(LUT.storage.quantize(y), y)
    dy = np.random.default_rng(1).standard_normal(y.shape)
    dx = net.backward(dy, LUT, need_input_grad=True)
    dyq = LUT.storage.quantize(dy)
    ref = p * (dyq - (dyq * p).sum(axis=1, keepdims=True))
    assert np.abs(dx - ref).max() <= LUT.storage.lsb


def test_lut_tanh_gradient_is_analytic_derivative():
    # Backward through a table activation = d tanh at the (stored) input, not the table's slope:
    # equal to dy (1 - tanh(x)^2) within the table error, and training still learns.
    s = LUT.storage
    net = _act("Tanh", 3)
    x = s.quantize(np.random.default_rng(2).uniform(-3, 3, (40, 3)))
    y = net.forward(x, LUT)
    dy = s.quantize(np.random.default_rng(3).standard_normal(y.shape))
    dx = net.backward(dy, LUT, need_input_grad=True)
    analytic = dy * (1 - np.tanh(x) ** 2)
    assert np.abs(dx - analytic).max() <= s.lsb
    assert np.abs(dx - dy * (1 - y ** 2)).max() <= 2 * np.abs(dy).max() * (8 / 1024 + s.lsb)


def test_training_with_lut_activations_learns():
    rng = np.random.default_rng(4)
    net = Network("r", (2,), [Dense(16), Tanh(), Dense(1), Sigmoid()], seed=0, init="uniform")
    x = rng.uniform(-1, 1, (64, 2))
    t = (x[:, :1] * x[:, 1:] > 0).astype(float) * 0.8 + 0.1
    losses = []
    for _ in range(300):
        y = net.forward(x, LUT)
        losses.append(float(((y - t) ** 2).mean()))
        net.backward(2 * (y - t) / len(x), LUT)
        net.set_params({k: v - 2.0 * net.grads[k] for k, v in net.get_params().items()})
    assert losses[-1] < 0.5 * losses[0], (losses[0], losses[-1])


def test_precision_tables_defaults_and_errors():
    p = Precision("fixed<16,6>", "fixed<32,12>")
    assert not p.lut and p.with_tables().lut and p.with_tables().lut_table == p.storage
    q = Precision("fixed<16,6>", "fixed<32,12>", table="fixed<18,8>")
    assert q.lut and q.lut_size == 1024 and str(q.lut_table) == "fixed<18,8>"
    assert q.with_tables(table_size=256).lut_size == 256  # unset fields take the arguments
    assert Precision("fp32", "fp32", table_size=64).with_tables(table_size=256).lut_size == 64  # set ones win
    with pytest.raises(RlhlsError, match="table_size 1000, expected a power of two"):
        Precision("fp32", "fp32", table_size=1000)
    with pytest.raises(RlhlsError, match="width 8 < log2"):
        _act("Softmax", 3).forward(np.zeros((1, 3)), Precision("fixed<8,3>", "fixed<16,6>", table_size=1024))
