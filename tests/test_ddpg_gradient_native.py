"""The ddpg_gradient kernel model's compiled arithmetic (designs/kernels/ddpg_gradient_native.py) gives
the numpy model's bits: each operation on edge values (saturation both ways, rounding ties of both
signs, strided operands), whole gradient steps of the three F-DDPG designs and of saturating inputs,
and a short training run's checkpoint; RLHLS_NATIVE=0, a failed build or a failed self-check leave
the numpy model running."""

import numpy as np
import pytest

from rlhls.cli import main as cli_main
from rlhls.designs.kernels import KernelContext, get_kernel
from rlhls.designs.kernels import ddpg_gradient as dg
from rlhls.designs.kernels import ddpg_gradient_native as dn
from rlhls.designs.registry import get_design
from rlhls.host.checkpoint import load_checkpoint

K = get_kernel("ddpg_gradient")
ST, ACC = "fixed<32,8,RND,SAT>", "fixed<64,16,RND,SAT>"


def _params(name):
    ctx = KernelContext(get_design(name))
    return K.resolve(K.node_params(ctx.graph.node("critic.fc1.bwd"), ctx))


def _fx(native, storage=ST, acc=ACC, tree=16):
    return dg._Fx({"storage": storage, "acc": acc, "tree": tree}, native=native)


@pytest.fixture(scope="module")
def nat():
    fx = _fx(True)
    n = fx.native()
    assert n is not None, "the compiled library did not build or failed its self-check"
    return fx, _fx(False)


def _model(p, x, native, monkeypatch):
    monkeypatch.setenv("RLHLS_NATIVE", "1" if native else "0")
    return K.model(p, **x)


def _same(a, b):
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


def test_dense_saturates_both_ways_and_rounds_ties_as_numpy(nat):
    fx, ref = nat
    T = fx.T
    # first chunk at S's ends, one sign per output column: A saturates up and down; the second chunk
    # pulls it back near 0 (the exact sum would stay at S's end)
    x = np.full((3, 2 * T + 5), fx.smax, dtype=np.int64)
    w = np.zeros((2 * T + 5, 4), dtype=np.int64)
    w[:T, 0::2], w[:T, 1::2] = fx.smax, fx.smin
    w[T:2 * T, 0::2], w[T:2 * T, 1::2] = -2 ** 28, 2 ** 28
    got = fx.dense(x, w)
    assert np.array_equal(got, ref.dense(x, w))
    assert (0 < got[:, 0]).all() and (got[:, 0] < fx.smax).all()
    assert (fx.smin < got[:, 1]).all() and (got[:, 1] < 0).all()
    w[T:] = np.random.default_rng(1).integers(-2 ** 28, 2 ** 28, (T + 5, 4))
    assert np.array_equal(fx.dense(x, w), ref.dense(x, w))
    # sums of odd multiples of half an S LSB: ties of both signs
    half = np.int64(1) << (fx.F - 1)
    xt = np.array([[1, 0], [-1, 0], [3, 0], [-3, 0], [1, 1]], dtype=np.int64)
    wt = np.array([[half, -half], [2 * half, half]], dtype=np.int64)
    assert np.array_equal(fx.dense(xt, wt), ref.dense(xt, wt))
    assert fx.dense(xt, wt)[:4, 0].tolist() == [1, 0, 2, -1]  # RND: half up
    # a bias at S's ends; transposed and sliced operands (strides)
    b = np.array([fx.smax, fx.smin, 0, -1], dtype=np.int64)
    for xx, ww in ((x, w), (x[:, ::-1], w[::-1]), (np.ascontiguousarray(x.T).T, np.ascontiguousarray(w.T).T),
                   (x[::2], w[:, :4])):
        assert np.array_equal(fx.dense(xx, ww, b), ref.dense(xx, ww, b))
    d = np.vstack([x[:, :4], -x[:, :4]])
    assert np.array_equal(fx.rowsum_s(d.T), ref.to_s(ref.rowsum(d.T)))
    assert np.array_equal(fx.rowsum_s(x[:, :4]), ref.to_s(ref.rowsum(x[:, :4])))


def test_q_matches_numpy_at_ties_ends_and_nonfinite(nat):
    fx, ref = nat
    lsb = 2.0 ** -fx.F
    v = np.concatenate([(np.arange(-20, 20) + 0.5) * lsb, [0.0, -0.0, 5e-324, 1e300, -1e300, 127.99, -128.5,
                                                          (fx.smax + 0.5) * lsb, (fx.smin - 0.5) * lsb]])
    for x in (v, v.reshape(7, 7)[:, ::2], np.float64(-0.5 * lsb), 0.99):
        assert np.array_equal(fx.q(x), ref.q(x)) and np.shape(fx.q(x)) == np.shape(ref.q(x))
    bad = np.array([1.0, np.nan, np.inf, -np.inf])
    assert np.array_equal(fx.q(bad), ref.q(bad))  # the format's own quantizer takes non-finite values


@pytest.mark.parametrize("design", ["fddpg-arm-m1", "fddpg-arm-m2", "fddpg-arm-m3"])
def test_gradient_model_is_bit_identical_with_and_without_the_library(design, monkeypatch):
    p = _params(design)
    for seed in range(3):
        x = K.random_inputs(p, np.random.default_rng(seed))
        assert _same(_model(p, x, True, monkeypatch), _model(p, x, False, monkeypatch))


def test_gradient_model_is_bit_identical_when_everything_saturates(monkeypatch):
    p = K.resolve({"hidden": [5, 7], "batch": 5, "tree": 3, "fusion": False, "rows": 3, "cols": 2, "out_pad": 8})
    rng = np.random.default_rng(5)
    x = K.random_inputs(p, rng)
    for key in ("actor", "critic", "target_actor", "target_critic"):
        x[key] = np.clip(x[key] * rng.uniform(0, 190, x[key].shape), -127, 127)
    for key in ("s", "s2"):
        x[key] = np.clip(x[key] * 150, -128, 127)
    x["r"] = x["r"] * 150
    got, want = _model(p, x, True, monkeypatch), _model(p, x, False, monkeypatch)
    assert np.abs(want["grad_critic"]).max() == 128.0 and _same(got, want)
    # non-finite inputs: the layer by layer path (the format's quantizer takes NaN and Inf), the same bits
    x["s"][0, :3], x["r"][1] = (np.nan, np.inf, -np.inf), np.nan
    got, want = _model(p, x, True, monkeypatch), _model(p, x, False, monkeypatch)
    assert _same(got, want)


def test_numpy_runs_when_disabled_or_the_build_fails(monkeypatch):
    p = _params("fddpg-arm-m1")
    x = K.random_inputs(p, np.random.default_rng(0))
    want = _model(p, x, True, monkeypatch)

    def boom(*a, **k):
        raise AssertionError("compiled path used")

    monkeypatch.setattr(dn.Native, "dense", boom)
    monkeypatch.setattr(dn.Native, "q", boom)
    monkeypatch.setattr(dn.Native, "rowsum_s", boom)
    monkeypatch.setattr(dn.Native, "gradient", boom)
    with pytest.raises(AssertionError):
        _model(p, x, True, monkeypatch)
    assert _same(_model(p, x, False, monkeypatch), want)  # RLHLS_NATIVE=0: numpy, the same bits
    monkeypatch.setenv("RLHLS_NATIVE", "0")
    assert dn.load(lambda *a: None, list, None) is None
    monkeypatch.setenv("RLHLS_NATIVE", "1")

    def no_compiler(*a, **k):
        raise OSError("g++: not found")

    monkeypatch.setattr(dn, "build_library", no_compiler)
    assert dn.load(lambda *a: None, list, None) is None
    fx = _fx(True)
    monkeypatch.setattr(dg, "_NATIVE", [False])  # what a failed load leaves
    assert fx.native() is None and fx.dense(np.ones((2, 2), np.int64), np.ones((2, 2), np.int64)).shape == (2, 2)


def test_self_check_refuses_a_library_with_other_bits(nat):
    class Off:  # the real library with one rounding changed: TRN for RND
        def __init__(self, lib):
            self.lib = lib
            self.rlhls_fx_q, self.rlhls_fx_gradient = lib.rlhls_fx_q, lib.rlhls_fx_gradient

        def rlhls_fx_dense(self, *args):
            c = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_int64 * 7).from_address(args[-1]))
            saved = c[2]
            c[2] = 0
            try:
                self.lib.rlhls_fx_dense(*args)
            finally:
                c[2] = saved

    lib = dg._NATIVE[0]
    mk = lambda st, acc, T: _fx(False, st, acc, T)  # noqa: E731
    assert dn.check(lib, mk)
    assert not dn.check(Off(lib), mk)
    cases = dg._native_cases()
    arith = lambda p: dg._arith(p, numpy=True)  # noqa: E731
    assert dn.check_model(lib, cases, arith)
    p, x, want = cases[2]
    lsb = 2.0 ** -dg._arith(p)[0].F
    assert not dn.check_model(lib, [(p, x, dict(want, y=want["y"] + lsb))], arith)


def test_training_checkpoint_is_identical_with_and_without_the_library(tmp_path, monkeypatch):
    base = ["fddpg-arm-m1", "--set", "learning_starts=240", "--set", "steps_per_update=60", "--set",
            "buffer_size=2000", "--steps", "420", "--quiet"]
    ck = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("RLHLS_NATIVE", flag)
        assert cli_main(["train", *base, "--out", str(tmp_path / flag)]) == 0
        ck[flag] = load_checkpoint(tmp_path / flag / "checkpoint.npz")
    a, b = ck["1"], ck["0"]
    assert a.keys() == b.keys()
    flat = []

    def walk(u, v):
        if isinstance(u, dict):
            assert u.keys() == v.keys()
            for k in u:
                walk(u[k], v[k])
        elif isinstance(u, np.ndarray):
            flat.append(u)
            assert u.dtype == v.dtype and np.array_equal(u, v, equal_nan=True)
        elif isinstance(u, (list, tuple)):
            assert len(u) == len(v)
            for s, t in zip(u, v):
                walk(s, t)

    walk(a, b)
    assert flat  # the parameters were compared
