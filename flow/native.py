"""Compiled kernels for ``designs``: the sequential float32 sum of ``arith`` (the fp32-accumulator
dense path) and the float64 -> float-format rounding of ``FloatFormat.quantize`` (FP16 and BF16
layers, and ``formats.round_half``).

``arith._seq_sum_f32_numpy`` computes ``acc[n, m] = fl32(acc + fl32(x[n, k] * w[k, m]))`` for
k in order with numpy; the same sums in C (below, register-blocked) are ~7-15x faster. ``install()`` builds it
once (``rlhls.core.native.build_library``: no reassociation, no FMA, so the product is rounded
before the add, as in numpy), loads it with ctypes, checks it bit for bit against the numpy path (wide
magnitudes so every add rounds, overflow to Inf, NaN, subnormals, both orientations) and only
then registers it with ``arith.set_seq_sum_kernel``. No compiler, a failed build or a failed
check: the numpy path stays (same results, slower), with one debug log line.

Where every product x[n, k] w[k, m] is exact in float32 (FP16 x FP16, BF16 x BF16 away from the
ends of BF16's range; decided from the operands in one pass), fl32(acc + fl32(x w)) equals
fma(x, w, acc), so ``rlhls_seq_sum_f32_fma`` runs the same k order with AVX-512 FMA (4-5x the
plain loop); it returns 0 where that does not hold or the CPU lacks AVX-512, and the plain loop
runs. The self-check covers both paths.

``rlhls_update_fp32`` is the weight_update kernel's all-FP32 model (``WeightUpdate._model_fp32``:
Adam, RMSprop, SGD) in place on one layer's arrays, checked against it and handed out by
``update_kernel()`` (the emu backend's PL update nodes, ``PlanKernels.update_inplace``).

``rlhls_round_float`` is ``FloatFormat._quantize_magic`` written as a C loop (one float64 add and
subtract of a magic constant per value, the same IEEE operations, so the same bits; the overflow
count in the same pass). numpy's float16 cast is software and BF16 went through three casts and a
check; mixed-precision training with PL (FP16) and AIE (BF16) layers spent ~30 % of its time
rounding. It is checked against the numpy path on FP16, BF16 and two other widths (every exponent
from subnormal to overflow, ties, +-0, Inf, NaN; for FP16 also against numpy's float16 cast) and
registered with ``formats.set_round_kernel`` on its own: either kernel can fail its check alone.
Its variants read and write float32 (``formats.round_to``), the same values without float64 copies.

``native_gae.SOURCE`` is the GAE unit's bit-accurate model as one C loop (``flow/native_gae.py``):
its own library, checked against ``GaeKernel.model_numpy`` and registered with
``gae.set_model_kernel`` on its own, like the rounding kernel.

``install()`` is idempotent (built and checked once per process) and returns whether the
compiled seq_sum kernel is in use. ``RLHLS_NATIVE=0`` disables all of them (``install()`` then
unregisters them and returns False).
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import numpy as np

from rlhls.core.native import build_library, enabled
from rlhls.designs import arith, formats
from rlhls.designs.kernels import gae as gae_kernel

from . import native_gae

__all__ = ["install", "enabled", "update_kernel", "SOURCE"]

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

static void seq_sum_plain(const float *x, const float *w, float *acc, long N, long K, long M) {
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

// Every product x[n, k] w[k, m] exact in float32 (decided from the operands alone: significant
// bits, exponent range; no Inf / NaN / subnormal)? Then fl32(acc + fl32(x w)) = fma(x, w, acc)
// bit for bit, and the same k order with FMA gives the same sums. FP16 x FP16 (11 + 11 bits) and
// BF16 x BF16 (8 + 8) operands pass unless BF16 exponents reach the ends of the range.
#if defined(__AVX512F__)
#include <immintrin.h>
// OR of the fraction fields, min exponent field of the nonzero values, max exponent field.
static void scan(const float *p, long n, unsigned *orm, int *lo, int *hi) {
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), frac = _mm512_set1_epi32(0x7fffff);
  __m512i o = _mm512_setzero_si512(), l = _mm512_set1_epi32(255), h = _mm512_setzero_si512();
  for (long i = 0; i < n; i += 16) {
    const __mmask16 in = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    const __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi32(in, p + i), abs);
    const __m512i e = _mm512_srli_epi32(a, 23);
    o = _mm512_or_si512(o, _mm512_and_si512(a, frac));
    l = _mm512_mask_min_epu32(l, _mm512_test_epi32_mask(a, a), l, e);
    h = _mm512_max_epu32(h, e);
  }
  *orm = (unsigned)_mm512_reduce_or_epi32(o);
  *lo = (int)_mm512_reduce_min_epu32(l);
  *hi = (int)_mm512_reduce_max_epu32(h);
}

static int exact_products(const float *x, long nx, const float *w, long nw) {
  unsigned ox, ow;
  int lx, hx, lw, hw;
  scan(x, nx, &ox, &lx, &hx);
  scan(w, nw, &ow, &lw, &hw);
  if (lx == 255 || lw == 255) return 1;  // all zeros on one side: every product is a zero
  if (lx == 0 || lw == 0 || hx == 255 || hw == 255) return 0;  // subnormal, Inf or NaN operands
  const int tx = ox ? __builtin_ctz(ox) : 23, tw = ow ? __builtin_ctz(ow) : 23;
  return (24 - tx) + (24 - tw) <= 24          // significant bits of any product fit float32's 24
      && (lx - 150 + tx) + (lw - 150 + tw) >= -149  // its lowest bit is not below float32's
      && (hx - 127) + (hw - 127) <= 126;       // |product| < 2^128 (hence finite)
}

// R rows x V vectors (16 V columns, masked at the right edge) of running sums in registers, over
// k blocks of KB whose strip of w stays in L1 (the sums go through memory between blocks:
// float32, exact); V = 4 and R = 6 for wide outputs (24 of the 32 registers), one or two vectors
// and 12 rows for narrow ones (no FMAs on masked-off lanes).
#define KB 64
template <int R, int V>
static void fma_block(const float *x, const float *w, float *acc, long K, long ldx, long M, long m0,
                      const __mmask16 *km) {
  __m512 c[R][V];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < V; ++j) c[i][j] = _mm512_maskz_loadu_ps(km[j], acc + i * M + m0 + 16 * j);
  const float *wk = w + m0;
  for (long k = 0; k < K; ++k, wk += M) {
    __m512 wv[V];
    for (int j = 0; j < V; ++j) wv[j] = _mm512_maskz_loadu_ps(km[j], wk + 16 * j);
    for (int i = 0; i < R; ++i) {
      const __m512 b = _mm512_set1_ps(x[i * ldx + k]);
      for (int j = 0; j < V; ++j) c[i][j] = _mm512_fmadd_ps(b, wv[j], c[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < V; ++j) _mm512_mask_storeu_ps(acc + i * M + m0 + 16 * j, km[j], c[i][j]);
}

template <int R, int V>
struct Rows {  // the last n < R rows of a strip
  static void run(const float *x, const float *w, float *acc, long n, long K, long ldx, long M, long m0,
                  const __mmask16 *km) {
    if (n == R) fma_block<R, V>(x, w, acc, K, ldx, M, m0, km);
    else Rows<R - 1, V>::run(x, w, acc, n, K, ldx, M, m0, km);
  }
};
template <int V>
struct Rows<0, V> {
  static void run(const float *, const float *, float *, long, long, long, long, long, const __mmask16 *) {}
};

template <int R, int V>
static void seq_sum_fma(const float *x, const float *w, float *acc, long N, long K, long M) {
  for (long m0 = 0; m0 < M; m0 += 16 * V) {
    __mmask16 km[V];
    for (int j = 0; j < V; ++j) {
      const long r = M - m0 - 16 * j;
      km[j] = r >= 16 ? (__mmask16)0xffff : (r <= 0 ? (__mmask16)0 : (__mmask16)((1u << r) - 1));
    }
    for (long k0 = 0; k0 < K; k0 += KB) {
      const long kn = K - k0 < KB ? K - k0 : KB;
      long n0 = 0;
      for (; n0 + R <= N; n0 += R) fma_block<R, V>(x + n0 * K + k0, w + k0 * M, acc + n0 * M, kn, K, M, m0, km);
      if (n0 < N) Rows<R - 1, V>::run(x + n0 * K + k0, w + k0 * M, acc + n0 * M, N - n0, kn, K, M, m0, km);
    }
  }
}
#endif

// acc (N, M) += x (N, K) w (K, M), one product and one add per k in order for every output.
extern "C" void rlhls_seq_sum_f32(const float *x, const float *w, float *acc, long N, long K, long M) {
  seq_sum_plain(x, w, acc, N, K, M);
}

// The same with FMA where every product is exact (then the same bits); returns 0, having done
// nothing, where that does not hold or the CPU has no AVX-512.
extern "C" int rlhls_seq_sum_f32_fma(const float *x, const float *w, float *acc, long N, long K, long M) {
#if defined(__AVX512F__)
  if (!exact_products(x, N * K, w, K * M)) return 0;
  if (M <= 16) seq_sum_fma<12, 1>(x, w, acc, N, K, M);
  else if (M <= 32) seq_sum_fma<12, 2>(x, w, acc, N, K, M);
  else seq_sum_fma<6, 4>(x, w, acc, N, K, M);
  return 1;
#else
  return 0;
#endif
}

// y = fmt(x) as double, fmt a float format (exponent range [emin, emax], man fraction bits): the
// quantum of x is 2^q, q = max(e_x, emin) - man (e_x clamped to [emin, emax + 1] so Inf / NaN /
// huge values keep a finite constant); c = 1.5 * 2^(q + 52) makes the double add round x to a
// multiple of 2^q, ties to even, and - c is exact. Returns how many finite x overflowed to Inf.
template <class I, class O>
static long round_float(const I *x, O *y, long n, long emin, long emax, long man, double maxv) {
  const long long lo = 1023 + emin, hi = 1024 + emax, sh = 52 - man;
  long ovf = 0;
  for (long i = 0; i < n; ++i) {
    const double v = x[i];
    unsigned long long b;
    __builtin_memcpy(&b, &v, 8);
    long long e = (long long)((b >> 52) & 0x7FF);
    e = e < lo ? lo : (e > hi ? hi : e);
    const unsigned long long cb = ((unsigned long long)(e + sh) << 52) | (1ULL << 51);
    double c;
    __builtin_memcpy(&c, &cb, 8);
    const double r = __builtin_copysign((v + c) - c, v);  // a value rounded to zero keeps its sign
    const bool over = __builtin_fabs(r) > maxv;  // NaN: false; branch-free so the loop vectorizes
    ovf += over & (__builtin_fabs(v) <= __DBL_MAX__);
    unsigned long long rb;  // +-Inf by an integer select: a float select before the (O) cast kept gcc from vectorizing
    __builtin_memcpy(&rb, &r, 8);
    rb = over ? ((b & 0x8000000000000000ULL) | 0x7FF0000000000000ULL) : rb;
    double out;
    __builtin_memcpy(&out, &rb, 8);
    y[i] = (O)out;
  }
  return ovf;
}

extern "C" long rlhls_round_float(const double *x, double *y, long n, long emin, long emax, long man,
                                  double maxv) {
  return round_float(x, y, n, emin, emax, man, maxv);
}
// the same roundings read from / written to float32 (a format that fits float32: its values
// convert exactly), so no float64 <-> float32 cast around them
extern "C" long rlhls_round_float_to32(const double *x, float *y, long n, long emin, long emax, long man,
                                       double maxv) {
  return round_float(x, y, n, emin, emax, man, maxv);
}
extern "C" long rlhls_round_float32(const float *x, float *y, long n, long emin, long emax, long man,
                                    double maxv) {
  return round_float(x, y, n, emin, emax, man, maxv);
}
extern "C" long rlhls_round_float_from32(const float *x, double *y, long n, long emin, long emax, long man,
                                         double maxv) {
  return round_float(x, y, n, emin, emax, man, maxv);
}

// The weight_update kernel's all-FP32 model (designs/kernels/update.py, _model_fp32) in place on
// one layer's arrays: w, m, v float64 holding FP32 values, g float32; every operation in binary32
// in the model's order (-ffp-contract=off: no FMA). opt 0 Adam (k = B1, C1, B2, C2), 1 RMSprop
// (k = RHO, CR), 2 SGD.
extern "C" void rlhls_update_fp32(int opt, double *w, const float *g, double *m, double *v, long n, float step,
                                  float k1, float k2, float k3, float k4, float eps) {
  if (opt == 0) {
    for (long i = 0; i < n; ++i) {
      const float gi = g[i];
      const float m1 = k1 * (float)m[i] + k2 * gi;
      const float v1 = k3 * (float)v[i] + (k4 * gi) * gi;
      const float u = (step * m1) / (__builtin_sqrtf(v1) + eps);
      w[i] = (double)((float)w[i] - u);
      m[i] = m1;
      v[i] = v1;
    }
  } else if (opt == 1) {
    for (long i = 0; i < n; ++i) {
      const float gi = g[i];
      const float v1 = k1 * (float)v[i] + (k2 * gi) * gi;
      const float u = (step * gi) / (__builtin_sqrtf(v1) + eps);
      w[i] = (double)((float)w[i] - u);
      v[i] = v1;
    }
  } else {
    for (long i = 0; i < n; ++i) w[i] = (double)((float)w[i] - step * g[i]);
  }
}
"""

_kernel = None  # the checked seq_sum wrapper; False: unavailable in this process
_round = None  # the checked float-rounding wrapper (loaded with _kernel); False: unavailable
_update = None  # the checked FP32 weight update (loaded with _kernel); False / None: unavailable
_gae = None  # the checked GAE model wrapper (its own library); False: unavailable


def install() -> bool:
    """Register the compiled kernel with ``arith`` (build + self-check on first call)."""
    global _kernel, _round, _gae, _update
    if not enabled():
        if _kernel and arith._seq_sum_kernel is _kernel:
            arith.set_seq_sum_kernel(None)
        if _round and formats._round_kernel is _round:
            formats.set_round_kernel(None)
        if _gae and gae_kernel._model_kernel is _gae:
            gae_kernel.set_model_kernel(None)
        return False
    if _gae is None:
        try:
            _gae = native_gae.load(ctypes.CDLL(str(_build_gae()))) or False
        except Exception as e:  # noqa: BLE001 -- the numpy model does the same job
            log.debug("native gae model unavailable, using numpy: %s", e)
            _gae = False
    if _gae:
        gae_kernel.set_model_kernel(_gae)
    if _kernel is None:
        try:
            _kernel, _round, _update = (k or False for k in _load())
        except Exception as e:  # noqa: BLE001 -- any build / load problem: numpy does the same job
            log.debug("native kernels unavailable, using numpy: %s", e)
            _kernel = _round = _update = False
    if _kernel:
        arith.set_seq_sum_kernel(_kernel)
    if _round:
        formats.set_round_kernel(_round)
    return bool(_kernel)


def update_kernel():
    """The checked in-place FP32 weight update (``update_fp32(optimizer, constants, step, w, g, m, v)
    -> bool``), or None (RLHLS_NATIVE=0, no compiler, a failed check)."""
    install()
    return _update or None if enabled() else None


def _build(name: str = "seq_sum", source: str = SOURCE) -> Path:
    return build_library(name, source)


def _build_gae() -> Path:
    return _build("gae_model", native_gae.SOURCE)


def _wrap(f, fma):
    def seq_sum(x32, w32, acc):
        N, K = x32.shape
        M = w32.shape[1]
        if N * K * M >= 4096:  # exact products: FMA, no transposition (smaller: the call costs more)
            xc, wc = np.ascontiguousarray(x32), np.ascontiguousarray(w32)
            if fma(xc.ctypes.data, wc.ctypes.data, acc.ctypes.data, N, K, M):
                return
        if M < 16 and N > M:  # the kernel vectorizes over M: run acc.T = w.T x.T (same products, same k order)
            accT = np.ascontiguousarray(acc.T)
            xt, wt = np.ascontiguousarray(w32.T), np.ascontiguousarray(x32.T)
            f(xt.ctypes.data, wt.ctypes.data, accT.ctypes.data, M, K, N)
            acc[...] = accT.T
            return
        x32, w32 = np.ascontiguousarray(x32), np.ascontiguousarray(w32)
        f(x32.ctypes.data, w32.ctypes.data, acc.ctypes.data, N, K, M)

    return seq_sum


def _wrap_round(lib):
    fs = {}
    for name, io in (("", (np.float64, np.float64)), ("_to32", (np.float64, np.float32)),
                     ("32", (np.float32, np.float32)), ("_from32", (np.float32, np.float64))):
        f = getattr(lib, "rlhls_round_float" + name)
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_long] * 4 + [ctypes.c_double]
        f.restype = ctypes.c_long
        fs[io] = f

    def round_float(x, fmt, dtype=np.float64):
        """(fmt(x), overflow count); x float64 (or float32), y of `dtype` (float32: fmt fits it)."""
        x = np.ascontiguousarray(x, dtype=np.float32 if x.dtype == np.float32 else np.float64)
        y = np.empty(x.shape, dtype=dtype)
        n = fs[(x.dtype.type, y.dtype.type)](x.ctypes.data, y.ctypes.data, x.size, fmt.emin, fmt.emax,
                                             fmt.man_bits, fmt.max_value)
        return y, int(n)

    return round_float


def _round_values(rng, fmt) -> np.ndarray:
    """For ``fmt``: every exponent from below its subnormals to past overflow, exact ties
    (half-way between neighbours, both parities; between subnormals too), the largest finite value,
    the overflow threshold and just below it, +-0, +-Inf, NaN and a random spread."""
    m = fmt.man_bits
    e = range(fmt.emin - m - 3, fmt.emax + 3)
    steps = np.arange(0, 2 ** m, max(1, 2 ** m // 28))
    base = [np.ldexp(1.0 + steps / 2.0 ** m, k) for k in e]
    ties = [np.ldexp(1.0 + (2 * steps + 1) / 2.0 ** (m + 1), k) for k in e]
    sub = np.ldexp(np.arange(0, 2 ** m, max(1, 2 ** m // 150)) + 0.5, fmt.emin - m)
    top = fmt.max_value + np.ldexp(1.0, fmt.emax - m - 1)  # half an ulp above: a tie that overflows
    special = np.array([0.0, fmt.max_value, top, np.nextafter(top, 0.0), 2 * top, 1e300, np.inf, np.nan,
                        fmt.min_subnormal, fmt.min_subnormal / 2, np.nextafter(fmt.min_subnormal / 2, 1.0)])
    spread = rng.standard_normal(4000) * np.exp2(rng.integers(fmt.emin - m - 4, fmt.emax + 4, 4000))
    v = np.concatenate([*base, *ties, sub, special, spread])
    return np.concatenate([v, -v])


CHECK_FORMATS = ("fp16", "bf16", "float<4,3>", "float<10,40>")  # the two in use, a narrow one, a wide one


def _check_round(kernel) -> bool:
    """Bit for bit the numpy path (FloatFormat._quantize_magic) and its overflow count on each of
    CHECK_FORMATS, contiguous and through a strided view; for FP16 also numpy's float16 cast."""
    rng = np.random.default_rng(2024)
    for name in CHECK_FORMATS:
        fmt = formats.parse_format_as(name, formats.FloatFormat)
        x = _round_values(rng, fmt)
        ref, n_ref = fmt._quantize_magic(x, True)
        refs = [ref]
        if name == "fp16":
            with np.errstate(over="ignore", invalid="ignore"):
                refs.append(x.astype(np.float16).astype(np.float64))
        (got, n), (back, _) = kernel(x, fmt), kernel(x[::-1].reshape(-1, 2), fmt)
        if n != n_ref or back.shape != (x.size // 2, 2):
            return False
        for r in refs:
            nan = np.isnan(r)
            for g in (got, back.reshape(-1)[::-1]):
                if not (np.array_equal(nan, np.isnan(g))
                        and np.array_equal(r[~nan].view(np.int64), g[~nan].view(np.int64))):
                    return False
        if fmt.exp_bits <= 8 and fmt.man_bits <= 23:  # the float32 variants: the same values
            with np.errstate(over="ignore", invalid="ignore"):
                x32 = x.astype(np.float32)
                ref32, n32 = fmt._quantize_magic(x32.astype(np.float64), True)
                for (g, n), r, nr in ((kernel(x, fmt, np.float32), ref.astype(np.float32), n_ref),
                                      (kernel(x32, fmt, np.float32), ref32.astype(np.float32), n32),
                                      (kernel(x32, fmt), ref32, n32)):
                    nan = np.isnan(r)
                    if n != nr or g.dtype != r.dtype or not (
                            np.array_equal(nan, np.isnan(g)) and np.array_equal(r[~nan], g[~nan])
                            and np.array_equal(np.signbit(r[~nan]), np.signbit(g[~nan]))):
                        return False
    return True


_OPT_CODES = {"adam": (0, ("B1", "C1", "B2", "C2")), "rmsprop": (1, ("RHO", "CR")), "sgd": (2, ())}


def _wrap_update(f):
    f.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_long] + [ctypes.c_float] * 6
    f.restype = None

    def update_fp32(optimizer, consts, step, w, g, m=None, v=None) -> bool:
        """The all-FP32 update model in place on w (and m, v): float64 C-contiguous w / m / v, float32 g
        of one shape; False (nothing done) for other layouts or dtypes."""
        arrays = [a for a in (w, m, v) if a is not None]
        if (g.dtype != np.float32 or any(a.dtype != np.float64 or a.shape != g.shape for a in arrays)
                or not all(a.flags.c_contiguous for a in (*arrays, g))):
            return False
        code, names = _OPT_CODES[optimizer]
        k = [consts[n] for n in names] + [0.0] * (4 - len(names))
        f(code, w.ctypes.data, g.ctypes.data, 0 if m is None else m.ctypes.data, 0 if v is None else v.ctypes.data,
          g.size, step, *k, consts.get("EPS", 0.0))
        return True

    return update_fp32


def _check_update(upd) -> bool:
    """Bit for bit WeightUpdate._model_fp32 for each optimizer (wide gradients, tiny and huge moments)."""
    from rlhls.designs.kernels.update import WeightUpdate, _constants

    rng = np.random.default_rng(7)
    n = 1000
    for opt in ("adam", "rmsprop", "sgd"):
        c = dict(_constants("fp32", 0.9, 0.999, 0.99, 1e-8))
        w = rng.standard_normal(n).astype(np.float32).astype(np.float64)
        g = (rng.standard_normal(n) * np.exp2(rng.integers(-40, 20, n))).astype(np.float32)
        # moments down to FP32's subnormals (where a converged layer's Adam state goes)
        m = (rng.standard_normal(n) * np.exp2(rng.integers(-150, -5, n))).astype(np.float32).astype(np.float64)
        v = (rng.random(n) * np.exp2(rng.integers(-150, 0, n))).astype(np.float32).astype(np.float64)
        g[:3] = 0.0
        a = {"w": w, "g": g, "alpha": (np.float32(1e-3),), "m": m, "v": v}
        with np.errstate(all="ignore"):
            ref = WeightUpdate._model_fp32({"optimizer": opt}, a, c)
        w2, m2, v2 = w.copy(), m.copy(), v.copy()
        upd(opt, c, 1e-3, w2, g, m2 if opt == "adam" else None, v2 if opt != "sgd" else None)
        got = {"w_new": w2, "m_new": m2, "v_new": v2}
        for k, r in ref.items():
            nan = np.isnan(r)
            if not (np.array_equal(nan, np.isnan(got[k])) and np.array_equal(r[~nan].view(np.int64),
                                                                              got[k][~nan].view(np.int64))):
                return False
    return True


def _load():
    """(seq_sum, round_float, update_fp32): each wrapper, or None, only after its own self-check."""
    lib = ctypes.CDLL(str(_build()))
    rnd = _wrap_round(lib)
    upd = _wrap_update(lib.rlhls_update_fp32)
    if not _check_update(upd):
        log.debug("native update_fp32: self-check failed, using numpy")
        upd = None
    if not _check_round(rnd):
        log.debug("native round_float: self-check failed, using numpy's casts")
        rnd = None
    f, fma = lib.rlhls_seq_sum_f32, lib.rlhls_seq_sum_f32_fma
    f.argtypes = fma.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 3
    f.restype, fma.restype = None, ctypes.c_int
    kernel = _wrap(f, fma)
    # Self-check on values whose sums round at every step (wide magnitudes, cancellation, Inf/NaN,
    # subnormals), in both orientations of the wrapper.
    rng = np.random.default_rng(12345)
    for N, K, M in ((7, 33, 19), (3, 5, 1), (16, 64, 40), (37, 20, 2), (13, 9, 35), (8, 150, 70)):
        x = (rng.standard_normal((N, K)) * np.exp2(rng.integers(-30, 30, (N, K)))).astype(np.float32)
        w = (rng.standard_normal((K, M)) * np.exp2(rng.integers(-30, 30, (K, M)))).astype(np.float32)
        x[0, 0], w[1, 0], x[-1, -1] = np.float32(3e38), np.float32(np.inf), np.float32(1e-40)
        a0 = rng.standard_normal((N, M)).astype(np.float32)
        # and FP16 / BF16 operands, whose products are exact (the FMA path), BF16 also at the ends
        # of its exponent range (products that underflow or overflow: the plain path)
        h = (rng.standard_normal((N, K)) * np.exp2(rng.integers(-14, 15, (N, K)))).astype(np.float16)
        g = (rng.standard_normal((K, M)) * np.exp2(rng.integers(-14, 15, (K, M)))).astype(np.float16)
        bx, bw = (formats.parse_format("bf16").quantize(v.astype(np.float64)).astype(np.float32) for v in (x, w))
        ex, ew = bx.copy(), bw.copy()
        ex[0, 0], ew[0, 0], ew[-1, -1] = np.float32(2.0 ** 100), np.float32(2.0 ** 60), np.float32(2.0 ** -100)
        ex[np.isinf(ex)], ew[np.isinf(ew)] = 1.0, 1.0
        cases = [(x, w), (h.astype(np.float32), g.astype(np.float32)), (bx / 2 ** 40, bw), (ex, ew),
                 (np.zeros_like(x), w)]
        for xc, wc in cases:
            a, b = a0.copy(), a0.copy()
            with np.errstate(over="ignore", invalid="ignore"):
                arith._seq_sum_f32_numpy(xc, wc, a)
                kernel(xc, wc, b)
            nan = np.isnan(a)  # same bits (so -0 != +0), NaN where the numpy path has NaN
            if not (np.array_equal(nan, np.isnan(b))
                    and np.array_equal(a[~nan].view(np.int32), b[~nan].view(np.int32))):
                log.debug("native seq_sum: self-check failed at %s, using numpy", (N, K, M))
                return None, rnd, upd
    return kernel, rnd, upd
