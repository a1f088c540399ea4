// Helpers shared by format_ref.cpp and the per-format-set parts the tests generate.
#pragma once
#include <ap_fixed.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

inline std::vector<double> read_doubles(FILE* f, int64_t n) {
  std::vector<double> v(n);
  if (n && fread(v.data(), sizeof(double), n, f) != (size_t)n) {
    fprintf(stderr, "short read\n");
    exit(1);
  }
  return v;
}

// Raw mantissa of an ap_fixed / ap_ufixed as int64 (sign-extended when signed).
template <class T, bool S>
int64_t mantissa_of(const T& v) {
  const int W = T::width;
  ap_uint<W> u = v.range(W - 1, 0);
  uint64_t b = u.to_uint64();
  if (S && W < 64 && ((b >> (W - 1)) & 1)) b |= ~0ULL << W;
  return (int64_t)b;
}

// T(x) for n doubles read from `in`; writes n int64 mantissas and n uint8 overflow flags.
// WIDE = ap_fixed<W+k, I+k, Q, AP_SAT> (k = 1 for signed T, 2 for unsigned): same LSB and
// rounding as T; it holds every rounded value in T's range exactly and saturates to values
// outside T's range, so "T overflowed" is exactly "WIDE(T(x)) != WIDE(x)".
template <class T, class WIDE, bool S>
void cast_fixed(FILE* in, FILE* out, int64_t n) {
  std::vector<double> x = read_doubles(in, n);
  std::vector<int64_t> m(n);
  std::vector<uint8_t> ovf(n);
  for (int64_t i = 0; i < n; ++i) {
    T v = x[i];
    WIDE wide = x[i];
    m[i] = mantissa_of<T, S>(v);
    ovf[i] = !(WIDE(v) == wide);
  }
  fwrite(m.data(), sizeof(int64_t), n, out);
  fwrite(ovf.data(), 1, n, out);
}
