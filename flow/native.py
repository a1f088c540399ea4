"""Compiled kernels for ``designs``: the sequential float32 sum of ``arith`` (the fp32-accumulator
dense path) and the float64 -> binary16 rounding of ``formats.round_half`` (fp16 layers).

``arith._seq_sum_f32_numpy`` computes ``acc[n, m] = fl32(acc + fl32(x[n, k] * w[k, m]))`` for
k in order with numpy; the same sums in C (below, register-blocked) are ~7-15x faster. ``install()`` builds it
once with the project toolchain (``toolchain.compile_cpp``: g++, content-hash cache) into
``paths.cache_dir() / 'native'`` with ``-O3 -fno-fast-math -ffp-contract=off -march=native``
(no reassociation, no FMA: the product is rounded before the add, as in numpy; the library
name carries the CPU's flags, so a cache shared between machines never loads code built for
another CPU), loads it with ctypes, checks it bit for bit against the numpy path (wide
magnitudes so every add rounds, overflow to Inf, NaN, subnormals, both orientations) and only
then registers it with ``arith.set_seq_sum_kernel``. No compiler, a failed build or a failed
check: the numpy path stays (same results, slower), with one debug log line.

``rlhls_round_f16`` is ``FloatFormat._quantize_magic`` for binary16 written as a C loop (one float64
add and subtract of a magic constant per value; the same IEEE operations, so the same bits): ~10x
numpy's software float16 cast, which dominated mixed-precision training with PL (fp16) layers.
It is checked against that cast (every exponent from subnormal to overflow, ties, +-0, Inf, NaN)
and registered with ``formats.set_half_kernel`` on its own: either kernel can fail its check alone.

``install()`` is idempotent (built and checked once per process) and returns whether the
compiled kernel is in use. ``RLHLS_NATIVE=0`` disables it (``install()`` then unregisters it
and returns False).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
from pathlib import Path

import numpy as np

from rlhls.designs import arith, formats

from .paths import cache_dir
from .toolchain import compile_cpp

__all__ = ["install", "enabled", "SOURCE", "FLAGS"]

log = logging.getLogger(__name__)

# acc[n, m] = acc[n, m] + x[n, k] * w[k, m], k in order for every output; no -ffast-math (no
# reassociation), -ffp-contract=off (no FMA, also for the vector types: the product is rounded
# before the add). Blocks of 6 rows x 2 vectors keep their 12 running sums in registers over the
# whole k loop (a GEMM-style micro-kernel, ~1.5-2.5x the plain loop); edges take the plain loop.
SOURCE = r"""
#if defined(__AVX__)
#define VB 32
#else
#define VB 16
#endif
#define VW (VB / 4)
#define MB (2 * VW)
#define NB 6
typedef float vf __attribute__((vector_size(VB)));
static inline vf ld(const float *p) { vf v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline void st(float *p, vf v) { __builtin_memcpy(p, &v, sizeof v); }

static void plain(const float *x, const float *w, float *acc, long n0, long n1, long m0, long m1,
                  long K, long M) {
  for (long n = n0; n < n1; ++n) {
    float *a = acc + n * M;
    const float *xr = x + n * K;
    for (long k = 0; k < K; ++k) {
      const float xv = xr[k];
      const float *wr = w + k * M;
      for (long m = m0; m < m1; ++m) a[m] = a[m] + xv * wr[m];
    }
  }
}

extern "C" void rlhls_seq_sum_f32(const float *x, const float *w, float *acc, long N, long K, long M) {
  const long Nb = N - N % NB, Mb = M - M % MB;
  for (long m0 = 0; m0 < Mb; m0 += MB) {  // a strip of w stays in L1 over all row blocks
    for (long n0 = 0; n0 < Nb; n0 += NB) {
      const float *xr = x + n0 * K;
      float *ar = acc + n0 * M + m0;
      vf c[NB][2];
      for (int i = 0; i < NB; ++i) { c[i][0] = ld(ar + i * M); c[i][1] = ld(ar + i * M + VW); }
      const float *wk = w + m0;
      for (long k = 0; k < K; ++k, wk += M) {
        const vf w0 = ld(wk), w1 = ld(wk + VW);
        for (int i = 0; i < NB; ++i) {
          const float b = xr[i * K + k];
          c[i][0] = c[i][0] + b * w0;
          c[i][1] = c[i][1] + b * w1;
        }
      }
      for (int i = 0; i < NB; ++i) { st(ar + i * M, c[i][0]); st(ar + i * M + VW, c[i][1]); }
    }
  }
  if (Mb < M) plain(x, w, acc, 0, Nb, Mb, M, K, M);
  if (Nb < N) plain(x, w, acc, Nb, N, 0, M, K, M);
}

// y = binary16(x) as double: the quantum of x is 2^q, q = max(e_x, -14) - 10 (e_x clamped to
// [-14, 16] so Inf / NaN / huge values keep a finite constant); c = 1.5 * 2^(q + 52) makes the
// double add round x to a multiple of 2^q, ties to even, and - c is exact.
extern "C" void rlhls_round_f16(const double *x, double *y, long n) {
  for (long i = 0; i < n; ++i) {
    const double v = x[i];
    unsigned long long b;
    __builtin_memcpy(&b, &v, 8);
    long long e = (long long)((b >> 52) & 0x7FF);
    e = e < 1023 - 14 ? 1023 - 14 : (e > 1024 + 15 ? 1024 + 15 : e);
    const unsigned long long cb = ((unsigned long long)(e + 42) << 52) | (1ULL << 51);
    double c;
    __builtin_memcpy(&c, &cb, 8);
    double r = __builtin_copysign((v + c) - c, v);  // a value rounded to zero keeps its sign
    if (__builtin_fabs(r) > 65504.0) r = __builtin_copysign(__builtin_inf(), v);  // NaN: false
    y[i] = r;
  }
}
"""
FLAGS = ("-O3", "-fno-fast-math", "-ffp-contract=off", "-Wno-psabi", "-shared", "-fPIC")

_kernel = None  # the checked seq_sum wrapper; False: unavailable in this process
_half = None  # the checked round_half wrapper (loaded with _kernel); False: unavailable


def enabled() -> bool:
    return os.environ.get("RLHLS_NATIVE", "1") != "0"


def install() -> bool:
    """Register the compiled kernel with ``arith`` (build + self-check on first call)."""
    global _kernel, _half
    if not enabled():
        if _kernel and arith._seq_sum_kernel is _kernel:
            arith.set_seq_sum_kernel(None)
        if _half and formats._half_kernel is _half:
            formats.set_half_kernel(None)
        return False
    if _kernel is None:
        try:
            _kernel, _half = (k or False for k in _load())
        except Exception as e:  # noqa: BLE001 -- any build / load problem: numpy does the same job
            log.debug("native kernels unavailable, using numpy: %s", e)
            _kernel = _half = False
    if _kernel:
        arith.set_seq_sum_kernel(_kernel)
    if _half:
        formats.set_half_kernel(_half)
    return bool(_kernel)


def _machine() -> str:
    """Short tag of the CPU: -march=native code is only valid where it was built."""
    flags = ""
    try:
        flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return hashlib.sha256(f"{platform.machine()}|{flags}".encode()).hexdigest()[:12]


def _build() -> Path:
    folder = cache_dir() / "native"
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "seq_sum.cpp"
    if not src.is_file() or src.read_text() != SOURCE:
        tmp = src.with_name(f"{src.name}.tmp{os.getpid()}")
        tmp.write_text(SOURCE)
        os.replace(tmp, src)  # atomic: a concurrent builder always hashes a whole file
    try:
        return compile_cpp([src], folder / f"seq_sum-{_machine()}.so", flags=(*FLAGS, "-march=native"))
    except Exception as e:  # noqa: BLE001 -- a compiler without -march=native: portable build
        log.debug("native seq_sum: -march=native build failed (%s), building without it", e)
        return compile_cpp([src], folder / "seq_sum.so", flags=FLAGS)


def _wrap(f):
    def seq_sum(x32, w32, acc):
        N, K = x32.shape
        M = w32.shape[1]
        if M < 16 and N > M:  # the kernel vectorizes over M: run acc.T = w.T x.T (same products, same k order)
            accT = np.ascontiguousarray(acc.T)
            xt, wt = np.ascontiguousarray(w32.T), np.ascontiguousarray(x32.T)
            f(xt.ctypes.data, wt.ctypes.data, accT.ctypes.data, M, K, N)
            acc[...] = accT.T
            return
        x32, w32 = np.ascontiguousarray(x32), np.ascontiguousarray(w32)
        f(x32.ctypes.data, w32.ctypes.data, acc.ctypes.data, N, K, M)

    return seq_sum


def _wrap_half(f):
    def round_half(x):
        x = np.ascontiguousarray(x, dtype=np.float64)
        y = np.empty_like(x)
        f(x.ctypes.data, y.ctypes.data, x.size)
        return y

    return round_half


def _half_values(rng) -> np.ndarray:
    """Every binary16 exponent from below the subnormals to past overflow, exact ties (half-way
    between neighbours, both parities), the largest finite value and the overflow threshold 65520,
    +-0, +-Inf, NaN and a random spread."""
    e = range(-30, 18)
    base = [np.ldexp(1.0 + np.arange(0, 1024, 37) / 1024.0, k) for k in e]
    ties = [np.ldexp(1.0 + (2 * np.arange(0, 1024, 41) + 1) / 2048.0, k) for k in e]
    sub = np.ldexp(np.arange(0, 1024, 7) + 0.5, -24)  # ties between subnormals
    special = np.array([0.0, 65504.0, 65519.99, 65520.0, 65536.0, 1e300, np.inf, np.nan, 5.96e-8, 2.98e-8])
    spread = rng.standard_normal(4000) * np.exp2(rng.integers(-40, 20, 4000))
    v = np.concatenate([*base, *ties, sub, special, spread])
    return np.concatenate([v, -v])


def _check_half(kernel) -> bool:
    x = _half_values(np.random.default_rng(2024))
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(np.float16).astype(np.float64)
    nan = np.isnan(ref)
    for got in (kernel(x), kernel(x[::-1].reshape(-1, 2)).reshape(-1)[::-1]):  # contiguous, then a strided view
        if not (np.array_equal(nan, np.isnan(got)) and np.array_equal(ref[~nan].view(np.int64), got[~nan].view(np.int64))):
            return False
    return True


def _load():
    """(seq_sum wrapper or None, round_half wrapper or None): each only after its self-check."""
    lib = ctypes.CDLL(str(_build()))
    h = lib.rlhls_round_f16
    h.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    h.restype = None
    half = _wrap_half(h)
    if not _check_half(half):
        log.debug("native round_half: self-check failed, using numpy's float16 cast")
        half = None
    f = lib.rlhls_seq_sum_f32
    f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 3
    f.restype = None
    kernel = _wrap(f)
    # Self-check on values whose sums round at every step (wide magnitudes, cancellation, Inf/NaN,
    # subnormals), in both orientations of the wrapper.
    rng = np.random.default_rng(12345)
    for N, K, M in ((7, 33, 19), (3, 5, 1), (16, 64, 40), (37, 20, 2), (13, 9, 35)):
        x = (rng.standard_normal((N, K)) * np.exp2(rng.integers(-30, 30, (N, K)))).astype(np.float32)
        w = (rng.standard_normal((K, M)) * np.exp2(rng.integers(-30, 30, (K, M)))).astype(np.float32)
        x[0, 0], w[1, 0], x[-1, -1] = np.float32(3e38), np.float32(np.inf), np.float32(1e-40)
        a0 = rng.standard_normal((N, M)).astype(np.float32)
        a, b = a0.copy(), a0.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            arith._seq_sum_f32_numpy(x, w, a)
            kernel(x, w, b)
        nan = np.isnan(a)  # same bits (so -0 != +0), NaN where the numpy path has NaN
        if not (np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.int32), b[~nan].view(np.int32))):
            log.debug("native seq_sum: self-check failed at %s, using numpy", (N, K, M))
            return None, half
    return kernel, half
