// HEPPO-GAE unit (seed 000 §III-B/C, §IV): N PE rows, round-robin trajectories, k-step lookahead,
// results written in place in the FILO row layout. The semantics (op order, one rounding per op,
// episode masks) are designs/kernels/gae.py's module docstring; this is its C++ twin.
#pragma once
#include <cmath>

#include "rlhls_types.h"

namespace rlgae {

// uq<NB> code -> standardized level (c - 2^(NB-1) + 1/2) * 2^(3-NB), exact in double, then D.
template <class D, int NB> inline D level(unsigned code) {
  const double l = ((double)code - (double)(1u << (NB - 1)) + 0.5) * std::ldexp(1.0, 3 - NB);
  return rl::from_d<D>(l);
}

// De-standardize a value code with the block's (mu, sigma): D(D(sigma * level) + mu).
template <class D, int NB> inline D deq(unsigned code, const D& mu, const D& sigma) {
  return rl::add<D>(rl::mul<D>(sigma, level<D, NB>(code)), mu);
}

// One PE row: the k-step lookahead registers of the trajectory it is working on.
template <class D, int K> struct PeState {
  D dh[K];     // dh[i-1] = delta_{t+i}, i = 1..K-1 (feed-forward taps)
  D ah[K];     // ah[i-1] = A_{t+i},     i = 1..K   (the K registers on the feedback loop)
  bool ch[K];  // ch[i-1] = cont_{t+i}
  D v_prev;    // V_{t+1} of this trajectory (the element popped one cycle earlier)
};

// Arrays are row-major [S][T] (row = timestep, Fig. 6); done: 0 continue, 1 terminated, 2 truncated.
template <class D, class O, class CODE, class DONE, class IDX, int T, int S, int NB, int K, int NPE, int II>
void run(const CODE* rew, const CODE* val, const DONE* done, const CODE* boot, const CODE* last,
         const D* stats, const D& gamma, const D& lambda, O* adv, O* rtg, IDX* pe_of, IDX* issue) {
  const D mu = stats[0], sigma = stats[1];
  const D zero = rl::from_d<D>(0.0);
  D cp[K + 1];  // C^i, C = gamma * lambda; cp[i] = D(cp[i-1] * C)
  cp[0] = rl::from_d<D>(1.0);
  cp[1] = rl::mul<D>(gamma, lambda);
  for (int i = 2; i <= K; ++i) cp[i] = rl::mul<D>(cp[i - 1], cp[1]);
  PeState<D, K> st[NPE];
  const int ROUNDS = (T + NPE - 1) / NPE;
rounds:
  for (int rd = 0; rd < ROUNDS; ++rd) {
  pop:  // FILO: row S-1 first
    for (int s = 0; s < S; ++s) {
#pragma HLS PIPELINE II = II
      const int t = S - 1 - s;
    pes:
      for (int p = 0; p < NPE; ++p) {
#pragma HLS UNROLL
        const int j = rd * NPE + p;
        if (j >= T) continue;
        PeState<D, K>& q = st[p];
        if (s == 0) {  // a new trajectory: empty lookahead registers
          for (int i = 0; i < K; ++i) { q.dh[i] = zero; q.ah[i] = zero; q.ch[i] = false; }
        }
        const int e = t * T + j;
        const D r = level<D, NB>(rew[e].to_uint());
        const D v = deq<D, NB>(val[e].to_uint(), mu, sigma);
        const unsigned d = done[e].to_uint();
        const D vnext = (s == 0) ? deq<D, NB>(last[j].to_uint(), mu, sigma) : q.v_prev;
        const D vn = d == 1 ? zero : (d == 2 ? deq<D, NB>(boot[e].to_uint(), mu, sigma) : vnext);
        const D delta = rl::sub<D>(rl::add<D>(r, rl::mul<D>(gamma, vn)), v);
        const bool cont = d == 0 && s != 0;
        bool m[K + 1];  // m[i]: no episode end between t and t+i
        m[0] = true;
        m[1] = cont;
        for (int i = 2; i <= K; ++i) m[i] = m[i - 1] && q.ch[i - 2];
        D P = delta;
        if (K > 1) {
          P = m[K - 1] ? rl::mul<D>(cp[K - 1], q.dh[K > 1 ? K - 2 : 0]) : zero;
          for (int i = K - 2; i >= 1; --i) P = rl::add<D>(P, m[i] ? rl::mul<D>(cp[i], q.dh[i - 1]) : zero);
          P = rl::add<D>(P, delta);
        }
        const D fb = m[K] ? rl::mul<D>(cp[K], q.ah[K - 1]) : zero;
        const D A = rl::add<D>(P, fb);
        adv[e] = rl::cast<O>(A);  // in place over the reward code (same row, same column)
        rtg[e] = rl::cast<O>(rl::add<D>(A, v));
        issue[e] = IDX((long long)(rd * S + s) * II);
        if (s == 0) pe_of[j] = IDX(p);
        for (int i = K - 1; i > 0; --i) { q.dh[i] = q.dh[i - 1]; q.ah[i] = q.ah[i - 1]; q.ch[i] = q.ch[i - 1]; }
        q.dh[0] = delta;
        q.ah[0] = A;
        q.ch[0] = cont;
        q.v_prev = v;
      }
    }
  }
}

}  // namespace rlgae
