// Sampling kernels. The transforms are in src/kernels/philox.hpp, shared with the CPU
// executor; compiled with --fmad=false so both produce bit-identical values (except the
// float32/16/bf16 normal transform: fast special functions on the GPU, see philox.hpp).
//
// ck_uniform_f32 / ck_normal_f32: the float32 fast paths (contiguous, 16-byte aligned). One
// thread turns one Philox block into four floats and writes them with one 16-byte store;
// the grid is exactly one wave (__launch_bounds__(256, kRngBlocksPerSm) caps registers so
// that many blocks fit per SM, and the host launches SMs x kRngBlocksPerSm blocks), so no
// SM idles behind a partial second wave. ck_sample: every other dtype/distribution.
#include <cstdint>

#include "kernels/philox.hpp"

using namespace cudakit;

namespace {
constexpr int kRngBlocksPerSm = 4;     // keep both in sync with src/ops/cuda_kernels.cpp
// ck_normal_f32: at most 64 registers, 4 blocks per SM (32 warps).
constexpr int kNormalBlocksPerSm = 4;

__device__ __forceinline__ void uniform_f32_fast(const rng::SampleArgs& a) {
  const std::uint64_t base = rng::philox_start(a.philox);  // read at kernel time (graphs)
  const rng::PhiloxKeys& keys = a.keys;  // parameter bank: operands, not registers
  const float p0 = static_cast<float>(a.a), p1 = static_cast<float>(a.b);
  const std::int64_t full = a.n / 4;  // whole Philox blocks
  float4* out = reinterpret_cast<float4*>(a.out);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t blk = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; blk < full; blk += stride) {
    rng::Philox4 b = rng::philox4x32_10(base + static_cast<std::uint64_t>(blk), keys);
    float t[4];
    rng::uniform4_f32(b, p0, p1, t);
    out[blk] = make_float4(t[0], t[1], t[2], t[3]);
  }
  // The last partial block (n % 4 elements), through the generic writer.
  if (blk == full && full * 4 < a.n) rng::sample_block(a, base, full);
}

// ---- ck_normal_f32: Box-Muller on the special-function unit (rng::normal4_f32) ----
// Two Philox blocks per thread and iteration (blk and blk + stride, both stores coalesced
// across the warp), so that each warp has two independent Philox chains and two sets of
// MUFU operations in flight; 4 blocks of 256 threads per SM (the 64-register cap of
// kNormalBlocksPerSm) give 8 warps per scheduler to hide the rest.
__device__ __forceinline__ float4 normal_block(std::uint64_t ctr, const rng::PhiloxKeys& keys, float mean, float sd) {
  float t[4];
  rng::normal4_f32(rng::philox4x32_10(ctr, keys), mean, sd, t);
  return make_float4(t[0], t[1], t[2], t[3]);
}

__device__ __forceinline__ void normal_f32_fast(const rng::SampleArgs& a) {
  const std::uint64_t base = rng::philox_start(a.philox);  // read at kernel time (graphs)
  const rng::PhiloxKeys& keys = a.keys;  // parameter bank
  const float mean = static_cast<float>(a.a), sd = static_cast<float>(a.b);
  const std::int64_t full = a.n / 4;  // whole Philox blocks
  float4* out = reinterpret_cast<float4*>(a.out);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t blk = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; blk + stride < full; blk += 2 * stride) {
    const std::uint64_t c = base + static_cast<std::uint64_t>(blk);
    const float4 p = normal_block(c, keys, mean, sd);
    const float4 q = normal_block(c + static_cast<std::uint64_t>(stride), keys, mean, sd);
    out[blk] = p;
    out[blk + stride] = q;
  }
  if (blk < full) {
    out[blk] = normal_block(base + static_cast<std::uint64_t>(blk), keys, mean, sd);
    blk += stride;
  }
  // The last partial block (n % 4 elements), through the generic writer: exactly one thread
  // ends at blk == full (blk runs through its residue class modulo the stride).
  if (blk == full && full * 4 < a.n) rng::sample_block(a, base, full);
}
}  // namespace

extern "C" __global__ void __launch_bounds__(256, kRngBlocksPerSm) ck_uniform_f32(const __grid_constant__ rng::SampleArgs a) {
  uniform_f32_fast(a);
}
extern "C" __global__ void __launch_bounds__(256, kNormalBlocksPerSm) ck_normal_f32(const __grid_constant__ rng::SampleArgs a) {
  normal_f32_fast(a);
}

// Generic path: one thread per Philox block in a grid-stride loop.
extern "C" __global__ void __launch_bounds__(256) ck_sample(rng::SampleArgs a) {
  const std::uint64_t base = rng::philox_start(a.philox);
  const int pb = rng::per_block(a.dtype, a.dist, a.range);
  const std::int64_t blocks = (a.n + pb - 1) / pb;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const bool vec = (reinterpret_cast<std::uintptr_t>(a.out) & 15u) == 0;
  for (std::int64_t blk = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks;
       blk += stride) {
    const bool full = (blk + 1) * pb <= a.n;
    if (vec && full && a.dist != rng::kRandint && a.dtype == ops::kFloat64) {
      rng::Philox4 b = rng::philox_block(a.philox.seed, base + static_cast<std::uint64_t>(blk));
      double t[2];
      if (a.dist == rng::kUniform) rng::uniform2_f64(b, a.a, a.b, t);
      else rng::normal2_f64(b, a.a, a.b, t);
      double2 v; v.x = t[0]; v.y = t[1];
      reinterpret_cast<double2*>(a.out)[blk] = v;
    } else {
      rng::sample_block(a, base, blk);
    }
  }
}
