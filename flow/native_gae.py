"""The GAE unit's bit-accurate model (``designs/kernels/gae.py``) as one compiled C loop.

``GaeKernel.model`` is a numpy loop over the S timesteps (k-step lookahead, one rounding per
operation); at 64 x 1024 it ran below a float64 textbook loop. This is the same element recursion
in C (the order of ``gae.py``'s docstring and ``vitis/include/rlhls_gae.h``), one pass over the
arrays: code checks, de-quantization, delta, lookahead, advantages, rewards-to-go and the issue
schedule, with the lookahead rows in a (k+1)-row ring buffer.

Datapath D: fp32 is C ``float`` arithmetic (-ffp-contract=off, no -ffast-math: each + - * is one
IEEE rounding, which is what numpy's float64 op then float32 cast gives, since 53 >= 2*24 + 2);
fixed<W,I,Q,O> (W <= 32; ufixed W <= 31, so a product stays below 2**62) works on int64
mantissas, products rounded by ap_fixed's Q then O as ``FixedFormat.cast_mantissa``, sums through
O only (the float64 sum the model rounds is exact). For an fp32 datapath with results in fp32 (the
seed's unit) the element loop runs on 8 columns at once (GCC vector types: the same IEEE
operations lane by lane; the columns are independent), the last T mod 8 columns one by one.
Results O: the datapath itself, fp32 (the double -> float cast, round to nearest even), or
fixed/ufixed up to 53 bits (``FixedFormat.quantize_mantissa``'s frexp split and shifts). Other
formats keep the numpy model. Invalid codes or done flags: the C loop reports them and the numpy
model raises its own error.

``load(lib)`` checks the compiled loop bit for bit against the numpy model (``check``: every k,
code widths 1..16, fp32 / fixed datapaths with every quantization and overflow mode, saturating
and wrapping sums, fp32 overflow to Inf and NaN, results stored in fixed and fp32, dense
terminated / truncated flags, trajectory counts that are not a multiple of the PEs, S = 1, T = 1)
and returns the wrapper only when every case agrees. ``flow.native.install()`` builds it and
registers it with ``gae.set_model_kernel``.
"""

from __future__ import annotations

import ctypes
import logging

import numpy as np

from rlhls.designs.formats import OVERFLOW_MODES, QUANT_MODES, FixedFormat, FloatFormat

__all__ = ["SOURCE", "load", "check", "CHECK_CASES"]

log = logging.getLogger(__name__)

SOURCE = r"""
#include <cmath>
#include <type_traits>
typedef long long i64;
typedef unsigned long long u64;

// Fixed format: W, F = W - I, signed, Q (index in formats.QUANT_MODES), O (in OVERFLOW_MODES).
enum { TRN, TRN_ZERO, RND, RND_ZERO, RND_MIN_INF, RND_INF, RND_CONV };
enum { WRAP, SAT, SAT_ZERO, SAT_SYM };
struct Fx {
  int W, F, sgn, q, o;
  i64 lo, hi;
};

static inline i64 round_right(i64 m, int s, int q) {  // Q(m * 2^-s), 1 <= s <= 62
  const i64 fl = m >> s;
  if (q == TRN) return fl;
  const bool neg = m < 0, qb = (m >> (s - 1)) & 1, r = (m & ((1LL << (s - 1)) - 1)) != 0;
  bool inc;
  switch (q) {
    case RND: inc = qb; break;
    case RND_ZERO: inc = qb && (neg || r); break;
    case RND_MIN_INF: inc = qb && r; break;
    case RND_INF: inc = qb && (!neg || r); break;
    case RND_CONV: inc = qb && ((fl & 1) || r); break;
    default: inc = neg && (qb || r);  // TRN_ZERO
  }
  return fl + inc;
}

static inline i64 wrap(const Fx& f, i64 t) {
  if (f.sgn) return f.W == 64 ? t : (i64)((u64)t << (64 - f.W)) >> (64 - f.W);
  return t & (i64)((1ULL << f.W) - 1);
}

// Overflow stage: t = low 64 bits of the rounded mantissa, big = the true value is outside int64.
static inline i64 finish(const Fx& f, i64 t, bool big, bool neg) {
  const bool sym = f.sgn && f.o == SAT_SYM;
  const bool hi = big ? !neg : t > f.hi;
  const bool lo = big ? neg : (t < f.lo || (sym && t == f.lo));
  if (!(hi || lo)) return t;
  if (f.o == WRAP) return wrap(f, t);
  if (f.o == SAT_ZERO) return 0;
  return hi ? f.hi : (sym ? -f.hi : f.lo);
}

// double -> mantissa, as ap_fixed's double constructor (FixedFormat.quantize_mantissa).
static i64 fx_q(const Fx& f, double x) {
  if (x != x) return 0;
  i64 m;
  int s;
  if (std::isinf(x)) {
    m = x > 0 ? 1 : -1;
    s = -4096;
  } else {
    int e;
    m = (i64)std::ldexp(std::frexp(x, &e), 53);
    s = 53 - e - f.F;
    if (s > 61) { m = (m > 0) - (m < 0); s = 61; }
  }
  if (s > 0) return finish(f, round_right(m, s, f.q), false, m < 0);
  const int k = -s;
  if (k > 63) return finish(f, 0, m != 0, m < 0);
  const i64 t = (i64)((u64)m << k);
  return finish(f, t, (t >> k) != m, m < 0);
}

static inline Fx mkfx(const long* d) {
  Fx f{(int)d[1], (int)d[2], (int)d[3], (int)d[4], (int)d[5], 0, 0};
  f.lo = f.sgn ? -(i64)(1ULL << (f.W - 1)) : 0;
  f.hi = f.sgn ? (i64)((1ULL << (f.W - 1)) - 1) : (i64)((1ULL << f.W) - 1);
  return f;
}

// Result stores O: kind 0 = the datapath, 1 = fp32, 2 = fixed (W <= 53); a template argument so
// that the common case (0) keeps a branch-free, vectorizable loop.
struct Out {
  Fx f;
  double lsb;
  template <int OK> inline double of(double x) const {
    if (OK == 0) return x;
    if (OK == 1) return (double)(float)x;
    return (double)fx_q(f, x) * lsb;
  }
};

// fp32 datapath: float arithmetic, one IEEE rounding per operation.
struct F32 {
  typedef float V;
  float mu, sigma, half, scale;
  F32(const double* stats, int nb) : mu((float)stats[0]), sigma((float)stats[1]),
      half((float)(1 << (nb - 1)) - 0.5f), scale(std::ldexp(1.0f, 3 - nb)) {}
  static inline V q(double x) { return (float)x; }
  static inline V mul(V a, V b) { return a * b; }
  static inline V add(V a, V b) { return a + b; }
  static inline V sub(V a, V b) { return a - b; }
  inline V level(double c) const { return (float)(c - (double)half) * scale; }  // exact
  inline V deq(double c) const { return add(mul(sigma, level(c)), mu); }
  // an invalid code gives a meaningless value here; the caller reports it
  inline V level_c(double c, bool) const { return level(c); }
  inline V deq_c(double c, bool) const { return deq(c); }
  static inline double val(V a) { return (double)a; }
  static inline V zero() { return 0.0f; }
};

// fixed datapath: int64 mantissas; levels and de-quantized codes come from per-code tables.
struct FixD {
  typedef i64 V;
  Fx f;
  double lsb;
  i64 mu, sigma;
  const i64 *rt, *vt;
  FixD(const Fx& fx, const double* stats, const i64* rtab, const i64* vtab)
      : f(fx), lsb(std::ldexp(1.0, -fx.F)), mu(fx_q(fx, stats[0])), sigma(fx_q(fx, stats[1])), rt(rtab), vt(vtab) {}
  inline V q(double x) const { return fx_q(f, x); }
  inline V mul(V a, V b) const {
    const i64 p = a * b;  // |a|, |b| <= 2^32: exact
    return finish(f, f.F > 0 ? round_right(p, f.F, f.q) : p, false, p < 0);
  }
  inline V add(V a, V b) const { return finish(f, a + b, false, false); }
  inline V sub(V a, V b) const { return finish(f, a - b, false, false); }
  inline V level_c(double c, bool ok) const { return rt[ok ? (int)c : 0]; }
  inline V deq_c(double c, bool ok) const { return vt[ok ? (int)c : 0]; }
  inline double val(V a) const { return (double)a * lsb; }
  static inline V zero() { return 0; }
};

// c an integer in [0, lim), lim <= 2^16: converted only when in range (NaN and Inf fail the range)
static inline bool code_ok(double c, double lim) {
  const bool in = (c >= 0.0) & (c < lim);
  const double cc = in ? c : 0.0;
  return in & ((double)(int)cc == cc);
}

// fp32 datapath, results in fp32: 8 columns at a time (GCC vector types; the compiler does not
// vectorize the element loop by itself: mixed float / double lanes, selects on loaded values).
// The same operations in the same order as the element loop of run() below, lane by lane.
typedef double vd __attribute__((vector_size(64)));
typedef long long vl __attribute__((vector_size(64)));
typedef float vf __attribute__((vector_size(32)));
typedef int vi __attribute__((vector_size(32)));
typedef signed char vb8 __attribute__((vector_size(8)));
template <class X> static inline X ldv(const void* p) { X v; __builtin_memcpy(&v, p, sizeof v); return v; }
template <class X> static inline void stv(void* p, X v) { __builtin_memcpy(p, &v, sizeof v); }

static inline vl vcode_ok(vd c, double lim) {
  const vl in = (c >= 0.0) & (c < lim);
  const vd cc = in ? c : vd{};
  return in & (__builtin_convertvector(__builtin_convertvector(cc, vl), vd) == cc);
}

template <int K>
static long f32_row(const F32& D, float g, const float* cp, const double* rew, const double* val,
                    const double* done, const double* boot, long e0, long T, double lim, bool inner,
                    double row_issue, double II, double* adv, double* rtg, double* issue, const double* col,
                    float* d0, float* a0, unsigned char* c0, const float* const* dn, const float* const* an,
                    const unsigned char* const* cn, float* vr, vl& badv) {
  const long T8 = T & ~7L;
  const vf zero = {};
  const double half = (double)D.half;
  const vi inner_m = inner ? ~vi{} : vi{};
  for (long j = 0; j < T8; j += 8) {
    const long e = e0 + j;
    const vd rc = ldv<vd>(rew + e), vc = ldv<vd>(val + e), bc = ldv<vd>(boot + e), dd = ldv<vd>(done + e);
    const vl okd = (dd == 0.0) | (dd == 1.0) | (dd == 2.0);
    badv |= ~(vcode_ok(rc, lim) & vcode_ok(vc, lim) & vcode_ok(bc, lim) & okd);
    const vf r = __builtin_convertvector(rc - half, vf) * D.scale;
    const vf v = D.sigma * (__builtin_convertvector(vc - half, vf) * D.scale) + D.mu;
    const vf vb = D.sigma * (__builtin_convertvector(bc - half, vf) * D.scale) + D.mu;
    const vi is0 = __builtin_convertvector(dd == 0.0, vi), is1 = __builtin_convertvector(dd == 1.0, vi),
             is2 = __builtin_convertvector(dd == 2.0, vi);
    const vf vn = is1 ? zero : (is2 ? vb : ldv<vf>(vr + j));
    const vf delta = (r + g * vn) - v;
    const vi cont = is0 & inner_m;
    vi m[K + 1];
    m[1] = cont;
    for (int i = 2; i <= K; ++i) m[i] = m[i - 1] & __builtin_convertvector(ldv<vb8>(cn[i - 1] + j) != 0, vi);
    vf P = delta;
    if (K > 1) {
      P = m[K - 1] ? cp[K - 1] * ldv<vf>(dn[K - 1] + j) : zero;
      for (int i = K - 2; i >= 1; --i) P = P + (m[i] ? cp[i] * ldv<vf>(dn[i] + j) : zero);
      P = P + delta;
    }
    const vf A = P + (m[K] ? cp[K] * ldv<vf>(an[K] + j) : zero);
    stv(adv + e, __builtin_convertvector(A, vd));
    stv(rtg + e, __builtin_convertvector(A + v, vd));
    stv(issue + e, (ldv<vd>(col + j) + row_issue) * II);
    stv(d0 + j, delta);
    stv(a0 + j, A);
    stv(c0 + j, __builtin_convertvector(cont, vb8));
    stv(vr + j, v);
  }
  return T8;
}

template <int K, int OK, class Dp>
static int run(const Dp& D, typename Dp::V g, const typename Dp::V* cp, const double* rew, const double* val,
               const double* done, const double* boot, const double* last, long S, long T, int nb, long N, long II,
               const Out& O, double* __restrict adv, double* __restrict rtg, double* __restrict pe,
               double* __restrict issue, typename Dp::V* ring, unsigned char* ch, double* col) {
  typedef typename Dp::V V;
  const double lim = (double)(1L << nb);
  V* dh = ring;                   // dh[slot * T + j]: delta of the row in that slot
  V* ah = ring + (K + 1) * T;     // advantages (in D) of the last K + 1 rows
  V* vr = ring + 2 * (K + 1) * T; // v of the row above (t + 1), then of this row
  for (long i = 0; i < 2 * (K + 1) * T; ++i) ring[i] = Dp::zero();
  for (long i = 0; i < (K + 1) * T; ++i) ch[i] = 0;
  int bad = 0;
  vl badv = {};
  for (long j = 0; j < T; ++j) {
    bad |= !code_ok(last[j], lim);
    vr[j] = D.deq_c(last[j], code_ok(last[j], lim));
    pe[j] = (double)(j % N);
    col[j] = (double)(j / N) * (double)S;
  }
  const V zero = Dp::zero();
  for (long t = S - 1; t >= 0; --t) {
    const long sl = t % (K + 1);
    V* __restrict d0 = dh + sl * T;
    V* __restrict a0 = ah + sl * T;
    unsigned char* __restrict c0 = ch + sl * T;
    const V* dn[K + 1];
    const V* an[K + 1];
    const unsigned char* cn[K + 1];
    for (int i = 1; i <= K; ++i) {
      const long s2 = (t + i) % (K + 1);
      dn[i] = dh + s2 * T; an[i] = ah + s2 * T; cn[i] = ch + s2 * T;
    }
    const double row_issue = (double)(S - 1 - t);
    const bool last_row = t < S - 1;
    const long e0 = t * T;
    long j0 = 0;
    if constexpr (std::is_same<Dp, F32>::value && OK == 0)
      j0 = f32_row<K>(D, g, cp, rew, val, done, boot, e0, T, lim, last_row, row_issue, (double)II, adv, rtg,
                      issue, col, d0, a0, c0, dn, an, cn, vr, badv);
    for (long j = j0; j < T; ++j) {
      const long e = e0 + j;
      const double rc = rew[e], vc = val[e], bc = boot[e], dd = done[e];
      const bool okr = code_ok(rc, lim), okv = code_ok(vc, lim), okb = code_ok(bc, lim);
      const bool okd = (dd == 0.0) | (dd == 1.0) | (dd == 2.0);
      bad |= !(okr & okv & okb & okd);
      const V r = D.level_c(rc, okr);
      const V v = D.deq_c(vc, okv);
      const V vb = D.deq_c(bc, okb);
      const V vprev = vr[j];
      const V vn = dd == 1.0 ? zero : (dd == 2.0 ? vb : vprev);
      const V delta = D.sub(D.add(r, D.mul(g, vn)), v);
      const bool cont = (dd == 0.0) & last_row;
      bool m[K + 1];
      m[0] = true;
      m[1] = cont;
      for (int i = 2; i <= K; ++i) m[i] = m[i - 1] & (cn[i - 1][j] != 0);
      V P = delta;
      if (K > 1) {
        const V x = D.mul(cp[K - 1], dn[K - 1][j]);
        P = m[K - 1] ? x : zero;
        for (int i = K - 2; i >= 1; --i) {
          const V y = D.mul(cp[i], dn[i][j]);
          P = D.add(P, m[i] ? y : zero);
        }
        P = D.add(P, delta);
      }
      const V fb = D.mul(cp[K], an[K][j]);
      const V A = D.add(P, m[K] ? fb : zero);
      adv[e] = O.template of<OK>(D.val(A));
      rtg[e] = O.template of<OK>(D.val(D.add(A, v)));
      issue[e] = (col[j] + row_issue) * (double)II;
      d0[j] = delta;
      a0[j] = A;
      c0[j] = cont;
      vr[j] = v;
    }
  }
  for (int i = 0; i < 8; ++i) bad |= badv[i] != 0;
  return bad;
}

template <class Dp>
static int dispatch(int K, const Dp& D, const double* gl, const double* rew, const double* val, const double* done,
                    const double* boot, const double* last, long S, long T, int nb, long N, long II,
                    int okind, const Out& O, double* adv, double* rtg, double* pe, double* issue, void* work) {
  typedef typename Dp::V V;
  // constants as the PE holds them: g = D(gamma), C = D(g * D(lambda)), cp[i] = D(cp[i-1] * C)
  const V g = D.q(gl[0]);
  V cp[5];
  cp[0] = D.q(1.0);
  cp[1] = D.mul(g, D.q(gl[1]));
  for (int i = 2; i <= K; ++i) cp[i] = D.mul(cp[i - 1], cp[1]);
  V* ring = (V*)work;
  double* col = (double*)work + (2 * (K + 1) + 1) * T;  // (j / N) * S of each column
  unsigned char* ch = (unsigned char*)(col + T);
#define RUN(k, ok) \
  run<k, ok>(D, g, cp, rew, val, done, boot, last, S, T, nb, N, II, O, adv, rtg, pe, issue, ring, ch, col)
#define RUN_K(ok) (K == 1 ? RUN(1, ok) : K == 2 ? RUN(2, ok) : K == 3 ? RUN(3, ok) : RUN(4, ok))
  if constexpr (std::is_same<Dp, F32>::value) {  // an fp32 store of an fp32 datapath is the datapath
    return okind == 2 ? RUN_K(2) : RUN_K(0);
  } else {
    return okind == 0 ? RUN_K(0) : okind == 1 ? RUN_K(1) : RUN_K(2);
  }
#undef RUN_K
#undef RUN
}

// ints: S, T, bits, K, N, II; dfmt/ofmt: kind (0 fp32 / 1 fixed; ofmt: 0 datapath, 1 fp32, 2 fixed),
// W, F, signed, Q, O; gl: gamma, lambda; stats: mu, sigma (raw, rounded to D here).
// work: (2 (K+1) + 2) T words of 8 bytes + (K+1) T bytes, plus 2 * 2^bits words (fixed tables).
// Returns 0, or 1 when a code or done flag is invalid (the outputs are then meaningless).
extern "C" int rlhls_gae_model(const long* ints, const long* dfmt, const long* ofmt, const double* gl,
                               const double* stats, const double* rew, const double* val, const double* done,
                               const double* boot, const double* last, double* adv, double* rtg, double* pe,
                               double* issue, void* work) {
  const long S = ints[0], T = ints[1], N = ints[4], II = ints[5];
  const int nb = (int)ints[2], K = (int)ints[3];
  Out O;
  const int okind = (int)ofmt[0];
  O.f = mkfx(ofmt);
  O.lsb = std::ldexp(1.0, -O.f.F);
  if (dfmt[0] == 0) {
    F32 D(stats, nb);
    return dispatch(K, D, gl, rew, val, done, boot, last, S, T, nb, N, II, okind, O, adv, rtg, pe, issue, work);
  }
  const Fx f = mkfx(dfmt);
  i64* rt = (i64*)work + (2 * (K + 1) + 2) * T + ((K + 1) * T + 7) / 8;
  i64* vt = rt + (1L << nb);
  FixD D0(f, stats, rt, vt);
  for (long c = 0; c < (1L << nb); ++c) {
    const double l = ((double)c - (double)(1L << (nb - 1)) + 0.5) * std::ldexp(1.0, 3 - nb);
    rt[c] = fx_q(f, l);
    vt[c] = D0.add(D0.mul(D0.sigma, rt[c]), D0.mu);
  }
  return dispatch(K, D0, gl, rew, val, done, boot, last, S, T, nb, N, II, okind, O, adv, rtg, pe, issue, work);
}
"""


def _fx_desc(kind: int, f) -> list[int]:
    if isinstance(f, FixedFormat):
        return [kind, f.width, f.frac_bits, int(f.signed), QUANT_MODES.index(f.quant),
                OVERFLOW_MODES.index(f.overflow)]
    return [kind, 1, 0, 0, 0, 0]


_DESC: dict = {}


def _descs(D, O):
    """(datapath, result) format descriptors for the C loop, or None where it has no path."""
    key = (D, O)
    if key not in _DESC:
        fp32 = lambda f: isinstance(f, FloatFormat) and (f.exp_bits, f.man_bits) == (8, 23)  # noqa: E731
        if fp32(D):
            d = _fx_desc(0, D)
        elif isinstance(D, FixedFormat) and D.width + (not D.signed) <= 32 and 0 <= D.frac_bits <= 31:
            d = _fx_desc(1, D)
        else:
            d = None
        if O == D:
            o = _fx_desc(0, D)
        elif fp32(O):
            o = _fx_desc(1, O)
        elif isinstance(O, FixedFormat) and O.width <= 53:
            o = _fx_desc(2, O)
        else:
            o = None
        _DESC[key] = None if d is None or o is None else (np.array(d, np.int64), np.array(o, np.int64))
    return _DESC[key]


def _wrap(f):
    """gae_model(kernel, p, a) -> the model's outputs, or None where the numpy model must run."""
    from rlhls.designs.kernels.gae import _datapath, _out

    def gae_model(kernel, p, a):
        desc = _descs(_datapath(p), _out(p))
        if desc is None:
            return None
        S, T, nb, K = p["steps"], p["trajectories"], p["bits"], p["lookahead"]
        ints = np.array([S, T, nb, K, p["pes"], kernel.ii(p)], np.int64)
        gl = np.array([p["gamma"], p["lam"]], np.float64)
        c = [np.ascontiguousarray(a[n], dtype=np.float64) for n in
             ("value_stats", "reward_codes", "value_codes", "done", "bootstrap_codes", "last_value_codes")]
        adv, rtg, issue = np.empty((S, T)), np.empty((S, T)), np.empty((S, T))
        pe = np.empty(T)
        words = (2 * (K + 1) + 2) * T + ((K + 1) * T + 7) // 8 + (2 << nb if desc[0][0] else 0)
        work = np.empty(words, np.int64)
        bad = f(ints.ctypes.data, desc[0].ctypes.data, desc[1].ctypes.data, gl.ctypes.data,
                *(x.ctypes.data for x in c), adv.ctypes.data, rtg.ctypes.data, pe.ctypes.data,
                issue.ctypes.data, work.ctypes.data)
        if bad:
            return None  # the numpy model names the invalid input
        return {"advantages": adv, "returns": rtg, "pe": pe, "issue_cycle": issue}

    return gae_model


# (parameters, input variant) cases of the self-check: together every k, code widths 1..16, every
# quantization and overflow mode in the datapath and in the result store (with exact ties: 3-bit
# codes are half-integers, an odd sigma makes every sigma * level a tie, and a result store one
# fraction bit narrower than the datapath rounds a tie at every odd mantissa), wrap and saturation,
# fp32 overflow to Inf / NaN, T not a multiple of N nor of the 8-column blocks, S = 1 and T = 1.
CHECK_CASES = (
    (dict(trajectories=13, steps=23, bits=8, lookahead=1, pes=3), "random"),
    (dict(trajectories=17, steps=14, bits=12, lookahead=3, pes=16, gamma=1.0, lam=0.9), "dense_done"),
    (dict(trajectories=16, steps=9, bits=2, lookahead=4, pes=5), "random"),
    (dict(trajectories=9, steps=17, bits=8, lookahead=2, pes=4, gamma=0.999, lam=1.0), "dense_done"),
    (dict(trajectories=5, steps=13, bits=3, lookahead=3, pes=2, out="fixed<8,4,RND,SAT>"), "random"),
    (dict(trajectories=6, steps=11, bits=16, lookahead=4, pes=5, out="fixed<53,20,RND_INF,SAT_SYM>"), "random"),
    (dict(trajectories=3, steps=19, bits=1, lookahead=2, pes=2), "random"),
    (dict(trajectories=21, steps=12, bits=3, lookahead=2, pes=4, gamma=1.0, lam=1.0,
          out="fixed<8,8,RND_CONV,SAT>"), "ties"),
    (dict(trajectories=41, steps=10, bits=3, lookahead=4, pes=6, datapath="fixed<24,8,RND,SAT>",
          out="fixed<24,9,RND_ZERO,SAT>"), "ties"),
    (dict(trajectories=5, steps=21, bits=8, lookahead=4, pes=3, datapath="fixed<24,8,RND,SAT>"), "random"),
    (dict(trajectories=37, steps=15, bits=10, lookahead=1, pes=2, datapath="fixed<12,4,TRN,WRAP>"), "huge_stats"),
    (dict(trajectories=19, steps=14, bits=6, lookahead=2, pes=4, datapath="fixed<14,5,RND_CONV,SAT_SYM>",
          out="fp32"), "huge_stats"),
    (dict(trajectories=29, steps=11, bits=3, lookahead=3, pes=7, datapath="fixed<14,5,RND_CONV,SAT_SYM>",
          out="fixed<12,4,RND_INF,SAT_SYM>"), "ties"),
    (dict(trajectories=15, steps=12, bits=8, lookahead=3, pes=3, datapath="fixed<16,6,RND_ZERO,SAT_ZERO>",
          out="fixed<10,3,TRN_ZERO,WRAP>"), "huge_stats"),
    (dict(trajectories=33, steps=10, bits=3, lookahead=1, pes=5, datapath="fixed<16,6,RND_ZERO,SAT_ZERO>",
          out="fixed<13,4,RND_MIN_INF,SAT_ZERO>"), "ties"),
    (dict(trajectories=6, steps=16, bits=5, lookahead=4, pes=4, datapath="fixed<20,4,RND_MIN_INF,SAT>",
          out="ufixed<9,3,RND_CONV,SAT>"), "dense_done"),
    (dict(trajectories=27, steps=10, bits=3, lookahead=2, pes=4, datapath="fixed<20,4,RND_MIN_INF,SAT>",
          out="fixed<18,3,RND,WRAP>"), "ties"),
    (dict(trajectories=5, steps=10, bits=4, lookahead=2, pes=2, datapath="ufixed<18,9,TRN_ZERO,WRAP>",
          out="fixed<6,2,RND_ZERO,SAT_ZERO>"), "dense_done"),
    (dict(trajectories=4, steps=9, bits=8, lookahead=3, pes=4, datapath="fixed<32,2,RND_INF,SAT>", out="fp32"),
     "huge_stats"),
    (dict(trajectories=9, steps=8, bits=16, lookahead=2, pes=4, datapath="fixed<7,3,TRN,SAT>",
          out="fixed<7,2,RND_INF,WRAP>"), "dense_done"),
    (dict(trajectories=23, steps=10, bits=3, lookahead=2, pes=3, datapath="fixed<32,2,RND_INF,SAT>",
          out="fixed<31,2,RND_CONV,SAT_SYM>"), "ties"),
    (dict(trajectories=31, steps=10, bits=3, lookahead=4, pes=4, datapath="fixed<10,4,TRN_ZERO,SAT_SYM>",
          out="fixed<9,4,TRN_ZERO,SAT>"), "ties"),
    (dict(trajectories=12, steps=12, bits=8, lookahead=2, pes=2, out="fixed<12,2,RND,WRAP>"), "fp32_overflow"),
    (dict(trajectories=10, steps=12, bits=8, lookahead=4, pes=2), "fp32_overflow"),
    (dict(trajectories=14, steps=9, bits=8, lookahead=3, pes=4, out="fixed<12,2,RND,WRAP>"), "fp32_large"),
    (dict(trajectories=7, steps=9, bits=8, lookahead=1, pes=4, out="fixed<16,4,RND_INF,SAT_SYM>"), "fp32_large"),
    (dict(trajectories=1, steps=1, bits=8, lookahead=4, pes=1), "random"),
    (dict(trajectories=11, steps=1, bits=9, lookahead=2, pes=8), "dense_done"),
    (dict(trajectories=1, steps=30, bits=7, lookahead=1, pes=1, datapath="fixed<8,3,RND,SAT>"), "dense_done"),
)


def check_inputs(kernel, p, variant, rng):
    """Inputs of one self-check case: the kernel's random inputs, then made adversarial."""
    x = kernel.random_inputs(p, rng)
    S, T, n = p["steps"], p["trajectories"], p["bits"]
    if variant == "dense_done":  # an episode end every few steps, both kinds; extreme and middle codes
        x["done"] = rng.integers(0, 3, (S, T)).astype(np.float64)
        for name in ("reward_codes", "value_codes", "bootstrap_codes"):
            x[name].flat[:: 3] = (1 << n) - 1
            x[name].flat[1:: 5] = 0
            x[name].flat[2:: 7] = (1 << n) // 2 - 1  # the levels nearest 0 (+-2**(2-n))
            x[name].flat[4:: 7] = (1 << n) // 2
    elif variant == "huge_stats":  # de-quantized values and sums past the datapath's range
        x["value_stats"] = np.array([rng.choice([-1, 1]) * rng.uniform(1, 40), rng.uniform(3, 60)])
    elif variant == "fp32_overflow":  # fp32 values reaching Inf (and Inf - Inf = NaN)
        x["value_stats"] = np.array([3.0e38, 2.0e38])
    elif variant == "fp32_large":  # finite fp32 results far past a fixed store's int64 mantissas
        x["value_stats"] = np.array([rng.uniform(-1, 1) * 1e25, 1e24])
    elif variant == "ties":  # odd sigma and mu mantissas (fixed), half-integer values (fp32)
        D = kernel.formats(p)["datapath"]
        if isinstance(D, FixedFormat):
            odd = lambda v: (2 * np.floor(v / D.lsb / 2) + 1) * D.lsb  # noqa: E731
            x["value_stats"] = np.array([odd(rng.uniform(-1, 1)), odd(rng.uniform(0.6, 1.9))])
        else:
            x["value_stats"] = np.array([0.0, 1.0])
    return x


def same(a, b) -> bool:
    """Equal float64 bit patterns, NaN where the other has NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nan = np.isnan(a)
    return (a.shape == b.shape and np.array_equal(nan, np.isnan(b))
            and np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64)))


def check(model) -> bool:
    """``model`` (the wrapper) equals the numpy model bit for bit on every CHECK_CASES case."""
    from rlhls.designs.kernels.gae import GaeKernel

    k = GaeKernel()
    rng = np.random.default_rng(20)
    with np.errstate(over="ignore", invalid="ignore"):
        for ps, variant in CHECK_CASES:
            p = k.resolve(ps)
            a = k.check_arrays(p, check_inputs(k, p, variant, rng))
            got = model(k, p, a)
            ref = k.model_numpy(p, **a)
            if got is None or not all(same(ref[n], got[n]) for n in ref):
                log.debug("native gae: self-check failed at %s (%s)", ps, variant)
                return False
        # an invalid code or done flag (in an 8-column block and in the tail): no result
        p = k.resolve(dict(trajectories=11, steps=6, bits=4, lookahead=2, pes=3))
        for name, bad in INVALID:
            for pos in (2, -1):
                a = k.check_arrays(p, k.random_inputs(p, rng))
                a[name].flat[pos] = bad
                if model(k, p, a) is not None:
                    log.debug("native gae: self-check failed: %s = %r accepted", name, bad)
                    return False
    return True


INVALID = (("reward_codes", 16.0), ("value_codes", -1.0), ("bootstrap_codes", 2.5),
           ("last_value_codes", np.nan), ("done", 3.0), ("done", 0.5), ("reward_codes", np.inf))


def load(lib):
    """The checked wrapper of ``lib.rlhls_gae_model``, or None when the self-check fails."""
    f = lib.rlhls_gae_model
    f.argtypes = [ctypes.c_void_p] * 15
    f.restype = ctypes.c_int
    model = _wrap(f)
    return model if check(model) else None
