// Elementwise reductions across buffers, shared by three users so they compute the same
// values: the peer-reduction kernel of comm.reduce_add (comm.cu), its host twin (the
// emulated backend's host task, src/comm/peer.cpp), and the emulated collectives engine
// (src/backend/emulated/comm_engine.cpp).
//
// Values are accumulated in the compute type (float for half / bfloat16) across all inputs
// and rounded once, in input order — every rank and every backend reduces in the same order,
// so results agree bit for bit.
#pragma once

#include <cstdint>

#include "kernels/numeric.hpp"

namespace cudakit::ops {

// Numbered as ncclRedOp_t (and cudakit::nccl::ReduceOp).
enum ReduceCode : int { kRedSum = 0, kRedProd, kRedMax, kRedMin, kRedAvg };

// Most buffers one peer operation reads or writes (inputs of a reduction, destinations of a
// broadcast). Larger device sets go through the other transports.
inline constexpr int kMaxPeerBuffers = 16;

// out[i] = in[0][i] + ... + in[nin - 1][i] over n elements of dtype `dtype` (a DTypeCode).
struct PeerReduceArgs {
  void* out;
  const void* in[kMaxPeerBuffers];
  int nin;
  std::int64_t n;
  int op;  // ReduceCode
};

// Every dst[k] receives a copy of src's `bytes` bytes.
struct PeerCopyArgs {
  const void* src;
  void* dst[kMaxPeerBuffers];
  int ndst;
  std::int64_t bytes;
};

template <class C>
CK_HD C reduce_combine(int op, C a, C b) {
  if constexpr (is_complex_t<C>::value) {
    if (op == kRedProd) return C{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    return C{a.re + b.re, a.im + b.im};  // sum / avg (max and min are refused for complex)
  } else if constexpr (std::is_same_v<C, bool>) {
    return (op == kRedProd || op == kRedMin) ? (a && b) : (a || b);
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;  // wrap-around, without UB
    switch (op) {
      case kRedProd: return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
      case kRedMax: return a > b ? a : b;
      case kRedMin: return a < b ? a : b;
      default: return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    }
  } else {
    switch (op) {
      case kRedProd: return a * b;
      case kRedMax: return (a > b || a != a) ? a : b;  // NaN propagates
      case kRedMin: return (a < b || a != a) ? a : b;
      default: return a + b;
    }
  }
}

// The final step of avg: divide the sum by the number of inputs.
template <class C>
CK_HD C reduce_finish(int op, C acc, int nin) {
  if (op != kRedAvg) return acc;
  if constexpr (is_complex_t<C>::value) {
    return C{acc.re / nin, acc.im / nin};
  } else if constexpr (std::is_same_v<C, bool>) {
    return acc;
  } else {
    return static_cast<C>(acc / static_cast<C>(nin));
  }
}

// Element i of the reduction of `nin` buffers of T.
template <class T>
CK_HD T reduce_element(int op, const void* const* in, int nin, std::int64_t i) {
  using C = compute_type<T>;
  C acc = load_c(static_cast<const T*>(in[0])[i]);
  for (int k = 1; k < nin; ++k) acc = reduce_combine<C>(op, acc, load_c(static_cast<const T*>(in[k])[i]));
  return store_c<T>(reduce_finish<C>(op, acc, nin));
}

// Host reduction of `nin` buffers of runtime dtype `dtype` (a DTypeCode) into out[0, n).
template <class T>
inline void reduce_typed_host(int op, void* out, const void* const* in, int nin, std::int64_t n) {
  T* o = static_cast<T*>(out);
  for (std::int64_t i = 0; i < n; ++i) o[i] = reduce_element<T>(op, in, nin, i);
}

inline void reduce_host(int dtype, int op, void* out, const void* const* in, int nin,
                        std::int64_t n) {
  switch (dtype) {
    case kBool: reduce_typed_host<bool>(op, out, in, nin, n); break;
    case kUInt8: reduce_typed_host<std::uint8_t>(op, out, in, nin, n); break;
    case kInt8: reduce_typed_host<std::int8_t>(op, out, in, nin, n); break;
    case kInt16: reduce_typed_host<std::int16_t>(op, out, in, nin, n); break;
    case kInt32: reduce_typed_host<std::int32_t>(op, out, in, nin, n); break;
    case kInt64: reduce_typed_host<std::int64_t>(op, out, in, nin, n); break;
    case kFloat16: reduce_typed_host<Half>(op, out, in, nin, n); break;
    case kBFloat16: reduce_typed_host<BFloat16>(op, out, in, nin, n); break;
    case kFloat32: reduce_typed_host<float>(op, out, in, nin, n); break;
    case kFloat64: reduce_typed_host<double>(op, out, in, nin, n); break;
    case kComplex64: reduce_typed_host<Complex64>(op, out, in, nin, n); break;
    default: reduce_typed_host<Complex128>(op, out, in, nin, n); break;
  }
}

}  // namespace cudakit::ops
