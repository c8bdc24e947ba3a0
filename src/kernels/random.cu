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
// ck_normal_f32: 64 registers, 4 blocks per SM. At 80 registers (3 blocks) ptxas loaded
// the round keys from the parameter bank every iteration anyway (10 LDC.64), so the cap
// costs ~2 instructions per iteration and buys a third more resident warps.
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

// ---- ck_normal_f32: the ziggurat with its rejections deferred ----
// The fast test accepts 98.5 % of candidates, so 5.9 % of threads see a reject in a given
// Philox block and nearly every warp iteration holds one: running the slow path (a second
// Philox call plus a log or an exp) in place would make the whole warp wait for it on most
// iterations. Instead a thread with a reject stores its block as it is (the rejected
// elements hold provisional values) and appends the block's stream index to its warp's
// ring in shared memory (slot by ballot + prefix count, the tail in a register; see the
// main loop for why not a shared atomic). When 32 blocks are pending the warp
// drains them, one per lane: it finds each block's rejected elements again, and runs the
// slow path once for all 32 lanes on their first rejected element; the rarer second, third
// and fourth rejects of a block (a drain holds ~0.75 of them) go to a second, per-element
// ring and are finished 32 at a time, so that nearly every slow-path pass runs all 32
// lanes (the first version ran one pass per word k = 0..3 of the blocks, ~8 lanes each).
// An entry waits ~9 iterations (~36 MB written GPU-wide), so the overwritten lines are
// normally still in L2. Results do not depend on the grouping: the slow path is a pure
// function of the word, the seed and the sample's stream position.
//
// The layer table is held in 16 copies, entry-major: entry i of copy c at table[i * 16 + c],
// and lane l reads copy l % 16. An LDS.64 is served one half-warp (16 lanes x 8 B = 128 B)
// per wavefront, and lane l's address is then in bank pair l % 16 whatever the entries, so
// every table read takes the minimum 2 wavefronts. One shared copy (8 B per entry, random
// entries) measured 5.2 wavefronts per read on the H200, 64 % of all shared wavefronts being
// replays, with the read on every float's dependency chain. Rejected: 4-byte packed entries
// (still conflicting, about half), 8 copies (lanes l and l + 8 share a bank pair: ~4
// wavefronts), entries in registers (256 x 2 words).
constexpr int kWarpsPerBlock = 256 / 32;
constexpr unsigned kCopies = 16;
constexpr unsigned kRing = 128;  // < 32 pending before an iteration appends at most 64: never full
// The element ring: 32 entries, so that the 32 KB table fits next to the rings in the 48 KB
// of static shared memory (4 blocks x (45 + 1 reserved) KB per SM <= 228 KB: occupancy stays
// at 4 blocks/SM, the register limit). It fills in ~40 drains (~0.75 entries each) and is
// then finished as one 32-lane pass; when a drain's entries do not all fit, the warp
// finishes the 32 oldest and goes on appending (drain(), the `full` case). A model of the
// queues (bench/tensor/normal_queue_model.py) at 1.5 % rejected words takes that path ~0.7
// times per 1,000 warp iterations: 17-29 times per warp for normal_check's 1-block grid at
// 2^26 elements, 3-6 at 2^24, so the check's 1- and 3-block grids exercise it.
constexpr unsigned kXRing = 32;

struct NormalSmem {
  rng::ZigEntry table[256 * kCopies];  // entry i of copy c at [i * kCopies + c]
  float density[260];  // 257 used
  unsigned long long ring[kWarpsPerBlock][kRing];  // stream index (base + block) of queued blocks
  uint4 xring[kWarpsPerBlock][kXRing];  // {word, k, stream index lo, hi} of queued elements
};
static_assert(sizeof(NormalSmem) <= 48 * 1024, "static shared memory limit");
static_assert(kNormalBlocksPerSm * (sizeof(NormalSmem) + 1024) <= 228 * 1024, "4 blocks per SM on the H200");

// This lane's copy of the layer table: the table and the lane's byte offset in each row.
struct LaneTable {
  const rng::ZigEntry* table;  // NormalSmem::table
  unsigned lane_off;           // (lane % kCopies) * 8
  // Entry i: row i * 128 B, OR-ed with the lane's offset (the row's low 7 bits are zero),
  // so that the address is a shift, one LOP3 and the table's place as the load's immediate
  // (indexing table + lane % 16 cost a fourth instruction per word).
  __device__ __forceinline__ rng::ZigEntry operator[](std::uint32_t i) const {
    const unsigned off = ((i & 0xffu) << 7) | lane_off;
    return *reinterpret_cast<const rng::ZigEntry*>(reinterpret_cast<const char*>(table) + off);
  }
};
static_assert(kCopies * sizeof(rng::ZigEntry) == 128, "LaneTable: 128-byte rows");

// The slow path's tables from shared memory (this lane's copy of the layer table) and its
// side stream from the round keys in the parameter bank: the same values as rng::zig_slow
// (rng::zig_slow_from is the one definition), without the per-call key schedule and
// uncoalesced global table loads.
struct SmemSource {
  const NormalSmem& sm;
  const LaneTable& table;
  const rng::PhiloxKeys& keys;
  __device__ __forceinline__ rng::ZigEntry entry(std::uint32_t i) const { return table[i]; }
  __device__ __forceinline__ float density(std::uint32_t i) const { return sm.density[i]; }
  __device__ __forceinline__ rng::Philox4 side(std::uint64_t block, std::uint32_t c2) const {
    return rng::philox4x32_10(rng::side_counter(block, c2), keys);
  }
};

__device__ __forceinline__ std::uint32_t word(const rng::Philox4& w, unsigned k) {
  return k == 0 ? w.v[0] : k == 1 ? w.v[1] : k == 2 ? w.v[2] : w.v[3];
}

// The fast test of word x: the candidate and whether it was rejected.
__device__ __forceinline__ float fast_candidate(const LaneTable& table, std::uint32_t x, bool& rej) {
  const rng::ZigEntry e = table[x];
  const float v = rng::zig_candidate(x, e.w);
  rej = !(fabsf(v) < e.t);
  return v;
}

struct DrainState {
  unsigned head;   // block ring: entries [head, tail) pending
  unsigned xhead;  // element ring: entries [xhead, xtail) pending (< 32 between drains)
  unsigned xtail;
};

// Lanes [0, m) each take block ring entry (head + lane) and find its rejected elements again
// with the fast test (cheaper here, once per 32 blocks, than carrying a mask through the hot
// loop). The first goes through the slow path at once; the others are appended to the
// element ring, which is consumed 32 entries per pass (every entry when `last`). One loop
// runs every slow-path pass, so the slow path is inlined once per drain() call site.
template <bool Standard>
__device__ __forceinline__ void drain(const rng::SampleArgs& a, std::uint64_t base, NormalSmem& sm,
                                      const LaneTable& table, unsigned warp, unsigned lane, unsigned m,
                                      bool last, DrainState& st, float mean, float sd) {
  const rng::PhiloxKeys& keys = a.keys;
  std::uint64_t c = 0;
  rng::Philox4 w{{0u, 0u, 0u, 0u}};
  unsigned mask = 0;
  __syncwarp();  // the ring appends and provisional stores of every lane before this point
  if (lane < m) {
    c = sm.ring[warp][(st.head + lane) & (kRing - 1)];
    w = rng::philox4x32_10(c, keys);  // recomputed: the queue stays 8 bytes an entry
#pragma unroll
    for (unsigned k = 0; k < 4; ++k) {
      bool rej;
      fast_candidate(table, w.v[k], rej);
      mask |= rej ? 1u << k : 0u;
    }
  }
  st.head += m;
  __syncwarp();  // block ring slots read above: free for the next iteration's appends
  // The lane's slow-path job: word jx, word index jk of stream block jc. (c, w) stay this
  // lane's block, for its remaining appends.
  bool have = mask != 0;
  unsigned jk = have ? __ffs(mask) - 1 : 0u;
  std::uint32_t jx = word(w, jk);
  std::uint64_t jc = c;
  mask &= mask - 1;
  // Element ring positions of the remaining rejects: lane order, then word order (a ballot
  // per count); lane's entries go to [pos, pos + popc(mask)).
  unsigned pos = 0;
  if (__any_sync(0xffffffffu, mask != 0)) {
    const unsigned n = __popc(mask);
    const unsigned b1 = __ballot_sync(0xffffffffu, n >= 1), b2 = __ballot_sync(0xffffffffu, n >= 2),
                   b3 = __ballot_sync(0xffffffffu, n >= 3);
    const unsigned lt = (1u << lane) - 1u;
    pos = st.xtail + __popc(b1 & lt) + __popc(b2 & lt) + __popc(b3 & lt);
    st.xtail += __popc(b1) + __popc(b2) + __popc(b3);
  }
  float* const out = static_cast<float*>(a.out);
  const SmemSource src{sm, table, keys};
  for (;;) {
    if (have) {
      const float v = rng::zig_slow_from(src, jx, jc, static_cast<int>(jk));
      out[4 * static_cast<std::int64_t>(jc - base) + jk] = Standard ? v : rng::fma32(v, sd, mean);
    }
    bool full = false;
    if (__any_sync(0xffffffffu, mask != 0)) {
      // Append what fits: position p has a free slot while p - xhead < kXRing. Positions
      // are handed out in order, so when some lane is left holding one, every slot of the
      // ring holds a pending entry.
      while (mask != 0 && pos - st.xhead < kXRing) {
        const unsigned kk = __ffs(mask) - 1;
        sm.xring[warp][pos & (kXRing - 1)] =
            make_uint4(word(w, kk), kk, static_cast<unsigned>(c), static_cast<unsigned>(c >> 32));
        ++pos;
        mask &= mask - 1;
      }
      full = __any_sync(0xffffffffu, mask != 0);
      __syncwarp();  // appended entries visible to the lanes that take them
    }
    const unsigned pending = st.xtail - st.xhead;  // incl. positions not yet written when full
    if (!full && pending < (last ? 1u : 32u)) break;
    const unsigned take = min(pending, 32u);  // full: 32 (kXRing) written entries
    have = lane < take;
    if (have) {
      const uint4 e = sm.xring[warp][(st.xhead + lane) & (kXRing - 1)];
      jx = e.x;
      jk = e.y;
      jc = (static_cast<std::uint64_t>(e.w) << 32) | e.z;
    }
    st.xhead += take;
    __syncwarp();  // element ring slots read above free before the next append
  }
}
template <bool Standard>
__device__ __forceinline__ void normal_f32_fast(const rng::SampleArgs& a, NormalSmem& sm) {
  // 16 copies of each entry; lanes 0-15 of a warp read the same entry (one broadcast load).
  for (unsigned f = threadIdx.x; f < 256 * kCopies; f += blockDim.x) sm.table[f] = rng::zig_entry(f / kCopies);
  for (unsigned i = threadIdx.x; i < 257; i += blockDim.x) sm.density[i] = rng::zig_density(i);
  __syncthreads();
  const std::uint64_t base = rng::philox_start(a.philox);  // read at kernel time (graphs)
  const rng::PhiloxKeys& keys = a.keys;  // parameter bank
  const float mean = static_cast<float>(a.a), sd = static_cast<float>(a.b);
  const std::int64_t full = a.n / 4;  // whole Philox blocks
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const LaneTable table{sm.table, (lane % kCopies) * static_cast<unsigned>(sizeof(rng::ZigEntry))};
  // 32-bit shared address of this warp's ring, opaque so that it stays in a register
  // (otherwise it is recomputed from threadIdx for every append).
  unsigned ring_addr = static_cast<unsigned>(__cvta_generic_to_shared(sm.ring[warp]));
  asm volatile("" : "+r"(ring_addr));
  const unsigned lt = (1u << lane) - 1u;  // lanes below this one
  unsigned tail = 0;          // blocks appended so far (mod 2^32), warp-uniform
  DrainState st{0u, 0u, 0u};  // warp-uniform

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

  auto value = [&](float v) { return Standard ? v : rng::fma32(v, sd, mean); };
  for (unsigned it = 0; it < iters; ++it, ctr += step, out += step) {
    // Both blocks' Philox rounds, then all eight table reads, before any ring append: the
    // appends are shared-memory writes, and ptxas keeps later shared reads behind them
    // (the previous version read block 2's table only after block 1's append).
    const rng::Philox4 p = rng::philox4x32_10(ctr, keys), q = rng::philox4x32_10(ctr + 32, keys);
    bool r[8];
    const float p0 = fast_candidate(table, p.v[0], r[0]), p1 = fast_candidate(table, p.v[1], r[1]);
    const float p2 = fast_candidate(table, p.v[2], r[2]), p3 = fast_candidate(table, p.v[3], r[3]);
    const float q0 = fast_candidate(table, q.v[0], r[4]), q1 = fast_candidate(table, q.v[1], r[5]);
    const float q2 = fast_candidate(table, q.v[2], r[6]), q3 = fast_candidate(table, q.v[3], r[7]);
    out[0] = make_float4(value(p0), value(p1), value(p2), value(p3));
    out[32] = make_float4(value(q0), value(q1), value(q2), value(q3));
    const bool rp = r[0] | r[1] | r[2] | r[3], rq = r[4] | r[5] | r[6] | r[7];
    // Queue the blocks with a reject, slots by ballot and prefix count: the warp's tail stays
    // in a register. (A shared atomic on a shared tail costs as many instructions, but the
    // loop then waited for the atomic and a reload of the tail before its drain branch.)
    const unsigned bp = __ballot_sync(0xffffffffu, rp), bq = __ballot_sync(0xffffffffu, rq);
    const unsigned sp = tail + __popc(bp & lt), sq = tail + __popc(bp) + __popc(bq & lt);
    tail += __popc(bp) + __popc(bq);
    asm volatile(
        "{\n\t.reg .pred pp, pq;\n\t.reg .u32 o;\n\t"
        "setp.ne.u32 pp, %0, 0;\n\t"
        "setp.ne.u32 pq, %1, 0;\n\t"
        "and.b32 o, %2, %5;\n\t"
        "shl.b32 o, o, 3;\n\t"
        "add.u32 o, %4, o;\n\t"
        "@pp st.shared.u64 [o], %6;\n\t"
        "and.b32 o, %3, %5;\n\t"
        "shl.b32 o, o, 3;\n\t"
        "add.u32 o, %4, o;\n\t"
        "@pq st.shared.u64 [o], %7;\n\t}"
        :: "r"(static_cast<unsigned>(rp)), "r"(static_cast<unsigned>(rq)), "r"(sp), "r"(sq), "r"(ring_addr),
           "n"(kRing - 1), "l"(ctr), "l"(ctr + 32)
        : "memory");
    // drain() starts with __syncwarp: this iteration's appends and provisional stores are
    // then visible to (and ordered before) every lane's reads and stores.
    while (tail - st.head >= 32u) drain<Standard>(a, base, sm, table, warp, lane, 32, false, st, mean, sd);
  }
  for (;;) {  // the last (< 32) blocks and every element still queued
    const unsigned m = min(tail - st.head, 32u);
    const bool last = tail - st.head <= 32u;
    drain<Standard>(a, base, sm, table, warp, lane, m, last, st, mean, sd);
    if (last) break;
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
