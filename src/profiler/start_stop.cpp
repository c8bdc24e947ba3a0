// profiler::start/stop: thin forwards to the backend seam (cuProfilerStart/Stop on cuda).
#include "backend/backend.hpp"
#include "cudakit/profiler.hpp"

namespace cudakit::profiler {

void start() { detail::backend().profiler_start(); }

void stop() { detail::backend().profiler_stop(); }

ProfileGuard::~ProfileGuard() {
  // No CUDA calls during process exit (a guard in a static object).
  if (detail::is_shutting_down()) return;
  try {
    stop();
  } catch (...) {  // destructors never throw; stop() only fails if start() would have
  }
}

}  // namespace cudakit::profiler
