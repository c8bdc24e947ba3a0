// Emulated backend: profiler start/stop. There is no profiling tool to drive, so the backend
// records the state (and validates the calling thread's device, as cuProfilerStart needs a
// context) for tests to observe through emulated_profiler_state().
#include <cstring>

#include "backend/emulated/state.hpp"

namespace cudakit::detail {
namespace emulated {

void EmulatedBackend::profiler_start() {
  dev(thread_current_device());
  profiler_starts_.fetch_add(1, std::memory_order_relaxed);
  profiler_active_.store(true, std::memory_order_release);
}

void EmulatedBackend::profiler_stop() {
  dev(thread_current_device());
  profiler_stops_.fetch_add(1, std::memory_order_relaxed);
  profiler_active_.store(false, std::memory_order_release);
}

EmulatedProfilerState EmulatedBackend::profiler_state() const noexcept {
  EmulatedProfilerState s;
  s.active = profiler_active_.load(std::memory_order_acquire);
  s.starts = profiler_starts_.load(std::memory_order_relaxed);
  s.stops = profiler_stops_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace emulated

bool emulated_profiler_state(EmulatedProfilerState* out) noexcept {
  if (!out || !backend_created()) return false;
  Backend& b = backend();
  if (std::strcmp(b.name(), "emulated") != 0) return false;
  *out = static_cast<emulated::EmulatedBackend&>(b).profiler_state();
  return true;
}

}  // namespace cudakit::detail
