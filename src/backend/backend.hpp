// The driver seam: the one narrow interface between cudakit and a device runtime.
//
// Everything above this file (devices, streams, memory, graphs, tensors, ...) is
// backend-agnostic and talks to the device only through `detail::Backend`. Two
// implementations exist:
//   * cuda     (src/backend/cuda)     — the CUDA driver API, resolved lazily with dlopen.
//   * emulated (src/backend/emulated) — host memory + host threads, for CI and GPU-less
//                                       development.
// The backend is chosen once, explicitly: CUDAKIT_BACKEND=cuda|emulated (default cuda), or
// cudakit::set_backend("emulated") before the first device call. Never a silent fallback.
//
// Code above the seam never asks which backend it runs on: it asks what the backend can do
// (capabilities()), and backends refuse what the other refuses with the same error, so
// callers need no branch. name() is for display and reports only. tests/layout/test_layout.py
// enforces this (docs/architecture.md lists the rules).
//
// Conventions for every method:
//   * Errors throw cudakit::AcceleratorError with a CUresult-numbered code (error.hpp).
//     Exception: allocation methods return nullptr / 0 on out-of-memory, so the caching
//     allocator can free cached blocks and retry before it reports.
//   * Device indices are the backend's visible ordinals (CUDA_VISIBLE_DEVICES applied).
//   * A null StreamHandle means "the legacy default stream of the calling thread's current
//     device" (as in CUDA). The layer above sets the current device before calling.
//   * Methods are thread-safe unless noted.
//   * Nothing here may be called during static destruction: handles owned by objects that
//     outlive main() must skip their destroy call when detail::is_shutting_down().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/activity.hpp"
#include "cudakit/device.hpp"
#include "cudakit/export.hpp"
#include "cudakit/libraries.hpp"
#include "cudakit/stream.hpp"

namespace cudakit::detail {

using StreamHandle = NativeStream;  // CUstream on cuda (public alias, stream.hpp)
using EventHandle = NativeEvent;    // CUevent on cuda
using GraphHandle = void*;      // CUgraph on cuda
using GraphExecHandle = void*;  // CUgraphExec on cuda
using PhysMemHandle = std::uint64_t;  // CUmemGenericAllocationHandle on cuda
using ModuleHandle = void*;     // CUmodule on cuda
using FunctionHandle = void*;   // CUfunction on cuda

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Backends fill the public property record directly (uuid formatted by uuid_string from
// the driver's 16 bytes); the devices module adds the backend name.
using DeviceInfo = DeviceProperties;
std::string uuid_string(const unsigned char (&bytes)[16]);

struct MemInfo {
  std::size_t free = 0, total = 0;
};

// Stream creation flags.
inline constexpr unsigned kStreamNonBlocking = 0x1;  // CU_STREAM_NON_BLOCKING
// Event creation flags (bit-compatible with CUevent_flags).
inline constexpr unsigned kEventBlockingSync = 0x1;
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr unsigned kEventInterprocess = 0x4;

enum class CaptureMode { global = 0, thread_local_ = 1, relaxed = 2 };
enum class CaptureStatus { none = 0, active = 1, invalidated = 2 };

struct IpcHandle {  // 64 opaque bytes, as CUipcEventHandle / CUipcMemHandle
  unsigned char bytes[64] = {};
};

enum class GraphNodeType { kernel, memcpy, memset, host, graph, empty, wait_event,
                           event_record, mem_alloc, mem_free, other };

struct GraphNodeInfo {
  std::uint64_t id = 0;       // stable within the graph (tools id on cuda if available)
  GraphNodeType type = GraphNodeType::other;
  std::string label;          // kernel name / "host" / ...
  // Id profilers report for the node: (graph id << 32) | node id, the layout of CUPTI's
  // graphNodeId and cuGraphNodeGetToolsId. 0 when the backend cannot tell (see
  // graph_tools_ids_available). The graph id is the template's; after instantiation the
  // executed node carries the exec graph's id in the upper half (graph_exec_id).
  std::uint64_t tools_id = 0;
  std::uintptr_t event = 0;    // event_record / wait_event nodes: the event handle
  std::uintptr_t host_fn = 0;  // host nodes: address of the function the node calls
};

struct GraphEdge {
  std::uint64_t from = 0, to = 0;
};

// A unit of host work enqueued on a stream (host functions, and built-in ops on emulated).
using HostTask = std::function<void()>;

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
  // IPC handles can be opened in another process. No backend opens them in the exporting
  // process (CUDA refuses with CUDA_ERROR_INVALID_CONTEXT, and so does the emulated backend).
  bool cross_process_ipc = false;
  // Telemetry comes from hardware sensors (NVML); otherwise from the backend's documented
  // model (utilization measured from its own workers, sensors derived from it).
  bool hardware_telemetry = false;
};

// C = op(A) * op(B), column-major as in BLAS: op(A) is m x k, op(B) is k x n, C is m x n
// with leading dimension ldc. A, B and C share `type`; float16 / bfloat16 accumulate in
// float32. allow_tf32 lets float32 products use TF32 inputs (10-bit mantissa), as
// torch.backends.cuda.matmul.allow_tf32.
enum class GemmType { float16, bfloat16, float32, float64 };
struct GemmArgs {
  GemmType type = GemmType::float32;
  bool transpose_a = false, transpose_b = false;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* c = nullptr;
  int ldc = 0;
  bool allow_tf32 = false;
  // Owner of the operands' memory, released once the product has run. Backends that run
  // the product as a host task keep it until then; the cuda backend drops it at once (the
  // caching allocator already orders reuse of the memory on the stream).
  std::shared_ptr<const void> keep_alive;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- identity / availability (never throw) ----
  virtual const char* name() const noexcept = 0;  // "cuda" or "emulated"
  virtual int device_count() noexcept = 0;        // 0 when no driver/GPU
  virtual std::string unavailable_reason() noexcept = 0;  // "" when available
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

  // ---- memory (return nullptr/0 on out-of-memory; throw on other errors) ----
  virtual void* mem_alloc(int device, std::size_t bytes) = 0;
  virtual void mem_free(int device, void* ptr) = 0;
  virtual void* host_alloc_pinned(std::size_t bytes) = 0;
  virtual void host_free_pinned(void* ptr) = 0;
  // Page-locks existing host memory [ptr, ptr+bytes) for every device (cuMemHostRegister,
  // portable) / undoes it (host_unregister takes the pointer given to host_register). false
  // on out-of-memory. Used by the pinned cache's pinned_use_cuda_host_register mode.
  virtual bool host_register(void* ptr, std::size_t bytes) = 0;
  virtual void host_unregister(void* ptr) = 0;
  // Stream-ordered allocation (cudaMallocAsync backend).
  virtual void* mem_alloc_async(int device, std::size_t bytes, StreamHandle s) = 0;
  virtual void mem_free_async(void* ptr, StreamHandle s) = 0;
  // Virtual memory ("expandable segments").
  virtual std::size_t vm_granularity(int device) = 0;
  virtual std::uintptr_t vm_reserve(int device, std::size_t bytes) = 0;  // 0 on failure
  virtual void vm_release(std::uintptr_t va, std::size_t bytes) = 0;
  virtual PhysMemHandle vm_create(int device, std::size_t bytes) = 0;    // 0 on OOM
  virtual void vm_destroy(PhysMemHandle h) = 0;
  // Maps h at va (bytes long) and grants read/write access to `device`.
  virtual void vm_map(std::uintptr_t va, std::size_t bytes, PhysMemHandle h, int device) = 0;
  virtual void vm_unmap(std::uintptr_t va, std::size_t bytes) = 0;
  // Maps n physical allocations of `chunk` bytes each back to back from va and grants
  // read/write access to `device` for the whole range. On failure nothing of the range stays
  // mapped. The cuda backend grants access once per range instead of once per chunk (torch's
  // expandable segments do the same: cuMemSetAccess is the costliest of the mapping calls);
  // this default maps chunk by chunk.
  virtual void vm_map_chunks(std::uintptr_t va, std::size_t chunk, const PhysMemHandle* h,
                             std::size_t n, int device) {
    std::size_t i = 0;
    try {
      for (; i < n; ++i) vm_map(va + i * chunk, chunk, h[i], device);
    } catch (...) {
      while (i-- > 0) vm_unmap(va + i * chunk, chunk);
      throw;
    }
  }
  // Device owning a pointer, or -1 for host/unknown memory.
  virtual int pointer_device(const void* ptr) = 0;

  // ---- copies (unified addressing: any direction) ----
  virtual void memcpy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s) = 0;
  virtual void memset_d8_async(void* dst, unsigned char value, std::size_t bytes,
                               StreamHandle s) = 0;

  // ---- streams ----
  virtual StreamHandle stream_create(int device, int priority, unsigned flags) = 0;
  virtual void stream_destroy(StreamHandle s) = 0;
  virtual bool stream_query(StreamHandle s) = 0;  // true when all work is done
  virtual void stream_synchronize(StreamHandle s) = 0;
  virtual void stream_wait_event(StreamHandle s, EventHandle e) = 0;
  virtual int stream_priority(StreamHandle s) = 0;
  virtual int stream_device(StreamHandle s) = 0;  // device a (possibly foreign) stream is on
  // Process-unique id of a stream, never reused (cuStreamGetId on cuda). The legacy default
  // stream of each device has its own id.
  virtual std::uint64_t stream_id(StreamHandle s) = 0;
  // Runs `task` on the host once all prior work in `s` is done; later work in `s` waits.
  virtual void launch_host_task(StreamHandle s, HostTask task) = 0;
  // A host task that stands for a device kernel named `kernel_name` (the emulated backend
  // runs built-in ops on the host): the emulated backend captures it as a kernel node, so
  // graph inspection and kernel annotations see the same node kinds on both backends.
  // `kernel_name` must outlive the call (a string literal). Default: launch_host_task.
  virtual void launch_host_kernel(StreamHandle s, const char* kernel_name, HostTask task) {
    launch_host_task(s, std::move(task));
  }

  // ---- events ----
  virtual EventHandle event_create(int device, unsigned flags) = 0;
  virtual void event_destroy(EventHandle e) = 0;
  virtual void event_record(EventHandle e, StreamHandle s) = 0;
  virtual bool event_query(EventHandle e) = 0;
  virtual void event_synchronize(EventHandle e) = 0;
  virtual float event_elapsed_ms(EventHandle start, EventHandle end) = 0;
  virtual IpcHandle event_ipc_handle(EventHandle e) = 0;
  virtual EventHandle event_open_ipc(const IpcHandle& h) = 0;
  virtual IpcHandle mem_ipc_handle(void* ptr) = 0;
  virtual void* mem_open_ipc(const IpcHandle& h) = 0;
  virtual void mem_close_ipc(void* ptr) = 0;

  // ---- kernels (cuda only: the emulated backend throws NotSupportedError naming the call) --
  // Loads a fatbin/cubin/PTX image into `device`'s primary context.
  virtual ModuleHandle module_load_data(int device, const void* image) = 0;
  virtual void module_unload(ModuleHandle m) = 0;
  virtual FunctionHandle module_get_function(ModuleHandle m, const char* name) = 0;
  virtual void launch_kernel(FunctionHandle f, Dim3 grid, Dim3 block, unsigned shared_bytes,
                             StreamHandle s, void** args) = 0;

  // ---- math (cuBLAS / cuSOLVER on cuda, CBLAS on emulated) ----
  // Stream-ordered GEMM (see GemmArgs). Shapes and leading dimensions are the caller's to
  // validate (ops::blas_gemm derives them from tensors).
  virtual void gemm(int device, StreamHandle s, GemmArgs args) = 0;
  // The calling thread's vendor BLAS handle for `device` (cublasHandle_t), created on first
  // use and never destroyed. NotSupportedError where capabilities().vendor_math_handles is
  // false, or when the library cannot be loaded (the message says why).
  virtual void* blas_handle(int device) = 0;
  // The calling thread's dense solver handle for `device` (cusolverDnHandle_t), bound to `s`.
  virtual void* solver_handle(int device, StreamHandle s) = 0;

  // ---- stream capture and graphs ----
  virtual void stream_begin_capture(StreamHandle s, CaptureMode mode) = 0;
  virtual GraphHandle stream_end_capture(StreamHandle s) = 0;
  // Status of capture on `s`; *capture_id set when active.
  virtual CaptureStatus stream_capture_status(StreamHandle s, std::uint64_t* capture_id) = 0;
  virtual GraphExecHandle graph_instantiate(GraphHandle g) = 0;
  virtual void graph_launch(GraphExecHandle g, StreamHandle s) = 0;
  virtual void graph_destroy(GraphHandle g) = 0;
  virtual void graph_exec_destroy(GraphExecHandle g) = 0;
  virtual std::vector<GraphNodeInfo> graph_nodes(GraphHandle g) = 0;
  virtual std::vector<GraphEdge> graph_edges(GraphHandle g) = 0;
  // Graphviz DOT of the graph; `verbose` adds node parameters (CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE).
  virtual void graph_debug_dot_print(GraphHandle g, const std::string& path,
                                     bool verbose = true) = 0;
  // True when graph_nodes() fills tools_id and graph_exec_id() works (cuda: a 13.1+ driver's
  // cuGraphNodeGetToolsId/cuGraphExecGetId, or CUPTI's cuptiGetGraphNodeId/GraphExecId,
  // loaded on first call; emulated: always). Never throws.
  virtual bool graph_tools_ids_available() noexcept = 0;
  // Id of an executable graph as profilers report it (upper half of its nodes' tools ids).
  // Throws NotSupportedError when !graph_tools_ids_available().
  virtual std::uint32_t graph_exec_id(GraphExecHandle g) = 0;
  // Number of nodes in the graph being captured on `s` (all streams of the capture), 0 when
  // `s` is not capturing. Kernel annotations diff it around a scope.
  virtual std::size_t stream_capture_node_count(StreamHandle s) = 0;
  // Sets the calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode)
  // and returns the previous one. While another capture is live, "potentially unsafe" calls
  // (mem_alloc) fail in global mode; relaxed lets the caching allocator grow a graph's
  // private pool during capture (ThreadCaptureModeGuard).
  virtual CaptureMode thread_exchange_capture_mode(CaptureMode mode) = 0;

  // ---- profiler control (cuProfilerStart/Stop: the capture-range hooks of Nsight Systems
  // and Nsight Compute) ----
  // Act on the calling thread's current context (device 0's primary context if it has none).
  // Idempotent, as the driver's. The emulated backend records the state (test-visible).
  virtual void profiler_start() = 0;
  virtual void profiler_stop() = 0;

  // ---- activity tracing (cudakit::profiler::Trace; records in backend/activity.hpp) ----
  // Starts delivering activity records to `sink` until activity_stop(). One tracer at a time
  // (the profiler serialises). Never fails for a missing tool: the status says what is
  // delivered and why anything asked for is not (cuda: CUPTI absent or held by another tool).
  // Default: nothing is delivered.
  virtual ActivityStatus activity_start(ActivitySink* sink, const ActivityConfig& config) {
    (void)sink;
    (void)config;
    ActivityStatus s;
    s.reason = std::string("the ") + name() + " backend records no device activity";
    return s;
  }
  // Delivers every record buffered so far for work that has completed (call after a device
  // synchronize to get everything). May block; never called concurrently with start/stop.
  virtual void activity_flush() {}
  // Stops recording and releases the tool; records may still arrive for work in flight.
  virtual void activity_stop() noexcept {}
};

// RAII: the calling thread's capture mode is `mode` in this scope (used around the caching
// allocator's segment allocations for graph pools, as torch's CUDAStreamCaptureModeGuard).
class ThreadCaptureModeGuard {
 public:
  ThreadCaptureModeGuard(Backend& b, CaptureMode mode)
      : backend_(b), previous_(b.thread_exchange_capture_mode(mode)) {}
  ~ThreadCaptureModeGuard() {
    try {
      backend_.thread_exchange_capture_mode(previous_);
    } catch (...) {  // destructors never throw
    }
  }
  ThreadCaptureModeGuard(const ThreadCaptureModeGuard&) = delete;
  ThreadCaptureModeGuard& operator=(const ThreadCaptureModeGuard&) = delete;

 private:
  Backend& backend_;
  CaptureMode previous_;
};

// The process's backend, created on first use from CUDAKIT_BACKEND. Never throws for an
// unavailable cuda driver (device_count() is 0); throws ValueError for an unknown name.
CUDAKIT_INTERNAL_API Backend& backend();
// True when the backend object exists (so shutdown paths never create one).
bool backend_created() noexcept;
// Selects the backend by name before first use; throws if a different one is already in use.
void select_backend(const std::string& name);
// Name selected (from select_backend or the environment) without creating the backend.
std::string selected_backend_name();

// Set by an atexit handler: after it, destructors skip device calls (no CUDA at exit).
CUDAKIT_INTERNAL_API bool is_shutting_down() noexcept;

// True on a thread that is running a host function the backend enqueued on a stream (cuda:
// cuLaunchHostFunc callbacks and the destructors of captured host tasks). The CUDA driver
// forbids CUDA calls there, and blocking there on a lock whose holder is inside a driver call
// deadlocks: that holder may wait for a driver lock that a third thread keeps while the
// device drains, and draining waits for this very host function (seen on the H200: a host
// task freeing memory, cuEventCreate under the allocator lock, cuMemFreeHost elsewhere).
// Code that would take such a lock (the allocators' free paths) defers its work instead.
// The emulated backend never sets it: its workers may take any lock (no driver below them).
bool in_host_function() noexcept;
// RAII: marks the calling thread as running a host function (used by the cuda backend).
class HostFunctionScope {
 public:
  HostFunctionScope() noexcept;
  ~HostFunctionScope();
  HostFunctionScope(const HostFunctionScope&) = delete;
  HostFunctionScope& operator=(const HostFunctionScope&) = delete;

 private:
  bool previous_;
};

// Factories implemented by each backend directory.
std::unique_ptr<Backend> make_cuda_backend();
std::unique_ptr<Backend> make_emulated_backend();

}  // namespace cudakit::detail
