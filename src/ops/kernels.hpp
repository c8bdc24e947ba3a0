// The embedded fatbins (cmake/EmbedFatbin.cmake) and their per-device modules.
#pragma once

#include <cstdint>

#include "backend/backend.hpp"

namespace cudakit::ops {

enum class KernelModule : int { ops = 0, random = 1, comm = 2 };

// Function `name` of module `m` on `device`. The module is loaded into the device's primary
// context on first use (once per device). Throws NotSupportedError when the library was
// built without kernels (no nvcc at build time).
detail::FunctionHandle get_kernel(int device, KernelModule m, const char* name);

// A 1-D launch covering `work_items` items with grid-stride loops: at most enough blocks
// to fill the device (a few waves), at least one.
detail::Dim3 grid_for(int device, std::int64_t work_items, unsigned block);

}  // namespace cudakit::ops
