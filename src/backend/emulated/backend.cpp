// Emulated backend: factory, identity, capabilities, devices, and the kernel entry points it
// does not have (PTX / cubin images; runtime-compiled modules are in runtime_modules.cpp).
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
  std::vector<int> machine;
  for (int i = 0; i < config_.devices; ++i) machine.push_back(i);
  for (int ordinal : config_.visible.value_or(machine)) {
    auto d = std::make_unique<Device>();
    d->index = static_cast<int>(devices_.size());
    d->machine_ordinal = ordinal;
    d->limit = config_.memory_per_device;
    devices_.push_back(std::move(d));
  }
}

BackendCapabilities EmulatedBackend::capabilities() const noexcept {
  BackendCapabilities c;
  c.host_addressable_device_memory = true;
  c.runs_kernels = false;
  c.vendor_math_handles = false;
  c.cross_process_ipc = false;
  c.hardware_telemetry = false;
  return c;
}

Device& EmulatedBackend::dev(int device) {
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    throw_accelerator_error(errc::invalid_device,
                            "emulated backend: device " + std::to_string(device) +
                                " does not exist (" + std::to_string(devices_.size()) +
                                " visible emulated devices; CUDAKIT_EMULATED_DEVICES and "
                                "CUDA_VISIBLE_DEVICES decide which exist)");
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
  info.multi_processor_count = kSmCount;
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
  // Identity follows the machine ordinal, as CUDA_VISIBLE_DEVICES remaps indices only.
  info.pci_bus_id = 0x10 + d.machine_ordinal;
  info.pci_device_id = 0;
  info.uuid = device_uuid(d.machine_ordinal);
  return info;
}

MemInfo EmulatedBackend::mem_get_info(int device) {
  Device& d = dev(device);
  reap_freed();
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
      ": kernels from PTX/cubin images need the cuda backend; the emulated backend runs "
      "built-in ops, host tasks and runtime-compiled modules built by the host C++ compiler "
      "(set CUDAKIT_BACKEND=cuda on a machine with a GPU)");
}
}  // namespace

ModuleHandle EmulatedBackend::module_load_data(int, const void*) { no_kernels("module_load_data"); }
void EmulatedBackend::launch_kernel(FunctionHandle, Dim3, Dim3, unsigned, StreamHandle, void**) {
  no_kernels("launch_kernel");
}

}  // namespace emulated
}  // namespace cudakit::detail
