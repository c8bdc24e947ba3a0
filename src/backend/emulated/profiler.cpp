// Emulated backend: profiler start/stop. There is no profiling tool to drive; like
// cuProfilerStart, the calls need a usable current device, which is all they check.
// profiler::state() (src/profiler) records what start/stop did, the same on both backends.
#include "backend/emulated/state.hpp"

namespace cudakit::detail::emulated {

void EmulatedBackend::profiler_start() { dev(thread_current_device()); }

void EmulatedBackend::profiler_stop() { dev(thread_current_device()); }

}  // namespace cudakit::detail::emulated
