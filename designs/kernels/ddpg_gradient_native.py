"""The ddpg_gradient kernel model's fixed-point arithmetic (``ddpg_gradient._Fx``) as compiled loops.

``gradient_model`` runs ~35 matrix products and ~16 float -> fixed roundings per call on arrays of a
few thousand elements; in numpy each is a dozen calls (bound, float64 or int64 products, the shift,
the clip), so F-DDPG's training loop spent most of its time in numpy's per-call overhead. Here one
C call does one of ``_Fx``'s operations whole:

* ``rlhls_fx_dense``: ``S(A(b) + x @ w)`` with the accumulator's chunks of ``T`` (``_Fx.dense``): the
  bound of every partial sum is taken exactly (128-bit); below A's range the int64 sum is the exact
  sum in any order (no saturation can happen, nothing overflows), else the chunks run in 128-bit
  with the saturating add after each, as ``_Fx._dot_slow``. x and w are read through their strides
  (transposed views and slices need no copy). ``x = NULL``: the sum over rows of w (``_Fx.rowsum``:
  every product is ``w << F``).
* ``rlhls_fx_q``: float64 -> S mantissas (``_Fx.q``'s inline RND/TRN + SAT path, the same IEEE
  operations); returns 0 on a non-finite value, and the format's own quantizer runs.

Both take S's rounding (RND or TRN, SAT), which is all ``_Fx`` inlines; other storage formats, and S
wider than 32 bits, keep the numpy model. ``load()`` builds the library once
(``rlhls.core.native.build_library``), checks it bit for bit against the numpy model (``check``:
both orientations, strided views, saturation both ways, rounding ties of both signs, the chunk edges,
non-finite inputs) and returns the wrapper, or None (no compiler, a failed build or check,
``RLHLS_NATIVE=0``): the numpy model then runs, with the same bits.
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from rlhls.core.native import build_library, enabled

__all__ = ["SOURCE", "load", "check", "supports"]

log = logging.getLogger(__name__)

SOURCE = r"""
#include <cmath>
#include <cstdlib>
#include <cstring>
typedef long long i64;
typedef __int128 i128;

// c: T, F, rnd (1 RND, 0 TRN), smin, smax, amin, amax
static inline i64 to_s(i64 m, int shift, int rnd, i64 smin, i64 smax) {  // _Fx._cast
  if (shift) {
    const i64 t = m >> shift;
    m = rnd ? t + ((m >> (shift - 1)) & 1) : t;
  }
  return m < smin ? smin : (m > smax ? smax : m);
}

// C (P, Q) = A (P, K) B (K, Q), exact int64 sums (the caller's bound keeps every partial sum in range);
// vectorised over q (int32 x int32 -> int64 products), the row of C in L1.
static void mm(const int *A, const int *B, i64 *C, long P, long K, long Q) {
  for (long p = 0; p < P; ++p) {
    i64 *c = C + p * Q;
    for (long q = 0; q < Q; ++q) c[q] = 0;
    const int *a = A + p * K;
    long k = 0;
    for (; k + 2 <= K; k += 2) {  // two rows of B per pass over c
      const i64 a0 = a[k], a1 = a[k + 1];
      const int *b0 = B + k * Q, *b1 = b0 + Q;
      for (long q = 0; q < Q; ++q) c[q] += a0 * b0[q] + a1 * b1[q];
    }
    for (; k < K; ++k) {
      const i64 a0 = a[k];
      const int *b0 = B + k * Q;
      for (long q = 0; q < Q; ++q) c[q] += a0 * b0[q];
    }
  }
}

// y (N, M) = S(A(b) + x @ w); x[n, k] at x[n sxn + k sxk], w[k, m] at w[k swk + m swm]; b (M,) or NULL;
// x NULL: the column sums of w (x = 1).
extern "C" void rlhls_fx_dense(const i64 *x, long sxn, long sxk, const i64 *w, long swk, long swm, const i64 *b,
                               i64 *y, long N, long K, long M, const i64 *c) {
  const long T = c[0];
  const int F = (int)c[1], rnd = (int)c[2];
  const i64 smin = c[3], smax = c[4], amin = c[5], amax = c[6];
  const bool ones = x == nullptr;
  const long NX = ones ? 1 : N;
  // S mantissas fit int32 (W <= 32): products int32 x int32 -> int64. xc (N, K), wc (K, M), and their
  // transposes xt (K, N), wt (M, K) when the product runs as y^T = w^T x^T (vectorised over n)
  const bool tr = M < 8 && N > M;
  i64 *bb = (i64 *)malloc(sizeof(i64) * (M + 1 + N * M));
  i64 *acc = bb + M;
  int *xc = (int *)malloc(sizeof(int) * (NX * K + M * K + 1)), *wc = xc + NX * K;
  for (long n = 0; n < NX; ++n)
    for (long k = 0; k < K; ++k) {
      const int v = ones ? (int)((i64)1 << F) : (int)x[n * sxn + k * sxk];
      if (tr) xc[k * NX + n] = v; else xc[n * K + k] = v;
    }
  for (long k = 0; k < K; ++k)
    for (long m = 0; m < M; ++m) {
      const int v = (int)w[k * swk + m * swm];
      if (tr) wc[m * K + k] = v; else wc[k * M + m] = v;
    }
  // bound of every partial sum: sum_k max_n |x| max_m |w| + max |b << F|
  unsigned __int128 bound = 0, bmax = 0;
  for (long m = 0; m < M; ++m) {
    bb[m] = b ? b[m] * ((i64)1 << F) : 0;
    const unsigned __int128 a = bb[m] < 0 ? -(unsigned __int128)bb[m] : bb[m];
    if (a > bmax) bmax = a;
  }
  for (long k = 0; k < K; ++k) {
    unsigned long long xa = 0, wa = 0;
    for (long n = 0; n < NX; ++n) {
      const i64 v = tr ? xc[k * NX + n] : xc[n * K + k];
      const unsigned long long a = v < 0 ? -(unsigned long long)v : v;
      if (a > xa) xa = a;
    }
    for (long m = 0; m < M; ++m) {
      const i64 v = tr ? wc[m * K + k] : wc[k * M + m];
      const unsigned long long a = v < 0 ? -(unsigned long long)v : v;
      if (a > wa) wa = a;
    }
    bound += (unsigned __int128)xa * wa;
  }
  bound += bmax;
  const int shift = F;  // A has 2F fractional bits, S has F
  if (bound <= (unsigned __int128)amax) {  // no partial sum reaches A's range: the exact sum, any order
    if (tr) mm(wc, xc, acc, M, K, NX); else mm(xc, wc, acc, NX, K, M);
    for (long n = 0; n < N; ++n)
      for (long m = 0; m < M; ++m) {
        const i64 s = tr ? acc[m * NX + (ones ? 0 : n)] : acc[(ones ? 0 : n) * M + m];
        y[n * M + m] = to_s(s + bb[m], shift, rnd, smin, smax);
      }
  } else {  // chunks of T exact products, the accumulator saturating after each
    for (long n = 0; n < N; ++n)
      for (long m = 0; m < M; ++m) {
        const long nn = ones ? 0 : n;
        i128 a = bb[m];
        for (long k0 = 0; k0 < K; k0 += T) {
          const long k1 = k0 + T < K ? k0 + T : K;
          i128 part = 0;
          for (long k = k0; k < k1; ++k) {
            const i64 xv = tr ? xc[k * NX + nn] : xc[nn * K + k], wv = tr ? wc[m * K + k] : wc[k * M + m];
            part += xv * wv;  // |product| < 2^62
          }
          a += part;
          a = a < amin ? amin : (a > amax ? amax : a);
        }
        y[n * M + m] = to_s((i64)a, shift, rnd, smin, smax);
      }
  }
  free(xc);
  free(bb);
}

// _Fx.q's inline path: m = clip(floor(clip(x 2^F, smin - 1, smax + 1) (+ 1/2 for RND)), smin, smax);
// 0 (y unset) when some x is not finite.
extern "C" int rlhls_fx_q(const double *x, i64 *y, long n, const i64 *c) {
  const int F = (int)c[1], rnd = (int)c[2];
  const i64 smin = c[3], smax = c[4];
  const double lo = (double)smin - 1.0, hi = (double)smax + 1.0;
  for (long i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return 0;
  for (long i = 0; i < n; ++i) {
    double v = std::ldexp(x[i], F);
    v = v < lo ? lo : (v > hi ? hi : v);
    const i64 m = (i64)std::floor(rnd ? v + 0.5 : v);
    y[i] = m < smin ? smin : (m > smax ? smax : m);
  }
  return 1;
}
"""


def supports(fx) -> bool:
    """Whether the compiled loops cover `fx`'s formats: S signed, at most 32 bits, at least one
    sign and one integer bit (1.0 fits: the row sums), rounded RND/TRN and saturating (``_Fx.fast``); A of
    ``fixed<2W, 2I, *, SAT>`` (the kernel's check) with 2F fractional bits."""
    S, A = fx.S, fx.A
    return (fx.fast and S.signed and S.width <= 32 and S.int_bits >= 2 and A.frac_bits == 2 * S.frac_bits
            and A.width <= 64 and A.overflow == "SAT")


class Native:
    """The compiled operations of one ``_Fx`` (its constants held once)."""

    def __init__(self, lib, fx):
        self._dense, self._q = lib.rlhls_fx_dense, lib.rlhls_fx_q
        self.consts = np.array([fx.T, fx.F, int(fx.S.quant == "RND"), fx.smin, fx.smax, fx.amin, fx.amax],
                               dtype=np.int64)
        self._c = self.consts.ctypes.data

    def dense(self, x, w, b=None):
        """S mantissas of ``A(b) + x @ w`` (int64 2-D x, w; b 1-D or None); None if the arrays are not int64."""
        if x.dtype != np.int64 or w.dtype != np.int64 or (b is not None and (b.dtype != np.int64 or b.ndim != 1)):
            return None
        N, K = x.shape
        M = w.shape[1]
        y = np.empty((N, M), dtype=np.int64)
        if N and M:
            sx, sw = x.strides, w.strides
            self._dense(x.ctypes.data, sx[0] // 8, sx[1] // 8, w.ctypes.data, sw[0] // 8, sw[1] // 8,
                        None if b is None else b.ctypes.data, y.ctypes.data, N, K, M, self._c)
        return y

    def rowsum_s(self, d):
        """S of the saturating sum over rows of d (N, M) (``_Fx.to_s(_Fx.rowsum(d))``)."""
        if d.dtype != np.int64:
            return None
        N, M = d.shape
        y = np.empty((1, M), dtype=np.int64)
        if M:
            s = d.strides
            self._dense(None, 0, 0, d.ctypes.data, s[0] // 8, s[1] // 8, None, y.ctypes.data, 1, N, M, self._c)
        return y[0]

    def q(self, x):
        """S mantissas of float64 values, or None (a non-finite value)."""
        x = np.asarray(x, dtype=np.float64)
        if not x.flags.c_contiguous:
            x = x.copy()
        y = np.empty(x.shape, dtype=np.int64)
        return y if self._q(x.ctypes.data, y.ctypes.data, x.size, self._c) else None


def _wrap(lib):
    lib.rlhls_fx_dense.argtypes = ([ctypes.c_void_p, ctypes.c_long, ctypes.c_long] * 2
                                   + [ctypes.c_void_p] * 2 + [ctypes.c_long] * 3 + [ctypes.c_void_p])
    lib.rlhls_fx_dense.restype = None
    lib.rlhls_fx_q.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p]
    lib.rlhls_fx_q.restype = ctypes.c_int
    return lib


CHECK_FORMATS = (("fixed<32,8,RND,SAT>", "fixed<64,16,RND,SAT>", 16),
                 ("fixed<32,8,TRN,SAT>", "fixed<64,16,TRN,SAT>", 4),
                 ("fixed<16,6,RND,SAT>", "fixed<32,12,RND,SAT>", 5),
                 ("fixed<8,3,RND,SAT>", "fixed<16,6,RND,SAT>", 3))


def _mantissas(rng, fx, shape, scale):
    """S mantissas spread over sign and magnitude, with both ends of S's range."""
    m = np.round(rng.standard_normal(shape) * scale * 2.0 ** fx.F * np.exp2(rng.integers(-12, 1, shape)))
    m = np.clip(m, fx.smin, fx.smax).astype(np.int64)
    flat = m.reshape(-1)
    flat[:2] = (fx.smax, fx.smin)[:flat.size]
    return m


def check(lib, make_fx) -> bool:
    """Bit for bit ``_Fx``'s numpy dense, rowsum and q (``make_fx(storage, acc, tree)`` builds one with
    the numpy paths): the formats of ``CHECK_FORMATS``; products well inside A, products that saturate
    A up and down, transposed and sliced operands, no bias, K not a multiple of T; ties of both
    signs, S's ends and beyond, and non-finite values for q."""
    rng = np.random.default_rng(43)
    for st, acc, T in CHECK_FORMATS:
        fx = make_fx(st, acc, T)
        nat = Native(lib, fx)
        big = 2.0 ** (fx.S.int_bits - 1)
        for N, K, M in ((32, 17, 108), (5, 108, 1), (1, 3, 7), (7, 2 * T + 3, 9)):
            for case in ("small", "unit", "big", "sat", "ties"):
                scale = {"small": 0.05, "unit": 1.0}.get(case, big)
                x = _mantissas(rng, fx, (N, K), scale)
                w = _mantissas(rng, fx, (K, M), scale)
                b = _mantissas(rng, fx, (M,), scale)
                if case == "sat":  # a first chunk of S's ends, one sign per output: A saturates both ways
                    x[:] = fx.smax
                    w[:T, ::2], w[:T, 1::2] = fx.smax, fx.smin
                elif case == "ties":  # small sums of odd multiples of half an S LSB: ties of both signs
                    x = rng.integers(-3, 4, (N, K)).astype(np.int64)
                    w = (rng.integers(-2, 3, (K, M)) * 2 + 1).astype(np.int64) << (fx.F - 1)
                wt = np.ascontiguousarray(w.T).T  # a transposed view of the same values
                for xx, ww, bb in ((x, w, b), (x, wt, None), (np.ascontiguousarray(x.T).T, w[:, :M], b),
                                   (x[:, ::-1], w[::-1], b)):
                    y = nat.dense(xx, ww, bb)
                    if y is None or not np.array_equal(y, fx.to_s(fx.dot(xx, ww, bb))):
                        return False
                for d in (x, wt, x[::2]):
                    if not np.array_equal(nat.rowsum_s(d), fx.to_s(fx.rowsum(d))):
                        return False
        lsb = 2.0 ** -fx.F
        v = np.concatenate([rng.standard_normal(301) * big, (np.arange(-40, 40) + 0.5) * lsb,
                            [0.0, -0.0, 5e-324, -5e-324, lsb / 2, -lsb / 2, 3 * big, -3 * big, 1e300, -1e300,
                             fx.smax * lsb, fx.smin * lsb, (fx.smax + 0.5) * lsb, (fx.smin - 0.5) * lsb]])
        for x in (v, v.reshape(5, -1)[:, 1:], np.float64(-0.5 * lsb)):
            y = nat.q(x)
            if y is None or not np.array_equal(y, fx.q(x)):
                return False
        if nat.q(np.array([1.0, np.nan])) is not None or nat.q(np.array([np.inf])) is not None:
            return False
    return True


def load(make_fx):
    """The checked library (``Native(lib, fx)`` per format), or None (see the module docstring)."""
    if not enabled():
        return None
    try:
        lib = _wrap(ctypes.CDLL(str(build_library("ddpg_gradient", SOURCE))))
    except Exception as e:  # noqa: BLE001 -- any build / load problem: the numpy model does the same job
        log.debug("native ddpg_gradient model unavailable, using numpy: %s", e)
        return None
    if not check(lib, make_fx):
        log.debug("native ddpg_gradient model: self-check failed, using numpy")
        return None
    return lib
