// HEPPO-GAE unit (seed 000 §III-B/C, §IV): N PE rows, round-robin trajectories, k-step lookahead,
// the rollout on chip in the FILO row layout of Fig. 6 (dual-port BRAM), results written in place.
// The semantics (op order, one rounding per op, episode masks) are designs/kernels/gae.py's module
// docstring; this is its C++ twin. The memory is gae.py's memory_layout: word = max(NB, out bits).
#pragma once
#include <cmath>
#include <cstdint>

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

// The bits of a result in a memory word and back (the in-place overwrite keeps every bit).
template <class X> struct Bits {  // ap_fixed / ap_ufixed
  static const int W = X::width;
  template <class WORD> static WORD put(const X& x) {
    WORD w = 0;
    w.range(W - 1, 0) = x.range(W - 1, 0);
    return w;
  }
  template <class WORD> static X get(const WORD& w) {
    X x;
    x.range(W - 1, 0) = w.range(W - 1, 0);
    return x;
  }
};
template <> struct Bits<float> {
  static const int W = 32;
  union U { float f; uint32_t u; };
  template <class WORD> static WORD put(const float& x) {
    U c;
    c.f = x;
    return WORD(c.u);
  }
  template <class WORD> static float get(const WORD& w) {
    U c;
    c.u = (uint32_t)w.to_uint();
    return c.f;
  }
};

// The FILO stack of Fig. 6 (gae.py memory_layout): S rows of T words in each of BRAM0 / BRAM1.
template <class O, int T, int S, int NB> struct Stack {
  static const int WORD_BITS = NB > Bits<O>::W ? NB : Bits<O>::W;
  static const long BITS = 2L * S * T * WORD_BITS;
  typedef ap_uint<WORD_BITS> word_t;
};

// One PE row: the k-step lookahead registers of the trajectory it is working on.
template <class D, int K> struct PeState {
  D dh[K];     // dh[i-1] = delta_{t+i}, i = 1..K-1 (feed-forward taps)
  D ah[K];     // ah[i-1] = A_{t+i},     i = 1..K   (the K registers on the feedback loop)
  bool ch[K];  // ch[i-1] = cont_{t+i}
  D v_prev;    // V_{t+1} of this trajectory (the element popped one cycle earlier)
};

// Arrays are row-major [S][T] (row = timestep, Fig. 6); done: 0 continue, 1 terminated, 2 truncated.
// The host's rollout is pushed once into the on-chip stack (push, t = 0..S-1), the PEs pop it from
// row S-1 and overwrite each code with its result, and the results leave once (drain).
template <class D, class O, class CODE, class DONE, class IDX, int T, int S, int NB, int K, int NPE, int II>
void run(const CODE* rew, const CODE* val, const DONE* done, const CODE* boot, const CODE* last,
         const D* stats, const D& gamma, const D& lambda, O* adv, O* rtg, IDX* pe_of, IDX* issue) {
  typedef typename Stack<O, T, S, NB>::word_t word_t;  // a code, later a result in place
  typedef ap_uint<NB + 2> ep_t;  // episode word: done (2 bits) over the bootstrap code
  // BRAM0: reward codes, then advantages; BRAM1: value codes, then rewards-to-go (Fig. 6). True
  // dual port: the PE reads an element and writes its result in the same cycle; one bank per PE.
  static word_t rmb[S][T];
  static word_t vmb[S][T];
  static ep_t emb[S][T];
  static CODE lmb[T];
#pragma HLS BIND_STORAGE variable = rmb type = ram_t2p impl = bram
#pragma HLS BIND_STORAGE variable = vmb type = ram_t2p impl = bram
#pragma HLS ARRAY_PARTITION variable = rmb cyclic factor = NPE dim = 2
#pragma HLS ARRAY_PARTITION variable = vmb cyclic factor = NPE dim = 2
#pragma HLS ARRAY_PARTITION variable = emb cyclic factor = NPE dim = 2
push:
  for (int e = 0; e < S * T; ++e) {
#pragma HLS PIPELINE II = 1
    const int t = e / T, j = e % T;
    rmb[t][j] = word_t(rew[e].to_uint());
    vmb[t][j] = word_t(val[e].to_uint());
    emb[t][j] = (ep_t(done[e].to_uint()) << NB) | ep_t(boot[e].to_uint());
  }
push_last:
  for (int j = 0; j < T; ++j) {
#pragma HLS PIPELINE II = 1
    lmb[j] = last[j];
  }
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
        const D r = level<D, NB>(rmb[t][j].range(NB - 1, 0).to_uint());
        const D v = deq<D, NB>(vmb[t][j].range(NB - 1, 0).to_uint(), mu, sigma);
        const ep_t ep = emb[t][j];
        const unsigned d = ep.range(NB + 1, NB).to_uint();
        const D vnext = (s == 0) ? deq<D, NB>(lmb[j].to_uint(), mu, sigma) : q.v_prev;
        const D vn = d == 1 ? zero : (d == 2 ? deq<D, NB>(ep.range(NB - 1, 0).to_uint(), mu, sigma) : vnext);
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
        rmb[t][j] = Bits<O>::template put<word_t>(rl::cast<O>(A));  // in place over the reward code
        vmb[t][j] = Bits<O>::template put<word_t>(rl::cast<O>(rl::add<D>(A, v)));  // over the value code
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
drain:  // the results leave once, in the host's row-major layout
  for (int e = 0; e < S * T; ++e) {
#pragma HLS PIPELINE II = 1
    const int t = e / T, j = e % T;
    adv[e] = Bits<O>::template get<word_t>(rmb[t][j]);
    rtg[e] = Bits<O>::template get<word_t>(vmb[t][j]);
  }
}

}  // namespace rlgae
