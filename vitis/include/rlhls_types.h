// rlhls number types and rounding operations shared by every kernel (no vendor code here).
//
// Types: ap_fixed / ap_ufixed (from the ap_types headers hls4ml installs), float, half, bfloat16.
//   half      g++ csim: the compiler's _Float16 (IEEE binary16). Under Vitis (__SYNTHESIS__,
//             __VITIS_HLS__ or RLHLS_HLS_HALF) it is hls_half.h's `half` instead.
//   bfloat16  our own 16-bit struct (top half of an IEEE binary32); conversions round to nearest
//             even with ONE rounding, also from double (round-to-odd float first), as formats.py.
//
// Operations (rl::mul/add/sub/div/sqrt/cast, result type R first): each is ONE rounding of the
// exact (or correctly rounded float64) result to R, the semantics of designs/arith.py and
// designs/kernels/update.py:
//   fixed operands    ap_fixed's own full-precision product / sum, then assignment to R
//                     (quantization, then overflow). div and sqrt go through double.
//   float operands    the operation in double (exact for products and sums of <= 24-bit
//                     mantissas; correctly rounded for div and sqrt), then one RNE to R.
#pragma once
#include <ap_fixed.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SYNTHESIS__) || defined(__VITIS_HLS__) || defined(RLHLS_HLS_HALF)
#include <hls_half.h>
#else
typedef _Float16 half;
#endif

struct bfloat16 {
  uint16_t bits;
  bfloat16() : bits(0) {}
  bfloat16(float f) : bits(from_float(f)) {}
  bfloat16(double d) : bits(from_double(d)) {}
  operator float() const {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {  // RNE; NaN stays a quiet NaN
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
  }
  static uint16_t from_double(double d) {
    // Round to odd at float precision keeps the sticky information: the second rounding
    // (float -> bf16, 16 bits fewer) is then the single correct rounding of d.
    if (d != d) return from_float((float)d);
    float f = (float)d;
    if ((double)f != d) {
      if (std::fabs((double)f) > std::fabs(d)) f = std::nextafterf(f, 0.0f);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u |= 1u;
      std::memcpy(&f, &u, 4);
    }
    return from_float(f);
  }
};

namespace rl {

template <class T> struct is_fx : std::false_type {};
template <int W, int I, ap_q_mode Q, ap_o_mode O, int N>
struct is_fx<ap_fixed<W, I, Q, O, N> > : std::true_type {};
template <int W, int I, ap_q_mode Q, ap_o_mode O, int N>
struct is_fx<ap_ufixed<W, I, Q, O, N> > : std::true_type {};

template <class T> inline double to_d(const T& v) { return (double)v; }
inline double to_d(const bfloat16& v) { return (double)(float)v; }
template <int W, int I, ap_q_mode Q, ap_o_mode O, int N>
inline double to_d(const ap_fixed<W, I, Q, O, N>& v) { return v.to_double(); }
template <int W, int I, ap_q_mode Q, ap_o_mode O, int N>
inline double to_d(const ap_ufixed<W, I, Q, O, N>& v) { return v.to_double(); }

// double -> T with T's own single rounding (ap_fixed: its double constructor).
template <class T> inline T from_d(double d) { return T(d); }

template <class R, class A, class B> inline R mul_(const A& a, const B& b, std::true_type) { return R(a * b); }
template <class R, class A, class B> inline R mul_(const A& a, const B& b, std::false_type) { return from_d<R>(to_d(a) * to_d(b)); }
template <class R, class A, class B> inline R add_(const A& a, const B& b, std::true_type) { return R(a + b); }
template <class R, class A, class B> inline R add_(const A& a, const B& b, std::false_type) { return from_d<R>(to_d(a) + to_d(b)); }
template <class R, class A, class B> inline R sub_(const A& a, const B& b, std::true_type) { return R(a - b); }
template <class R, class A, class B> inline R sub_(const A& a, const B& b, std::false_type) { return from_d<R>(to_d(a) - to_d(b)); }
template <class R, class A> inline R cast_(const A& a, std::true_type) { return R(a); }
template <class R, class A> inline R cast_(const A& a, std::false_type) { return from_d<R>(to_d(a)); }

template <class R, class A, class B> inline R mul(const A& a, const B& b) { return mul_<R>(a, b, is_fx<A>()); }
template <class R, class A, class B> inline R add(const A& a, const B& b) { return add_<R>(a, b, is_fx<A>()); }
template <class R, class A, class B> inline R sub(const A& a, const B& b) { return sub_<R>(a, b, is_fx<A>()); }
template <class R, class A> inline R cast(const A& a) { return cast_<R>(a, is_fx<A>()); }
template <class R, class A, class B> inline R div(const A& a, const B& b) { return from_d<R>(to_d(a) / to_d(b)); }
template <class R, class A> inline R sqrt(const A& a) { return from_d<R>(std::sqrt(to_d(a))); }

}  // namespace rl
