// CPP's FVP unit (seed 001 §III-D/E): Type A and Type B blocked layers (Fig. 1) cascaded A-B-A-B
// (Fig. 2), the tanh unit and the per-sample FVP accumulators. The semantics (one rounding per
// operation, step order of the sums) are designs/kernels/fvp.py's module docstring; this is its
// C++ twin. Vectors are blocked: element i of an n-vector with p blocks of c = ceil(n/p) steps is
// in block i / c at step i % c; padded elements (stream padding) are zero and meet zero weights.
#pragma once
#include <cmath>

#include "rlhls_types.h"

namespace rlfvp {

// Extra integer bits that hold the exact sum of n values.
constexpr int guard(int n) { return n <= 1 ? 1 : 1 + guard((n + 1) / 2); }

template <class A, int N> struct wide {  // exact sum of N values of A
  typedef ap_fixed<A::width + guard(N), A::iwidth + guard(N)> type;
};

// tanh: table T[k] = S(tanh(k 2^-TB)) and linear interpolation on |x| (odd symmetry).
template <class S, int TB> struct Tanh {
  static const int W = S::width, I = S::iwidth, F = W - I;
  static const int NT = (1 << (I - 1 + TB)) + 2;
  S t[NT];
  Tanh() {
    for (int k = 0; k < NT; ++k) t[k] = S(std::tanh(std::ldexp((double)k, -TB)));
  }
  S operator()(const S& x) const {
    typedef ap_ufixed<W, I> mag_t;  // |x| <= 2^(I-1): exact
    const bool neg = x < 0;
    const mag_t a = neg ? mag_t(-x) : mag_t(x);
    const int k = (int)a.range(W - 1, F - TB).to_uint64();
    ap_ufixed<F - TB, 0> f;
    f.range(F - TB - 1, 0) = a.range(F - TB - 1, 0).to_uint64();
    const S y = S(t[k] + f * (t[k + 1] - t[k]));
    return neg ? S(-y) : y;
  }
};

// One policy layer: n_in -> n_out with PI x PO blocks; its weights, direction and accumulators.
template <class S, class A, int NI, int NO, int PI, int PO> struct Layer {
  static const int CI = (NI + PI - 1) / PI, CO = (NO + PO - 1) / PO;
  static const int NIP = PI * CI, NOP = PO * CO;  // padded lengths
  typedef typename wide<A, PI>::type fsum_t;       // a step of x: PI products
  typedef typename wide<A, 2 * PI>::type rsum_t;   // a step of R{x}: 2 PI products
  typedef typename wide<A, PO>::type bsum_t;       // a step of the backward: PO products

  S w[NIP][NOP];   // W, read by the forward block
  S wb[NIP][NOP];  // W again, read by the backward block (its own port)
  S vw[NIP][NOP];  // V: the direction's part for W
  S b[NOP], vb[NOP];
  A f[NIP][NOP], fb[NOP];  // FVP accumulators (eq. 19 summed over the samples)

  // theta and v in (row-major W, V), accumulators cleared; padding zero.
  void load(const S* W, const S* B, const S* VW, const S* VB) {
  rows:
    for (int i = 0; i < NIP; ++i) {
    cols:
      for (int j = 0; j < NOP; ++j) {
#pragma HLS PIPELINE II = 1
        const bool in = i < NI && j < NO;
        w[i][j] = in ? W[i * NO + j] : S(0);
        wb[i][j] = w[i][j];
        vw[i][j] = in ? VW[i * NO + j] : S(0);
        f[i][j] = A(0);
      }
    }
    for (int j = 0; j < NOP; ++j) {
      b[j] = j < NO ? B[j] : S(0);
      vb[j] = j < NO ? VB[j] : S(0);
      fb[j] = A(0);
    }
  }

  // One forward term of step t for output j: x gets y w, R{x} gets R{y} w (RY) + y v.
  template <bool RY> void fwd_step(const S* y, const S* ry, int t, int j, A& acc, A& racc) const {
    fsum_t s = 0;
    rsum_t rs = 0;
  blocks_in:
    for (int k = 0; k < PI; ++k) {
#pragma HLS UNROLL
      const int i = k * CI + t;
      s += rl::mul<A>(y[i], w[i][j]);
      if (RY) rs += rl::mul<A>(ry[i], w[i][j]);
      rs += rl::mul<A>(y[i], vw[i][j]);
    }
    acc = rl::add<A>(acc, s);
    racc = rl::add<A>(racc, rs);
  }

  // Type A forward (odd layers): inner loop over the input, output step u final after it.
  template <bool RY> void fwd_a(const S* y, const S* ry, S* x, S* rx) const {
  outer:
    for (int u = 0; u < CO; ++u) {
      A acc[PO], racc[PO];
#pragma HLS ARRAY_PARTITION variable = acc complete
#pragma HLS ARRAY_PARTITION variable = racc complete
      for (int q = 0; q < PO; ++q) {
        acc[q] = rl::cast<A>(b[q * CO + u]);
        racc[q] = rl::cast<A>(vb[q * CO + u]);
      }
    inner:
      for (int t = 0; t < CI; ++t) {
#pragma HLS PIPELINE II = 1
        for (int q = 0; q < PO; ++q) fwd_step<RY>(y, ry, t, q * CO + u, acc[q], racc[q]);
      }
      for (int q = 0; q < PO; ++q) {
        x[q * CO + u] = rl::cast<S>(acc[q]);
        rx[q * CO + u] = rl::cast<S>(racc[q]);
      }
    }
  }

  // Type B forward (even layers): outer loop over the input, partial results buffered.
  template <bool RY> void fwd_b(const S* y, const S* ry, S* x, S* rx) const {
    A acc[NOP], racc[NOP];
#pragma HLS ARRAY_PARTITION variable = acc block factor = PO
#pragma HLS ARRAY_PARTITION variable = racc block factor = PO
    for (int j = 0; j < NOP; ++j) {
      acc[j] = rl::cast<A>(b[j]);
      racc[j] = rl::cast<A>(vb[j]);
    }
  outer:
    for (int t = 0; t < CI; ++t) {
    inner:
      for (int u = 0; u < CO; ++u) {
#pragma HLS PIPELINE II = 1
        for (int q = 0; q < PO; ++q) fwd_step<RY>(y, ry, t, q * CO + u, acc[q * CO + u], racc[q * CO + u]);
      }
    }
    for (int j = 0; j < NOP; ++j) {
      x[j] = rl::cast<S>(acc[j]);
      rx[j] = rl::cast<S>(racc[j]);
    }
  }

  // One backward term of input step t for output i: R{dE/dy_i} gets w r (DY); F_ij += y_i r_j.
  template <bool DY> void bwd_step(const S* y, const S* r, int t, int i, A& acc) {
    bsum_t s = 0;
  blocks_in:
    for (int q = 0; q < PO; ++q) {
#pragma HLS UNROLL
      const int j = q * CO + t;
      if (DY) s += rl::mul<A>(wb[i][j], r[j]);
      f[i][j] = rl::add<A>(f[i][j], rl::mul<A>(y[i], r[j]));
    }
    if (DY) acc = rl::add<A>(acc, s);
  }

  void bias_acc(const S* r) {
    for (int j = 0; j < NOP; ++j) fb[j] = rl::add<A>(fb[j], rl::cast<A>(r[j]));
  }

  // Type A backward (even layers): outer loop over the output (rows of W), inner over r.
  template <bool DY> void bwd_a(const S* y, const S* r, S* rdy) {
  outer:
    for (int u = 0; u < CI; ++u) {
      A acc[PI];
#pragma HLS ARRAY_PARTITION variable = acc complete
      for (int k = 0; k < PI; ++k) acc[k] = A(0);
    inner:
      for (int t = 0; t < CO; ++t) {
#pragma HLS PIPELINE II = 1
        for (int k = 0; k < PI; ++k) bwd_step<DY>(y, r, t, k * CI + u, acc[k]);
      }
      if (DY)
        for (int k = 0; k < PI; ++k) rdy[k * CI + u] = rl::cast<S>(acc[k]);
    }
    bias_acc(r);
  }

  // Type B backward (odd layers): outer loop over r, partial results buffered.
  template <bool DY> void bwd_b(const S* y, const S* r, S* rdy) {
    A acc[NIP];
#pragma HLS ARRAY_PARTITION variable = acc block factor = PI
    for (int i = 0; i < NIP; ++i) acc[i] = A(0);
  outer:
    for (int t = 0; t < CO; ++t) {
    inner:
      for (int u = 0; u < CI; ++u) {
#pragma HLS PIPELINE II = 1
        for (int k = 0; k < PI; ++k) bwd_step<DY>(y, r, t, k * CI + u, acc[k * CI + u]);
      }
    }
    if (DY)
      for (int i = 0; i < NIP; ++i) rdy[i] = rl::cast<S>(acc[i]);
    bias_acc(r);
  }

  // The accumulated FVP of W and b out, unpadded, in the parameter layout.
  template <class O> void store(O* F, O* FB) const {
    for (int i = 0; i < NI; ++i)
      for (int j = 0; j < NO; ++j) {
#pragma HLS PIPELINE II = 1
        F[i * NO + j] = f[i][j];
      }
    for (int j = 0; j < NO; ++j) FB[j] = fb[j];
  }
};

// Hidden-layer lanes after the forward block: y = tanh(x), d = S(1 - y y) (sigma'), R{y} = S(R{x} d).
template <class S, class T, int N> void hidden(const T& act, const S* x, const S* rx, S* y, S* ry, S* d) {
  for (int j = 0; j < N; ++j) {
#pragma HLS PIPELINE II = 1
    y[j] = act(x[j]);
    d[j] = S(S(1) - y[j] * y[j]);
    ry[j] = rl::mul<S>(rx[j], d[j]);
  }
}

// r = S(d R{dE/dy}) on the backward side of a hidden layer.
template <class S, int N> void dsig(const S* d, const S* rdy, S* r) {
  for (int j = 0; j < N; ++j) {
#pragma HLS PIPELINE II = 1
    r[j] = rl::mul<S>(d[j], rdy[j]);
  }
}

}  // namespace rlfvp
