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
#include <utility>
#include <vector>

#include "backend/activity.hpp"
#include "backend/collectives.hpp"
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
using GreenContextHandle = void*;  // CUgreenCtx on cuda
using GdsFileHandle = void*;       // CUfileHandle_t on cuda

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
  // IPC handles (mem_ipc_handle / event_ipc_handle) can be opened in another process. No
  // backend opens them in the exporting process (CUDA refuses with CUDA_ERROR_INVALID_CONTEXT,
  // and so does the emulated backend). Physical memory shared through vm_export_fd opens in
  // other processes on every backend, whatever this says.
  bool cross_process_ipc = false;
  // Telemetry comes from hardware sensors (NVML); otherwise from the backend's documented
  // model (utilization measured from its own workers, sensors derived from it).
  bool hardware_telemetry = false;
};

// How a device's SMs may be partitioned into green contexts (CUdevSmResource of
// cuDeviceGetDevResource): a partition has at least `min_partition_sms` SMs and a multiple of
// `sm_alignment` (the driver rounds a requested count up to that).
struct SmResourceInfo {
  int sm_count = 0;
  int min_partition_sms = 0;
  int sm_alignment = 0;
};

// State of GPUDirect Storage (cuFile) on this backend. `available`: file data can move by DMA
// between storage and device memory (cuFile loaded, its driver opened, the nvidia-fs kernel
// driver present); otherwise `reason` says why and cudakit moves file data through its
// compat path (src/gds). `library` describes cuFile when it was loaded (version, path).
struct GdsStatus {
  bool available = false;
  std::string reason;
  std::string library;
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
  // C = alpha * op(A) op(B) + beta * C (BLAS). matmul uses 1 and 0; beta != 0 reads C.
  double alpha = 1.0, beta = 0.0;
  // Scratch memory for the library, from the caching allocator (ops::blas_gemm: one per
  // (device, stream) for eager products, as torch's cuBLAS workspaces; a captured product's
  // own, from the graph's private pool). The cuda backend hands it to cuBLAS
  // (cublasSetWorkspace) so cuBLAS never allocates from the driver, outside the pool and
  // its statistics — during graph capture too; null: the library's own. The emulated GEMM
  // needs none.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // Owner of the operands' memory, released once the product has run. Backends that run
  // the product as a host task keep it until then; the cuda backend drops it at once (the
  // caching allocator already orders reuse of the memory on the stream).
  std::shared_ptr<const void> keep_alive;
};

// ---- GEMM tuning (TunableOp, src/tunable) ----
// One way to compute one GEMM problem other than Backend::gemm itself ("Default"): a cuBLASLt
// algorithm configuration on cuda, a CPU loop on emulated. A plan is bound to a problem: the
// shape, type, transposes, leading dimensions, allow_tf32 and the alignment of the pointers of
// the GemmArgs it was made for; run() takes any GemmArgs of that problem (other pointers with at
// least the planned alignment, any alpha / beta). Plans are immutable, so one plan may run
// from several threads at once; they hold no device memory (the caller passes the workspace).
class GemmPlan {
 public:
  virtual ~GemmPlan() = default;
  // The solution name results files record ("Gemm_Cublaslt_id_...", "Default", ...).
  virtual const std::string& name() const noexcept = 0;
  // Device memory one run needs, passed to run() (stream-ordered on the run's stream).
  virtual std::size_t workspace_bytes() const noexcept = 0;
  // Enqueues the product on `s` (the caller has made the plan's device current). Throws
  // AcceleratorError / Error when the library refuses.
  virtual void run(StreamHandle s, const GemmArgs& args, void* workspace) const = 0;
};
using GemmPlanPtr = std::shared_ptr<const GemmPlan>;

// The largest power of two (at most 256) dividing `p`: the alignment a plan is made for.
inline unsigned pointer_alignment(const void* p) noexcept {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  if (v == 0) return 256;
  const std::uintptr_t low = v & (~v + 1);
  return low >= 256 ? 256u : static_cast<unsigned>(low);
}

class Backend {
 public:
  virtual ~Backend() = default;

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
  // Maps n physical allocations h[i] of sizes[i] bytes back to back from va and grants
  // read/write access to `device` for the whole range. Sizes differ: an expandable segment's
  // chunks grow with its pool (memory/expandable_segment.hpp). On failure nothing of the
  // range stays mapped. The cuda backend grants access once per range instead of once per
  // chunk (torch's expandable segments do the same: cuMemSetAccess is the costliest of the
  // mapping calls); this default (the emulated backend's) maps chunk by chunk.
  virtual void vm_map_chunks(std::uintptr_t va, const std::size_t* sizes, const PhysMemHandle* h,
                             std::size_t n, int device) {
    std::size_t i = 0;
    std::uintptr_t at = va;
    try {
      for (; i < n; at += sizes[i], ++i) vm_map(at, sizes[i], h[i], device);
    } catch (...) {
      while (i-- > 0) {
        at -= sizes[i];
        vm_unmap(at, sizes[i]);
      }
      throw;
    }
  }
  // Sharing physical memory with another process (IPC of expandable segments, src/memory/
  // ipc.cpp; the descriptor travels with pidfd_getfd, so no server thread is needed).
  // A new file descriptor (close-on-exec, owned by the caller) for the physical allocation
  // `h` of vm_create (cuda: cuMemExportToShareableHandle, POSIX file descriptor; emulated: the
  // memfd behind h). The memory lives while any process holds a handle, a mapping or such a
  // descriptor. NotSupportedError saying why when h cannot be shared (cuda: the driver refused
  // the shareable handle type when vm_create asked for it; vm_create then made an unshareable
  // allocation rather than fail).
  virtual int vm_export_fd(PhysMemHandle h) = 0;
  // A physical allocation handle, for vm_map / vm_destroy in this process, of the allocation
  // behind `fd`, a descriptor vm_export_fd made (in this or another process) of a `bytes`-long
  // allocation on `device`. Does not take `fd` (the caller closes it). The memory is not
  // counted against `device` here (it is the exporter's). AcceleratorError invalid_value (or
  // the driver's code) when fd is not such a descriptor; emulated also checks `bytes`.
  virtual PhysMemHandle vm_import_fd(int device, int fd, std::size_t bytes) = 0;
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

  // ---- runtime-compiled modules (the jiterator; every backend) ----
  // The source is one self-contained C++17 translation unit. The cuda backend compiles it
  // with NVRTC for `device`'s exact architecture (CUBIN; PTX when the device is newer than
  // NVRTC) and its kernels are __global__ functions taking one parameter block by value. The
  // emulated backend compiles it with the host C++ compiler into a shared object whose
  // functions are `extern "C" void f(const void* params)`, run as host tasks. The source
  // tells the two apart by `__CUDACC_RTC__`.
  //
  // What identifies the compiler's output besides the source (compiler and its version,
  // target architecture, flags, driver): the key of cached images. Cheap after the first
  // call: it does not load the compiler when `state_dir` (a private, writable directory; ""
  // for none) remembers how the compiler that would be loaded was identified before.
  // NotSupportedError naming what is missing when there is no compiler.
  virtual std::string runtime_compiler_id(int device, const std::string& state_dir) = 0;
  struct RuntimeCompileResult {
    bool ok = false;
    std::vector<char> image;  // loadable by load_runtime_module (for the same compiler id)
    std::string log;          // the compiler's diagnostics (the reason when !ok)
  };
  // Compiles `source`; `program` names it in diagnostics. A compile error is a result
  // (ok false), not an exception: callers add context from the source. Throws only when the
  // compiler cannot run at all.
  virtual RuntimeCompileResult compile_runtime_module(int device, const std::string& source,
                                                      const std::string& program) = 0;
  // Loads an image from compile_runtime_module into `device`. module_get_function resolves
  // its functions; modules stay loaded until exit (module_unload is allowed, but no kernel
  // of the module may still be pending).
  virtual ModuleHandle load_runtime_module(int device, const void* image, std::size_t size) = 0;
  // Launches a runtime-module function on `s` with its parameter block (`bytes` bytes, copied
  // before this returns). `keep_alive` is released once the launch no longer needs the
  // operands' memory (host tasks run later; the cuda backend drops it at once, as for gemm).
  // The host task of the emulated backend processes the whole launch; grid/block are for
  // the device.
  virtual void launch_runtime_kernel(FunctionHandle f, Dim3 grid, Dim3 block, StreamHandle s,
                                     const void* params, std::size_t bytes,
                                     std::shared_ptr<const void> keep_alive) = 0;

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

  // ---- GEMM tuning (src/tunable; defaults: nothing to tune) ----
  // The implementations worth timing for `problem` on `device`, besides gemm() itself (cuda:
  // the cuBLASLt heuristic's algorithms for several workspace limits and split-K variants of
  // them; emulated: blocked CPU loops). Each plan's name() is unique in the list. Ordered by
  // promise, most promising first: the tuner may try only a prefix (loading each candidate's
  // kernel costs host time). Empty when the backend has none or its library is missing
  // (optional_libraries() says why).
  virtual std::vector<GemmPlanPtr> gemm_candidates(int device, const GemmArgs& problem) {
    return {};
  }
  // The plan that `name` (a solution read from a results file) denotes for `problem`, or
  // nullptr when the name is not one of this backend's or cannot run this problem here
  // (another library version or GPU, too little alignment). Never throws for a bad name.
  virtual GemmPlanPtr gemm_plan(int device, const GemmArgs& problem, const std::string& name) {
    return nullptr;
  }
  // What tuned choices on `device` depend on, for the results file's Validator lines: (key,
  // value) pairs such as ("CUBLASLT_VERSION", "130200"). Never throws.
  virtual std::vector<std::pair<std::string, std::string>> gemm_tuning_validators(
      int device) noexcept {
    return {};
  }

  // ---- stream capture and graphs ----
  virtual void stream_begin_capture(StreamHandle s, CaptureMode mode) = 0;
  virtual GraphHandle stream_end_capture(StreamHandle s) = 0;
  // Status of capture on `s`; *capture_id set when active.
  virtual CaptureStatus stream_capture_status(StreamHandle s, std::uint64_t* capture_id) = 0;
  virtual GraphExecHandle graph_instantiate(GraphHandle g) = 0;
  virtual void graph_launch(GraphExecHandle g, StreamHandle s) = 0;
  virtual void graph_destroy(GraphHandle g) = 0;
  virtual void graph_exec_destroy(GraphExecHandle g) = 0;
  // Updates `exec` in place with the node parameters of `g` (cuGraphExecUpdate), keeping its
  // exec id. Returns false with *why set (state unchanged) when g's topology differs from the
  // graph `exec` was instantiated from (node kinds, order, edges) or the driver refuses a
  // node change; throws on other errors.
  virtual bool graph_exec_update(GraphExecHandle exec, GraphHandle g, std::string* why) = 0;
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
  // The capture frontier of `s`: the nodes the next work captured on `s` will depend on
  // (cuStreamGetCaptureInfo's dependencies), as opaque ids unique within the process's live
  // captures; with `ancestors`, also every node those depend on, transitively. Empty when `s`
  // is not capturing (or captures nothing yet). The caching allocator's
  // graph_capture_record_stream_reuse compares these sets: no event is queried.
  virtual std::vector<std::uint64_t> stream_capture_frontier(StreamHandle s, bool ancestors) = 0;
  // Sets the calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode)
  // and returns the previous one. While another capture is live, "potentially unsafe" calls
  // (mem_alloc) fail in global mode; relaxed lets the caching allocator grow a graph's
  // private pool during capture (ThreadCaptureModeGuard).
  virtual CaptureMode thread_exchange_capture_mode(CaptureMode mode) = 0;

  // ---- collective communication (collectives.hpp: NCCL on cuda, shared memory on emulated) --
  // The engine's identity; probing loads it (cuda: libnccl). Never throws.
  virtual CommEngineInfo comm_engine() noexcept = 0;
  // A new communicator id (ncclGetUniqueId). NotSupportedError when the engine is unusable.
  virtual nccl::UniqueId comm_unique_id() = 0;
  // Rank `rank` of `nranks` ranks sharing `id`, on `device` (ncclCommInitRankConfig). A
  // blocking call returns once every rank has joined (NcclError on failure or timeout); a
  // non-blocking one at once, its state() initializing until then. The caller has checked
  // 1 <= nranks and 0 <= rank < nranks (src/nccl/communicator.cpp, with the user's names).
  virtual std::shared_ptr<BackendComm> comm_init_rank(int nranks, const nccl::UniqueId& id,
                                                      int rank, int device,
                                                      const CommInitOptions& options) = 0;
  // One rank per entry of `devices` (distinct devices, rank i on devices[i]), all in this
  // process (ncclCommInitAll).
  virtual std::vector<std::shared_ptr<BackendComm>> comm_init_all(
      const std::vector<int>& devices) = 0;
  // ncclGroupStart / ncclGroupEnd for the calling thread; groups nest, operations enqueued
  // inside are launched at the outermost end. group_end without start: ValueError.
  virtual void comm_group_start() = 0;
  virtual void comm_group_end() = 0;

  // ---- green contexts (SM partitions: cuDevSmResourceSplitByCount + cuGreenCtxCreate) ----
  // NotSupportedError naming the missing entry point on a driver without green contexts
  // (CUDA < 12.4 for contexts, < 12.5 for their streams).
  virtual SmResourceInfo device_sm_resource(int device) = 0;
  // A green context owning `sm_count` SMs of `device` (the caller validated the count against
  // device_sm_resource: >= min_partition_sms, a multiple of sm_alignment, <= sm_count).
  // Returns the context and the SM count the driver actually gave in *granted.
  virtual GreenContextHandle green_context_create(int device, int sm_count, int* granted) = 0;
  // Destroys the context. Its streams must have been destroyed first (the driver leaves them
  // dangling otherwise). Skips the call during shutdown.
  virtual void green_context_destroy(GreenContextHandle g) = 0;
  // A non-blocking stream whose kernels run on the context's SMs. An ordinary stream for every
  // other call (events, waits, copies, capture, stream_destroy).
  virtual StreamHandle green_context_stream_create(GreenContextHandle g, int priority) = 0;

  // ---- GPUDirect Storage (cuFile on cuda; the emulated backend has none) ----
  // Probes once (cuda: loads cuFile and opens its driver on first call); never throws.
  virtual GdsStatus gds_status() noexcept = 0;
  // Registers an open file descriptor with cuFile (cuFileHandleRegister). Returns nullptr and
  // sets *why when the driver refuses this file (e.g. its file system has no GDS support):
  // callers then take the compat path. Throws only when GDS is unavailable altogether.
  virtual GdsFileHandle gds_file_register(int fd, std::string* why) = 0;
  virtual void gds_file_deregister(GdsFileHandle h) = 0;
  // cuFileBufRegister / cuFileBufDeregister of device memory (AcceleratorError / Error on
  // failure, with cuFile's status name).
  virtual void gds_buffer_register(void* ptr, std::size_t bytes) = 0;
  virtual void gds_buffer_deregister(void* ptr) = 0;
  // Synchronous DMA between a registered file and device memory of the calling thread's
  // current device (cuFileRead / cuFileWrite). Returns the bytes moved (fewer only at the end
  // of the file); throws on failure.
  virtual std::size_t gds_read(GdsFileHandle h, void* dst, std::size_t bytes,
                               std::int64_t file_offset) = 0;
  virtual std::size_t gds_write(GdsFileHandle h, const void* src, std::size_t bytes,
                                std::int64_t file_offset) = 0;

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
  // Waits for the work enqueued so far on every context this process may have traced work
  // on (cuda: each primary context cudakit retained, plus the contexts CUPTI reported created
  // while tracing; emulated: every device), so the records of that work become final. Never
  // creates a context. Records its waits like any synchronize while a trace records.
  virtual void activity_synchronize() {}
  // Delivers every record buffered so far, and returns only once they are delivered (cuda:
  // a forced CUPTI flush, then a wait for the buffer-completed callbacks CUPTI may still run
  // on its own thread). Records of work that had not completed come with start = end = 0
  // (as CUPTI gives them): call activity_synchronize() first. May block; never called
  // concurrently with start/stop.
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
