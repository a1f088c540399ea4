"""HEPPO-GAE standardization + uniform quantization (rlhls.designs.quantizer)."""

from __future__ import annotations

import numpy as np
import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FP32, UniformFormat
from rlhls.designs.quantizer import (
    RunningStats, block_stats, dequantize_blocks, quantize_blocks, quantize_standardized,
    roundtrip_blocks)


def test_welford_sequential_matches_numpy():
    r = np.random.default_rng(0).normal(3.0, 2.5, 2000)
    s = RunningStats().update_sequential(r)
    assert s.n == r.size
    assert s.mean == pytest.approx(r.mean(), rel=1e-13)
    assert s.std == pytest.approx(r.std(), rel=1e-12)  # eq. 9: population std


def test_welford_batches_merge_and_sequential_agree():
    rng = np.random.default_rng(1)
    batches = [rng.normal(100.0, 0.01, n) for n in (1, 7, 500, 3, 1000)]  # large mean: stability
    allv = np.concatenate(batches)
    a = RunningStats()
    for bt in batches:
        a.update(bt)
    b = RunningStats().update_sequential(allv)
    c = RunningStats().update(batches[0]).update(batches[1])
    c.merge(RunningStats().update(np.concatenate(batches[2:])))
    for s in (a, b, c):
        assert s.n == allv.size
        assert s.mean == pytest.approx(allv.mean(), rel=1e-14)
        assert s.std == pytest.approx(allv.std(), rel=1e-9)
    assert a.var == pytest.approx(allv.var(), rel=1e-9)
    assert RunningStats().std == 0.0 and RunningStats().update([]).n == 0


def test_running_stats_rejects_nonfinite():
    with pytest.raises(RlhlsError, match="non-finite"):
        RunningStats().update([1.0, np.nan])


def test_block_stats_shapes_and_values():
    x = np.random.default_rng(2).normal(size=(4, 3, 64))
    mu, sigma = block_stats(x)
    assert mu.shape == sigma.shape == (4, 3)
    assert np.allclose(mu, x.mean(-1)) and np.allclose(sigma, x.std(-1))
    mu32, s32 = block_stats(x, stats_fmt="fp32")
    assert np.array_equal(mu32, FP32.quantize(mu)) and np.array_equal(s32, FP32.quantize(sigma))
    with pytest.raises(RlhlsError, match="last axis"):
        block_stats(np.zeros((3, 0)))


@pytest.mark.parametrize("n_bits", [3, 6, 8, 10])
def test_block_roundtrip_error_bound(n_bits):
    rng = np.random.default_rng(n_bits)
    # blocks with very different scales and offsets (values evolve during training, Fig. 2)
    scale = np.exp2(rng.integers(-10, 10, (32, 1)))
    x = rng.normal(size=(32, 256)) * scale + rng.normal(size=(32, 1)) * 50
    q = quantize_blocks(x, f"uq<{n_bits}>")
    assert q.codes.dtype == np.uint16 and q.codes.shape == x.shape
    assert q.codes.max() < 2**n_bits
    y = dequantize_blocks(q)
    f = UniformFormat(n_bits)
    z = (x - q.mu[:, None]) / q.sigma[:, None]
    inside = (z >= -f.clip) & (z < f.clip)
    # Inside the clipping range the error is at most half a step, in each block's own units.
    err = np.abs(y - x) / q.sigma[:, None]
    assert np.all(err[inside] <= f.step / 2 * (1 + 1e-9))
    assert q.overflow == int(np.count_nonzero(~inside))
    assert np.array_equal(roundtrip_blocks(x, f"uq<{n_bits}>"), y)
    assert q.bits == x.size * n_bits + 2 * 64 * 32


def test_constant_block_is_guarded():
    x = np.array([[5.0] * 8, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])
    q = quantize_blocks(x, "uq<8>", stats_fmt="fp32")
    y = dequantize_blocks(q)
    assert np.all(np.isfinite(y))
    assert np.all(np.abs(y[0] - 5.0) <= UniformFormat(8).step / 2)  # sigma 0 -> standardized with 1
    assert q.bits == 16 * 8 + 2 * 32 * 2


def test_dynamic_reward_standardization():
    rng = np.random.default_rng(4)
    stats = RunningStats()
    f = UniformFormat(8)
    seen = []
    for epoch in range(5):
        r = rng.normal(epoch, 1 + epoch, 300)  # reward distribution drifts across epochs
        seen.append(r)
        codes, n_ovf = quantize_standardized(r, stats, f, return_overflow=True)
        allr = np.concatenate(seen)
        assert stats.n == allr.size and stats.mean == pytest.approx(allr.mean())
        z = (r - allr.mean()) / allr.std()  # standardized with everything seen so far
        zq = f.decode(codes)  # rewards stay in standardized form
        inside = (z >= -f.clip) & (z < f.clip)
        assert np.all(np.abs(zq - z)[inside] <= f.step / 2 * (1 + 1e-9))
        assert n_ovf == int(np.count_nonzero(~inside))
    # update=False uses the stats as they are
    n0 = stats.n
    quantize_standardized(np.zeros(3), stats, "uq<4>", update=False)
    assert stats.n == n0


def test_quantizer_rejects_non_uniform_format():
    with pytest.raises(RlhlsError, match="not uniform"):
        quantize_blocks(np.ones((2, 4)), "fixed<8,3>")
