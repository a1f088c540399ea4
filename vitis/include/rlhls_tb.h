// Testbench helpers: tb data are raw little-endian float64 files, one per array.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace rltb {

inline bool read_f64(const char* path, std::vector<double>& v, size_t n) {
  FILE* f = std::fopen(path, "rb");
  if (!f) { std::printf("FAIL cannot open %s\n", path); return false; }
  v.assign(n, 0.0);
  size_t got = n ? std::fread(v.data(), sizeof(double), n, f) : 0;
  std::fclose(f);
  if (got != n) { std::printf("FAIL %s: expected %zu values, read %zu\n", path, n, got); return false; }
  return true;
}

// Bit-for-bit comparison of float64 values (any two NaNs count as equal).
inline bool same_bits(const char* name, const std::vector<double>& got, const std::vector<double>& exp) {
  for (size_t i = 0; i < exp.size(); ++i) {
    uint64_t a, b;
    std::memcpy(&a, &got[i], 8);
    std::memcpy(&b, &exp[i], 8);
    if (a != b && !(got[i] != got[i] && exp[i] != exp[i])) {
      std::printf("FAIL %s[%zu]: C++ %.17g (0x%016llx) != expected %.17g (0x%016llx)\n", name, i,
                  got[i], (unsigned long long)a, exp[i], (unsigned long long)b);
      return false;
    }
  }
  return true;
}

}  // namespace rltb
