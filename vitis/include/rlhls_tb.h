// Testbench helpers: tb data are raw little-endian float64 files, one per array; the runtime
// row count of kernels that take one is a decimal integer in n.txt.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
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

inline bool read_int(const char* path, int& v, int lo, int hi) {
  FILE* f = std::fopen(path, "r");
  if (!f) { std::printf("FAIL cannot open %s\n", path); return false; }
  int ok = std::fscanf(f, "%d", &v);
  std::fclose(f);
  if (ok != 1 || v < lo || v > hi) {
    std::printf("FAIL %s: expected an integer in %d..%d\n", path, lo, hi);
    return false;
  }
  return true;
}

// Write v to <dir>/<name> (raw float64), via a temporary file renamed into place.
inline bool write_f64(const char* dir, const char* name, const std::vector<double>& v) {
  std::string path = std::string(dir) + "/" + name, tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) { std::printf("FAIL cannot write %s\n", tmp.c_str()); return false; }
  size_t put = v.empty() ? 0 : std::fwrite(v.data(), sizeof(double), v.size(), f);
  bool ok = std::fclose(f) == 0 && put == v.size() && std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) std::printf("FAIL cannot write %s\n", path.c_str());
  return ok;
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
