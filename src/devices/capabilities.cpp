// backend_capabilities(): the seam's BackendCapabilities, copied for display.
#include "cudakit/capabilities.hpp"

#include "backend/backend.hpp"

namespace cudakit {

Capabilities backend_capabilities() {
  const detail::BackendCapabilities c = detail::backend().capabilities();
  Capabilities out;
  out.host_addressable_device_memory = c.host_addressable_device_memory;
  out.runs_kernels = c.runs_kernels;
  out.vendor_math_handles = c.vendor_math_handles;
  out.cross_process_ipc = c.cross_process_ipc;
  out.hardware_telemetry = c.hardware_telemetry;
  return out;
}

}  // namespace cudakit
