// MAC-array compute element of seed 004 (Fig. 4 and its FSM listing): MACS multiply-accumulators
// (Input_0 one operand per MAC, Input_1 shared, one output BRAM per MAC) run by an 11-state FSM
// that the PS drives through s_axilite handshake registers. Semantics, buffer layouts and the
// cycle model are designs/kernels/mac_array.py's module docstring; this is its C++ twin.
//
// ComputeElement is the PL. PsDriver is the PS's side of the seed's protocol (fill the input
// buffers, raise ps_control, drain the output BRAMs on pl_full, read them on done); run() steps
// the two in turn so the handshakes play out under g++ csim. On a board the driver is host code
// polling the same registers.
#pragma once
#include "rlhls_types.h"

namespace rlmac {

// States of the seed's listing, in its numbering.
enum State {
  S_IDLE = 0,    // wait for ps_control == 1 (PS start of a new phase)
  S_SETUP = 1,   // latch full_reg, accfreq, iternum, repeat, start addresses
  S_ITER = 2,    // start a new iteration: addresses to the datapath
  S_LOAD = 3,    // load inputs into the MAC units
  S_ACC = 4,     // valid_in per accumulation, next inputs; valid_last on the last one
  S_WAIT = 5,    // wait for the final accumulation result
  S_WRITE = 6,   // write results, repeat_counter, next addresses
  S_XCHECK = 7,  // transfer needed?
  S_FULL = 8,    // assert pl_full, wait for ps_control == 0 (transfer complete)
  S_LAST = 9,    // last iteration of the stage?
  S_ACK = 10     // done; wait for the PS acknowledgement (ps_control == 0)
};

// One prog row: the stage set-up registers (designs/kernels/mac_array.py REGS).
enum Reg { R_ACCFREQ, R_ITERNUM, R_REPEAT, R_FULL, R_IN0, R_IN1, R_INIT, R_BIAS, R_OUT, NREG };
// Counters per stage (COUNTERS).
enum Cnt { C_ITER, C_VALID, C_XFER, C_CYCLES, NCNT };

const int LOAD_LAT = 2;  // BRAM read latency of state 3

// The s_axilite handshake registers: ps_control PS -> PL; pl_full and done PL -> PS.
struct Axilite {
  volatile int ps_control, pl_full, done;
};

template <class C> struct Buffers {
  typename C::S in0[C::IN0_DEPTH];           // Input_0, [group][a][mac]: MACS cyclic banks
  typename C::S in1[C::IN1_DEPTH];           // Input_1, [col][a]: shared by every MAC
  typename C::S init[C::INIT_DEPTH];         // initial accumulator per output (bias), [group][mac]
  typename C::S out[C::MACS][C::OUT_DEPTH];  // Output buffer: one BRAM per MAC
};

template <class C> inline long xfer_cycles(long words) {
  return C::PS_LAT + (words * C::WORD_BYTES + C::AXI_BYTES - 1) / C::AXI_BYTES;
}

// A prog row the FSM can run (the numpy model raises on any other; here it ends the program).
template <class C> inline bool row_ok(const long* r) {
  const long A = r[R_ACCFREQ], I = r[R_ITERNUM], R = r[R_REPEAT];
  if (A < 1 || I < 1 || R < 1 || I % R || r[R_FULL] < 1 || r[R_FULL] > C::OUT_DEPTH) return false;
  if (r[R_BIAS] != 0 && r[R_BIAS] != 1) return false;
  const long w0 = R * A * C::MACS, w1 = (I / R) * A, wi = r[R_BIAS] ? R * C::MACS : 0, wo = I * C::MACS;
  return w0 <= C::IN0_DEPTH && r[R_IN0] + w0 <= C::IN0_WORDS && w1 <= C::IN1_DEPTH &&
         r[R_IN1] + w1 <= C::IN1_WORDS && wi <= C::INIT_DEPTH && (wi == 0 || r[R_INIT] + wi <= C::INIT_WORDS) &&
         r[R_OUT] + wo <= C::OUT_WORDS;
}

// The PL: FSM + MACS MACs + the three buffers.
template <class C> struct ComputeElement {
  typedef typename C::S S;
  typedef typename C::A A;
  State state = S_IDLE;
  long regs[NREG] = {};
  long iter = 0, rep = 0, fill = 0;  // iter_counter, repeat_counter, results per BRAM
  long p0 = 0, p1 = 0, pi = 0;       // addresses in Input_0, Input_1, init
  bool raised = false;               // pl_full / done asserted, waiting for ps_control == 0
  A acc[C::MACS];

  // Runs the current state once; returns the cycles it took (0 while it waits on the PS).
  long step(Axilite& r, const long* ps_regs, Buffers<C>& b, long* cnt) {
    switch (state) {
      case S_IDLE:
        if (r.ps_control == 1) state = S_SETUP;
        return 0;
      case S_SETUP:
        for (int i = 0; i < NREG; ++i) regs[i] = ps_regs[i];
        iter = rep = fill = 0;
        p0 = p1 = pi = 0;
        state = S_ITER;
        return 1;
      case S_ITER:
        state = S_LOAD;
        return 1;
      case S_LOAD:
        for (int j = 0; j < C::MACS; ++j) {
#pragma HLS UNROLL
          acc[j] = regs[R_BIAS] ? rl::cast<A>(b.init[pi + j]) : rl::from_d<A>(0.0);
        }
        state = S_ACC;
        return LOAD_LAT;
      case S_ACC: {
        const long n = regs[R_ACCFREQ];
      accumulate:
        for (long a = 0; a < n; ++a) {
#pragma HLS PIPELINE II = C::II
          for (int j = 0; j < C::MACS; ++j) {  // input_0 per MAC, input_1 shared
#pragma HLS UNROLL
            acc[j] = rl::add<A>(acc[j], rl::mul<A>(b.in0[p0 + a * C::MACS + j], b.in1[p1 + a]));
          }
        }
        cnt[C_VALID] += n;
        state = S_WAIT;
        return n * C::II;
      }
      case S_WAIT:
        state = S_WRITE;
        return C::MAC_LAT;
      case S_WRITE:
        for (int j = 0; j < C::MACS; ++j) {
#pragma HLS UNROLL
          b.out[j][fill] = rl::cast<S>(acc[j]);
        }
        ++fill;
        if (++rep == regs[R_REPEAT]) {  // every group done: next shared Input_1 vector
          rep = 0;
          p0 = pi = 0;
          p1 += regs[R_ACCFREQ];
        } else {
          p0 += regs[R_ACCFREQ] * C::MACS;
          pi += C::MACS;
        }
        state = S_XCHECK;
        return 1;
      case S_XCHECK:
        state = (fill == regs[R_FULL] && iter + 1 < regs[R_ITERNUM]) ? S_FULL : S_LAST;
        return 1;
      case S_FULL:  // four-phase: raise only while ps_control is 1, so its fall means "transferred"
        if (!raised) {
          if (r.ps_control == 1) { r.pl_full = 1; raised = true; }
        } else if (r.ps_control == 0) {
          r.pl_full = 0;
          raised = false;
          fill = 0;
          ++cnt[C_XFER];
          state = S_LAST;
        }
        return 0;
      case S_LAST:
        ++iter;
        ++cnt[C_ITER];
        state = iter < regs[R_ITERNUM] ? S_ITER : S_ACK;
        return 1;
      case S_ACK:
        if (!raised) {
          if (r.ps_control == 1) { r.done = 1; raised = true; }
        } else if (r.ps_control == 0) {
          r.done = 0;
          raised = false;
          state = S_IDLE;
        }
        return 0;
    }
    return 0;
  }
};

// The PS's side of the protocol over DRAM (the top's m_axi arrays).
template <class C> struct PsDriver {
  typedef typename C::S S;
  enum Phase { P_START, P_RUN, P_XFER, P_DONE, P_END };
  Phase phase = P_START;
  int stage = -1;
  long regs[NREG] = {};  // the register file the PL latches in state 1
  long drained = 0;      // results per BRAM already moved to DRAM

  void drain(Buffers<C>& b, S* out, long n) {
    for (long f = 0; f < n; ++f)
      for (int j = 0; j < C::MACS; ++j) out[regs[R_OUT] + (drained + f) * C::MACS + j] = b.out[j][f];
    drained += n;
  }

  // One look at the registers; returns the cycles of a blocking action (the PL waits meanwhile).
  long step(Axilite& r, const typename C::R* prog, const S* in0, const S* in1, const S* init, S* out,
            Buffers<C>& b) {
    switch (phase) {
      case P_START: {
        if (stage + 1 >= C::NSTAGE) { phase = P_END; return 0; }
        long row[NREG];
        for (int i = 0; i < NREG; ++i) row[i] = (long)rl::to_d(prog[(stage + 1) * NREG + i]);
        if (row[R_ACCFREQ] == 0 || !row_ok<C>(row)) { phase = P_END; return 0; }
        ++stage;
        for (int i = 0; i < NREG; ++i) regs[i] = row[i];
        drained = 0;
        const long A = regs[R_ACCFREQ], R = regs[R_REPEAT];
        const long w0 = R * A * C::MACS, w1 = (regs[R_ITERNUM] / R) * A, wi = regs[R_BIAS] ? R * C::MACS : 0;
        for (long i = 0; i < w0; ++i) b.in0[i] = in0[regs[R_IN0] + i];
        for (long i = 0; i < w1; ++i) b.in1[i] = in1[regs[R_IN1] + i];
        for (long i = 0; i < wi; ++i) b.init[i] = init[regs[R_INIT] + i];
        r.ps_control = 1;
        phase = P_RUN;
        return xfer_cycles<C>(w0 + w1 + wi);
      }
      case P_RUN:
        if (r.ps_control == 1 && r.pl_full) {
          drain(b, out, regs[R_FULL]);
          r.ps_control = 0;
          phase = P_XFER;
          return xfer_cycles<C>(C::MACS * regs[R_FULL]);
        }
        if (r.ps_control == 1 && r.done) {
          const long n = regs[R_ITERNUM] - drained;
          drain(b, out, n);
          r.ps_control = 0;
          phase = P_DONE;
          return xfer_cycles<C>(C::MACS * n);
        }
        return 0;
      case P_XFER:  // re-arm once the PL dropped pl_full
        if (!r.pl_full) { r.ps_control = 1; phase = P_RUN; }
        return 0;
      case P_DONE:
        if (!r.done) phase = P_START;
        return 0;
      case P_END:
        return 0;
    }
    return 0;
  }
};

// The whole program of prog: stages in row order, each started, transferred and acknowledged by
// the PS. Unprogrammed output words read 0, unused counter rows 0, the trace -1 past its end.
template <class C>
void run(const typename C::R* prog, const typename C::S* in0, const typename C::S* in1, const typename C::S* init,
         typename C::S* out, typename C::N* counters, typename C::N* trace) {
  static Buffers<C> b;
#pragma HLS ARRAY_PARTITION variable = b.in0 type = cyclic factor = C::MACS
#pragma HLS ARRAY_PARTITION variable = b.init type = cyclic factor = C::MACS
#pragma HLS ARRAY_PARTITION variable = b.out type = complete dim = 1
  Axilite r;
  r.ps_control = 0;
  r.pl_full = 0;
  r.done = 0;
  ComputeElement<C> pl;
  PsDriver<C> ps;
  long cnt[C::NSTAGE][NCNT] = {};
  for (long i = 0; i < C::OUT_WORDS; ++i) out[i] = rl::from_d<typename C::S>(0.0);
  long nt = 0;
  if (nt < C::TRACE) trace[nt++] = rl::from_d<typename C::N>(S_IDLE);
  // every step moves one side on (a valid program cannot stall); the bound only stops a broken one
  const long limit = 64L * (C::OUT_WORDS + C::NSTAGE) + 1024;
  for (long steps = 0; steps < limit; ++steps) {
    const long c_ps = ps.step(r, prog, in0, in1, init, out, b);
    if (ps.stage >= 0) cnt[ps.stage][C_CYCLES] += c_ps;
    if (ps.phase == PsDriver<C>::P_END && pl.state == S_IDLE) break;
    if (ps.stage < 0) continue;
    const State before = pl.state;
    cnt[ps.stage][C_CYCLES] += pl.step(r, ps.regs, b, cnt[ps.stage]);
    if (pl.state != before && nt < C::TRACE) trace[nt++] = rl::from_d<typename C::N>((double)pl.state);
  }
  for (long i = nt; i < C::TRACE; ++i) trace[i] = rl::from_d<typename C::N>(-1.0);
  for (int s = 0; s < C::NSTAGE; ++s)
    for (int k = 0; k < NCNT; ++k) counters[s * NCNT + k] = rl::from_d<typename C::N>((double)cnt[s][k]);
}

}  // namespace rlmac
