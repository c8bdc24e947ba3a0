// The embedded fatbins (cmake/EmbedFatbin.cmake), their per-device modules, and the one cache
// of their function handles that every launcher of a built-in kernel uses (the tensor ops in
// src/ops/cuda_kernels.cpp, the RNG, the peer copies and reductions in src/comm/peer.cpp).
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/kernel_ops.hpp"

namespace cudakit::ops {

enum class KernelModule : int { ops = 0, random = 1, comm = 2 };
inline constexpr int kKernelModules = 3;
// Handle slots per module: each launcher numbers its kernels inside its module (a fixed
// index per (kernel family, dtype), chosen by the launcher), so a launch after the first
// finds its handle with one atomic load: no name string, no lock, no map.
inline constexpr int kKernelSlotsPerModule = 320;

// Function `name` of module `m` on `device`, uncached: the module is loaded into the device's
// primary context on first use (once per device), the function looked up under a lock.
// Throws NotSupportedError when the library was built without kernels (no nvcc at build time).
detail::FunctionHandle get_kernel(int device, KernelModule m, const char* name);

// The handle cell of (device, module, slot); throws for a bad device index.
std::atomic<detail::FunctionHandle>& kernel_slot(int device, KernelModule m, int slot);

// The handle of the kernel in `slot` of module `m` on `device`; `name()` (a callable
// returning the kernel's name as std::string) is called only the first time, to look it up.
template <class NameFn>
detail::FunctionHandle cached_kernel(int device, KernelModule m, int slot, NameFn&& name) {
  std::atomic<detail::FunctionHandle>& cell = kernel_slot(device, m, slot);
  detail::FunctionHandle f = cell.load(std::memory_order_acquire);
  if (!f) [[unlikely]] {
    // Two threads may both look it up: the driver returns the same handle to both.
    f = get_kernel(device, m, name().c_str());
    cell.store(f, std::memory_order_release);
  }
  return f;
}

// The device's multiprocessor count (at least 1), read once per device.
int multiprocessor_count(int device);

// A 1-D launch covering `work_items` items with grid-stride loops: at most enough blocks
// to fill the device (a few waves), at least one.
detail::Dim3 grid_for(int device, std::int64_t work_items, unsigned block);

}  // namespace cudakit::ops
