// rlhls host shim of the ADF kernel-side API: just what the generated AIE kernels use, so that
// g++ compiles and runs exactly those kernel sources on the host (see rlhls/flow/aie.py).
// Our own code, not AMD's header. Graph classes (adf::graph, plio, connect) are not modelled:
// graph.h is only ever compiled by the AIE compiler.
#pragma once
#include <cstddef>
#include <deque>
#include <stdexcept>

#include "aie_api/aie.hpp"

namespace adf {

template <std::size_t... Dims>
struct extents {
    static constexpr std::size_t size() { return sizeof...(Dims) == 0 ? 0 : prod(Dims...); }
 private:
    static constexpr std::size_t prod() { return 1; }
    template <class... R>
    static constexpr std::size_t prod(std::size_t a, R... r) { return a * prod(r...); }
};

// A kernel buffer port: a view of caller-owned memory (the harness plays the DMA).
template <typename T, typename Extents = extents<>>
class input_buffer {
 public:
    explicit input_buffer(const T* p) : p_(p) {}
    const T* data() const { return p_; }
    static constexpr std::size_t size() { return Extents::size(); }
 private:
    const T* p_;
};

template <typename T, typename Extents = extents<>>
class output_buffer {
 public:
    explicit output_buffer(T* p) : p_(p) {}
    T* data() { return p_; }
    static constexpr std::size_t size() { return Extents::size(); }
 private:
    T* p_;
};

// Cascade ports: both ends of one cascade share a FIFO of accumulator lanes (fp32 for accfloat).
template <typename T>
struct output_cascade {
    explicit output_cascade(std::deque<float>* q) : q(q) {}
    std::deque<float>* q;
};
template <typename T>
struct input_cascade {
    explicit input_cascade(std::deque<float>* q) : q(q) {}
    std::deque<float>* q;
};

}  // namespace adf

using adf::input_cascade;
using adf::output_cascade;

// aie_adf.hpp-style stream access on cascades.
template <unsigned N, typename T>
aie::accum<accfloat, N> readincr_v(adf::input_cascade<T>* in) {
    aie::accum<accfloat, N> a;
    for (unsigned i = 0; i < N; ++i) {
        if (in->q->empty()) throw std::runtime_error("readincr_v: cascade FIFO is empty");
        a.v[i] = in->q->front();
        in->q->pop_front();
    }
    return a;
}

template <typename T, unsigned N>
void writeincr(adf::output_cascade<T>* out, const aie::accum<accfloat, N>& a) {
    for (unsigned i = 0; i < N; ++i) out->q->push_back(a.v[i]);
}
