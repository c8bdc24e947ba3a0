// CudaBackend: profiler control through cuProfilerStart / cuProfilerStop.
//
// Both act on the calling thread's current context, so a thread without one gets device 0's
// primary context first, as cudaProfilerStart does through the runtime's lazy init. They are
// optional rows of the entry-point table: a driver without them reports NotSupportedError
// naming the entry point rather than disabling the whole backend.
#include "backend/cuda/cuda_backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {

void CudaBackend::profiler_start() {
  const EntryPoints& t = api("profiler_start");
  ensure_current_context("profiler_start");
  check(CUDAKIT_CU_OPTIONAL(t, cuProfilerStart)(), "cuProfilerStart");
}

void CudaBackend::profiler_stop() {
  const EntryPoints& t = api("profiler_stop");
  ensure_current_context("profiler_stop");
  check(CUDAKIT_CU_OPTIONAL(t, cuProfilerStop)(), "cuProfilerStop");
}

}  // namespace cudakit::detail::cuda
