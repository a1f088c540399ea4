// F-DDPG's gradient kernel (seed 002 §III): the processing elements and activation units of the
// whole DDPG gradient in fixed point. Semantics (one rounding per stored value, the MADD trees'
// exact sums, the saturating accumulator) are designs/kernels/ddpg_gradient.py's module docstring;
// this is its C++ twin. The generated top (vitis/templates/ddpg_gradient.cpp.j2) wires the layers.
#pragma once
#include <cmath>

#include "rlhls_types.h"

namespace rlddpg {

// Extra integer bits that hold the exact sum of n values.
constexpr int guard(int n) { return n <= 1 ? 1 : 1 + guard((n + 1) / 2); }

// The exact sum of T products of type A (a MADD tree's adder tree).
template <class A, int T> struct tree {
  typedef ap_fixed<A::width + guard(T), A::iwidth + guard(T)> type;
};

// Matrix product Y = S(init + X Z) with Y (N x M), X(n, i) = x[n * xr + i * xi], Z(i, j) = z[i * zi + j * zj]
// (i < K), init = A(b[j]) or 0. Every output: acc = init; for each chunk of T terms (ascending i)
// acc = A(acc + exact tree sum of A(X * Z)); Y = S(acc). The two PEs differ in the order they visit
// the outputs, never in an output's own sums: the bits are the same.
template <class S, class A, int T, int R, int C, int MAXM> struct Pe {
  typedef typename tree<A, T>::type W;

  static W madd(const S* x, int xi, const S* z, int zi, int i0, int K) {
    W t = 0;
  tree_:
    for (int j = 0; j < T; ++j) {
#pragma HLS UNROLL
      if (i0 + j < K) t += A(x[(i0 + j) * xi] * z[(i0 + j) * zi]);
    }
    return t;
  }

  // Odd layer (§III-A, Fig. 1): R x C MADD trees; column-major over the weights (every row block
  // against C input columns), each tree walks its dot product T terms a cycle.
  static void odd(const S* x, int xr, int xi, const S* z, int zi, int zj, const S* b, S* y, int N, int K, int M) {
  col_blocks:
    for (int n0 = 0; n0 < N; n0 += C) {
    row_blocks:
      for (int m0 = 0; m0 < M; m0 += R) {
      trees:
        for (int c = 0; c < C; ++c) {
          for (int r = 0; r < R; ++r) {
            const int n = n0 + c, m = m0 + r;
            if (n >= N || m >= M) continue;
            A acc = b ? A(b[m]) : A(0);
          steps:
            for (int i0 = 0; i0 < K; i0 += T) {
#pragma HLS PIPELINE II = 1
              acc = A(acc + madd(x + n * xr, xi, z + m * zj, zi, i0, K));
            }
            y[n * M + m] = S(acc);
          }
        }
      }
    }
  }

  // Even layer (§III-B): rows first; C trees update one output row a cycle in a bank of accumulators
  // (the bank is revisited every M cycles: M padded to the loop latency), a burst per column block.
  static void even(const S* x, int xr, int xi, const S* z, int zi, int zj, const S* b, S* y, int N, int K, int M) {
    static A acc[C][MAXM];
#pragma HLS ARRAY_PARTITION variable = acc complete dim = 1
  col_blocks:
    for (int n0 = 0; n0 < N; n0 += C) {
      for (int c = 0; c < C; ++c)
        for (int m = 0; m < M; ++m) acc[c][m] = b ? A(b[m]) : A(0);
    steps:
      for (int i0 = 0; i0 < K; i0 += T) {
      rows:
        for (int m = 0; m < M; ++m) {
#pragma HLS PIPELINE II = 1
          for (int c = 0; c < C; ++c) {
#pragma HLS UNROLL
            const int n = n0 + c;
            if (n < N) acc[c][m] = A(acc[c][m] + madd(x + n * xr, xi, z + m * zj, zi, i0, K));
          }
        }
      }
    burst:
      for (int c = 0; c < C; ++c)
        if (n0 + c < N)
          for (int m = 0; m < M; ++m) y[(n0 + c) * M + m] = S(acc[c][m]);
    }
  }

  static void mm(bool is_odd, const S* x, int xr, int xi, const S* z, int zi, int zj, const S* b, S* y, int N, int K,
                 int M) {
    if (is_odd)
      odd(x, xr, xi, z, zi, zj, b, y, N, K, M);
    else
      even(x, xr, xi, z, zi, zj, b, y, N, K, M);
  }

  // Bias gradient: S(sum over the N rows of d (N x M)), chunks of T rows per tree.
  static void rowsum(const S* d, S* out, int N, int M) {
    for (int m = 0; m < M; ++m) {
      A acc = 0;
      for (int n0 = 0; n0 < N; n0 += T) {
        W t = 0;
        for (int j = 0; j < T; ++j)
          if (n0 + j < N) t += A(d[(n0 + j) * M + m]);
        acc = A(acc + t);
      }
      out[m] = S(acc);
    }
  }
};

// hls4ml's tanh table (designs/lut.py): N entries over [-4, 4), the C library's tanhf stored in S;
// index trunc(x N / 8) + N / 2, clipped.
template <class S, int N> struct TanhTable {
  S t[N];
  TanhTable() {
    for (int i = 0; i < N; ++i) {
      const float in = (float)(8.0 * (i - N / 2.0) / N);
      t[i] = S(tanhf(in));
    }
  }
  S operator()(const S& x) const {
    const int r = (int)(rl::to_d(x) * (N / 8.0));
    int idx = r + N / 2;
    idx = idx < 0 ? 0 : (idx > N - 1 ? N - 1 : idx);
    return t[idx];
  }
};

// Activation units: the value for the next layer and the gradient stored for the backward pass.
template <class S> void relu(const S* z, S* h, bool* mask, int n) {
  for (int i = 0; i < n; ++i) {
    mask[i] = z[i] > 0;
    h[i] = mask[i] ? z[i] : S(0);
  }
}

template <class S, int N> void tanh_unit(const TanhTable<S, N>& tab, const S* z, S* t, S* g, int n) {
  typedef ap_fixed<2 * S::width + 2, 2 * S::iwidth + 2> wide_t;
  for (int i = 0; i < n; ++i) {
    t[i] = tab(z[i]);
    g[i] = S(wide_t(1) - wide_t(t[i] * t[i]));  // 1 - t^2, one rounding
  }
}

// d *= mask (the ReLU's stored gradient)
template <class S> void mask_grad(S* d, const bool* mask, int n) {
  for (int i = 0; i < n; ++i)
    if (!mask[i]) d[i] = 0;
}

// Padded on-chip copy of a K x M block of a packed row-major matrix (stream padding: zeros).
template <class S> void load(const S* src, int K, int M, S* dst, int KP, int MP, int row0 = 0) {
  for (int k = 0; k < KP; ++k)
    for (int m = 0; m < MP; ++m) dst[k * MP + m] = (k < K && m < M) ? src[(row0 + k) * M + m] : S(0);
}

// The unpadded K x M block of a padded matrix, back into a packed vector.
template <class S> void store(const S* src, int MP, int K, int M, S* dst, int row0 = 0) {
  for (int k = 0; k < K; ++k)
    for (int m = 0; m < M; ++m) dst[(row0 + k) * M + m] = src[k * MP + m];
}

}  // namespace rlddpg
