// What the backend in use can do: the flags cudakit's own modules branch on (never on
// backend_name()), for reports (`python -m cudakit info`) and for code that wants to branch
// the same way.
//
// Thread-safety: backend_capabilities() may be called from any thread; the answer is fixed
// for the process.
#pragma once

#include "cudakit/export.hpp"

namespace CUDAKIT_API cudakit {

struct Capabilities {
  bool host_addressable_device_memory = false;  // host code may read device pointers
  bool runs_kernels = false;         // built-in ops run as device kernels (else host tasks)
  bool vendor_math_handles = false;  // current_blas_handle / current_solver_handle work
  bool cross_process_ipc = false;    // IPC memory handles open in another process
  bool hardware_telemetry = false;   // utilization, temperature, ... read from sensors (NVML),
                                     // else from the backend's documented model
};

// The capabilities of the backend in use (created on first call, as optional_libraries()).
Capabilities backend_capabilities();

}  // namespace cudakit
