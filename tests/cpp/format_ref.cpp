// C++ reference for rlhls.designs.formats: casts float64 values through the real types.
//
//   format_ref fixed IN OUT   IN: int64 n, then n doubles per fixed format (parts in order)
//                             OUT per format: n int64 mantissas, n uint8 overflow flags
//   format_ref float IN OUT   IN: int64 n, n doubles. OUT: n uint32 fp32 bits, n uint16 fp16
//                             bits, n uint16 bf16 bits (from double), n uint16 bf16 bits of
//                             (float)x (RNE on the float32 bits)
//   format_ref uq IN OUT      IN: int64 n, n doubles. OUT per n of RLHLS_UQ_BITS: n uint16 codes
//
// The fixed formats are compiled in parts the test generates (so g++ can build them in
// parallel): rlhls_format_list.h declares  void rlhls_fixed_partK(FILE*, FILE*, int64_t)  and
// RLHLS_FIXED_PARTS(X) listing K, and RLHLS_UQ_BITS(X) listing the uq<n> widths.
#include "format_ref.h"

#include <cmath>
#include <cstring>
#include <string>

#include "rlhls_format_list.h"

// bfloat16 from float32 bits, round to nearest even (the usual bias trick; NaN kept quiet).
static uint16_t bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// bfloat16 from double with ONE rounding: round to odd into float32 (24 >= 8 + 2 bits, same
// exponent range), then round to nearest even; this equals direct correct rounding.
static uint16_t bf16_from_double(double d) {
  if (std::isnan(d)) return bf16_from_float((float)d);
  float f = (float)d;
  if ((double)f != d) {
    if (std::fabs((double)f) > std::fabs(d)) f = std::nextafterf(f, 0.0f);  // truncate
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= 1u;  // sticky -> odd
    memcpy(&f, &u, 4);
  }
  return bf16_from_float(f);
}

int main(int argc, char** argv) {
  if (argc != 4) { fprintf(stderr, "usage: format_ref fixed|float|uq IN OUT\n"); return 2; }
  std::string mode = argv[1];
  FILE* in = fopen(argv[2], "rb");
  FILE* out = fopen(argv[3], "wb");
  if (!in || !out) { fprintf(stderr, "cannot open files\n"); return 1; }
  int64_t n = 0;
  if (fread(&n, sizeof(n), 1, in) != 1) return 1;
  if (mode == "fixed") {
#define RLHLS_PART(K) rlhls_fixed_part##K(in, out, n);
    RLHLS_FIXED_PARTS(RLHLS_PART)
#undef RLHLS_PART
  } else if (mode == "float") {
    std::vector<double> x = read_doubles(in, n);
    std::vector<uint32_t> f32(n);
    std::vector<uint16_t> f16(n), b16(n), b16f(n);
    for (int64_t i = 0; i < n; ++i) {
      float f = (float)x[i];
      memcpy(&f32[i], &f, 4);
      _Float16 h = (_Float16)x[i];  // libgcc __truncdfhf2: correctly rounded from double
      memcpy(&f16[i], &h, 2);
      b16[i] = bf16_from_double(x[i]);
      b16f[i] = bf16_from_float(f);
    }
    fwrite(f32.data(), 4, n, out);
    fwrite(f16.data(), 2, n, out);
    fwrite(b16.data(), 2, n, out);
    fwrite(b16f.data(), 2, n, out);
  } else if (mode == "uq") {
    std::vector<double> x = read_doubles(in, n);
    std::vector<uint16_t> c(n);
    // code = offset-binary bits of ap_fixed<N,3,AP_TRN,AP_SAT>(x) (step 2^(3-N), clip +-4)
#define RLHLS_UQ(N)                                                          \
  for (int64_t i = 0; i < n; ++i) {                                          \
    ap_fixed<N, 3, AP_TRN, AP_SAT> q = x[i];                                 \
    c[i] = (uint16_t)(mantissa_of<ap_fixed<N, 3, AP_TRN, AP_SAT>, true>(q) + \
                      (1 << ((N)-1)));                                       \
  }                                                                          \
  fwrite(c.data(), 2, n, out);
    RLHLS_UQ_BITS(RLHLS_UQ)
#undef RLHLS_UQ
  } else {
    fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  fclose(out);
  fclose(in);
  return 0;
}
