// Turning CUresult codes into cudakit exceptions, and gating calls on driver availability.
#pragma once

#include <string>

#include "backend/cuda/driver_api.hpp"

namespace cudakit::detail::cuda {

// Throws AcceleratorError(code, "<what>: <CUDA_ERROR_NAME>: <driver's description>"), or
// OutOfMemoryError for CUDA_ERROR_OUT_OF_MEMORY. Never returns.
[[noreturn]] void throw_cu(CUresult rc, const char* what);

inline void check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) [[unlikely]] throw_cu(rc, what);
}

// Throws AcceleratorError carrying the load failure (no driver, cuInit error, ...).
[[noreturn]] void throw_unavailable(const DriverState& s, const char* what);

// Throws NotSupportedError: the loaded driver lacks optional entry point `entry_point`.
[[noreturn]] void throw_missing(const char* entry_point);

// The entry-point table of a usable driver; throws (naming `what`) otherwise. The fast path is
// one call_once check and a bool test.
inline const EntryPoints& api(const char* what) {
  const DriverState& s = driver();
  if (!s.available) [[unlikely]] throw_unavailable(s, what);
  return s.api;
}

}  // namespace cudakit::detail::cuda

// Calls an optional entry point, throwing NotSupportedError when the driver lacks it.
#define CUDAKIT_CU_OPTIONAL(table, fn) \
  ((table).fn ? (table).fn : (::cudakit::detail::cuda::throw_missing(#fn), (table).fn))
