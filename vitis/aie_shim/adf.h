// rlhls host shim of the ADF kernel-side API: just what the generated AIE kernels use, so that
// g++ compiles and runs exactly those kernel sources on the host (see rlhls/flow/aie.py).
// Our own code, not AMD's header. Graph classes (adf::graph, plio, pktsplit, connect) are not
// modelled: graph.h is only ever compiled by the AIE compiler.
#pragma once
#include <cstddef>
#include <stdexcept>

#include "aie_api/aie.hpp"

// Kernel classes register their run function for the AIE compiler; nothing to do on the host.
#define REGISTER_FUNCTION(f)

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

// Asynchronous output buffer: the kernel acquires it, writes, and releases it, on the invocations
// it chooses. The harness reads the caller-owned memory after a release; releases() and held() are
// host-only accessors for it (the AIE API has neither). Misuse throws, so the harness reports it.
template <typename T, typename Extents = extents<>>
class output_async_buffer {
 public:
    explicit output_async_buffer(T* p) : p_(p) {}
    void acquire() {
        if (held_) throw std::runtime_error("output_async_buffer: acquire() while already acquired");
        held_ = true;
    }
    void release() {
        if (!held_) throw std::runtime_error("output_async_buffer: release() without acquire()");
        held_ = false;
        ++releases_;
    }
    T* data() {
        if (!held_) throw std::runtime_error("output_async_buffer: data() outside acquire() / release()");
        return p_;
    }
    static constexpr std::size_t size() { return Extents::size(); }
    std::size_t releases() const { return releases_; }
    bool held() const { return held_; }
 private:
    T* p_;
    bool held_ = false;
    std::size_t releases_ = 0;
};

}  // namespace adf
