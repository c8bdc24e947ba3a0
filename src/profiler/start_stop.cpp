// profiler::start/stop: thin forwards to the backend seam (cuProfilerStart/Stop on cuda).
#include <atomic>

#include "backend/lifetime.hpp"
#include "backend/profiler_ops.hpp"
#include "cudakit/profiler.hpp"

namespace cudakit::profiler {
namespace {
std::atomic<bool> g_active{false};
std::atomic<unsigned long long> g_starts{0}, g_stops{0};
}  // namespace

void start() {
  detail::profiler_ops().profiler_start();
  g_starts.fetch_add(1, std::memory_order_relaxed);
  g_active.store(true, std::memory_order_release);
}

void stop() {
  detail::profiler_ops().profiler_stop();
  g_stops.fetch_add(1, std::memory_order_relaxed);
  g_active.store(false, std::memory_order_release);
}

State state() noexcept {
  return {g_active.load(std::memory_order_acquire), g_starts.load(std::memory_order_relaxed),
          g_stops.load(std::memory_order_relaxed)};
}

ProfileGuard::~ProfileGuard() {
  // No CUDA calls during process exit (a guard in a static object).
  if (detail::is_shutting_down()) return;
  try {
    stop();
  } catch (...) {  // destructors never throw; stop() only fails if start() would have
  }
}

}  // namespace cudakit::profiler
