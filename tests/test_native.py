"""rlhls.flow.native: the compiled sequential float32 sum equals designs.arith's numpy path and the
compiled float rounding FloatFormat's numpy paths (numpy's float16 cast, ml_dtypes' bfloat16 cast),
bit for bit; RLHLS_NATIVE=0, a failed build or a failed self-check leave the numpy path in place
(also for the compiled GAE model, registered on its own; its bits are tested in test_gae.py)."""

import numpy as np
import pytest

from rlhls.designs import arith, formats
from rlhls.designs.formats import parse_format
from rlhls.designs.kernels import gae as gae_kernel
from rlhls.flow import native, native_gae
from rlhls.host import optim, optim_native


@pytest.fixture
def fresh(monkeypatch):
    """native with nothing loaded yet; arith's, formats' and the GAE model's kernels restored afterwards."""
    prev, prev_round = arith.set_seq_sum_kernel(None), formats.set_round_kernel(None)
    prev_gae = gae_kernel.set_model_kernel(None)
    monkeypatch.setattr(optim, "_fused", None)
    monkeypatch.setattr(native, "_kernel", None)
    monkeypatch.setattr(native, "_round", None)
    monkeypatch.setattr(native, "_gae", None)
    monkeypatch.setattr(native, "_update", None)
    yield native
    arith.set_seq_sum_kernel(prev)
    formats.set_round_kernel(prev_round)
    gae_kernel.set_model_kernel(prev_gae)


@pytest.fixture(scope="module")
def kernel():
    if not native.install():
        pytest.skip("no C++ compiler: dense uses the numpy path only")
    return native._kernel


def _wide(rng, shape, spread=30):
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape))).astype(np.float32)


def _same_bits(a, b):
    """Equal bit patterns (so -0 != +0), NaN where the other has NaN (payloads may differ)."""
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.int32), b[~nan].view(np.int32))


SHAPES = [(1, 1, 1), (5, 9, 1), (1, 40, 3), (37, 64, 2), (8, 129, 64), (64, 3, 300), (13, 17, 19),
          (200, 7, 5), (3, 1, 9), (25, 50, 37), (6, 70, 16), (300, 30, 15), (12, 1, 32)]


@pytest.mark.parametrize("N, K, M", SHAPES)
def test_kernel_equals_numpy_path(kernel, N, K, M):
    """Both orientations (M < 16 and N > M runs transposed), the 6 x 16 blocks and their edges, wide magnitudes so every add rounds,
    overflow to +-Inf, Inf - Inf = NaN, NaN inputs, subnormals, non-contiguous inputs."""
    rng = np.random.default_rng(N * 10007 + K * 101 + M)
    for trial in range(4):
        x, w = _wide(rng, (N, K)), _wide(rng, (K, M))
        x.flat[rng.integers(0, x.size)] = 1e-40  # subnormal
        if trial >= 1:  # overflow of the running sum: 3e38 * 2 twice
            x[:, 0], w[0, :] = np.float32(3e38), np.float32(2.0)
            if K > 1:
                x[:, -1], w[-1, :] = np.float32(3e38), np.float32(2.0)
        if trial >= 2 and K > 2:
            x[0, 1], w[2, 0] = np.float32(3e38), np.float32(-np.inf)
        if trial == 3:
            w.flat[rng.integers(0, w.size)] = np.nan
        acc0 = rng.standard_normal((N, M)).astype(np.float32)
        a, b, c = acc0.copy(), acc0.copy(), acc0.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            arith._seq_sum_f32_numpy(x, w, a)
            kernel(np.asfortranarray(x), w, b)
            kernel(x, np.asfortranarray(w), c)
        assert _same_bits(a, b) and _same_bits(a, c), (N, K, M, trial)


@pytest.mark.parametrize("N, K, M", SHAPES)
def test_kernel_equals_numpy_path_on_fp16_and_bf16_operands(kernel, N, K, M):
    """FP16 x FP16 and BF16 x BF16 operands (the PL's and the AIE's: exact products, the FMA path
    where the CPU has one), and BF16 operands whose products underflow or overflow float32 (the
    plain path), wide magnitudes so the sums round, zeros."""
    rng = np.random.default_rng(N * 7919 + K * 31 + M)
    bf16 = parse_format("bf16")
    h = lambda s: (rng.standard_normal(s) * np.exp2(rng.integers(-14, 15, s))).astype(np.float16).astype(np.float32)  # noqa: E731
    b = lambda s: bf16.quantize(_wide(rng, s, 60).astype(np.float64)).astype(np.float32)  # noqa: E731
    edge_x, edge_w = b((N, K)), b((K, M))
    edge_x[0, 0], edge_w[0, -1] = np.float32(2.0 ** 90), np.float32(2.0 ** 50)  # a product of 2^140
    tiny_x, tiny_w = b((N, K)), b((K, M))
    tiny_x[-1, -1], tiny_w[-1, 0] = np.float32(2.0 ** -80), np.float32(2.0 ** -70)  # one of 2^-150
    for x, w in ((h((N, K)), h((K, M))), (b((N, K)), b((K, M))), (edge_x, edge_w), (tiny_x, tiny_w),
                 (np.zeros((N, K), np.float32), h((K, M)))):
        acc0 = _wide(rng, (N, M), 10)
        a, c = acc0.copy(), acc0.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            arith._seq_sum_f32_numpy(x, w, a)
            kernel(x, w, c)
        assert _same_bits(a, c), (N, K, M)


@pytest.mark.parametrize("fi, fo", [("fp32", "fp32"), ("fp16", "fp32"), ("bf16", "bf16"), ("fp16", None)])
def test_dense_same_bits_with_and_without_kernel(kernel, fi, fo):
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1, (33, 70)) * np.exp2(rng.integers(-20, 21, (33, 70)))
    w = rng.normal(0, 1, (70, 6)) * np.exp2(rng.integers(-20, 21, (70, 6)))
    b = rng.normal(size=6)
    prev = arith.set_seq_sum_kernel(None)
    try:
        ref = arith.dense(x, w, b, in_fmt=fi, acc_fmt="fp32", out_fmt=fo)
        arith.set_seq_sum_kernel(kernel)
        y = arith.dense(x, w, b, in_fmt=fi, acc_fmt="fp32", out_fmt=fo)
    finally:
        arith.set_seq_sum_kernel(prev)
    assert np.array_equal(np.isnan(ref), np.isnan(y))
    ok = ~np.isnan(ref)
    assert np.array_equal(ref[ok].view(np.int64), y[ok].view(np.int64))


def _spy(monkeypatch):
    calls = []
    real = arith._seq_sum_f32_numpy
    monkeypatch.setattr(arith, "_seq_sum_f32_numpy", lambda *a: (calls.append(1), real(*a)))
    return calls


@pytest.fixture(scope="module")
def rnd():
    if not native.install() or not native._round:
        pytest.skip("no C++ compiler: float rounding uses numpy's casts only")
    return native._round


def _cast(x, dtype=np.float16):
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dtype).astype(np.float64)


def _same64(a, b):
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64))


def _ovf(y, x):
    return int(np.count_nonzero(np.isinf(y) & np.isfinite(x)))


@pytest.mark.parametrize("name", native.CHECK_FORMATS + ("float<6,9>",))
def test_round_kernel_equals_numpy_path(rnd, name):
    """Every exponent, ties between neighbours and between subnormals, the largest value and the
    overflow tie, +-0, Inf, NaN, in C order, Fortran order and strided views; overflow counts."""
    fmt = parse_format(name)
    rng = np.random.default_rng(7)
    x = native._round_values(rng, fmt)
    x = np.concatenate([x, rng.uniform(-1.1, 1.1, 10_000) * fmt.max_value, rng.standard_normal(10_000) * 1e-6])
    ref, n_ref = fmt._quantize_magic(x, True)
    y, n = rnd(x, fmt)
    assert n == n_ref > 0 and _same64(ref, y)
    if name == "fp16":
        assert _same64(_cast(x), y)
    m = x[: x.size - x.size % 60].reshape(-1, 60)
    for view in (np.asfortranarray(m), m[:, ::3], m.T):
        y, n = rnd(view, fmt)
        want, n_want = fmt._quantize_magic(np.array(view), True)
        assert y.shape == view.shape and n == n_want and _same64(want, y)


def test_bf16_kernel_equals_ml_dtypes_cast(rnd):
    """BF16 of float32 values (accumulator results, masters): ml_dtypes' cast is the reference."""
    import ml_dtypes

    x = native._round_values(np.random.default_rng(3), parse_format("bf16"))
    x = x[np.isnan(x) | (_cast(x, np.float32) == x)]  # the float32-exact ones
    y, n = rnd(x, parse_format("bf16"))
    ref = _cast(x.astype(np.float32), ml_dtypes.bfloat16)
    assert _same64(ref, y) and n == _ovf(ref, x) > 0


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_quantize_same_bits_with_and_without_kernel(rnd, name):
    rng = np.random.default_rng(8)
    fmt = parse_format(name)
    x = rng.standard_normal((300, 70)) * np.exp2(rng.integers(fmt.emin - 14, fmt.emax + 5, (300, 70)))
    x32 = _cast(x, np.float32)  # BF16's ml_dtypes path takes float32-exact input
    prev = formats.set_round_kernel(None)
    try:
        refs = [fmt.quantize(v, return_overflow=True) for v in (x, x32)]
        w32_ref = arith._to32(fmt, x)
        formats.set_round_kernel(rnd)
        got = [fmt.quantize(v, return_overflow=True) for v in (x, x32)]
        w32 = arith._to32(fmt, x)
    finally:
        formats.set_round_kernel(prev)
    assert refs[0][1] > 0  # x reaches past the format's largest value
    for (ref, n_ref), (y, n) in zip(refs, got):
        assert n == n_ref and _same64(ref, y)
    assert np.array_equal(w32_ref.view(np.int32), w32.view(np.int32))
    assert fmt.quantize(np.float64(1 / 3)) == fmt._quantize_magic(np.array(1 / 3), False)  # 0-d: numpy


def test_failed_round_check_keeps_numpy_casts_only(fresh, monkeypatch):
    """A kernel off by one rounding mode (truncation instead of RNE) is caught by the self-check."""
    def wrong(f):
        def k(x, fmt):
            y = np.asarray(x, dtype=np.float64)
            _, e = np.frexp(y)
            q = np.maximum(e - 1, fmt.emin) - fmt.man_bits
            with np.errstate(invalid="ignore", over="ignore"):
                return np.ldexp(np.trunc(np.ldexp(y, -q)), q), 0
        return k

    monkeypatch.setattr(native, "_wrap_round", wrong)
    if not fresh.install():
        pytest.skip("no C++ compiler")
    assert formats._round_kernel is None and arith._seq_sum_kernel is fresh._kernel


def test_disabled_by_env_runs_numpy_path(fresh, monkeypatch):
    monkeypatch.setenv("RLHLS_NATIVE", "0")
    assert fresh.install() is False
    assert arith._seq_sum_kernel is None and gae_kernel._model_kernel is None
    calls = _spy(monkeypatch)
    arith.dense(np.ones((4, 5)), np.ones((5, 3)), in_fmt="fp16", acc_fmt="fp32")
    assert calls
    assert _gae_runs_numpy(monkeypatch)


def _gae_runs_numpy(monkeypatch) -> bool:
    """GaeKernel.model answers through the numpy model (and gives its results)."""
    K = gae_kernel.GaeKernel()
    calls = []
    real = K._model_numpy
    monkeypatch.setattr(K, "_model_numpy", lambda p, a: (calls.append(1), real(p, a))[1])
    p = K.resolve(dict(trajectories=9, steps=7, pes=2))
    x = K.random_inputs(p, np.random.default_rng(0))
    y = K.model(p, **x)
    return bool(calls) and all(native_gae.same(y[n], K.model_numpy(p, **x)[n]) for n in y)


def test_env_unregisters_an_installed_kernel(fresh, monkeypatch):
    if not fresh.install():
        pytest.skip("no C++ compiler")
    assert arith._seq_sum_kernel is fresh._kernel
    assert fresh.install() is True and arith._seq_sum_kernel is fresh._kernel  # idempotent
    assert formats._round_kernel is fresh._round
    assert fresh._gae and gae_kernel._model_kernel is fresh._gae
    monkeypatch.setattr(optim._install_once, "done", False)
    assert optim._fused_step() is not None  # the optimizer's own compiled step (host/optim_native.py)
    monkeypatch.setenv("RLHLS_NATIVE", "0")
    assert fresh.install() is False and arith._seq_sum_kernel is None and formats._round_kernel is None
    assert gae_kernel._model_kernel is None and _gae_runs_numpy(monkeypatch) and optim._fused_step() is None


def test_build_failure_falls_back_silently(fresh, monkeypatch, capsys):
    def boom():
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(native, "_build", boom)
    assert fresh.install() is False
    assert fresh.install() is False  # not retried
    assert arith._seq_sum_kernel is None
    assert capsys.readouterr() == ("", "")


def test_failed_self_check_is_not_registered(fresh, monkeypatch):
    def wrong(f):  # float64 sums: not the float32 bits
        def k(x, w, acc):
            acc[...] = acc + (x.astype(np.float64) @ w.astype(np.float64))
        return k

    monkeypatch.setattr(native, "_wrap", wrong)
    assert fresh.install() is False
    assert arith._seq_sum_kernel is None


def test_cache_dir_honoured(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("RLHLS_CACHE_DIR", str(tmp_path))
    if not fresh.install():
        pytest.skip("no C++ compiler")
    assert list((tmp_path / "native").glob("seq_sum*.so"))
    assert fresh._gae and list((tmp_path / "native").glob("gae_model*.so"))


def test_mixed_precision_with_pl_nodes_installs(fresh):
    from rlhls.designs.network import Dense, Network, ReLU
    from rlhls.designs.registry import get_design
    from rlhls.host.mixed import MixedPrecision

    design = get_design("apdrl-dqn-cartpole")
    net = Network("q", (4,), [Dense(8), ReLU(), Dense(2)], seed=0)
    MixedPrecision(design, net, "q", None)  # all PS: nothing to speed up
    assert arith._seq_sum_kernel is None
    asg = {"loss": "PS"}
    for layer in ("fc1", "fc1_relu", "fc2"):
        for ph in ("fwd", "tfwd", "bwd"):
            asg[f"q.{layer}.{ph}"] = "PL"
        if layer.startswith("fc"):
            asg[f"q.{layer}.upd"] = "PS"
    MixedPrecision(design, net, "q", asg)
    assert arith._seq_sum_kernel is (fresh._kernel or None)


def test_failed_gae_check_keeps_numpy_model_only(fresh, monkeypatch):
    """A compiled model one ulp off in one element is caught by the self-check; the others stay."""
    real = native_gae._wrap

    def off_by_one_ulp(f):
        model = real(f)

        def wrong(kernel, p, a):
            y = model(kernel, p, a)
            if y is not None:
                y["returns"].flat[-1] = np.nextafter(y["returns"].flat[-1], np.inf)
            return y
        return wrong

    monkeypatch.setattr(native_gae, "_wrap", off_by_one_ulp)
    if not fresh.install():
        pytest.skip("no C++ compiler")
    assert fresh._gae is False and gae_kernel._model_kernel is None
    assert arith._seq_sum_kernel is fresh._kernel
    assert _gae_runs_numpy(monkeypatch)


def test_gae_build_failure_keeps_numpy_model(fresh, monkeypatch, capsys):
    def boom():
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(native, "_build_gae", boom)
    have = fresh.install()
    assert fresh._gae is False and gae_kernel._model_kernel is None
    assert arith._seq_sum_kernel is (fresh._kernel if have else None)
    assert capsys.readouterr() == ("", "")
    assert _gae_runs_numpy(monkeypatch)


def test_gae_check_rejects_invalid_input_results(fresh):
    """The self-check also fails a model that answers on invalid codes instead of deferring to
    numpy's error (the inputs of native_gae.INVALID)."""
    if not fresh.install() or not fresh._gae:
        pytest.skip("no C++ compiler")
    real = fresh._gae

    def lenient(kernel, p, a):
        a = {n: (np.nan_to_num(np.clip(v, 0, 2 if n == "done" else (1 << p["bits"]) - 1)).round()
                 if n != "value_stats" else v) for n, v in a.items()}
        return real(kernel, p, a)

    assert native_gae.check(real) is True
    assert native_gae.check(lenient) is False


@pytest.mark.parametrize("opt", ["adam", "rmsprop", "sgd"])
def test_update_kernel_equals_fp32_model(opt):
    """The in-place FP32 weight update is WeightUpdate._model_fp32 bit for bit (a layer's 2-D
    arrays; wide gradients, zeros, subnormals), and declines float64 gradients (the model's float64 path)."""
    from rlhls.designs.kernels.update import WeightUpdate, _constants

    upd = native.update_kernel()
    if upd is None:
        pytest.skip("no C++ compiler: the numpy model updates")
    rng = np.random.default_rng(3)
    c = dict(_constants("fp32", 0.9, 0.999, 0.99, 1e-8))
    shape = (37, 11)
    w = rng.standard_normal(shape).astype(np.float32).astype(np.float64)
    g = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))).astype(np.float32)
    g[0, :] = 0.0
    m = (rng.standard_normal(shape) * 1e-2).astype(np.float32).astype(np.float64)
    v = (rng.random(shape) * 1e-4).astype(np.float32).astype(np.float64)
    # a converged layer's: subnormal moments, gradients whose squares are subnormal (the vector loop's too)
    m[1:3, :] = (rng.standard_normal((2, 11)) * 1e-40).astype(np.float32)
    v[1:3, :] = (rng.random((2, 11)) * 1e-41).astype(np.float32)
    g[2:4, :] = (rng.standard_normal((2, 11)) * 1e-21).astype(np.float32)
    assert 0 < np.abs(m[1]).max() < np.finfo(np.float32).tiny and np.abs(g[3] * g[3]).max() < np.finfo(np.float32).tiny
    with np.errstate(all="ignore"):
        ref = WeightUpdate._model_fp32({"optimizer": opt}, {"w": w, "g": g, "alpha": (2e-4,), "m": m, "v": v}, c)
    got = {"w_new": w.copy(), "m_new": m.copy(), "v_new": v.copy()}
    assert upd(opt, c, 2e-4, got["w_new"], g, got["m_new"] if opt == "adam" else None,
               got["v_new"] if opt != "sgd" else None)
    for k, r in ref.items():
        assert np.array_equal(r.view(np.int64), got[k].view(np.int64)), k
    assert not upd(opt, c, 2e-4, w.copy(), g.astype(np.float64), m.copy(), v.copy())


@pytest.mark.parametrize("make", [lambda: optim.Adam(1e-3), lambda: optim.Adam(3e-4, (0.8, 0.99), 1e-5),
                                  lambda: optim.RMSprop(7e-4)], ids=["adam", "adam-eps", "rmsprop"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_optimizer_step_equals_the_numpy_steps(make, dtype, monkeypatch):
    """Optimizer.step with float32 gradients takes the compiled one-pass step: the numpy steps' bits
    for the parameters and every moment (a converged layer's subnormal moments and gradients
    whose squares underflow included, p float64 or float32); a broken step fails the self-check."""
    compiled = optim_native.load(optim.Adam, optim.RMSprop)
    if compiled is None:
        pytest.skip("no C++ compiler: the numpy steps run")
    rng = np.random.default_rng(5)
    shape = (41, 13)
    p0 = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    monkeypatch.setattr(optim._install_once, "done", True)  # installed above: the step registered here stays
    runs = {}
    for fused in (compiled, None):
        monkeypatch.setattr(optim, "_fused", fused)
        calls = []
        if fused is not None:
            monkeypatch.setattr(optim, "_fused", lambda *a: calls.append(1) or fused(*a))
        opt, p = make(), {"w": p0.copy()}
        r = np.random.default_rng(9)
        for step in range(4):
            g = (r.standard_normal(shape) * np.exp2(r.integers(-140, 30, shape))).astype(np.float32)
            if step == 1:
                for s in opt.slots.values():
                    s["w"][:3] = (r.random((3, shape[1])) * 1e-40).astype(np.float32)  # subnormal moments
            with np.errstate(all="ignore"):
                opt.step(p, {"w": g})
        assert not fused or len(calls) == 4
        runs[fused is not None] = (p["w"], {k: s["w"] for k, s in opt.slots.items()})
    (pa, sa), (pb, sb) = runs[True], runs[False]
    assert pa.dtype == pb.dtype == dtype and pa.view(np.uint8).tobytes() == pb.view(np.uint8).tobytes()
    assert sa.keys() == sb.keys() and all(_same_bits(sa[k], sb[k]) for k in sa)
    assert any(((0 < np.abs(s)) & (np.abs(s) < np.finfo(np.float32).tiny)).any() for s in sa.values())
    assert optim_native.check(compiled, optim.Adam, optim.RMSprop)
    off = lambda kind, p, g, m, v, c: compiled(kind, p, g, m, v, (*c[:-1], c[-1] * 1.0000001))  # noqa: E731
    assert not optim_native.check(off, optim.Adam, optim.RMSprop)
