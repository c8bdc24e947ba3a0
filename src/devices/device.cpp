// Device selection, initialisation, fork safety and properties.
#include "cudakit/device.hpp"

#include <pthread.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

#include "backend/device_ops.hpp"
#include "backend/graph_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/memory_ops.hpp"
#include "cudakit/error.hpp"
#include "devices/resolve.hpp"
#include "devices/sync_debug.hpp"
#include "instrument/observers.hpp"

namespace cudakit {
namespace {

std::atomic<bool> g_initialized{false};
std::atomic<bool> g_in_bad_fork{false};
std::atomic<int> g_device_count{-1};
std::once_flag g_atfork_once;

void mark_bad_fork_in_child() {
  if (g_initialized.load()) g_in_bad_fork.store(true);
}

struct PropertiesCache {
  std::array<std::once_flag, kMaxDevices> once;
  std::array<std::unique_ptr<DeviceProperties>, kMaxDevices> props;
};
PropertiesCache& properties_cache() {
  static auto* cache = new PropertiesCache();  // leaked: read during exit paths too
  return *cache;
}


}  // namespace

namespace detail {

std::string uuid_string(const unsigned char (&u)[16]) {
  char buf[40];
  std::snprintf(buf, sizeof buf,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return buf;
}

int cached_device_count() noexcept {
  int n = g_device_count.load(std::memory_order_relaxed);
  if (n >= 0) return n;
  try {
    n = device_ops().device_count();
  } catch (...) {
    n = 0;
  }
  g_device_count.store(n, std::memory_order_relaxed);
  return n;
}

void ensure_initialized() {
  if (g_initialized.load(std::memory_order_acquire)) {
    if (g_in_bad_fork.load(std::memory_order_relaxed)) {
      throw Error(
          "Cannot re-initialize CUDA in forked subprocess: the parent process initialised "
          "cudakit before fork(). Use the 'spawn' or 'forkserver' multiprocessing start "
          "method, or do not touch the device in the parent before forking");
    }
    return;
  }
  init();
}

}  // namespace detail

std::string backend_name() { return detail::selected_backend_name(); }
void set_backend(const std::string& name) { detail::select_backend(name); }

BackendCapabilities backend_capabilities() noexcept {
  BackendCapabilities out;
  try {
    out.backend = backend_name();
    const detail::BackendCapabilities c = detail::device_ops().capabilities();
    out.runs_kernels = c.runs_kernels;
    out.host_addressable_device_memory = c.host_addressable_device_memory;
    out.vendor_math_handles = c.vendor_math_handles;
    out.cross_process_ipc = c.cross_process_ipc;
    out.hardware_telemetry = c.hardware_telemetry;
    out.graph_tools_ids = detail::graph_ops().graph_tools_ids_available();
  } catch (...) {  // an unusable backend can do nothing: every capability stays false
  }
  return out;
}

int device_count() noexcept { return detail::cached_device_count(); }
bool is_available() noexcept { return device_count() > 0; }
std::string unavailable_reason() noexcept {
  try {
    if (is_available()) return "";
    std::string r = detail::device_ops().unavailable_reason();
    return r.empty() ? "no devices are visible" : r;  // every backend says why (backend.hpp)
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error while probing the backend";
  }
}
bool is_initialized() noexcept {
  return g_initialized.load(std::memory_order_acquire) && !g_in_bad_fork.load();
}

void init() {
  if (g_in_bad_fork.load()) {
    throw Error(
        "Cannot re-initialize CUDA in forked subprocess: the parent process initialised "
        "cudakit before fork(). Use the 'spawn' or 'forkserver' multiprocessing start "
        "method");
  }
  if (g_initialized.load(std::memory_order_acquire)) return;
  auto& be = detail::device_ops();
  if (detail::cached_device_count() == 0) {
    std::string reason = be.unavailable_reason();
    throw AcceleratorError(errc::no_device, error_code_name(errc::no_device),
                           "cudakit: no device available on the '" + std::string(be.name()) +
                               "' backend" + (reason.empty() ? "" : ": " + reason) +
                               ". For development without a GPU set CUDAKIT_BACKEND=emulated");
  }
  std::call_once(g_atfork_once, [] { pthread_atfork(nullptr, nullptr, mark_bad_fork_in_child); });
  g_initialized.store(true, std::memory_order_release);
}

int resolve_device(int device) {
  if (device == kCurrentDevice) return current_device();
  detail::ensure_initialized();
  return detail::resolve_device_index(device);
}

int current_device() {
  detail::ensure_initialized();
  return detail::device_ops().current_device();
}

void set_device(int device) {
  device = resolve_device(device);
  detail::device_ops().set_current_device(device);
}

DeviceGuard::DeviceGuard(int device) : prev_(current_device()), cur_(resolve_device(device)) {
  if (cur_ != prev_) detail::device_ops().set_current_device(cur_);
}

DeviceGuard::~DeviceGuard() {
  if (cur_ != prev_ && !detail::is_shutting_down()) {
    try {
      detail::device_ops().set_current_device(prev_);
    } catch (...) {
    }
  }
}

int device_of_pointer(const void* ptr) {
  detail::ensure_initialized();
  return detail::memory_ops().pointer_device(ptr);
}

const DeviceProperties& get_device_properties(int device) {
  device = resolve_device(device);
  auto& cache = properties_cache();
  std::call_once(cache.once[device], [&] {
    auto& be = detail::device_ops();
    auto p = std::make_unique<DeviceProperties>(be.device_info(device));
    p->backend = be.name();
    cache.props[device] = std::move(p);
  });
  return *cache.props[device];
}

std::string get_device_name(int device) { return get_device_properties(device).name; }

std::pair<int, int> get_device_capability(int device) {
  const auto& p = get_device_properties(device);
  return {p.major, p.minor};
}

std::vector<std::string> get_arch_list() {
  if (!is_available()) return {};
  std::vector<std::string> out;
#ifdef CUDAKIT_CUDA_ARCH_LIST
  std::string list = CUDAKIT_CUDA_ARCH_LIST;  // e.g. "90;80"
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t next = list.find(';', pos);
    std::string a = list.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (!a.empty()) out.push_back("sm_" + a);
    if (next == std::string::npos) break;
    pos = next + 1;
  }
#endif
  return out;
}

std::string get_gencode_flags() {
  std::string flags;
  for (const auto& arch : get_arch_list()) {
    std::string num = arch.substr(3);
    if (!flags.empty()) flags += ' ';
    flags += "-gencode compute=compute_" + num + ",code=" + arch;
  }
  return flags;
}

// Both follow the device's compute capability on every backend: the emulated backend
// presents an sm_XY device and its matmul rounds to TF32 when allowed, as sm_80+ GPUs do.
bool is_bf16_supported(bool including_emulation) {
  if (!is_available()) return false;
  return get_device_capability().first >= 8 || including_emulation;
}

bool is_tf32_supported() {
  if (!is_available()) return false;
  return get_device_capability().first >= 8;
}

void synchronize(int device) {
  device = resolve_device(device);
  // Not a sync-debug report: torch's device_synchronize() (torch.cuda.synchronize) is not
  // one either, and graph capture calls it on entry.
  DeviceGuard guard(device);
  detail::device_ops().device_synchronize(device);
  if (const auto* o = instrument::stream_observer()) [[unlikely]] o->host_waited_device(device);  // sanitizer
}

bool can_device_access_peer(int device, int peer_device) {
  device = resolve_device(device);
  peer_device = resolve_device(peer_device);
  if (device == peer_device) return false;  // torch: a device is not its own peer
  return detail::device_ops().can_access_peer(device, peer_device);
}

void enable_peer_access(int device, int peer_device) {
  device = resolve_device(device);
  peer_device = resolve_device(peer_device);
  detail::device_ops().enable_peer_access(device, peer_device);
}

std::pair<std::size_t, std::size_t> mem_get_info(int device) {
  device = resolve_device(device);
  auto info = detail::device_ops().mem_get_info(device);
  return {info.free, info.total};
}

int utilization(int device) { return detail::device_ops().utilization_percent(resolve_device(device)); }
int memory_usage(int device) {
  return detail::device_ops().memory_utilization_percent(resolve_device(device));
}
int temperature(int device) { return detail::device_ops().temperature_c(resolve_device(device)); }
int power_draw(int device) { return detail::device_ops().power_draw_mw(resolve_device(device)); }
int clock_rate(int device) { return detail::device_ops().clock_rate_mhz(resolve_device(device)); }
std::size_t device_memory_used(int device) {
  return detail::device_ops().device_memory_used(resolve_device(device));
}

void check_error(int code) { throw_accelerator_error(code, "cudakit.check_error"); }

int driver_version() noexcept {
  try {
    return detail::device_ops().driver_version();
  } catch (...) {
    return 0;
  }
}

}  // namespace cudakit
