// rlhls host shim of the AIE API subset the generated bf16 matmul kernels use (our own code).
// Arithmetic defined here (and mirrored by rlhls.flow.aie.aie_dense_reference):
//   bfloat16          16-bit storage; float -> bfloat16 rounds to nearest even (NaN kept quiet)
//   accfloat lanes    IEEE fp32
//   mmul<4,8,4>::mac  for each of the 16 outputs: for kk = 0..7 in order:
//                         acc = fp32(acc + fp32(a[r][kk] * b[kk][c]))
//                     (a product of two bf16 is exact in fp32 unless it under/overflows;
//                      compile with -ffp-contract=off so no FMA fuses the two roundings)
// The real AIE-ML reduces the 8 products of one mac in its own adder tree and flushes fp32
// subnormals; this shim models the sequential order on purpose (it equals arith.dense).
#pragma once
#include <cstdint>
#include <cstring>

struct bfloat16 {
    uint16_t bits = 0;
    bfloat16() = default;
    bfloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like the AIE type
    operator float() const {
        uint32_t u = uint32_t(bits) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    static uint16_t from_float(float f) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even (overflow -> Inf)
        return uint16_t(u >> 16);
    }
};

struct accfloat {};  // accumulator element tag: fp32 lanes

namespace aie {

template <typename T, unsigned N>
struct vector {
    T v[N];
    static constexpr unsigned size() { return N; }
    T get(unsigned i) const { return v[i]; }
    void set(T x, unsigned i) { v[i] = x; }
    T operator[](unsigned i) const { return v[i]; }
    template <unsigned M>
    vector<T, M> extract(unsigned idx) const {
        vector<T, M> r;
        for (unsigned i = 0; i < M; ++i) r.v[i] = v[idx * M + i];
        return r;
    }
};

template <typename Tag, unsigned N>
struct accum {
    float v[N];
    static constexpr unsigned size() { return N; }
    template <typename T>
    void from_vector(const vector<T, N>& x, int shift = 0) {
        (void)shift;
        for (unsigned i = 0; i < N; ++i) v[i] = float(x.v[i]);
    }
    template <typename T>
    vector<T, N> to_vector(int shift = 0) const {
        (void)shift;
        vector<T, N> r;
        for (unsigned i = 0; i < N; ++i) r.v[i] = T(v[i]);
        return r;
    }
};

template <unsigned N, typename T>
vector<T, N> load_v(const T* p) {
    vector<T, N> r;
    for (unsigned i = 0; i < N; ++i) r.v[i] = p[i];
    return r;
}

template <typename T, unsigned N>
void store_v(T* p, const vector<T, N>& x) {
    for (unsigned i = 0; i < N; ++i) p[i] = x.v[i];
}

template <typename Tag, unsigned N>
accum<Tag, N> zeros() {
    accum<Tag, N> a;
    for (unsigned i = 0; i < N; ++i) a.v[i] = 0.0f;
    return a;
}

namespace detail {
template <typename T, unsigned N>
void put(T* dst, const vector<T, N>& x) {
    for (unsigned i = 0; i < N; ++i) dst[i] = x.v[i];
}
template <typename T, unsigned N, typename... R>
void put(T* dst, const vector<T, N>& x, const R&... rest) {
    put(dst, x);
    put(dst + N, rest...);
}
}  // namespace detail

// concat(v0, v1, ...): same-size vectors joined in argument order.
template <typename T, unsigned N, typename... R>
vector<T, N * (1 + sizeof...(R))> concat(const vector<T, N>& first, const R&... rest) {
    vector<T, N * (1 + sizeof...(R))> r;
    detail::put(r.v, first, rest...);
    return r;
}

// transpose(v, Row, Col): v holds a Row x Col matrix row-major; returns it as Col x Row row-major.
template <typename T, unsigned N>
vector<T, N> transpose(const vector<T, N>& x, unsigned row, unsigned col) {
    vector<T, N> r;
    for (unsigned i = 0; i < row; ++i)
        for (unsigned j = 0; j < col; ++j) r.v[j * row + i] = x.v[i * col + j];
    return r;
}

template <unsigned M, unsigned K, unsigned N, typename TA, typename TB, typename Acc = accfloat>
class mmul {
 public:
    static constexpr unsigned size_A = M * K;
    static constexpr unsigned size_B = K * N;
    static constexpr unsigned size_C = M * N;
    using accum_type = accum<Acc, size_C>;

    mmul() : acc_(zeros<Acc, size_C>()) {}
    explicit mmul(const accum_type& a) : acc_(a) {}

    // acc[r][c] += sum_kk a[r][kk] * b[kk][c], one fp32 rounding per product and per add, kk in order
    void mac(const vector<TA, size_A>& a, const vector<TB, size_B>& b) {
        for (unsigned r = 0; r < M; ++r)
            for (unsigned c = 0; c < N; ++c) {
                float s = acc_.v[r * N + c];
                for (unsigned kk = 0; kk < K; ++kk) {
                    const float p = float(a.v[r * K + kk]) * float(b.v[kk * N + c]);
                    s = s + p;
                }
                acc_.v[r * N + c] = s;
            }
    }
    void mul(const vector<TA, size_A>& a, const vector<TB, size_B>& b) {
        acc_ = zeros<Acc, size_C>();
        mac(a, b);
    }
    accum_type to_accum() const { return acc_; }
    template <typename T>
    vector<T, size_C> to_vector(int shift = 0) const { return acc_.template to_vector<T>(shift); }

 private:
    accum_type acc_;
};

}  // namespace aie
