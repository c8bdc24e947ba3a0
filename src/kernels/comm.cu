// Peer-access kernels of cudakit.comm (src/comm/peer.cpp): a broadcast that writes every
// destination from the source device (one read of the source, posted writes over NVLink), and
// a reduction that runs on the destination device and reads every input where it lives.
// The arithmetic is kernels/reduce.hpp, shared with the emulated backend's host twin.
//
// Both move 16-byte vectors with several loads in flight per thread before the stores: a
// remote load takes microseconds, so bandwidth over NVLink needs many outstanding requests
// (measure with bench/comm/bench_comm.py before changing the unroll factors or the grid, in
// peer.cpp). Unaligned or ragged ends fall back to element loops. Occupancy is set by the
// launch bounds: the copy fits two 512-thread blocks per SM without spills; the reductions
// one (float32 needs 84 registers; capping it at 64 spilled, measured with ptxas -v).
#include <cstdint>

#include "kernels/reduce.hpp"

using namespace cudakit::ops;

namespace {

constexpr int kUnroll = 4;

struct alignas(16) V16 {
  std::uint32_t w[4];
};

__device__ __forceinline__ std::int64_t gtid() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t gstride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

template <class T, int V>
struct alignas(16) Vec {
  T v[V];
};

template <class T>
__device__ void peer_reduce(const PeerReduceArgs& a) {
  constexpr int V = sizeof(T) >= 16 ? 1 : 16 / static_cast<int>(sizeof(T));
  // About 16 values per thread per input in flight: narrow types get fewer vectors (8-bit
  // types at 4 vectors spilled 3 KB of registers, measured with ptxas -v).
  constexpr int kUnroll = V >= 16 ? 1 : V >= 8 ? 2 : 4;
  using C = compute_type<T>;
  T* out = static_cast<T*>(a.out);
  bool vec = aligned16(out);
  for (int k = 0; k < a.nin; ++k) vec = vec && aligned16(a.in[k]);
  std::int64_t done = 0;
  if (vec) {
    using VT = Vec<T, V>;
    const std::int64_t nv = a.n / V;
    const std::int64_t step = gstride();
    for (std::int64_t base = gtid(); base < nv; base += step * kUnroll) {
      VT acc[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t i = base + u * step;
        if (i < nv) acc[u] = reinterpret_cast<const VT*>(a.in[0])[i];
      }
      C sum[kUnroll][V];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int e = 0; e < V; ++e) sum[u][e] = load_c(acc[u].v[e]);
      for (int k = 1; k < a.nin; ++k) {
        VT x[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t i = base + u * step;
          if (i < nv) x[u] = reinterpret_cast<const VT*>(a.in[k])[i];
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
          for (int e = 0; e < V; ++e) sum[u][e] = reduce_combine<C>(a.op, sum[u][e], load_c(x[u].v[e]));
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t i = base + u * step;
        if (i >= nv) continue;
        VT o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = store_c<T>(reduce_finish<C>(a.op, sum[u][e], a.nin));
        reinterpret_cast<VT*>(out)[i] = o;
      }
    }
    done = nv * V;
  }
  for (std::int64_t i = done + gtid(); i < a.n; i += gstride()) {
    out[i] = reduce_element<T>(a.op, a.in, a.nin, i);
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(512, 2) ck_peer_copy(PeerCopyArgs a) {
  const auto* src = static_cast<const unsigned char*>(a.src);
  bool vec = aligned16(src);
  for (int k = 0; k < a.ndst; ++k) vec = vec && aligned16(a.dst[k]);
  std::int64_t done = 0;
  if (vec) {
    const std::int64_t nv = a.bytes / 16;
    const std::int64_t step = gstride();
    for (std::int64_t base = gtid(); base < nv; base += step * kUnroll) {
      V16 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t i = base + u * step;
        if (i < nv) v[u] = reinterpret_cast<const V16*>(src)[i];
      }
      for (int k = 0; k < a.ndst; ++k) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t i = base + u * step;
          if (i < nv) reinterpret_cast<V16*>(a.dst[k])[i] = v[u];
        }
      }
    }
    done = nv * 16;
  }
  for (std::int64_t i = done + gtid(); i < a.bytes; i += gstride()) {
    const unsigned char b = src[i];
    for (int k = 0; k < a.ndst; ++k) static_cast<unsigned char*>(a.dst[k])[i] = b;
  }
}

#define CK_PEER_REDUCE(T, sfx) \
  extern "C" __global__ void __launch_bounds__(512, 1) ck_peer_reduce_##sfx(PeerReduceArgs a) { peer_reduce<T>(a); }

CK_PEER_REDUCE(bool, b8)
CK_PEER_REDUCE(std::uint8_t, u8)
CK_PEER_REDUCE(std::int8_t, i8)
CK_PEER_REDUCE(std::int16_t, i16)
CK_PEER_REDUCE(std::int32_t, i32)
CK_PEER_REDUCE(std::int64_t, i64)
CK_PEER_REDUCE(Half, f16)
CK_PEER_REDUCE(BFloat16, bf16)
CK_PEER_REDUCE(float, f32)
CK_PEER_REDUCE(double, f64)
CK_PEER_REDUCE(Complex64, c64)
CK_PEER_REDUCE(Complex128, c128)
