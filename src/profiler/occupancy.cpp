// Kernel occupancy estimate (occupancy.hpp).
#include "profiler/occupancy.hpp"

#include <algorithm>
#include <cmath>

namespace cudakit::profiler::detail {
namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t unit) { return (v + unit - 1) / unit * unit; }

// Resident-block limit per SM by compute capability (CUDA programming guide, "Technical
// Specifications per Compute Capability").
int arch_block_limit(int major, int minor) noexcept {
  if (major >= 9) return major == 12 ? 24 : 32;
  if (major == 8) return minor == 0 ? 32 : (minor == 9 ? 24 : 16);
  if (major == 7) return minor == 5 ? 16 : 32;
  return 16;
}

}  // namespace

int max_resident_blocks(const DeviceProperties& p, const KernelShape& k) noexcept {
  const std::uint64_t threads =
      std::uint64_t{k.block[0]} * std::uint64_t{k.block[1]} * std::uint64_t{k.block[2]};
  const int warp = p.warp_size > 0 ? p.warp_size : 32;
  if (threads == 0 || p.max_threads_per_multi_processor <= 0) return 0;
  const std::uint64_t warps_per_block = (threads + warp - 1) / warp;
  const std::uint64_t max_warps = static_cast<std::uint64_t>(p.max_threads_per_multi_processor) / warp;
  std::uint64_t limit = max_warps / warps_per_block;
  limit = std::min<std::uint64_t>(limit, arch_block_limit(p.major, p.minor));
  if (k.registers > 0 && p.regs_per_multiprocessor > 0) {
    const std::uint64_t regs_per_warp = round_up(std::uint64_t{k.registers} * warp, 256);
    const std::uint64_t warps_by_regs = p.regs_per_multiprocessor / regs_per_warp;
    limit = std::min(limit, warps_by_regs / warps_per_block);
  }
  if (k.shared_bytes > 0 && p.shared_memory_per_multiprocessor > 0) {
    const std::uint64_t reserved = p.major >= 8 ? 1024 : 0;
    const std::uint64_t per_block = round_up(std::uint64_t{k.shared_bytes} + reserved, 128);
    limit = std::min<std::uint64_t>(limit, p.shared_memory_per_multiprocessor / per_block);
  }
  return static_cast<int>(limit);
}

Occupancy kernel_occupancy(const DeviceProperties& p, const KernelShape& k) noexcept {
  Occupancy o;
  const double blocks =
      double(k.grid[0]) * double(k.grid[1]) * double(k.grid[2]);
  const double threads = double(k.block[0]) * double(k.block[1]) * double(k.block[2]);
  if (p.multi_processor_count <= 0) return o;
  o.blocks_per_sm = blocks / p.multi_processor_count;
  o.warps_per_sm = o.blocks_per_sm * threads / 32.0;
  if (p.max_threads_per_multi_processor <= 0) return o;
  const double resident = std::min<double>(max_resident_blocks(p, k), o.blocks_per_sm);
  const double occ = resident * threads / p.max_threads_per_multi_processor;
  o.achieved_percent = static_cast<int>(std::lround(std::clamp(occ, 0.0, 1.0) * 100.0));
  return o;
}

}  // namespace cudakit::profiler::detail
