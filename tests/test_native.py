"""rlhls.flow.native: the compiled sequential float32 sum equals designs.arith's numpy path and the
compiled binary16 rounding numpy's float16 cast, bit for bit; RLHLS_NATIVE=0, a failed build or a
failed self-check leave the numpy path in place."""

import numpy as np
import pytest

from rlhls.designs import arith, formats
from rlhls.designs.formats import parse_format
from rlhls.flow import native


@pytest.fixture
def fresh(monkeypatch):
    """native with nothing loaded yet; arith's and formats' kernels restored afterwards."""
    prev, prev_half = arith.set_seq_sum_kernel(None), formats.set_half_kernel(None)
    monkeypatch.setattr(native, "_kernel", None)
    monkeypatch.setattr(native, "_half", None)
    yield native
    arith.set_seq_sum_kernel(prev)
    formats.set_half_kernel(prev_half)


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
def half():
    if not native.install() or not native._half:
        pytest.skip("no C++ compiler: fp16 rounding uses numpy's cast only")
    return native._half


def _cast(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).astype(np.float64)


def _same64(a, b):
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64))


def test_half_kernel_equals_numpy_cast(half):
    """Every exponent, ties between neighbours and between subnormals, 65504 / 65520, +-0, Inf, NaN,
    in C order, Fortran order and strided views."""
    rng = np.random.default_rng(7)
    x = native._half_values(rng)
    x = np.concatenate([x, rng.uniform(-70000, 70000, 10_000), rng.standard_normal(10_000) * 1e-6])
    assert _same64(_cast(x), half(x))
    m = x[: x.size - x.size % 60].reshape(-1, 60)
    for view in (np.asfortranarray(m), m[:, ::3], m.T):
        y = half(view)
        assert y.shape == view.shape and _same64(_cast(view), y)


def test_fp16_quantize_same_bits_with_and_without_kernel(half):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((300, 70)) * np.exp2(rng.integers(-28, 20, (300, 70)))
    fp16 = parse_format("fp16")
    prev = formats.set_half_kernel(None)
    try:
        ref, n_ref = fp16.quantize(x, return_overflow=True)
        w32_ref = arith._to32(fp16, x)
        formats.set_half_kernel(half)
        y, n = fp16.quantize(x, return_overflow=True)
        w32 = arith._to32(fp16, x)
    finally:
        formats.set_half_kernel(prev)
    assert n == n_ref > 0 and _same64(ref, y)
    assert np.array_equal(w32_ref.view(np.int32), w32.view(np.int32))
    assert fp16.quantize(np.float64(1 / 3)) == _cast(np.array(1 / 3))  # 0-d and small arrays: numpy's cast


def test_failed_half_check_keeps_numpy_cast_only(fresh, monkeypatch):
    monkeypatch.setattr(native, "_wrap_half", lambda f: (lambda x: np.asarray(x, dtype=np.float64).copy()))
    if not fresh.install():
        pytest.skip("no C++ compiler")
    assert formats._half_kernel is None and arith._seq_sum_kernel is fresh._kernel


def test_disabled_by_env_runs_numpy_path(fresh, monkeypatch):
    monkeypatch.setenv("RLHLS_NATIVE", "0")
    assert fresh.install() is False
    assert arith._seq_sum_kernel is None
    calls = _spy(monkeypatch)
    arith.dense(np.ones((4, 5)), np.ones((5, 3)), in_fmt="fp16", acc_fmt="fp32")
    assert calls


def test_env_unregisters_an_installed_kernel(fresh, monkeypatch):
    if not fresh.install():
        pytest.skip("no C++ compiler")
    assert arith._seq_sum_kernel is fresh._kernel
    assert fresh.install() is True and arith._seq_sum_kernel is fresh._kernel  # idempotent
    assert formats._half_kernel is fresh._half
    monkeypatch.setenv("RLHLS_NATIVE", "0")
    assert fresh.install() is False and arith._seq_sum_kernel is None and formats._half_kernel is None


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
