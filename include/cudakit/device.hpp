// Devices: availability, selection, properties, telemetry, sync-debug mode.
// (seed: the first block of torch.cuda — is_available ... clock_rate)
//
// Thread-safety: all functions are thread-safe. The current device is per thread (as in
// CUDA). Device properties are computed once per device and then immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cudakit/export.hpp"

namespace CUDAKIT_API cudakit {

// "Current device" sentinel accepted wherever a device index is.
inline constexpr int kCurrentDevice = -1;
// Per-device state (current stream, pools, properties) lives in fixed arrays of this size;
// resolve_device() rejects higher indices.
inline constexpr int kMaxDevices = 64;

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;
  std::size_t total_memory = 0;
  int multi_processor_count = 0;
  int L2_cache_size = 0;
  int max_threads_per_multi_processor = 0;
  int max_threads_per_block = 0;
  int warp_size = 32;
  int regs_per_multiprocessor = 0;
  std::size_t shared_memory_per_block = 0;
  std::size_t shared_memory_per_block_optin = 0;
  std::size_t shared_memory_per_multiprocessor = 0;
  int clock_rate = 0;         // kHz
  int memory_clock_rate = 0;  // kHz
  int memory_bus_width = 0;   // bits
  bool is_integrated = false;
  bool is_multi_gpu_board = false;
  int pci_bus_id = 0, pci_device_id = 0, pci_domain_id = 0;
  std::string uuid;  // "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string backend;  // "cuda" or "emulated"
};

// Name of the backend in use ("cuda" / "emulated"), without initialising anything. For
// display and reports: what a backend can do is not decided by its name.
std::string backend_name();
// Selects the backend before first use (alternative to CUDAKIT_BACKEND).
void set_backend(const std::string& name);

// What the backend in use can do: decide by these, never by comparing backend_name().
struct BackendCapabilities {
  std::string backend;  // "cuda" or "emulated": for display and reports only
  // Device kernels run on the device: Stream::handle() is a CUstream / cudaStream_t of the
  // device's primary context (the CUDA runtime's), device pointers are CUDA device pointers,
  // so one's own kernels (a .cu file, cuLaunchKernel) and CUDA libraries run on cudakit's
  // streams and memory. False on the emulated backend: its handles mean nothing to CUDA.
  bool runs_kernels = false;
  // Host code may dereference device pointers (emulated: device memory is host memory).
  bool host_addressable_device_memory = false;
  // current_blas_handle() / current_solver_handle() return cuBLAS / cuSOLVER handles.
  bool vendor_math_handles = false;
  // IPC handles (memory, events) open in another process.
  bool cross_process_ipc = false;
  // Telemetry (utilization(), temperature(), ...) comes from hardware sensors (NVML).
  bool hardware_telemetry = false;
  // Graph node tools ids (graph annotations, get_graph_data(), profiler joins) are available.
  // Asking may load CUPTI on a cuda driver older than 13.1.
  bool graph_tools_ids = false;
};
// Never throws; does not create a device context (only graph_tools_ids may load CUPTI).
BackendCapabilities backend_capabilities() noexcept;

bool is_available() noexcept;   // device_count() > 0; never throws
// Why is_available() is false ("no CUDA driver: libcuda.so.1 not found", ...); "" when a
// device is available. Never throws (a failure to ask is itself the reason).
std::string unavailable_reason() noexcept;
int device_count() noexcept;    // 0 when no driver / no device; never throws
void init();                    // initialises the backend; throws with the reason if unusable
bool is_initialized() noexcept;

int current_device();
void set_device(int device);
// Resolves kCurrentDevice and validates the index: ValueError(invalid_device_message(device)).
int resolve_device(int device);
// The message of every bad device index: the index, the devices this process sees (count
// and range), the backend and CUDA_VISIBLE_DEVICES, e.g. "Invalid device index 99: this
// process sees 2 device(s) (0..1) on the 'emulated' backend; CUDA_VISIBLE_DEVICES=unset".
// For callers that check an index themselves (the Python argument layer).
std::string invalid_device_message(std::int64_t device);

// RAII: makes `device` current, restores the previous current device on destruction.
// Not copyable or movable; use on one thread.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  int original_device() const noexcept { return prev_; }

 private:
  int prev_;
  int cur_;
};

// Device owning a pointer (device memory from any allocator), or -1 for host memory.
int device_of_pointer(const void* ptr);

std::string get_device_name(int device = kCurrentDevice);
std::pair<int, int> get_device_capability(int device = kCurrentDevice);
const DeviceProperties& get_device_properties(int device = kCurrentDevice);
// Architectures this library's kernels were compiled for, e.g. {"sm_90"}.
std::vector<std::string> get_arch_list();
std::string get_gencode_flags();
bool is_bf16_supported(bool including_emulation = true);
bool is_tf32_supported();

void synchronize(int device = kCurrentDevice);
bool can_device_access_peer(int device, int peer_device);
void enable_peer_access(int device, int peer_device);

std::pair<std::size_t, std::size_t> mem_get_info(int device = kCurrentDevice);  // free,total

// Telemetry: NVML on cuda (NotSupportedError where the GPU or driver cannot report a value);
// on emulated a documented model (src/backend/emulated/telemetry.cpp): utilization and
// memory_usage measured from the emulator's workers, the sensors derived from utilization.
int utilization(int device = kCurrentDevice);   // percent of time a kernel ran
int memory_usage(int device = kCurrentDevice);  // percent of time memory was read/written
int temperature(int device = kCurrentDevice);   // degrees C
int power_draw(int device = kCurrentDevice);    // milliwatts
int clock_rate(int device = kCurrentDevice);    // SM clock, MHz
std::size_t device_memory_used(int device = kCurrentDevice);  // bytes, all processes

// The calling thread's cuBLAS handle for the current device (cublasHandle_t), created on
// first use and never destroyed (torch.cuda.current_blas_handle). NotSupportedError on a
// backend without vendor math libraries (emulated) or when cuBLAS cannot be loaded.
void* current_blas_handle();
// The calling thread's cuSOLVER dense handle for the current device (cusolverDnHandle_t),
// bound to the current stream (torch.cuda.current_solver_handle). Errors as above.
void* current_solver_handle();

// Raises AcceleratorError for a non-zero CUresult-numbered code.
void check_error(int code);

// Sync debug mode: warn or throw on synchronizing calls (torch.cuda semantics). Reported, as
// in torch: Stream.synchronize() and every blocking copy between host and device memory
// (copy_/to()/cpu() with non_blocking=False, item(), tolist(), NumPy conversion). Not
// reported, as in torch: synchronize() (the device) and Event.synchronize(). Built-in ops
// and factories never synchronise (a scalar operand is a kernel argument).
enum class SyncDebugMode { none = 0, warn = 1, error = 2 };
void set_sync_debug_mode(SyncDebugMode mode);
SyncDebugMode get_sync_debug_mode() noexcept;
// Where "warn" mode's messages go (default, or an empty handler: stderr). Called on the
// synchronizing thread; the Python package installs one issuing a UserWarning.
void set_sync_warning_handler(std::function<void(const std::string& message)> handler);

// Driver version as an integer (13000 = 13.0), 0 without a driver.
int driver_version() noexcept;

}  // namespace cudakit
