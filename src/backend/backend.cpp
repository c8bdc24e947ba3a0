// Backend selection (CUDAKIT_BACKEND / select_backend), the topic accessors and the
// process-exit guard.
#include "backend/backend.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "cudakit/error.hpp"

namespace cudakit::detail {
namespace {

std::mutex g_mutex;
std::string g_selected;               // set by select_backend before creation
std::atomic<Backend*> g_backend{nullptr};
std::atomic<bool> g_shutting_down{false};

void on_exit() { g_shutting_down.store(true, std::memory_order_release); }

std::string name_from_env() {
  const char* env = std::getenv("CUDAKIT_BACKEND");
  return (env && *env) ? std::string(env) : std::string("cuda");
}

void validate(const std::string& name) {
  if (name != "cuda" && name != "emulated") {
    throw ValueError("unknown cudakit backend '" + name +
                     "': set CUDAKIT_BACKEND (or cudakit.set_backend) to 'cuda' or 'emulated'");
  }
}

}  // namespace

bool is_shutting_down() noexcept { return g_shutting_down.load(std::memory_order_acquire); }

namespace {
thread_local bool t_in_host_function = false;
}  // namespace

bool in_host_function() noexcept { return t_in_host_function; }
HostFunctionScope::HostFunctionScope() noexcept : previous_(t_in_host_function) {
  t_in_host_function = true;
}
HostFunctionScope::~HostFunctionScope() { t_in_host_function = previous_; }

std::string selected_backend_name() {
  std::lock_guard lock(g_mutex);
  if (Backend* b = g_backend.load()) return b->name();
  return g_selected.empty() ? name_from_env() : g_selected;
}

void select_backend(const std::string& name) {
  validate(name);
  std::lock_guard lock(g_mutex);
  if (Backend* b = g_backend.load()) {
    if (name != b->name()) {
      throw Error("cudakit backend '" + std::string(b->name()) +
                  "' is already in use; select '" + name +
                  "' before the first device call (or set CUDAKIT_BACKEND)");
    }
    return;
  }
  g_selected = name;
}

bool backend_created() noexcept { return g_backend.load(std::memory_order_acquire) != nullptr; }

namespace {

[[gnu::noinline]] Backend& create_backend() {
  std::lock_guard lock(g_mutex);
  if (Backend* b = g_backend.load()) return *b;
  std::string name = g_selected.empty() ? name_from_env() : g_selected;
  validate(name);
  // Leaked on purpose: device handles must never be released during static destruction.
  Backend* created = (name == "emulated") ? make_emulated_backend().release()
                                          : make_cuda_backend().release();
  std::atexit(on_exit);
  g_backend.store(created, std::memory_order_release);
  return *created;
}

// The fast path every accessor shares: one acquire load.
inline Backend& the_backend() {
  if (Backend* b = g_backend.load(std::memory_order_acquire)) return *b;
  return create_backend();
}

}  // namespace

Backend& backend() { return the_backend(); }

// The topic accessors (declared in the topic headers): the backend upcast, a constant offset.
DeviceOps& device_ops() { return the_backend(); }
MemoryOps& memory_ops() { return the_backend(); }
StreamOps& stream_ops() { return the_backend(); }
GraphOps& graph_ops() { return the_backend(); }
KernelOps& kernel_ops() { return the_backend(); }
MathOps& math_ops() { return the_backend(); }
CommOps& comm_ops() { return the_backend(); }
GreenContextOps& green_context_ops() { return the_backend(); }
GdsOps& gds_ops() { return the_backend(); }
ProfilerOps& profiler_ops() { return the_backend(); }

}  // namespace cudakit::detail
