// Kineto's per-kernel launch statistics: blocks per SM, warps per SM and the estimated
// achieved occupancy, from the launch shape, the kernel's registers and shared memory, and the
// device's limits.
//
// The estimate follows the documented occupancy rules (as CUDA's occupancy calculator):
// resident blocks per SM are limited by warps, by the register file (registers per thread
// rounded up to the 256-register allocation unit per warp), by shared memory (per-block
// usage plus the 1 KB the driver reserves per block on sm_80+, in 128-byte units) and by
// the architecture's block limit. Achieved occupancy is Kineto's: min(resident blocks,
// launched blocks per SM) * threads per block / max threads per SM.
// Measured against nothing: it is an estimate, named "est." in the trace as in Kineto's.
#pragma once

#include <cstdint>

#include "cudakit/device.hpp"

namespace cudakit::profiler::detail {

struct KernelShape {
  std::uint32_t grid[3];
  std::uint32_t block[3];
  std::uint32_t shared_bytes;
  std::uint32_t registers;
};

struct Occupancy {
  double blocks_per_sm = 0;  // launched blocks / SM count (0 when the SM count is unknown)
  double warps_per_sm = 0;   // blocks_per_sm * threads per block / 32 (Kineto's definition)
  int achieved_percent = 0;  // rounded, 0..100
};

// Resident blocks per SM allowed by the limits above (0 when the block cannot run).
int max_resident_blocks(const DeviceProperties& p, const KernelShape& k) noexcept;
Occupancy kernel_occupancy(const DeviceProperties& p, const KernelShape& k) noexcept;

}  // namespace cudakit::profiler::detail
