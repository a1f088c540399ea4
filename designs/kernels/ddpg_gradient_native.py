"""The ddpg_gradient kernel's bit-accurate model (``ddpg_gradient.gradient_model``) as compiled C++.

The numpy model runs ~35 matrix products and ~16 float -> fixed roundings per call on arrays of a
few thousand elements, each a dozen numpy calls (bound, float64 or int64 products, shift, clip):
F-DDPG's training loop spent most of its time in numpy's per-call overhead. Here:

* ``rlhls_fx_gradient``: the whole model in one call, the numpy model's steps in its order (inputs
  and parameters rounded to S, the actor-learning, target and critic forwards, the temporal
  difference, both backward passes), every operation through the two below;
* ``rlhls_fx_dense``: ``S(A(b) + x @ w)`` with the accumulator's chunks of ``T`` (``_Fx.dense``): the
  bound of every partial sum is taken exactly (128-bit); within A's range the int64 sum is the exact
  sum in any order (nothing saturates or overflows: AVX2 int32 x int32 -> int64 products, 4 rows x 8
  columns of sums in registers), else the chunks run in 128-bit with the saturating add after each,
  as ``_Fx._dot_slow``. x and w are read through their strides. ``x = NULL``: the sum over rows of w
  (``_Fx.rowsum``: every product is ``w << F``);
* ``rlhls_fx_q``: float64 -> S mantissas (``_Fx.q``'s inline RND/TRN + SAT path, the same IEEE
  operations); 0 on a non-finite value, and the format's own quantizer runs.

They take S rounded RND or TRN and saturating (all ``_Fx`` inlines), signed, at most 32 bits, with
two integer bits or more; other formats keep the numpy model. The whole model returns 0 on a
non-finite input, and the model then runs layer by layer in Python with the two operations (each
falling back to numpy where it has no path). ``load()`` builds the library once
(``rlhls.core.native.build_library``), checks it bit for bit against the numpy model (``check``:
each operation in four formats, both orientations, strided views, the vector blocks' edges,
saturation both ways, rounding ties of both signs, non-finite inputs; ``check_model``: whole
gradients of model 1 and 3's networks, a short batch, a saturating network without fusion layer,
TRN storage) and returns the library, or None (no compiler, a failed build or check,
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

// C (P, Q) = A (P, K) B (K, Q), exact int64 sums (the caller's bound keeps every partial sum in range, so
// any order gives them): int32 x int32 -> int64 products, R rows x 8 columns of sums in registers.
#if defined(__AVX2__)
#include <immintrin.h>
template <int R>
static void mm_rows(const int *A, const int *B, i64 *C, long p, long K, long Q) {
  long q = 0;
  for (; q + 8 <= Q; q += 8) {
    __m256i c[R][2];
    for (int r = 0; r < R; ++r) c[r][0] = c[r][1] = _mm256_setzero_si256();
    for (long k = 0; k < K; ++k) {
      const int *b = B + k * Q + q;
      const __m256i b0 = _mm256_cvtepi32_epi64(_mm_loadu_si128((const __m128i *)b));
      const __m256i b1 = _mm256_cvtepi32_epi64(_mm_loadu_si128((const __m128i *)(b + 4)));
      for (int r = 0; r < R; ++r) {
        const __m256i a = _mm256_set1_epi32(A[(p + r) * K + k]);  // vpmuldq reads each lane's low half
        c[r][0] = _mm256_add_epi64(c[r][0], _mm256_mul_epi32(a, b0));
        c[r][1] = _mm256_add_epi64(c[r][1], _mm256_mul_epi32(a, b1));
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_si256((__m256i *)(C + (p + r) * Q + q), c[r][0]);
      _mm256_storeu_si256((__m256i *)(C + (p + r) * Q + q + 4), c[r][1]);
    }
  }
  for (; q < Q; ++q)
    for (int r = 0; r < R; ++r) {
      const int *a = A + (p + r) * K;
      i64 s = 0;
      for (long k = 0; k < K; ++k) s += (i64)a[k] * B[k * Q + q];
      C[(p + r) * Q + q] = s;
    }
}
static void mm(const int *A, const int *B, i64 *C, long P, long K, long Q) {
  long p = 0;
  for (; p + 4 <= P; p += 4) mm_rows<4>(A, B, C, p, K, Q);
  for (; p < P; ++p) mm_rows<1>(A, B, C, p, K, Q);
}
#else
static void mm(const int *A, const int *B, i64 *C, long P, long K, long Q) {
  for (long p = 0; p < P; ++p) {
    i64 *c = C + p * Q;
    for (long q = 0; q < Q; ++q) c[q] = 0;
    for (long k = 0; k < K; ++k) {
      const i64 a = A[p * K + k];
      const int *b = B + k * Q;
      for (long q = 0; q < Q; ++q) c[q] += a * b[q];
    }
  }
}
#endif

static inline unsigned uabs(int v) { return v < 0 ? 0u - (unsigned)v : (unsigned)v; }

// y (N, M) = S(A(b) + x @ w); x[n, k] at x[n sxn + k sxk], w[k, m] at w[k swk + m swm]; b (M,) or NULL;
// x NULL: the column sums of w (x = 1).
static void dense(const i64 *x, long sxn, long sxk, const i64 *w, long swk, long swm, const i64 *b, i64 *y,
                  long N, long K, long M, const i64 *c) {
  const long T = c[0];
  const int F = (int)c[1], rnd = (int)c[2];
  const i64 smin = c[3], smax = c[4], amin = c[5], amax = c[6];
  const bool ones = x == nullptr;
  const long NX = ones ? 1 : N;
  // S mantissas fit int32 (W <= 32). The product runs as Pa (P, K) Bm (K, Q), vectorised over Q: x w
  // (P = NX, Q = M), or y^T = w^T x^T for narrow outputs (P = M, Q = NX)
  const bool tr = M < 8 && NX > M;
  const long P = tr ? M : NX, Q = tr ? NX : M;
  i64 *buf = (i64 *)malloc(sizeof(i64) * (M + P * Q + 1));
  i64 *bb = buf, *acc = buf + M;
  int *Pa = (int *)malloc(sizeof(int) * (P * K + K * Q + 2 * K + 1)), *Bm = Pa + P * K;
  unsigned *pa = (unsigned *)(Bm + K * Q), *ba = pa + K;
  for (long n = 0; n < NX; ++n)
    for (long k = 0; k < K; ++k) {
      const int v = ones ? (int)((i64)1 << F) : (int)x[n * sxn + k * sxk];
      if (tr) Bm[k * Q + n] = v; else Pa[n * K + k] = v;
    }
  for (long k = 0; k < K; ++k)
    for (long m = 0; m < M; ++m) {
      const int v = (int)w[k * swk + m * swm];
      if (tr) Pa[m * K + k] = v; else Bm[k * Q + m] = v;
    }
  // bound of every partial sum: sum_k max_p |Pa[p, k]| max_q |Bm[k, q]| + max |b << F|
  for (long k = 0; k < K; ++k) pa[k] = 0;
  for (long p = 0; p < P; ++p)
    for (long k = 0; k < K; ++k) {
      const unsigned u = uabs(Pa[p * K + k]);
      pa[k] = u > pa[k] ? u : pa[k];
    }
  unsigned __int128 bound = 0, bmax = 0;
  for (long k = 0; k < K; ++k) {
    unsigned m = 0;
    for (long q = 0; q < Q; ++q) {
      const unsigned u = uabs(Bm[k * Q + q]);
      m = u > m ? u : m;
    }
    ba[k] = m;
    bound += (unsigned __int128)((unsigned long long)pa[k] * m);
  }
  for (long m = 0; m < M; ++m) {
    bb[m] = b ? b[m] * ((i64)1 << F) : 0;
    const unsigned __int128 a = bb[m] < 0 ? -(unsigned __int128)bb[m] : bb[m];
    if (a > bmax) bmax = a;
  }
  bound += bmax;
  const int shift = F;  // A has 2F fractional bits, S has F
  if (bound <= (unsigned __int128)amax) {  // no partial sum reaches A's range: the exact sum, any order
    mm(Pa, Bm, acc, P, K, Q);
    for (long n = 0; n < N; ++n) {
      const long nn = ones ? 0 : n;
      for (long m = 0; m < M; ++m) {
        const i64 s = tr ? acc[m * Q + nn] : acc[nn * Q + m];
        y[n * M + m] = to_s(s + bb[m], shift, rnd, smin, smax);
      }
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
            const i64 xv = tr ? Bm[k * Q + nn] : Pa[nn * K + k], wv = tr ? Pa[m * K + k] : Bm[k * Q + m];
            part += xv * wv;  // |product| <= 2^62
          }
          a += part;
          a = a < amin ? amin : (a > amax ? amax : a);
        }
        y[n * M + m] = to_s((i64)a, shift, rnd, smin, smax);
      }
  }
  free(Pa);
  free(buf);
}

extern "C" void rlhls_fx_dense(const i64 *x, long sxn, long sxk, const i64 *w, long swk, long swm, const i64 *b,
                               i64 *y, long N, long K, long M, const i64 *c) {
  dense(x, sxn, sxk, w, swk, swm, b, y, N, K, M, c);
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

// ---------------------------------------------------------------- the whole model (gradient_model)
#include <vector>
typedef std::vector<i64> V;

struct Mat {  // a row-major matrix of S mantissas, or a strided view
  const i64 *p;
  long r, c, sr, sc;
  Mat(const i64 *p_, long r_, long c_) : p(p_), r(r_), c(c_), sr(c_), sc(1) {}
  Mat(const i64 *p_, long r_, long c_, long sr_, long sc_) : p(p_), r(r_), c(c_), sr(sr_), sc(sc_) {}
  Mat t() const { return Mat(p, c, r, sc, sr); }
};
struct Layer { Mat w; const i64 *b; };

struct Model {
  const i64 *c;
  int F, rnd;
  i64 smin, smax;
  const i64 *table;
  long ntab;
  V dense(const Mat &x, const Mat &w, const i64 *b) const {
    V y(x.r * w.c);
    ::dense(x.p, x.sr, x.sc, w.p, w.sr, w.sc, b, y.data(), x.r, x.c, w.c, c);
    return y;
  }
  i64 sat(i64 m) const { return m < smin ? smin : (m > smax ? smax : m); }
  i64 mul(i64 a, i64 b) const { return to_s(a * b, F, rnd, smin, smax); }
  i64 tanh_(i64 z) const {  // hls4ml's table: index trunc(z N / 8) + N/2, clipped
    const double v = std::ldexp((double)z, -F) * ((double)ntab / 8.0);
    i64 r = (i64)std::trunc(v) + ntab / 2;
    r = r < 0 ? 0 : (r > ntab - 1 ? ntab - 1 : r);
    return table[r];
  }
};

static void relu(V &z, V &mask) {
  mask.resize(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    mask[i] = z[i] > 0;
    if (z[i] < 0) z[i] = 0;
  }
}

// hs[0..L] (inputs of each layer, then the output), masks[0..L-1] (ReLU masks, last: tanh's gradient)
static void actor_fwd(const Model &md, const V &x, long B, const std::vector<Layer> &ls, std::vector<V> &hs,
                      std::vector<V> &masks) {
  const long L = ls.size();
  hs.assign(1, x);
  masks.clear();
  long K = ls[0].w.r;
  for (long i = 0; i < L; ++i) {
    V z = md.dense(Mat(hs.back().data(), B, K), ls[i].w, ls[i].b);
    V m;
    if (i < L - 1) {
      relu(z, m);
    } else {
      m.resize(z.size());
      for (size_t j = 0; j < z.size(); ++j) {
        const i64 t = md.tanh_(z[j]);
        z[j] = t;
        m[j] = to_s(((i64)1 << (2 * md.F)) - t * t, md.F, md.rnd, md.smin, md.smax);
      }
    }
    masks.push_back(m);
    hs.push_back(z);
    K = ls[i].w.c;
  }
}

// returns z (B x 1); hs[0] = concat(x_s, x_a), hs[i] = the hidden layers' outputs; masks: ReLU masks
static V critic_fwd(const Model &md, const V &xs, const V &xa, long B, long S, long A, bool fusion,
                    const std::vector<Layer> &ls, std::vector<V> *hs_out, std::vector<V> *masks_out) {
  const Layer &l1 = ls[0];
  const long H = l1.w.c;
  V cat(B * (S + A));
  for (long n = 0; n < B; ++n) {
    for (long k = 0; k < S; ++k) cat[n * (S + A) + k] = xs[n * S + k];
    for (long k = 0; k < A; ++k) cat[n * (S + A) + S + k] = xa[n * A + k];
  }
  V z;
  if (fusion) {  // two halves without bias (S outputs), the fusion adds them and the bias
    V zs = md.dense(Mat(xs.data(), B, S), Mat(l1.w.p, S, H, l1.w.sr, l1.w.sc), nullptr);
    V za = md.dense(Mat(xa.data(), B, A), Mat(l1.w.p + S * l1.w.sr, A, H, l1.w.sr, l1.w.sc), nullptr);
    z.resize(B * H);
    for (long n = 0; n < B; ++n)
      for (long m = 0; m < H; ++m) z[n * H + m] = md.sat(zs[n * H + m] + za[n * H + m] + l1.b[m]);
  } else {
    z = md.dense(Mat(cat.data(), B, S + A), l1.w, l1.b);
  }
  std::vector<V> hs(1, cat), masks;
  for (size_t i = 1; i < ls.size(); ++i) {
    V m;
    relu(z, m);
    masks.push_back(m);
    hs.push_back(z);
    z = md.dense(Mat(hs.back().data(), B, ls[i].w.r), ls[i].w, ls[i].b);
  }
  if (hs_out) *hs_out = hs;
  if (masks_out) *masks_out = masks;
  return z;
}

// weight and bias gradients of every layer into g (the packed layout), node deltas from the last layer down
static void backward(const Model &md, V dz, long B, const std::vector<V> &hs, const std::vector<V> &masks,
                     const std::vector<Layer> &ls, const long *off, i64 *g) {
  for (long i = (long)ls.size() - 1; i >= 0; --i) {
    const long K = ls[i].w.r, M = ls[i].w.c;
    const Mat d(dz.data(), B, M);
    ::dense(hs[i].data(), 1, K, d.p, M, 1, nullptr, g + off[2 * i], K, B, M, md.c);  // x^T dy
    ::dense(nullptr, 0, 0, d.p, M, 1, nullptr, g + off[2 * i + 1], 1, B, M, md.c);  // sum over rows
    if (i) {
      V nd = md.dense(d, ls[i].w.t(), nullptr);
      const V &mk = masks[i - 1];
      for (size_t j = 0; j < nd.size(); ++j) nd[j] *= mk[j];
      dz.swap(nd);
    }
  }
}

static bool quantize(const double *x, long n, V &y, const i64 *c) {
  y.resize(n);
  return rlhls_fx_q(x, y.data(), n, c);
}

// ints: B, S, A, L, fusion, ntab, then the actor's dims (L + 1), the critic's (L + 1); consts: q(gamma),
// q(2 / B), q(-1 / B). Outputs float64 values of S. Returns 0 (nothing written) on a non-finite input.
extern "C" int rlhls_fx_gradient(const double *s, const double *a, const double *r, const double *s2,
                                 const double *done, const double *actor, const double *critic,
                                 const double *tactor, const double *tcritic, const long *ints, const i64 *table,
                                 const i64 *consts, const i64 *c, double *grad_actor, double *grad_critic,
                                 double *q_out, double *y_out, double *qpi_out) {
  const long B = ints[0], S = ints[1], A = ints[2], L = ints[3];
  const bool fusion = ints[4];
  const long *da = ints + 6, *dc = ints + 6 + L + 1;
  Model md{c, (int)c[1], (int)c[2], c[3], c[4], table, ints[5]};
  long PA = 0, PC = 0;
  for (long i = 0; i < L; ++i) {
    PA += da[i] * da[i + 1] + da[i + 1];
    PC += dc[i] * dc[i + 1] + dc[i + 1];
  }
  V sm, am, rm, s2m, dm, va, vc, vta, vtc;
  if (!(quantize(s, B * S, sm, c) && quantize(a, B * A, am, c) && quantize(r, B, rm, c) &&
        quantize(s2, B * S, s2m, c) && quantize(done, B, dm, c) && quantize(actor, PA, va, c) &&
        quantize(critic, PC, vc, c) && quantize(tactor, PA, vta, c) && quantize(tcritic, PC, vtc, c)))
    return 0;
  std::vector<long> oa(2 * L), oc(2 * L);
  auto layers = [&](const V &v, const long *d, std::vector<long> &off) {
    std::vector<Layer> ls;
    long o = 0;
    for (long i = 0; i < L; ++i) {
      const long K = d[i], M = d[i + 1];
      ls.push_back(Layer{Mat(v.data() + o, K, M), v.data() + o + K * M});
      off[2 * i] = o;
      off[2 * i + 1] = o + K * M;
      o += K * M + M;
    }
    return ls;
  };
  std::vector<long> tmp(2 * L);
  const std::vector<Layer> A_ = layers(va, da, oa), C_ = layers(vc, dc, oc), TA = layers(vta, da, tmp),
                           TC = layers(vtc, dc, tmp);
  std::vector<V> ha, ga, ht, gt, hc, mc, mpi;
  actor_fwd(md, sm, B, A_, ha, ga);
  const V qpi = critic_fwd(md, sm, ha.back(), B, S, A, fusion, C_, nullptr, &mpi);
  actor_fwd(md, s2m, B, TA, ht, gt);
  const V qt = critic_fwd(md, s2m, ht.back(), B, S, A, fusion, TC, nullptr, nullptr);
  const V qv = critic_fwd(md, sm, am, B, S, A, fusion, C_, &hc, &mc);
  const i64 gamma = consts[0], c2 = consts[1], c1 = consts[2];
  V y(B), delta(B);
  for (long n = 0; n < B; ++n) {
    y[n] = md.sat(rm[n] + (dm[n] != 0 ? 0 : 1) * md.mul(qt[n], gamma));
    delta[n] = md.mul(md.sat(qv[n] - y[n]), c2);
  }
  V gc(PC), gav(PA);
  backward(md, delta, B, hc, mc, C_, oc.data(), gc.data());
  // actor learning: dQ/da through the online critic (no weight gradients), then the actor
  V dz(B, c1);
  for (long i = L - 1; i >= 1; --i) {
    V nd = md.dense(Mat(dz.data(), B, C_[i].w.c), C_[i].w.t(), nullptr);
    for (size_t j = 0; j < nd.size(); ++j) nd[j] *= mpi[i - 1][j];
    dz.swap(nd);
  }
  const Mat w1a(C_[0].w.p + S * C_[0].w.sr, A, C_[0].w.c, C_[0].w.sr, C_[0].w.sc);
  V dav = md.dense(Mat(dz.data(), B, C_[0].w.c), w1a.t(), nullptr);
  const V &g = ga.back();
  for (size_t j = 0; j < dav.size(); ++j) dav[j] = md.mul(dav[j], g[j]);
  backward(md, dav, B, ha, ga, A_, oa.data(), gav.data());
  const int F = md.F;
  for (long i = 0; i < PA; ++i) grad_actor[i] = std::ldexp((double)gav[i], -F);
  for (long i = 0; i < PC; ++i) grad_critic[i] = std::ldexp((double)gc[i], -F);
  for (long n = 0; n < B; ++n) {
    q_out[n] = std::ldexp((double)qv[n], -F);
    y_out[n] = std::ldexp((double)y[n], -F);
    qpi_out[n] = std::ldexp((double)qpi[n], -F);
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
        self._dense, self._q, self._gradient = lib.rlhls_fx_dense, lib.rlhls_fx_q, lib.rlhls_fx_gradient
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


    def gradient(self, p, table, gamma, c2, c1, arrays):
        """``gradient_model``'s outputs in one call (``arrays``: its float64 inputs; ``gamma``, ``c2``,
        ``c1``: the S mantissas of gamma, 2/B and -1/B), or None (a non-finite input)."""
        B = arrays["s"].shape[0]
        da = [p["obs"], *p["hidden"], p["act"]]
        dc = [p["obs"] + p["act"], *p["hidden"], 1]
        ints = np.array([B, p["obs"], p["act"], len(da) - 1, int(bool(p["fusion"])), len(table), *da, *dc],
                        dtype=np.int64)
        ins = [np.ascontiguousarray(arrays[k], dtype=np.float64) for k in _INPUTS]
        consts = np.array([gamma, c2, c1], dtype=np.int64)
        tab = np.ascontiguousarray(table, dtype=np.int64)
        out = {"grad_actor": np.empty(arrays["actor"].shape[0]), "grad_critic": np.empty(arrays["critic"].shape[0]),
               "q": np.empty(B), "y": np.empty(B), "qpi": np.empty(B)}
        ok = self._gradient(*[a.ctypes.data for a in ins], ints.ctypes.data, tab.ctypes.data, consts.ctypes.data,
                            self._c, *[a.ctypes.data for a in out.values()])
        return out if ok else None


_INPUTS = ("s", "a", "r", "s2", "done", "actor", "critic", "target_actor", "target_critic")


def _wrap(lib):
    lib.rlhls_fx_gradient.argtypes = [ctypes.c_void_p] * 18
    lib.rlhls_fx_gradient.restype = ctypes.c_int
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
        # the vector loop's blocks and edges (4 rows x 8 columns), both orientations; the saturating
        # cases (numpy replays them in Python ints) on the small shapes
        for N, K, M in ((32, 17, 108), (5, 108, 1), (9, 17, 12), (20, 6, 3), (1, 3, 7), (7, 2 * T + 3, 9)):
            for case in ("small", "unit", "ties") if N * K * M > 4000 else ("small", "unit", "big", "sat", "ties"):
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


def check_model(lib, cases, arith) -> bool:
    """``rlhls_fx_gradient`` bit for bit the numpy model on `cases` ((p, inputs, its outputs)), and
    None (the numpy model's turn) on a non-finite input; ``arith(p)``: the numpy model's (fx, tanh table)."""
    for p, x, want in cases:
        fx, table = arith(p)
        nat = Native(lib, fx)
        B = x["s"].shape[0]
        consts = fx.q(p["gamma"]), fx.q(2.0 / B), fx.q(-1.0 / B)
        got = nat.gradient(p, table, *consts, x)
        if got is None or set(got) != set(want) or not all(np.array_equal(got[k], want[k]) for k in want):
            return False
        if nat.gradient(p, table, *consts, dict(x, r=np.full(B, np.nan))) is not None:
            return False
    return True


def load(make_fx, cases, arith):
    """The checked library (``Native(lib, fx)`` per format), or None (see the module docstring);
    ``cases()``: the whole model's check cases and ``arith`` its arithmetic (``check_model``)."""
    if not enabled():
        return None
    try:
        lib = _wrap(ctypes.CDLL(str(build_library("ddpg_gradient", SOURCE))))
        ok = check(lib, make_fx) and check_model(lib, cases(), arith)
    except Exception as e:  # noqa: BLE001 -- any build / load / check problem: the numpy model does the same job
        log.debug("native ddpg_gradient model unavailable, using numpy: %s", e)
        return None
    if not ok:
        log.debug("native ddpg_gradient model: self-check failed, using numpy")
        return None
    return lib
