// The `cuda` implementation of the driver seam (backend.hpp), on the CUDA driver API.
//
// Method bodies are split by topic: cuda_devices.cpp (identity, devices, contexts),
// cuda_memory.cpp (allocation, VM, copies), cuda_streams.cpp (streams, events, IPC),
// cuda_graphs.cpp (capture, graphs), cuda_kernels.cpp (modules, launches),
// cuda_runtime_modules.cpp (jiterator modules compiled by NVRTC, nvrtc.cpp),
// cuda_profiler.cpp (cuProfilerStart/Stop), cuda_telemetry.cpp (NVML), cuda_math.cpp
// (cuBLAS / cuSOLVER, capabilities, library report), cupti_activity.cpp (the tracer's CUPTI
// activity session), cuda_collectives.cpp (NCCL), cuda_green_contexts.cpp (SM partitions)
// and cuda_gds.cpp (cuFile). Every run-time-loaded library goes
// through library_loader.hpp.
//
// Contexts: every device uses its primary context, retained once on first use and never
// released (the process keeps it until exit; releasing at exit would call the driver during
// teardown). A thread's current device is cached in a thread_local so set_current_device is
// free when nothing changes; methods that act on a given device switch to its context only
// for the duration of the call (ContextScope) and restore the caller's afterwards.
//
// Thread-safety: all methods are thread-safe (the driver is; our own lazily built state is
// guarded by call_once / atomics).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "backend/backend.hpp"
#include "backend/cuda/cu_check.hpp"

namespace cudakit::detail::cuda {

// The calling thread's cached current device: -1 when unknown (never set through cudakit on
// this thread, or a foreign context is current).
inline int& thread_current_device() noexcept {
  thread_local int device = -1;
  return device;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;

  // ---- identity / availability ----
  const char* name() const noexcept override { return "cuda"; }
  int device_count() noexcept override;
  std::string unavailable_reason() noexcept override;
  int driver_version() noexcept override;
  BackendCapabilities capabilities() const noexcept override;
  std::vector<LibraryInfo> optional_libraries() noexcept override;

  // ---- devices ----
  void set_current_device(int device) override;
  int current_device() override;
  DeviceInfo device_info(int device) override;
  MemInfo mem_get_info(int device) override;
  void device_synchronize(int device) override;
  bool can_access_peer(int device, int peer) override;
  void enable_peer_access(int device, int peer) override;
  bool peer_mappable(const void* ptr) noexcept override;
  std::pair<int, int> stream_priority_range() override;

  // ---- telemetry ----
  int utilization_percent(int device) override;
  int memory_utilization_percent(int device) override;
  int temperature_c(int device) override;
  int power_draw_mw(int device) override;
  int clock_rate_mhz(int device) override;
  std::size_t device_memory_used(int device) override;
  std::vector<ProcessMemory> gpu_processes(int device) override;

  // ---- memory ----
  void* mem_alloc(int device, std::size_t bytes) override;
  void mem_free(int device, void* ptr) override;
  void* host_alloc_pinned(std::size_t bytes) override;
  void host_free_pinned(void* ptr) override;
  bool host_register(void* ptr, std::size_t bytes) override;
  void host_unregister(void* ptr) override;
  void* mem_alloc_async(int device, std::size_t bytes, StreamHandle s) override;
  void mem_free_async(void* ptr, StreamHandle s) override;
  std::size_t vm_granularity(int device) override;
  std::uintptr_t vm_reserve(int device, std::size_t bytes) override;
  void vm_release(std::uintptr_t va, std::size_t bytes) override;
  PhysMemHandle vm_create(int device, std::size_t bytes) override;
  void vm_destroy(PhysMemHandle h) override;
  void vm_map(std::uintptr_t va, std::size_t bytes, PhysMemHandle h, int device) override;
  void vm_unmap(std::uintptr_t va, std::size_t bytes) override;
  void vm_map_chunks(std::uintptr_t va, const std::size_t* sizes, const PhysMemHandle* h, std::size_t n,
                     int device) override;
  int vm_export_fd(PhysMemHandle h) override;
  PhysMemHandle vm_import_fd(int device, int fd, std::size_t bytes) override;
  int pointer_device(const void* ptr) override;

  // ---- copies ----
  void memcpy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s) override;
  void memset_d8_async(void* dst, unsigned char value, std::size_t bytes,
                       StreamHandle s) override;

  // ---- streams ----
  StreamHandle stream_create(int device, int priority, unsigned flags) override;
  void stream_destroy(StreamHandle s) override;
  bool stream_query(StreamHandle s) override;
  void stream_synchronize(StreamHandle s) override;
  void stream_wait_event(StreamHandle s, EventHandle e) override;
  int stream_priority(StreamHandle s) override;
  int stream_device(StreamHandle s) override;
  std::uint64_t stream_id(StreamHandle s) override;
  void launch_host_task(StreamHandle s, HostTask task) override;

  // ---- events ----
  EventHandle event_create(int device, unsigned flags) override;
  void event_destroy(EventHandle e) override;
  void event_record(EventHandle e, StreamHandle s) override;
  bool event_query(EventHandle e) override;
  void event_synchronize(EventHandle e) override;
  float event_elapsed_ms(EventHandle start, EventHandle end) override;
  IpcHandle event_ipc_handle(EventHandle e) override;
  EventHandle event_open_ipc(const IpcHandle& h) override;
  IpcHandle mem_ipc_handle(void* ptr) override;
  void* mem_open_ipc(const IpcHandle& h) override;
  void mem_close_ipc(void* ptr) override;

  // ---- kernels ----
  ModuleHandle module_load_data(int device, const void* image) override;
  void module_unload(ModuleHandle m) override;
  FunctionHandle module_get_function(ModuleHandle m, const char* name) override;
  void launch_kernel(FunctionHandle f, Dim3 grid, Dim3 block, unsigned shared_bytes,
                     StreamHandle s, void** args) override;

  // ---- runtime-compiled modules (cuda_runtime_modules.cpp, NVRTC in nvrtc.cpp) ----
  std::string runtime_compiler_id(int device, const std::string& state_dir) override;
  RuntimeCompileResult compile_runtime_module(int device, const std::string& source,
                                              const std::string& program) override;
  ModuleHandle load_runtime_module(int device, const void* image, std::size_t size) override;
  void launch_runtime_kernel(FunctionHandle f, Dim3 grid, Dim3 block, StreamHandle s,
                             const void* params, std::size_t bytes,
                             std::shared_ptr<const void> keep_alive) override;

  // ---- math libraries ----
  void gemm(int device, StreamHandle s, GemmArgs args) override;
  void* blas_handle(int device) override;
  void* solver_handle(int device, StreamHandle s) override;
  std::vector<GemmPlanPtr> gemm_candidates(int device, const GemmArgs& problem) override;
  GemmPlanPtr gemm_plan(int device, const GemmArgs& problem, const std::string& name) override;
  std::vector<std::pair<std::string, std::string>> gemm_tuning_validators(
      int device) noexcept override;

  // ---- capture and graphs ----
  void stream_begin_capture(StreamHandle s, CaptureMode mode) override;
  GraphHandle stream_end_capture(StreamHandle s) override;
  CaptureStatus stream_capture_status(StreamHandle s, std::uint64_t* capture_id) override;
  GraphExecHandle graph_instantiate(GraphHandle g) override;
  void graph_launch(GraphExecHandle g, StreamHandle s) override;
  void graph_destroy(GraphHandle g) override;
  void graph_exec_destroy(GraphExecHandle g) override;
  bool graph_exec_update(GraphExecHandle exec, GraphHandle g, std::string* why) override;
  std::vector<GraphNodeInfo> graph_nodes(GraphHandle g) override;
  std::vector<GraphEdge> graph_edges(GraphHandle g) override;
  void graph_debug_dot_print(GraphHandle g, const std::string& path, bool verbose) override;
  bool graph_tools_ids_available() noexcept override;
  std::uint32_t graph_exec_id(GraphExecHandle g) override;
  std::size_t stream_capture_node_count(StreamHandle s) override;
  std::vector<std::uint64_t> stream_capture_frontier(StreamHandle s, bool ancestors) override;
  CaptureMode thread_exchange_capture_mode(CaptureMode mode) override;

  // ---- green contexts (cuda_green_contexts.cpp) ----
  SmResourceInfo device_sm_resource(int device) override;
  GreenContextHandle green_context_create(int device, int sm_count, int* granted) override;
  void green_context_destroy(GreenContextHandle g) override;
  StreamHandle green_context_stream_create(GreenContextHandle g, int priority) override;

  // ---- GPUDirect Storage (cuda_gds.cpp, cuFile) ----
  GdsStatus gds_status() noexcept override;
  GdsFileHandle gds_file_register(int fd, std::string* why) override;
  void gds_file_deregister(GdsFileHandle h) override;
  void gds_buffer_register(void* ptr, std::size_t bytes) override;
  void gds_buffer_deregister(void* ptr) override;
  std::size_t gds_read(GdsFileHandle h, void* dst, std::size_t bytes,
                       std::int64_t file_offset) override;
  std::size_t gds_write(GdsFileHandle h, const void* src, std::size_t bytes,
                        std::int64_t file_offset) override;

  // ---- profiler control (cuda_profiler.cpp) ----
  void profiler_start() override;
  void profiler_stop() override;

  // ---- activity tracing through CUPTI (cupti_activity.cpp) ----
  ActivityStatus activity_start(ActivitySink* sink, const ActivityConfig& config) override;
  void activity_synchronize() override;
  void activity_flush() override;
  void activity_stop() noexcept override;

  // ---- collective communication (cuda_collectives.cpp, NCCL) ----
  CommEngineInfo comm_engine() noexcept override;
  nccl::UniqueId comm_unique_id() override;
  std::shared_ptr<BackendComm> comm_init_rank(int nranks, const nccl::UniqueId& id, int rank,
                                              int device, const CommInitOptions& options) override;
  std::vector<std::shared_ptr<BackendComm>> comm_init_all(const std::vector<int>& devices) override;
  void comm_group_start() override;
  void comm_group_end() override;

  // ---- helpers shared by the topic files ----

  // Validates `device` (throws AcceleratorError naming the visible count) and returns the
  // driver handle; `what` names the caller in messages.
  CUdevice cu_device(int device, const char* what);
  // The device's primary context, retained on first use.
  CUcontext context(int device, const char* what);
  // Visible ordinal of a driver device handle, or -1.
  int ordinal_of(CUdevice dev);
  // Makes sure the calling thread has a current context (device 0's primary context if none),
  // so calls on the legacy default stream (null handle) have one to act on.
  void ensure_current_context(const char* what);
  // For calls on stream `s`: a null handle needs the thread's current context
  // (ensure_current_context); a real stream carries its own, and on a thread without any
  // current context we make the stream's context current rather than device 0's, so no
  // context is ever created on a device the caller does not use.
  void ensure_context(StreamHandle s, const char* what) {
    if (thread_current_device() >= 0) [[likely]] return;
    ensure_context_slow(s, what);
  }
  // Runs `call` (returning CUresult); if the driver wants a current context and the thread has
  // none, provides one and retries. For context-independent calls (VM, pointer queries,
  // releases) that must not create a context as a side effect.
  template <class Call>
  CUresult with_context_retry(const char* what, Call&& call) {
    CUresult rc = call();
    if (rc == CUDA_ERROR_INVALID_CONTEXT && thread_current_device() < 0) {
      ensure_current_context(what);
      rc = call();
    }
    return rc;
  }

  // Makes `device`'s primary context current for a scope, restoring the previous one. Free when
  // `device` already is the thread's current device.
  class ContextScope {
   public:
    ContextScope(CudaBackend& b, int device, const char* what);
    ~ContextScope();
    ContextScope(const ContextScope&) = delete;
    ContextScope& operator=(const ContextScope&) = delete;

   private:
    bool switched_ = false;
    CUcontext previous_ = nullptr;
    int previous_device_ = -1;
  };

 private:
  struct DeviceSlot {
    CUdevice dev = 0;
    std::once_flag ctx_once;
    std::atomic<CUcontext> ctx{nullptr};
    std::once_flag info_once;
    DeviceInfo info;
    // Whether vm_create asks for POSIX-descriptor-shareable memory (cuda_memory.cpp):
    // 0 not yet known, 1 yes, 2 the driver refused (vm_share_refusal_ says why).
    std::atomic<int> vm_fd_share{0};
  };
  DeviceSlot& slot(int device, const char* what);
  void build_slots();
  void ensure_context_slow(StreamHandle s, const char* what);
  // Ordinal of the device of the thread's current context (-1: none / not ours); caches it
  // in thread_current_device() when that context is our primary context. Needs a usable driver.
  int device_of_current_context(CUcontext* current);

  // Why the driver refused shareable physical memory (first refusal; vm_export_fd reports it).
  std::mutex vm_share_mu_;
  std::string vm_share_refusal_;

  std::once_flag slots_once_;
  std::unique_ptr<DeviceSlot[]> slots_;
  int slot_count_ = 0;
};

}  // namespace cudakit::detail::cuda
