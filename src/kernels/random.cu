// Sampling kernels. The transforms are in src/kernels/philox.hpp, shared with the CPU
// executor; compiled with --fmad=false so both produce bit-identical values.
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
// ck_normal_f32 gets 80 registers (3 blocks per SM): at 64 its round keys no longer fit
// and are reloaded from the parameter bank each iteration (10 more instructions).
constexpr int kNormalBlocksPerSm = 3;

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

// ---- ck_normal_f32: the ziggurat with its rejections deferred ----
// The fast test accepts 98.5 % of candidates, so 5.9 % of threads see a reject in a given
// Philox block and nearly every warp iteration holds one: running the slow path (a second
// Philox call plus a log or an exp) in place would make the whole warp wait for it on most
// iterations. Instead a thread with a reject stores its block as it is (the rejected
// elements hold provisional values) and appends {words, block} to its warp's ring in
// shared memory (a shared-memory atomic hands out the slot: ~7 instructions per block,
// against ~15 for a ballot + prefix count); when 32 entries are pending the warp runs the
// slow path on all of them at once, one entry per lane, and overwrites the rejected
// elements. An entry waits ~9 iterations (~36 MB written GPU-wide), so the overwritten
// lines are normally still in L2. Results do not depend on the grouping: zig_slow is a
// pure function of the word, the seed and the sample's stream position.
constexpr int kWarpsPerBlock = 256 / 32;
constexpr unsigned kRing = 128;  // < 32 pending before an iteration appends at most 64

struct NormalSmem {
  rng::ZigEntry table[256];
  unsigned long long ring[kWarpsPerBlock][kRing];  // stream index (base + block) of queued blocks
  unsigned tail[kWarpsPerBlock];  // entries appended so far (mod 2^32)
};

__device__ __noinline__ float zig_slow_call(std::uint32_t x, std::uint64_t seed, std::uint64_t ctr, int k) {
  return rng::zig_slow(x, seed, ctr, k);
}

// Lanes [0, m) each take ring entry (head + lane) and finish its rejected elements (found
// again by the fast test: cheaper here, once per 32 entries, than carrying a mask through
// the hot loop).
template <bool Standard>
__device__ __forceinline__ void drain(const rng::SampleArgs& a, const rng::PhiloxKeys& keys, std::uint64_t base,
                                      const NormalSmem& sm, unsigned warp, unsigned head, unsigned m, unsigned lane,
                                      float mean, float sd) {
  if (lane >= m) return;
  const std::uint64_t ctr = sm.ring[warp][(head + lane) & (kRing - 1)];
  const rng::Philox4 w = rng::philox4x32_10(ctr, keys);  // recomputed: the queue stays 8 bytes an entry
  float* out = static_cast<float*>(a.out) + 4 * static_cast<std::int64_t>(ctr - base);
#pragma unroll 1
  for (int k = 0; k < 4; ++k) {
    const std::uint32_t x = k == 0 ? w.v[0] : k == 1 ? w.v[1] : k == 2 ? w.v[2] : w.v[3];
    const rng::ZigEntry e = sm.table[x & 0xffu];
    if (fabsf(rng::zig_candidate(x, e.w)) < e.t) continue;
    const float v = zig_slow_call(x, a.philox.seed, ctr, k);
    out[k] = Standard ? v : rng::fma32(v, sd, mean);
  }
}

template <bool Standard>
__device__ __forceinline__ void normal_f32_fast(const rng::SampleArgs& a, NormalSmem& sm) {
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) sm.table[i] = rng::zig_entry(i);
  if (threadIdx.x < kWarpsPerBlock) sm.tail[threadIdx.x] = 0;
  __syncthreads();
  const std::uint64_t base = rng::philox_start(a.philox);  // read at kernel time (graphs)
  // Round keys in registers (opaque, so they are not recomputed from the seed inside the
  // loop; read from the parameter bank they cost 10 LDC per iteration, the compiler
  // reloading them under register pressure).
  rng::PhiloxKeys keys = a.keys;
#pragma unroll
  for (int r = 0; r < 10; ++r) asm volatile("" : "+r"(keys.k0[r]), "+r"(keys.k1[r]));
  const float mean = static_cast<float>(a.a), sd = static_cast<float>(a.b);
  const std::int64_t full = a.n / 4;  // whole Philox blocks
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  unsigned* tail = &sm.tail[warp];
  // 32-bit shared addresses of this warp's ring and tail, opaque so that they stay in
  // registers (otherwise they are recomputed from threadIdx for every append).
  unsigned ring_addr = static_cast<unsigned>(__cvta_generic_to_shared(sm.ring[warp]));
  unsigned tail_addr = static_cast<unsigned>(__cvta_generic_to_shared(tail));
  asm volatile("" : "+r"(ring_addr), "+r"(tail_addr));
  unsigned head = 0;  // warp-uniform; entries [head, *tail) are pending

  // Each warp takes chunks of 64 consecutive blocks (two per lane, each warp-wide store
  // coalesced), halving the loop and vote overhead per block. Only whole chunks go through
  // this loop, so it needs no bounds checks; the one partial chunk is done below.
  const std::uint64_t warps = static_cast<std::uint64_t>(gridDim.x) * kWarpsPerBlock;
  const std::uint64_t gw = static_cast<std::uint64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  const std::uint64_t chunks = static_cast<std::uint64_t>(full) / 64;
  const unsigned iters = gw < chunks ? static_cast<unsigned>((chunks - gw + warps - 1) / warps) : 0u;
  std::uint64_t ctr = base + gw * 64 + lane;  // stream index of this lane's first block
  float4* out = reinterpret_cast<float4*>(a.out) + gw * 64 + lane;
  const std::uint64_t step = warps * 64;

  // The four fast tests of one Philox block; the block is stored as computed, and its
  // stream index queued when any word was rejected. The append is predicated PTX (an
  // atomic hands out the slot): as a branch it cost three more instructions per block,
  // and 86 % of warp-blocks hold a reject anyway.
  auto candidate = [&](std::uint32_t x, unsigned& rej) {
    const rng::ZigEntry e = sm.table[x & 0xffu];
    const float v = rng::zig_candidate(x, e.w);
    rej |= fabsf(v) < e.t ? 0u : 1u;
    return Standard ? v : rng::fma32(v, sd, mean);
  };
  auto block = [&](std::uint64_t c, float4* o) {
    const rng::Philox4 b = rng::philox4x32_10(c, keys);
    unsigned rej = 0;
    const float v0 = candidate(b.v[0], rej), v1 = candidate(b.v[1], rej);
    const float v2 = candidate(b.v[2], rej), v3 = candidate(b.v[3], rej);
    *o = make_float4(v0, v1, v2, v3);
    asm volatile(
        "{\n\t.reg .pred p;\n\t.reg .u32 s, a;\n\t"
        "setp.ne.u32 p, %0, 0;\n\t"
        "@p atom.shared.add.u32 s, [%1], 1;\n\t"
        "and.b32 s, s, %3;\n\t"
        "shl.b32 s, s, 3;\n\t"
        "add.u32 a, %2, s;\n\t"
        "@p st.shared.u64 [a], %4;\n\t}"
        :: "r"(rej), "r"(tail_addr), "r"(ring_addr), "n"(kRing - 1), "l"(c) : "memory");
  };

  for (unsigned it = 0; it < iters; ++it, ctr += step, out += step) {
    block(ctr, out);
    block(ctr + 32, out + 32);
    __syncwarp();  // this iteration's appends (and provisional stores) visible to every lane
    const unsigned end = *static_cast<volatile unsigned*>(tail);  // same value in every lane
    if (end - head >= 32u) {
      do {
        drain<Standard>(a, keys, base, sm, warp, head, 32, lane, mean, sd);
        head += 32;
      } while (end - head >= 32u);
      __syncwarp();  // drained slots free before the next append
    }
  }
  __syncwarp();
  const unsigned end = *static_cast<volatile unsigned*>(tail);
  while (head != end) {
    const unsigned m = min(end - head, 32u);
    drain<Standard>(a, keys, base, sm, warp, head, m, lane, mean, sd);
    head += m;
  }
  // The partial chunk (full % 64 blocks) and the partial block (n % 4 elements), through
  // the generic writer (slow path inline).
  if (gw == chunks % warps) {
    for (std::int64_t blk = static_cast<std::int64_t>(chunks) * 64 + lane; blk < full; blk += 32)
      rng::sample_block(a, base, blk);
    if (lane == 0 && full * 4 < a.n) rng::sample_block(a, base, full);
  }
}
}  // namespace

extern "C" __global__ void __launch_bounds__(256, kRngBlocksPerSm) ck_uniform_f32(const __grid_constant__ rng::SampleArgs a) {
  uniform_f32_fast(a);
}
// randn (mean 0, std 1) skips the fma per element: fma(v, 1, 0) == v for every candidate
// (never -0), so both branches give the CPU executor's bits.
extern "C" __global__ void __launch_bounds__(256, kNormalBlocksPerSm) ck_normal_f32(const __grid_constant__ rng::SampleArgs a) {
  __shared__ NormalSmem sm;
  if (a.a == 0.0 && a.b == 1.0) normal_f32_fast<true>(a, sm);
  else normal_f32_fast<false>(a, sm);
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
