// HEPPO-GAE reward/value standardizer + uq<NB> quantizer (seed 000 §II-A/B/C). The semantics
// (numpy's pairwise summation order, Welford merge, fp32 / fp64 per-element datapath, encoding)
// are designs/kernels/standardizer.py's module docstring; this is its C++ twin. Statistics are
// float64 throughout: the running state outlives any rollout (n passes 2^24) and the trainer's
// statistics (designs/quantizer.py) are float64 in numpy's order, which this reproduces.
#pragma once
#include <cmath>

#include "rlhls_types.h"

namespace rlstd {

const int PW_BLOCK = 128;  // numpy's PW_BLOCKSIZE: leaves of the pairwise tree
const int PW_STACK = 64;   // tree depth bound (log2 of 2^31 elements, with margin)

// Element i of a block in float64: x_i (SQ = 0) or (x_i - m)^2 (SQ = 1).
template <int SQ, class X> inline double elem(const X* a, int i, double m) {
  const double x = rl::to_d(a[i]);
  if (SQ) {
    const double d = x - m;
    return d * d;
  }
  return x;
}

// One leaf (n <= 128): 8 interleaved partial sums, as numpy's unrolled leaf.
template <int SQ, class X> double leaf(const X* a, int s, int n, double m) {
  if (n < 8) {
    double res = -0.0;
    for (int i = 0; i < n; ++i) res += elem<SQ>(a, s + i, m);
    return res;
  }
  double r[8];
#pragma HLS ARRAY_PARTITION variable = r complete
  for (int j = 0; j < 8; ++j) r[j] = elem<SQ>(a, s + j, m);
  int i = 8;
leaf_rows:
  for (; i < n - n % 8; i += 8) {
#pragma HLS PIPELINE II = 1
    for (int j = 0; j < 8; ++j) r[j] += elem<SQ>(a, s + i + j, m);
  }
  double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
  for (; i < n; ++i) res += elem<SQ>(a, s + i, m);
  return res;
}

// numpy's np.sum of a[0..n): 0.0 + the pairwise tree (split at n/2 rounded down to a multiple of
// 8), evaluated in post-order with an explicit stack (HLS has no recursion).
template <int SQ, class X> double pairwise_sum(const X* a, int n, double m) {
  int fs[PW_STACK], fn[PW_STACK], stage[PW_STACK];
  double left[PW_STACK];
  int sp = 0;
  fs[0] = 0;
  fn[0] = n;
  stage[0] = 0;
  double ret = 0.0;
tree:
  for (;;) {
#pragma HLS LOOP_TRIPCOUNT max = 4096
    const int s = fs[sp], len = fn[sp];
    if (len <= PW_BLOCK) {
      ret = leaf<SQ>(a, s, len, m);
    } else {
      int h = len / 2;
      h -= h % 8;
      if (stage[sp] == 0) {  // descend left
        stage[sp] = 1;
        fs[sp + 1] = s;
        fn[sp + 1] = h;
        stage[sp + 1] = 0;
        ++sp;
        continue;
      }
      if (stage[sp] == 1) {  // left done: keep it, descend right
        left[sp] = ret;
        stage[sp] = 2;
        fs[sp + 1] = s + h;
        fn[sp + 1] = len - h;
        stage[sp + 1] = 0;
        ++sp;
        continue;
      }
      ret = left[sp] + ret;
    }
    if (sp == 0) break;
    --sp;
  }
  return 0.0 + ret;
}

inline double safe_sigma(double s) { return (std::isfinite(s) && s > 0) ? s : 1.0; }

// uq<NB> code of a standardized z: floor(z * 2^(NB-3)) saturated, offset binary (ap_fixed<NB,3,
// AP_TRN,AP_SAT> bits); counts z >= 4, z < -4 and NaN (code 2^(NB-1)) as overflows.
template <int NB> inline unsigned encode(double z, long long& ovf) {
  const double H = (double)(1u << (NB - 1));
  if (z != z) {
    ++ovf;
    return 1u << (NB - 1);
  }
  const double y = std::floor(std::ldexp(z, NB - 3));  // exact for NB >= 3
  if (y < -H) {
    ++ovf;
    return 0;
  }
  if (y > H - 1) {
    ++ovf;
    return (1u << NB) - 1;
  }
  return (unsigned)(long long)(y + H);
}

// Standardize + encode n words of a block, L per cycle: fp32 (RECIP) z = D(D(D(x) - mD) * g),
// else z = (x - mu) / sigma in float64.
template <class X, class D, class CODE, int NB, int RECIP, int L>
void quantize(const X* a, int n, double mu, double sigma, CODE* out, long long& ovf) {
  const D mD = rl::from_d<D>(mu);
  const D g = rl::from_d<D>(1.0 / sigma);
encode_pass:
  for (int i = 0; i < n; ++i) {
#pragma HLS PIPELINE II = 1
#pragma HLS UNROLL factor = L
    double z;
    if (RECIP) {
      const D x = rl::from_d<D>(rl::to_d(a[i]));
      z = rl::to_d(rl::mul<D>(rl::sub<D>(x, mD), g));
    } else {
      z = (rl::to_d(a[i]) - mu) / sigma;
    }
    out[i] = CODE(encode<NB>(z, ovf));
  }
}

// One rollout (arrays row-major [S][T]; done: 0 continue, 1 terminated, 2 truncated).
template <class X, class D, class CODE, class DONE, class CNT, int S, int T, int NB, int L, int DYN, int RECIP>
void run(const X* rewards, const X* values, const DONE* done, const X* trunc_values, const X* bootstrap,
         const double* state_in, CODE* reward_codes, CODE* value_codes, CODE* last_value_codes,
         CODE* bootstrap_codes, double* state_out, double* reward_stats, double* value_stats, CNT* overflow) {
  const int M = S * T;
  // On-chip rollout buffers (the PS->PL load); the value block: values, bootstrap row, truncations.
  static X rb[S * T];
  static X vb[(2 * S + 1) * T];
  static CODE vc[(2 * S + 1) * T];
#pragma HLS ARRAY_PARTITION variable = rb cyclic factor = L
#pragma HLS ARRAY_PARTITION variable = vb cyclic factor = L
  int mv = M + T;
load:
  for (int e = 0; e < M; ++e) {
#pragma HLS PIPELINE II = 1
    rb[e] = rewards[e];
    vb[e] = values[e];
  }
  for (int j = 0; j < T; ++j) vb[M + j] = bootstrap[j];
  for (int e = 0; e < M; ++e)
    if (done[e].to_uint() == 2) vb[mv++] = trunc_values[e];

  // Rewards: dynamic (Chan's merge into the running state) or one block.
  const double rmean = pairwise_sum<0>(rb, M, 0.0) / (double)M;
  const double rm2 = pairwise_sum<1>(rb, M, rmean);
  const double n0 = state_in[0], m0 = state_in[1], s0 = state_in[2];
  double r_mu, r_sigma;
  if (DYN) {
    const unsigned long long n = (unsigned long long)n0 + (unsigned long long)M;
    const double d = rmean - m0;
    const double m = m0 + d * (double)M / (double)n;
    const double s = s0 + rm2 + d * d * n0 * (double)M / (double)n;
    state_out[0] = (double)n;
    state_out[1] = m;
    state_out[2] = s;
    r_mu = m;
    r_sigma = safe_sigma(std::sqrt(s / (double)n));
  } else {
    state_out[0] = n0;
    state_out[1] = m0;
    state_out[2] = s0;
    r_mu = rmean;
    r_sigma = safe_sigma(std::sqrt(rm2 / (double)M));
  }
  long long r_ovf = 0, v_ovf = 0;
  quantize<X, D, CODE, NB, RECIP, L>(rb, M, r_mu, r_sigma, reward_codes, r_ovf);

  // Values: one block.
  const double vmean = pairwise_sum<0>(vb, mv, 0.0) / (double)mv;
  const double vm2 = pairwise_sum<1>(vb, mv, vmean);
  const double v_sigma = safe_sigma(std::sqrt(vm2 / (double)mv));
  quantize<X, D, CODE, NB, RECIP, L>(vb, mv, vmean, v_sigma, vc, v_ovf);
  for (int e = 0; e < M; ++e) value_codes[e] = vc[e];
  for (int j = 0; j < T; ++j) last_value_codes[j] = vc[M + j];
  int k = M + T;
  for (int e = 0; e < M; ++e) bootstrap_codes[e] = done[e].to_uint() == 2 ? vc[k++] : CODE(0);

  reward_stats[0] = r_mu;
  reward_stats[1] = r_sigma;
  value_stats[0] = vmean;
  value_stats[1] = v_sigma;
  overflow[0] = CNT(r_ovf);
  overflow[1] = CNT(v_ovf);
}

}  // namespace rlstd
