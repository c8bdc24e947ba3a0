// torch.cuda.set_sync_debug_mode: warn or throw when a call blocks the host on the device.
#include <atomic>
#include <cstdio>
#include <mutex>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "devices/sync_debug.hpp"

namespace cudakit {
namespace {
std::atomic<int> g_mode{0};
std::mutex g_handler_mutex;
detail::SyncWarningHandler g_handler;  // guarded by g_handler_mutex
}  // namespace

void set_sync_debug_mode(SyncDebugMode mode) {
  int m = static_cast<int>(mode);
  if (m < 0 || m > 2) throw ValueError("sync debug mode must be 0/'default', 1/'warn' or 2/'error'");
  g_mode.store(m, std::memory_order_relaxed);
}

SyncDebugMode get_sync_debug_mode() noexcept {
  return static_cast<SyncDebugMode>(g_mode.load(std::memory_order_relaxed));
}

void set_sync_warning_handler(std::function<void(const std::string& message)> handler) {
  std::lock_guard lock(g_handler_mutex);
  g_handler = std::move(handler);
}

namespace detail {

void on_synchronizing_call(const char* what) {
  int mode = g_mode.load(std::memory_order_relaxed);
  if (mode == 0) return;
  std::string msg = std::string("called a synchronizing CUDA operation (") + what +
                    "); set_sync_debug_mode('default') to silence this";
  if (mode == 2) throw Error(msg);
  SyncWarningHandler handler;
  {
    std::lock_guard lock(g_handler_mutex);
    handler = g_handler;
  }
  if (handler) {
    handler(msg);
  } else {
    std::fprintf(stderr, "cudakit warning: %s\n", msg.c_str());
  }
}

}  // namespace detail
}  // namespace cudakit
