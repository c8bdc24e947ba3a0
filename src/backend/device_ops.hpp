// Driver seam, devices topic: which backend this is and what it can do (identity,
// capabilities), the devices it sees, and their telemetry. capabilities() lives here rather
// than in backend.hpp because modules of every topic ask it (host-addressable memory,
// kernels or host tasks): one small header, not the whole seam.
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cudakit/device.hpp"
#include "cudakit/libraries.hpp"

namespace cudakit::detail {

// Backends fill the public property record directly (uuid formatted by uuid_string from
// the driver's 16 bytes); the devices module adds the backend name.
using DeviceInfo = DeviceProperties;
std::string uuid_string(const unsigned char (&bytes)[16]);

struct MemInfo {
  std::size_t free = 0, total = 0;
};

// What a backend can do. Callers above the seam branch on these, never on name().
struct BackendCapabilities {
  // Device pointers can be dereferenced by host code (emulated: device memory is host memory).
  bool host_addressable_device_memory = false;
  // module_load_data / launch_kernel work, so built-in ops run as device kernels; otherwise
  // ops run as host tasks on the stream (launch_host_task) over host-addressable memory.
  bool runs_kernels = false;
  // blas_handle / solver_handle return vendor library handles (cuBLAS / cuSOLVER). gemm works
  // on every backend; these handles are for code that calls the vendor libraries itself.
  bool vendor_math_handles = false;
  // IPC handles (mem_ipc_handle / event_ipc_handle) can be opened in another process. No
  // backend opens them in the exporting process (CUDA refuses with CUDA_ERROR_INVALID_CONTEXT,
  // and so does the emulated backend). Physical memory shared through vm_export_fd opens in
  // other processes on every backend, whatever this says.
  bool cross_process_ipc = false;
  // Telemetry comes from hardware sensors (NVML); otherwise from the backend's documented
  // model (utilization measured from its own workers, sensors derived from it).
  bool hardware_telemetry = false;
};

struct DeviceOps {
  // ---- identity / availability (never throw) ----
  virtual const char* name() const noexcept = 0;  // "cuda" or "emulated"
  virtual int device_count() noexcept = 0;        // 0 when no driver/GPU
  // "" when available; otherwise why (never empty when device_count() == 0)
  virtual std::string unavailable_reason() noexcept = 0;
  virtual int driver_version() noexcept = 0;      // e.g. 13000; 0 if none
  virtual BackendCapabilities capabilities() const noexcept = 0;
  // Run-time-loaded libraries this backend uses (found or not, with version / reason).
  // Probing loads them (cuda: dlopen + init); never throws.
  virtual std::vector<LibraryInfo> optional_libraries() noexcept = 0;

  // ---- devices ----
  // Makes `device` current for the calling thread (retaining its primary context on cuda).
  virtual void set_current_device(int device) = 0;
  virtual int current_device() = 0;  // the calling thread's current device (default 0)
  virtual DeviceInfo device_info(int device) = 0;
  virtual MemInfo mem_get_info(int device) = 0;
  virtual void device_synchronize(int device) = 0;
  virtual bool can_access_peer(int device, int peer) = 0;
  virtual void enable_peer_access(int device, int peer) = 0;  // idempotent
  // Whether peer access, once enabled, reaches the allocation holding `ptr`: true for
  // cuMemAlloc-style memory (what enable_peer_access maps on every peer), false for
  // virtual-memory mappings (expandable segments) and memory-pool allocations, which need
  // per-peer access grants; true where device memory is host memory. Never throws (false
  // when the driver cannot tell).
  virtual bool peer_mappable(const void* ptr) noexcept = 0;
  virtual std::pair<int, int> stream_priority_range() = 0;    // {least, greatest}

  // ---- telemetry (NVML on cuda; the emulated backend's documented model otherwise) --
  virtual int utilization_percent(int device) = 0;       // GPU busy % over last sample
  virtual int memory_utilization_percent(int device) = 0;  // memory-controller busy %
  virtual int temperature_c(int device) = 0;
  virtual int power_draw_mw(int device) = 0;
  virtual int clock_rate_mhz(int device) = 0;            // current SM clock
  virtual std::size_t device_memory_used(int device) = 0;  // bytes used, all processes
  struct ProcessMemory { int pid = 0; std::size_t used_bytes = 0; };
  virtual std::vector<ProcessMemory> gpu_processes(int device) = 0;

 protected:
  ~DeviceOps() = default;
};

// The process's backend (backend() in backend.hpp) as its DeviceOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
DeviceOps& device_ops();

}  // namespace cudakit::detail
