// Emulated backend: factory, identity, devices, and the (unsupported) kernel entry points.
#include <cstdlib>
#include <cstring>

#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail {

std::unique_ptr<Backend> make_emulated_backend() {
  return std::make_unique<emulated::EmulatedBackend>(emulated::config_from_env());
}

namespace emulated {

void fail(int code, const std::string& what) {
  throw_accelerator_error(code, "emulated backend: " + what);
  std::abort();  // unreachable: code is never 0 here
}

int& thread_current_device() {
  thread_local int current = 0;
  return current;
}

EmulatedBackend::EmulatedBackend(Config config) : config_(config) {
  for (int i = 0; i < config_.devices; ++i) {
    auto d = std::make_unique<Device>();
    d->index = i;
    d->limit = config_.memory_per_device;
    devices_.push_back(std::move(d));
  }
}

Device& EmulatedBackend::dev(int device) {
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    throw_accelerator_error(errc::invalid_device,
                            "emulated backend: device " + std::to_string(device) +
                                " does not exist (" + std::to_string(devices_.size()) +
                                " emulated devices; set CUDAKIT_EMULATED_DEVICES for more)");
  }
  return *devices_[static_cast<std::size_t>(device)];
}

void EmulatedBackend::set_current_device(int device) {
  dev(device);
  thread_current_device() = device;
}

int EmulatedBackend::current_device() { return thread_current_device(); }

DeviceInfo EmulatedBackend::device_info(int device) {
  Device& d = dev(device);
  DeviceInfo info;
  info.name = "cudakit emulated device";
  info.major = config_.major;
  info.minor = config_.minor;
  info.total_memory = d.limit;
  info.multi_processor_count = 132;
  info.L2_cache_size = 50 * 1024 * 1024;
  info.max_threads_per_multi_processor = 2048;
  info.max_threads_per_block = 1024;
  info.warp_size = 32;
  info.regs_per_multiprocessor = 65536;
  info.shared_memory_per_block = 48 * 1024;
  info.shared_memory_per_block_optin = 227 * 1024;
  info.shared_memory_per_multiprocessor = 228 * 1024;
  info.clock_rate = 1980000;
  info.memory_clock_rate = 2619000;
  info.memory_bus_width = 5120;
  info.pci_domain_id = 0;
  info.pci_bus_id = 0x10 + device;
  info.pci_device_id = 0;
  // Deterministic per index, marked as a version-4-style UUID so tools print it normally.
  std::uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(device + 1);
  unsigned char raw[16];
  for (int i = 0; i < 16; ++i) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    raw[i] = static_cast<unsigned char>(x >> 56);
  }
  raw[6] = static_cast<unsigned char>((raw[6] & 0x0F) | 0x40);
  raw[8] = static_cast<unsigned char>((raw[8] & 0x3F) | 0x80);
  info.uuid = uuid_string(raw);
  return info;
}

MemInfo EmulatedBackend::mem_get_info(int device) {
  Device& d = dev(device);
  std::size_t used = d.used.load(std::memory_order_relaxed);
  return MemInfo{used >= d.limit ? 0 : d.limit - used, d.limit};
}

bool EmulatedBackend::can_access_peer(int device, int peer) {
  dev(device);
  dev(peer);
  return device != peer;  // all emulated memory is host memory: every pair can talk
}

void EmulatedBackend::enable_peer_access(int device, int peer) {
  if (!can_access_peer(device, peer)) {
    throw_accelerator_error(errc::invalid_device,
                            "emulated backend: a device cannot enable peer access to itself");
  }
}

namespace {
[[noreturn]] void no_kernels(const char* call) {
  throw NotSupportedError(
      std::string(call) +
      ": kernels from PTX/cubin/NVRTC need the cuda backend; the emulated backend runs only "
      "built-in ops and host tasks (set CUDAKIT_BACKEND=cuda on a machine with a GPU)");
}
}  // namespace

ModuleHandle EmulatedBackend::module_load_data(int, const void*) { no_kernels("module_load_data"); }
void EmulatedBackend::module_unload(ModuleHandle) { no_kernels("module_unload"); }
FunctionHandle EmulatedBackend::module_get_function(ModuleHandle, const char*) {
  no_kernels("module_get_function");
}
void EmulatedBackend::launch_kernel(FunctionHandle, Dim3, Dim3, unsigned, StreamHandle, void**) {
  no_kernels("launch_kernel");
}

}  // namespace emulated
}  // namespace cudakit::detail
