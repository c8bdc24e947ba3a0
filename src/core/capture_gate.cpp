// core/capture_gate.hpp: the live-capture count and the synchronize gate.
#include "core/capture_gate.hpp"

#include <atomic>

namespace cudakit::detail {
namespace {
std::atomic<int> g_live_captures{0};
}  // namespace

int live_captures() noexcept { return g_live_captures.load(std::memory_order_acquire); }
void note_capture_begun() noexcept { g_live_captures.fetch_add(1, std::memory_order_acq_rel); }
void note_capture_ended() noexcept { g_live_captures.fetch_sub(1, std::memory_order_acq_rel); }

std::mutex& capture_start_mutex() noexcept {
  static std::mutex m;
  return m;
}

bool synchronize_unless_capturing(const std::function<void()>& synchronize) {
  std::lock_guard<std::mutex> lock(capture_start_mutex());
  if (live_captures() != 0) return false;
  synchronize();
  return true;
}

}  // namespace cudakit::detail
