// Sampling kernel: one thread per Philox block (4 x 32-bit words) in a grid-stride loop.
// The transforms are in src/random/philox.hpp, shared with the CPU executor; compiled with
// --fmad=false so both produce bit-identical values.
#include <cstdint>

#include "random/philox.hpp"

using namespace cudakit;

extern "C" __global__ void __launch_bounds__(256) ck_sample(rng::SampleArgs a) {
  const std::uint64_t base = rng::philox_start(a.philox);  // read at kernel time (graphs)
  const int pb = rng::per_block(a.dtype, a.dist, a.range);
  const std::int64_t blocks = (a.n + pb - 1) / pb;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const bool vec = (reinterpret_cast<std::uintptr_t>(a.out) & 15u) == 0;
  for (std::int64_t blk = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks;
       blk += stride) {
    const bool full = (blk + 1) * pb <= a.n;
    if (vec && full && a.dist != rng::kRandint && a.dtype == ops::kFloat32) {
      // Fast path: one 16-byte store per thread.
      rng::Philox4 b = rng::philox_block(a.philox.seed, base + static_cast<std::uint64_t>(blk));
      float4 v;
      float t[4];
      if (a.dist == rng::kUniform) rng::uniform4_f32(b, static_cast<float>(a.a), static_cast<float>(a.b), t);
      else rng::normal4_f32(b, static_cast<float>(a.a), static_cast<float>(a.b), t);
      v.x = t[0]; v.y = t[1]; v.z = t[2]; v.w = t[3];
      reinterpret_cast<float4*>(a.out)[blk] = v;
    } else if (vec && full && a.dist != rng::kRandint && a.dtype == ops::kFloat64) {
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
