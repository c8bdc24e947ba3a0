// Internal state of the emulated backend: virtual devices backed by host memory, streams
// executed by host worker threads, events as (stream, sequence number) markers, and stream
// capture into host-side graphs. Split across files by concern:
//   backend.cpp   identity, devices, kernels from images (not supported)
//   runtime_modules.cpp  runtime-compiled modules (jiterator): host C++ compiler + dlopen
//   memory.cpp    device/pinned/stream-ordered allocation, pointer→device map, memory IPC
//   vm.cpp        virtual memory (reserve / create / map) with memfd + mmap
//   streams.cpp   stream objects, worker threads, legacy default stream, copies
//   events.cpp    events, timing, event IPC
//   capture.cpp   stream capture (fork/join, invalidation)
//   graphs.cpp    graph inspection, instantiate, replay, DOT output
//   telemetry.cpp the telemetry model (utilization measured, sensors derived from it)
//   math.cpp      GEMM through CBLAS (OpenBLAS), the optional-library report
//   profiler.cpp  profiler start/stop (device validation only: nothing to profile)
//   activity.cpp  activity records for the profiler's tracer (its host tasks are the kernels)
//   collectives.cpp, comm_engine.cpp  NCCL's communicators over shared memory
//   green_contexts.cpp  SM partitions (the counts and rules of a Hopper-class device)
//   gds.cpp       GPUDirect Storage: absent by default (cudakit.gds takes its compat path);
//                 a model of cuFile with CUDAKIT_EMULATED_GDS=1
//
// Ordering model: every stream has a monotonically increasing sequence number per enqueued
// op; "stream S reached n" (S.completed >= n) is the only completion primitive. An event is
// the pair (stream, n) of its latest record; waits and the legacy-default-stream barriers
// are dependencies (stream, n) attached to an op, which the worker waits on before running.
//
// Lock order: capture_mu_ → Device::mu → Stream::mu. Event::mu is a leaf. The caching
// allocator's locks come before capture_mu_ and Event::mu (its graph-pool filters ask for
// capture status; it records and queries events), so the last reference to a CaptureSession
// or GraphData (whose tasks may own device tensors) is never dropped under those locks. Workers never
// hold one stream's mutex while waiting on another stream.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.hpp"
#include "backend/emulated/config.hpp"

namespace cudakit::detail::emulated {

using Clock = std::chrono::steady_clock;

struct Stream;
struct Device;
struct CaptureSession;

// Whether the calling thread runs a stream's work (streams.cpp).
bool on_stream_worker() noexcept;

struct Dep {
  std::shared_ptr<Stream> stream;
  std::uint64_t seq = 0;
};

// What an op or a captured node reports to the tracer when it runs (activity.cpp). Filled
// at enqueue while a trace records (ops) and always at capture (nodes: a trace may start
// after the capture). kind none: the op reports nothing.
struct PendingRecord;

struct OpTrace {
  const char* name = nullptr;  // kernel name (a literal); memcpy/memset: null
  // The record reserved for this op at enqueue (activity.cpp); null for nodes and untraced
  // ops.
  PendingRecord* pending = nullptr;
  std::uint64_t bytes = 0;
  std::uint32_t correlation = 0;  // of the API call that enqueued it (0 for nodes)
  ActivityKind kind = ActivityKind::none;
  std::uint8_t copy_kind = 0, src_kind = 0, dst_kind = 0;
};

// A device record waiting for its work's timestamps (EmulatedBackend::reserve_record).
struct PendingRecord {
  ActivityRecord r;  // everything but the timestamps, written at reservation
  std::atomic<std::int64_t> start{0}, end{0};
  std::atomic<bool> done{false};  // timestamps written (release) or cancelled
  bool delivered = false;         // handed to the sink (pending_mu_)
  bool cancelled = false;         // never delivered (pending_mu_ or before `done`)
};

struct Op {
  HostTask fn;            // may be empty (pure marker / wait)
  std::vector<Dep> deps;  // waited on before fn runs
  OpTrace trace;
};

struct Stream : std::enable_shared_from_this<Stream> {
  static constexpr std::uint64_t kMagic = 0x6D74537564756B63ull;  // "ckduStm"
  std::uint64_t magic = kMagic;
  Device* device = nullptr;
  int priority = 0;
  unsigned flags = 0;
  bool legacy = false;  // the per-device legacy default stream
  std::uint64_t id = 0;  // process-unique, never reused (stream_id)
  std::uint32_t trace_id = 0;  // stream id in trace records (CUPTI's numbering style)

  std::mutex mu;
  std::condition_variable cv_work;  // worker: new op or destroy
  std::condition_variable cv_done;  // waiters: completed advanced
  std::deque<Op> queue;             // guarded by mu
  std::uint64_t enqueued = 0;       // guarded by mu
  std::uint64_t completed = 0;      // guarded by mu
  std::string error;                // first task failure (sticky); guarded by mu
  int error_code = 719;             // its CUresult code (CUDA_ERROR_LAUNCH_FAILED unless the
                                    // task threw an AcceleratorError); guarded by mu
  bool error_seen_by_device = false;  // device_synchronize reported it once
  bool worker_started = false, destroyed = false;  // guarded by mu

  // Capture state, guarded by the backend's capture_mu_ (flag readable without it).
  std::atomic<bool> capturing{false};
  std::shared_ptr<CaptureSession> cap;
  std::vector<std::uint64_t> cap_tail;  // nodes the next captured node depends on

  bool blocking() const noexcept { return !legacy && !(flags & kStreamNonBlocking); }
  ~Stream() { magic = 0; }
};

// Busy time of a set of workers over the last `window` (union of their running intervals).
class BusyWindow {
 public:
  void note(bool start);           // a worker starts / stops running a task
  int percent();                   // % of the last window some worker was busy, 0..100
 private:
  std::mutex mu_;
  int busy_ = 0;
  Clock::time_point busy_since_{};
  std::deque<std::pair<Clock::time_point, Clock::time_point>> intervals_;
};

struct Device {
  int index = 0;            // visible ordinal
  int machine_ordinal = 0;  // ordinal before CUDA_VISIBLE_DEVICES (identity: uuid, PCI bus)
  std::size_t limit = 0;
  std::atomic<std::size_t> used{0};

  std::mutex mu;  // streams list, legacy ordering barrier
  std::vector<std::shared_ptr<Stream>> streams;  // created streams (live or draining)
  std::shared_ptr<Stream> legacy;                // created lazily
  std::atomic<bool> legacy_used{false};

  // Telemetry: any task running (utilization), a copy or memset running (memory_usage).
  BusyWindow compute, memory;

  // A fault of a host-compiled kernel (kernel_faults.hpp): the context's sticky error, as a
  // GPU's illegal address. Set once; every later synchronization of the device reports it.
  std::atomic<bool> faulted{false};
  std::mutex fault_mu;  // a leaf; guards the two below
  int fault_code = 0;
  std::string fault_name, fault_error;
};

struct TimeSlot {
  std::atomic<std::int64_t> ns{-1};  // steady_clock time of completion, -1 until then
};

struct GraphNode {
  std::uint64_t id = 0;
  GraphNodeType type = GraphNodeType::other;
  std::string label;
  HostTask fn;  // replay action (empty for nodes without work)
  std::vector<std::uint64_t> deps;
  std::uintptr_t event = 0;  // wait_event nodes: the event waited for
  OpTrace trace;             // kernel / memcpy / memset nodes: what a traced replay reports
};

struct GraphData {
  std::uint32_t id = 0;          // graph id (upper half of the nodes' tools ids)
  std::vector<GraphNode> nodes;  // node id == index
  std::vector<HostTask> on_destroy;  // deferred frees of mem_free nodes
  ~GraphData();
};

struct GraphObj {
  static constexpr std::uint64_t kMagic = 0x687061724775646Bull;
  std::uint64_t magic = kMagic;
  std::shared_ptr<GraphData> data;
  ~GraphObj() { magic = 0; }
};

struct GraphExecObj {
  static constexpr std::uint64_t kMagic = 0x6365784575646B63ull;
  std::uint64_t magic = kMagic;
  std::uint32_t id = 0;  // exec graph id, from the same counter as graph ids (never equal)
  std::shared_ptr<GraphData> data;
  std::vector<std::size_t> order;  // topological order of node indices
  ~GraphExecObj() { magic = 0; }
};

struct Event;

struct CaptureSession {
  std::uint64_t id = 0;
  CaptureMode mode = CaptureMode::global;
  std::thread::id thread;
  Stream* origin = nullptr;
  bool invalidated = false;
  bool ended = false;
  std::shared_ptr<GraphData> graph = std::make_shared<GraphData>();
  std::vector<std::shared_ptr<Stream>> streams;  // origin + joined
};

struct Event : std::enable_shared_from_this<Event> {
  static constexpr std::uint64_t kMagic = 0x746E764575646B63ull;
  std::uint64_t magic = kMagic;
  int device = 0;
  unsigned flags = 0;
  int handle_refs = 1;  // creator + in-process IPC opens; guarded by backend events_mu_

  std::mutex mu;
  std::shared_ptr<Stream> stream;  // latest record (null: never recorded)
  std::uint64_t seq = 0;
  std::shared_ptr<TimeSlot> slot;
  // Latest record happened inside a capture: fork/join information.
  std::shared_ptr<CaptureSession> captured;
  std::vector<std::uint64_t> captured_nodes;
  ~Event() { magic = 0; }
};

class EmulatedBackend final : public Backend {
 public:
  explicit EmulatedBackend(Config config);

  const char* name() const noexcept override { return "emulated"; }
  int device_count() noexcept override { return static_cast<int>(devices_.size()); }
  std::string unavailable_reason() noexcept override {
    return devices_.empty() ? "no emulated devices are visible (CUDAKIT_EMULATED_DEVICES and "
                              "CUDA_VISIBLE_DEVICES decide which exist)"
                            : "";
  }
  int driver_version() noexcept override { return 13000; }
  BackendCapabilities capabilities() const noexcept override;
  std::vector<LibraryInfo> optional_libraries() noexcept override;

  void set_current_device(int device) override;
  int current_device() override;
  DeviceInfo device_info(int device) override;
  MemInfo mem_get_info(int device) override;
  void device_synchronize(int device) override;
  bool can_access_peer(int device, int peer) override;
  void enable_peer_access(int device, int peer) override;
  bool peer_mappable(const void*) noexcept override { return true; }  // host memory
  std::pair<int, int> stream_priority_range() override { return {0, -5}; }

  int utilization_percent(int device) override;
  int memory_utilization_percent(int device) override;
  int temperature_c(int device) override;
  int power_draw_mw(int device) override;
  int clock_rate_mhz(int device) override;
  std::size_t device_memory_used(int device) override;
  std::vector<ProcessMemory> gpu_processes(int device) override;

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
  int vm_export_fd(PhysMemHandle h) override;
  PhysMemHandle vm_import_fd(int device, int fd, std::size_t bytes) override;
  int pointer_device(const void* ptr) override;

  void memcpy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s) override;
  void memset_d8_async(void* dst, unsigned char value, std::size_t bytes,
                       StreamHandle s) override;

  StreamHandle stream_create(int device, int priority, unsigned flags) override;
  void stream_destroy(StreamHandle s) override;
  bool stream_query(StreamHandle s) override;
  void stream_synchronize(StreamHandle s) override;
  void stream_wait_event(StreamHandle s, EventHandle e) override;
  int stream_priority(StreamHandle s) override;
  int stream_device(StreamHandle s) override;
  std::uint64_t stream_id(StreamHandle s) override;
  void launch_host_task(StreamHandle s, HostTask task) override;
  void launch_host_kernel(StreamHandle s, const char* kernel_name, HostTask task) override;

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

  ModuleHandle module_load_data(int device, const void* image) override;
  void module_unload(ModuleHandle m) override;
  FunctionHandle module_get_function(ModuleHandle m, const char* name) override;
  void launch_kernel(FunctionHandle f, Dim3 grid, Dim3 block, unsigned shared_bytes,
                     StreamHandle s, void** args) override;
  std::string runtime_compiler_id(int device, const std::string& state_dir) override;
  RuntimeCompileResult compile_runtime_module(int device, const std::string& source,
                                              const std::string& program) override;
  ModuleHandle load_runtime_module(int device, const void* image, std::size_t size) override;
  void launch_runtime_kernel(FunctionHandle f, Dim3 grid, Dim3 block, StreamHandle s,
                             const void* params, std::size_t bytes,
                             std::shared_ptr<const void> keep_alive) override;

  void gemm(int device, StreamHandle s, GemmArgs args) override;
  void* blas_handle(int device) override;
  void* solver_handle(int device, StreamHandle s) override;
  std::vector<GemmPlanPtr> gemm_candidates(int device, const GemmArgs& problem) override;
  GemmPlanPtr gemm_plan(int device, const GemmArgs& problem, const std::string& name) override;
  std::vector<std::pair<std::string, std::string>> gemm_tuning_validators(
      int device) noexcept override;

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
  bool graph_tools_ids_available() noexcept override { return true; }
  std::uint32_t graph_exec_id(GraphExecHandle g) override;
  std::size_t stream_capture_node_count(StreamHandle s) override;
  std::vector<std::uint64_t> stream_capture_frontier(StreamHandle s, bool ancestors) override;
  CaptureMode thread_exchange_capture_mode(CaptureMode mode) override;

  void profiler_start() override;
  void profiler_stop() override;

  SmResourceInfo device_sm_resource(int device) override;
  GreenContextHandle green_context_create(int device, int sm_count, int* granted) override;
  void green_context_destroy(GreenContextHandle g) override;
  StreamHandle green_context_stream_create(GreenContextHandle g, int priority) override;

  GdsStatus gds_status() noexcept override;
  GdsFileHandle gds_file_register(int fd, std::string* why) override;
  void gds_file_deregister(GdsFileHandle h) override;
  void gds_buffer_register(void* ptr, std::size_t bytes) override;
  void gds_buffer_deregister(void* ptr) override;
  std::size_t gds_read(GdsFileHandle h, void* dst, std::size_t bytes,
                       std::int64_t file_offset) override;
  std::size_t gds_write(GdsFileHandle h, const void* src, std::size_t bytes,
                        std::int64_t file_offset) override;

  // Every emulated device has this many SMs (an H100/H200's count; device_info reports it).
  static constexpr int kSmCount = 132;

  CommEngineInfo comm_engine() noexcept override;
  nccl::UniqueId comm_unique_id() override;
  std::shared_ptr<BackendComm> comm_init_rank(int nranks, const nccl::UniqueId& id, int rank,
                                              int device, const CommInitOptions& options) override;
  std::vector<std::shared_ptr<BackendComm>> comm_init_all(const std::vector<int>& devices) override;
  void comm_group_start() override;
  void comm_group_end() override;

  ActivityStatus activity_start(ActivitySink* sink, const ActivityConfig& config) override;
  void activity_synchronize() override;
  void activity_flush() override;
  void activity_stop() noexcept override;

  // ---- activity records (activity.cpp) ----
  // The sink while a trace records device activity / API calls, else null (one relaxed
  // load: the cost of tracing support when no trace runs).
  ActivitySink* device_sink() const noexcept {
    return device_sink_.load(std::memory_order_acquire);
  }
  ActivitySink* api_sink() const noexcept { return api_sink_.load(std::memory_order_acquire); }
  std::uint32_t next_correlation() noexcept {
    return next_correlation_.fetch_add(1, std::memory_order_relaxed);
  }
  // A driver-API record around one backend call, made when a trace records API calls.
  class ApiCall {
   public:
    ApiCall(EmulatedBackend& b, const char* name, std::uint32_t cbid) noexcept;
    ~ApiCall();
    ApiCall(const ApiCall&) = delete;
    ApiCall& operator=(const ApiCall&) = delete;
    // Correlation id for the work this call enqueues (0: no trace).
    std::uint32_t correlation() const noexcept { return correlation_; }

   private:
    EmulatedBackend& b_;
    const char* name_;
    std::uint32_t cbid_;
    std::uint32_t correlation_ = 0;
    std::int64_t start_ = 0;
  };
  // A synchronization record (a host wait) around one call, when a trace records.
  class SyncWait {
   public:
    SyncWait(EmulatedBackend& b, SyncKind kind, const Stream* s, int device,
             std::uint32_t correlation) noexcept;
    ~SyncWait();
    SyncWait(const SyncWait&) = delete;
    SyncWait& operator=(const SyncWait&) = delete;

   private:
    ActivitySink* sink_;
    SyncKind kind_;
    std::uint32_t stream_;
    int device_;
    std::uint32_t correlation_;
    std::int64_t start_ = 0;
  };
  // Tag for a memcpy (kinds from the pointers) / memset / kernel, when `wanted`.
  OpTrace copy_trace(const void* dst, const void* src, std::size_t bytes);
  OpTrace memset_trace(const void* dst, std::size_t bytes);
  // Device records are buffered as CUPTI buffers them (activity.cpp): reserved when the work
  // is enqueued, timed when it runs, handed to the sink by activity_flush() (or when the
  // buffer is long). Reserves the record of an op on `s` (call with a sink set).
  PendingRecord* reserve_record(const Stream& s, const OpTrace& t, std::uint64_t graph_node_id,
                                std::uint32_t graph_id);
  // Marks a reserved record as never to be timed (its work will not run).
  void cancel_record(PendingRecord* p) noexcept;
  // Emits the record of an op or node that ran on `s` from `start` to `end` (into its
  // reserved record when it has one).
  void emit_op(const Stream& s, const OpTrace& t, std::int64_t start, std::int64_t end,
               std::uint64_t graph_node_id = 0, std::uint32_t graph_id = 0) noexcept;
  void emit_stream(ActivityKind kind, const Stream& s) noexcept;

 private:
  // ---- green contexts ----
  struct GreenContext {
    static constexpr std::uint64_t kMagic = 0x6E65657247756B63ull;
    std::uint64_t magic = kMagic;
    int device = 0;
    int sm_count = 0;
    ~GreenContext() { magic = 0; }
  };
  GreenContext& green_context(GreenContextHandle g);  // throws invalid_context
  std::mutex green_mu_;
  std::unordered_map<void*, std::unique_ptr<GreenContext>> green_contexts_;
  // ---- GPUDirect Storage model (CUDAKIT_EMULATED_GDS=1) ----
  struct GdsFile {
    int fd = -1;  // our own descriptor of the file, without O_DIRECT (closed on deregister)
  };
  std::mutex gds_mu_;
  std::unordered_map<void*, std::unique_ptr<GdsFile>> gds_files_;
  std::map<const void*, std::size_t> gds_buffers_;  // registered device ranges

  // ---- devices ----
  Device& dev(int device);  // throws invalid_device
  // ---- memory ----
  bool reserve_bytes(Device& d, std::size_t bytes);  // accounting; false on OOM
  void release_bytes(Device& d, std::size_t bytes);
  void* alloc_device(int device, std::size_t bytes);
  // `after_queued_work`: cuMemFree's semantics. cuMemFree synchronises the device before the
  // memory goes; here the host free waits (without blocking the caller) until every stream
  // has run what was queued before it, since tasks hold raw pointers to device memory.
  void free_device(void* ptr, const char* what, bool after_queued_work = false);
  // Frees the device memory whose queued work has run (cheap when nothing waits).
  void reap_freed();
  struct PendingFree {
    void* ptr;
    int device;
    std::size_t accounted;
    std::vector<Dep> until;  // each stream's position when the free was asked for
  };
  std::mutex pending_frees_mu_;  // a leaf
  std::vector<PendingFree> pending_frees_;
  std::atomic<bool> frees_pending_{false};
  struct Range { std::uintptr_t end; int device; bool vm; std::size_t accounted; };
  std::shared_mutex ranges_mu_;
  std::map<std::uintptr_t, Range> ranges_;  // base → range (device allocs + VM mappings)
  std::mutex pinned_mu_;
  std::unordered_set<void*> pinned_;
  std::unordered_map<void*, std::size_t> registered_;  // host_register'ed ranges (pinned_mu_)
  // ---- virtual memory ----
  struct PhysMem {
    int fd = -1;
    int device = 0;
    std::size_t bytes = 0;
    int maps = 0;
    bool destroyed = false;
    bool imported = false;  // vm_import_fd: another process's memory, not accounted here
  };
  struct Mapping { std::size_t bytes; PhysMemHandle phys; };
  std::mutex vm_mu_;
  std::map<std::uintptr_t, std::pair<std::size_t, int>> reservations_;  // va → (bytes, device)
  std::map<std::uintptr_t, Mapping> mappings_;                           // va → mapping
  std::unordered_map<PhysMemHandle, PhysMem> phys_;
  PhysMemHandle next_phys_ = 1;
  void maybe_drop_phys(PhysMemHandle h);  // vm_mu_ held
  // ---- streams ----
  Stream* resolve(StreamHandle s);  // null/legacy → current device's legacy stream
  Stream& legacy_stream(Device& d);
  std::uint64_t submit(Stream& s, HostTask fn, std::vector<Dep> deps = {},
                       const OpTrace& trace = {});
  void start_worker(Stream& s);  // s.mu held
  void worker_loop(std::shared_ptr<Stream> s);
  void wait_reached(Stream& s, std::uint64_t seq);
  void throw_if_failed(Stream& s);  // sticky task errors (the stream's, then the device's)
  void throw_if_faulted(Device& d);  // the device's sticky kernel fault, if any
  void sync_stream(Stream& s);
  bool reached(Stream& s, std::uint64_t seq);
  std::atomic<std::uint64_t> next_stream_id_{1};
  // ---- capture ----
  // Records a node when `s` is capturing (returns true); throws if the capture is invalid.
  // `fn` is moved from only when a node is recorded.
  bool capture_node(Stream& s, GraphNodeType type, const std::string& label, HostTask&& fn,
                    const OpTrace& trace = {});
  void record_node_locked(Stream& s, GraphNodeType type, const std::string& label,
                          HostTask&& fn, std::uintptr_t event = 0,
                          const OpTrace& trace = {});  // capture_mu_ held, s.cap valid
  // "Potentially unsafe" calls (mem_alloc, event and stream queries, exec-graph destroys)
  // under CUDA's capture-mode rules: throws CAPTURE_UNSUPPORTED and invalidates the offending
  // capture(s) when prohibited. A query of an event or stream that has nothing to do with
  // the capture is prohibited too: from the capturing thread in global and thread_local
  // mode, and from any thread in global mode while a global capture is live (the known
  // failure of a watchdog thread's cuEventQuery beside torch's global-mode captures).
  // Synchronizes of unrelated streams and events are not modelled as unsafe (no evidence
  // either way from the H200 yet).
  void check_unsafe_call(const char* what);
  // event_record / stream_wait_event under capture (fork/join); true when handled.
  bool capture_record(Event& ev, Stream& s);
  bool capture_wait(Stream& s, Event& ev);
  // stream sync/query on a capturing stream, device sync during capture.
  void check_sync_during_capture(Stream& s, const char* what);
  // Legacy-stream use while blocking streams of `d` capture → invalidate + throw implicit.
  void check_legacy_implicit(Device& d, const char* what);
  void invalidate_locked(CaptureSession& c);  // capture_mu_ held
  void end_session_locked(CaptureSession& c);  // capture_mu_ held: streams leave capture
  std::mutex capture_mu_;
  // Live stream handles, so a foreign or stale handle (ExternalStream(0xdead...)) gets a
  // clean invalid-handle error instead of a wild read. Emulated only: a shared lock per use.
  std::shared_mutex stream_handles_mu_;
  std::unordered_set<const void*> stream_handles_;
  std::atomic<int> active_captures_{0};
  std::unordered_set<CaptureSession*> sessions_;  // active (not ended)
  std::uint64_t next_capture_id_ = 1;
  std::atomic<std::uint32_t> next_graph_id_{1};  // graph and exec graph ids
  // ---- events ----
  Event* event_ptr(EventHandle e);  // throws invalid_handle
  std::mutex events_mu_;
  std::unordered_map<Event*, std::shared_ptr<Event>> events_;
  // ---- graphs ----
  static void run_graph(const GraphData& g, const std::vector<std::size_t>& order);
  // run_graph reporting each kernel/memcpy/memset node to the tracer (activity.cpp).
  // `slots`: the nodes' records reserved at launch, each set to null once timed (empty:
  // records made as the nodes run, for a launch captured into another graph).
  void run_graph_traced(const GraphData& g, const std::vector<std::size_t>& order,
                        const Stream& s, std::uint32_t exec_id, std::uint32_t correlation,
                        std::vector<PendingRecord*>& slots);
  std::vector<PendingRecord*> reserve_graph_records(const GraphData& g,
                                                    const std::vector<std::size_t>& order,
                                                    const Stream& s, std::uint32_t exec_id,
                                                    std::uint32_t correlation);
  // Hands buffered records to the sink: forced, every one not handed out yet (those whose
  // work has not run with start = end = 0, as CUPTI's forced flush does); else the completed
  // ones at the front. pending_mu_ held.
  void deliver_records_locked(bool forced) noexcept;

  Config config_;
  std::vector<std::unique_ptr<Device>> devices_;
  // ---- activity tracing (activity.cpp) ----
  std::atomic<ActivitySink*> device_sink_{nullptr};
  std::atomic<ActivitySink*> api_sink_{nullptr};
  std::atomic<std::uint32_t> next_correlation_{1};
  std::mutex pending_mu_;
  std::deque<PendingRecord> pending_;  // deque: a record's address is stable while it waits
  std::atomic<std::uint32_t> next_trace_stream_id_{13};  // legacy streams are 7, as CUPTI numbers them
};

// Throws AcceleratorError(code) with context `what` (CUresult numbering, error.hpp).
[[noreturn]] void fail(int code, const std::string& what);

// Current device of the calling thread (per thread, default 0).
int& thread_current_device();

// Runs a captured host-task node during replay. A named, exported function so graph
// inspection can report a host node's function address and symbol (host_fn_addr/name):
// exported despite the library's hidden visibility, so dladdr can name it.
CUDAKIT_INTERNAL_API void run_host_node(const HostTask& fn);

}  // namespace cudakit::detail::emulated
