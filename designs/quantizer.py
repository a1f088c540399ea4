"""HEPPO-GAE standardize -> n-bit uniform quantize -> de-quantize -> de-standardize (seed 000, §II).

Two standardizations, as the paper uses them:

* Dynamic standardization of rewards (§II.A): ``RunningStats`` keeps Welford's running mean
  M_n and sum of squared deviations S_n over everything seen so far (eq. 6-8),
  std = sqrt(S_n / n) (eq. 9, population). ``update(array)`` takes a batch; the batch is
  folded in with Chan et al.'s pairwise combination, which is Welford's recurrence applied to
  a whole batch at once (``update_sequential`` runs eq. 7-8 literally, one value at a time, and
  the tests check both agree with numpy). Rewards are stored as codes and used in their
  standardized form (§II.C.1): ``quantize_standardized`` / ``UniformFormat.decode``.
* Block standardization of values (§II.B): every block (last axis of an array of blocks)
  gets its own (mu, sigma) = ``block_stats``; the codes are stored with (mu, sigma) per block
  and reconstructed as decode(code) * sigma + mu (§II.C.2): ``quantize_blocks`` /
  ``dequantize_blocks``.

The codeword format is ``UniformFormat`` (``uq<n>``): clipping range [-4, 4) standard
deviations, 2**n mid-rise levels, step 2**(3-n) (see formats.py). A block or running
statistic with sigma == 0 (or non-finite) is standardized with sigma = 1 instead, so a
constant block reconstructs to its mean up to half a step. (mu, sigma) are kept in float64,
or rounded to ``stats_fmt`` (e.g. fp32, as a hardware table would hold them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlhls.core.errors import RlhlsError

from .formats import UniformFormat, parse_format

__all__ = ["EXPERIMENTS", "RunningStats", "block_stats", "BlockCodes", "quantize_blocks", "dequantize_blocks",
           "quantize_standardized", "roundtrip_blocks"]

# HEPPO-GAE Table III (host/gae.py's docstring): how rewards and values reach the GAE unit; the
# standardizer kernel's ``rewards`` parameter follows it (0: CleanRL ppo_atari's raw rewards)
EXPERIMENTS = {
    0: {"reward": "raw", "value": "float", "quant": False},
    1: {"reward": "cleanrl", "value": "float", "quant": False},
    2: {"reward": "dynamic", "value": "float", "quant": False},
    3: {"reward": "block_destd", "value": "block", "quant": True},
    4: {"reward": "block_keep", "value": "block", "quant": True},
    5: {"reward": "dynamic", "value": "block", "quant": True},
}


def _uq(fmt) -> UniformFormat:
    f = parse_format(fmt) if isinstance(fmt, str) else fmt
    if not isinstance(f, UniformFormat):
        raise RlhlsError(f"quantizer: codeword format {str(f)!r} is not uniform (expected uq<n>)")
    return f


def _safe_sigma(sigma):
    sigma = np.asarray(sigma, dtype=np.float64)
    return np.where(np.isfinite(sigma) & (sigma > 0), sigma, 1.0)


class RunningStats:
    """Welford running mean / std over every value seen (HEPPO-GAE eq. 6-9); mergeable."""

    def __init__(self, n: int = 0, mean: float = 0.0, s: float = 0.0):
        self.n = int(n)  # values seen
        self.m = float(mean)  # M_n, eq. 7
        self.s = float(s)  # S_n, eq. 8

    @property
    def mean(self) -> float:
        return self.m

    @property
    def var(self) -> float:
        return self.s / self.n if self.n else 0.0

    @property
    def std(self) -> float:  # eq. 9: sqrt(S_n / n)
        return float(np.sqrt(self.var))

    def update_sequential(self, values) -> "RunningStats":
        """Eq. 7-8 literally, one value at a time (slow; the reference for ``update``)."""
        for r in np.asarray(values, dtype=np.float64).ravel().tolist():
            self.n += 1
            m_prev = self.m
            self.m = m_prev + (r - m_prev) / self.n
            self.s = self.s + (r - m_prev) * (r - self.m)
        return self

    def update(self, values) -> "RunningStats":
        """Fold in a batch: Welford's recurrence for a whole batch (Chan's combination)."""
        v = np.asarray(values, dtype=np.float64).ravel()
        if v.size:
            if not np.all(np.isfinite(v)):
                raise RlhlsError(f"RunningStats.update: {int(np.count_nonzero(~np.isfinite(v)))} "
                                 "non-finite value(s) in the batch (expected finite rewards)")
            mb = float(v.mean())
            self.merge(RunningStats(v.size, mb, float(np.sum((v - mb) ** 2))))
        return self

    def merge(self, other: "RunningStats") -> "RunningStats":
        """Combine with statistics of other values, as if they had been seen here too."""
        if other.n == 0:
            return self
        n = self.n + other.n
        delta = other.m - self.m
        self.m = self.m + delta * other.n / n
        self.s = self.s + other.s + delta * delta * self.n * other.n / n
        self.n = n
        return self

    def standardize(self, x):
        """(x - mean) / std with std guarded (0 -> 1)."""
        return (np.asarray(x, dtype=np.float64) - self.m) / _safe_sigma(self.std)

    def __repr__(self):
        return f"RunningStats(n={self.n}, mean={self.m!r}, std={self.std!r})"


def block_stats(x, *, stats_fmt=None):
    """Per-block (mu, sigma) over the last axis (population std, as eq. 9); shapes x.shape[:-1]."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise RlhlsError(f"block_stats: expected blocks along the last axis, got shape {x.shape}")
    mu = x.mean(axis=-1)
    sigma = x.std(axis=-1)
    if stats_fmt is not None:
        f = parse_format(stats_fmt) if isinstance(stats_fmt, str) else stats_fmt
        mu, sigma = f.quantize(mu), f.quantize(sigma)
    return mu, sigma


@dataclass(frozen=True)
class BlockCodes:
    """Stored form of block-quantized values: codes (uint16, shape of x) + (mu, sigma) per block."""

    codes: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    fmt: UniformFormat
    overflow: int = 0  # values clipped to the outermost levels
    stats_bits: int = 64  # storage of each of mu, sigma (64: float64, else stats_fmt.bits)

    @property
    def bits(self) -> int:
        """Storage in bits: the codes plus (mu, sigma) per block."""
        return int(self.codes.size * self.fmt.bits + 2 * self.stats_bits * np.size(self.mu))


def quantize_blocks(x, fmt="uq<8>", *, stats_fmt=None) -> BlockCodes:
    """Block standardization + uniform quantization of x (blocks along the last axis)."""
    f = _uq(fmt)
    x = np.asarray(x, dtype=np.float64)
    mu, sigma = block_stats(x, stats_fmt=stats_fmt)
    z = (x - mu[..., None]) / _safe_sigma(sigma)[..., None]
    codes, n_ovf = f.encode(z, return_overflow=True)
    sf = parse_format(stats_fmt) if isinstance(stats_fmt, str) else stats_fmt
    return BlockCodes(codes, mu, sigma, f, n_ovf, 64 if sf is None else sf.bits)


def dequantize_blocks(q: BlockCodes) -> np.ndarray:
    """De-quantize and de-standardize: decode(code) * sigma + mu per block."""
    return q.fmt.decode(q.codes) * _safe_sigma(q.sigma)[..., None] + q.mu[..., None]


def roundtrip_blocks(x, fmt="uq<8>", *, stats_fmt=None) -> np.ndarray:
    """What the GAE unit sees after storing x as block codes and reading it back."""
    return dequantize_blocks(quantize_blocks(x, fmt, stats_fmt=stats_fmt))


def quantize_standardized(x, stats: RunningStats, fmt="uq<8>", *, update=True, return_overflow=False):
    """Rewards (§II.A, II.C.1): optionally fold x into the running stats, standardize with
    them, and return the uint16 codes (decode them with ``fmt.decode``: rewards stay standardized)."""
    f = _uq(fmt)
    if update:
        stats.update(x)
    codes, n_ovf = f.encode(stats.standardize(x), return_overflow=True)
    return (codes, n_ovf) if return_overflow else codes
