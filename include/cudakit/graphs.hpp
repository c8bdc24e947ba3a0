// CUDA graphs (seed: "Graphs (beta)" and "CUDA graph lifecycle hooks"): capture the work a
// stream issues into a graph, instantiate it once, replay it with one launch.
//
//   cudakit::CUDAGraph g;
//   {
//     cudakit::GraphCapture capture(g);   // syncs, captures on a side stream
//     y = x * 2 + 1;                      // cudakit ops, kernels on current_stream() ...
//     capture.end();                      // instantiates (keep_graph=false)
//   }
//   g.replay();                           // on the current stream
//
// Semantics follow torch.cuda.CUDAGraph (current PyTorch main): capture_begin/capture_end,
// capture_end_pre/post, keep_graph, instantiate-on-first-replay, private memory pools shared
// through pool()/graph_pool_handle(), RNG that advances per replay, destroy callbacks and
// retained objects per capture cycle, get_graph_data() with profiler ids, and lifecycle
// hooks. Allocation during capture goes to the graph's private pool; a replay allocates
// nothing. A capture that hits an illegal operation raises; abort_capture() (what
// GraphCapture's destructor and cudakit.graph's __exit__ do on an exception) ends it cleanly.
//
// Hooks. Global hooks (register_graph_*_hook) fire for every graph, before the graph's own
// hooks, in registration order; an exception from a global hook is swallowed (one consumer
// cannot break another's step), an exception from a per-graph hook propagates (a raising
// replay-start hook aborts the replay and no end hook fires; end hooks fire even when the
// launch throws, then the launch error propagates). Destroy hooks get the exec graph ids
// being destroyed and fire once per capture cycle, on reset() or destruction; destroy
// callbacks' exceptions are swallowed. With no hook registered, replay() checks a few
// relaxed atomics and does no std::function call, lock or allocation: it costs what the raw
// launch costs (bench/graphs/bench_graphs.cpp). Hooks and callbacks must not reference their
// own graph (it would keep the graph alive, as in torch).
//
// Thread-safety: a CUDAGraph is not thread-safe: capture, instantiate, reset and destruction
// must not race with other uses of the same graph; replay() may run concurrently from
// several threads while nothing else touches the graph. Different graphs are independent.
// Hook registration and removal are thread-safe (copy-on-write lists); a hook removed while
// it is being fired still finishes that call. HookHandle is a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cudakit/export.hpp"
#include "cudakit/memory.hpp"  // MempoolId, graph_pool_handle()
#include "cudakit/stream.hpp"

namespace CUDAKIT_API cudakit {

using NativeGraph = void*;      // CUgraph on cuda
using NativeGraphExec = void*;  // CUgraphExec on cuda

// What a HookHandle removes from (a hook list). Implemented in src/graphs; not for users.
class HookRegistryBase {
 public:
  virtual ~HookRegistryBase() = default;
  virtual void remove(std::uint64_t id) noexcept = 0;
  virtual bool contains(std::uint64_t id) const noexcept = 0;
};

// cudaStreamCaptureMode (torch's capture_error_mode): which threads' "unsafe" calls (e.g. a
// device allocation outside the graph's pool) fail while the capture is live.
enum class CaptureErrorMode { global = 0, thread_local_ = 1, relaxed = 2 };
// "global" | "thread_local" | "relaxed"; ValueError naming the bad value otherwise.
CaptureErrorMode parse_capture_error_mode(std::string_view name);
const char* capture_error_mode_name(CaptureErrorMode mode) noexcept;

// True when capture is under way on the current stream of the current device. Never
// initialises the backend (false before first use), as torch's.
bool is_current_stream_capturing();

// What GraphCapture and cudakit.graph do before capturing (torch.cuda.graph synchronizes the
// device there): synchronizes `device`, unless a capture is live on any thread, in which case
// only the current stream of `device` is synchronized, since a device synchronize would
// invalidate that capture (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED; torch breaks the other
// thread's capture here). Returns whether the whole device was synchronized.
bool synchronize_for_capture(int device);

class CUDAGraph;
using GraphHook = std::function<void(CUDAGraph&)>;
// Destroy hooks get the exec graph ids (upper half of the tools ids) being destroyed.
using GraphDestroyHook = std::function<void(const std::vector<std::uint32_t>& exec_graph_ids)>;

// Returned by every registration (torch's RemovableHandle). Copyable; removing twice, or
// after the graph is gone, is a no-op. Dropping a handle does not unregister.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<HookRegistryBase> registry, std::uint64_t id)
      : registry_(std::move(registry)), id_(id) {}
  void remove() noexcept;
  bool registered() const noexcept;
  std::uint64_t id() const noexcept { return id_; }

 private:
  std::weak_ptr<HookRegistryBase> registry_;
  std::uint64_t id_ = 0;
};

// ---- global lifecycle hooks (torch.cuda.graphs.register_graph_*_hook) ----
// Capture start runs with the capture live (it must not issue device work: it would be
// captured); capture end sees the template live in both keep_graph modes; instantiate runs
// after each instantiation; replay start/end around every replay (end: once enqueued).
// An empty function is a ValueError.
HookHandle register_graph_capture_start_hook(GraphHook fn);
HookHandle register_graph_capture_end_hook(GraphHook fn);
HookHandle register_graph_instantiate_hook(GraphHook fn);
HookHandle register_graph_replay_start_hook(GraphHook fn);
HookHandle register_graph_replay_end_hook(GraphHook fn);
HookHandle register_graph_destroy_hook(GraphDestroyHook fn);

// get_graph_data(): torch's documented structure. Ids are remapped to the exec graph, so a
// node's tools_id is what a CUPTI-based profiler reports as its "graph node id".
struct GraphNodeData {
  std::size_t index = 0;    // position in `nodes` (the driver's node order)
  std::string node_type;    // "kernel", "memcpy", "memset", "host", "child_graph", "empty",
                            // "wait_event", "event_record", "mem_alloc", "mem_free", or the
                            // driver's name for rarer kinds ("conditional", ...)
  std::uint64_t tools_id = 0;  // (graph_id << 32) | node_id
  std::uint32_t graph_id = 0;  // == exec_graph_id
  std::uint32_t node_id = 0;
  std::optional<std::string> kernel_name;  // kernel nodes, demangled ("decode(float*, int)")
  std::uintptr_t event_ptr = 0;            // event_record / wait_event nodes, else 0
  std::uintptr_t host_fn_addr = 0;         // host nodes, else 0
  std::optional<std::string> host_fn_name;  // demangled symbol of host_fn_addr, if exported
  std::vector<std::size_t> dependencies;   // indices into `nodes`
  std::vector<std::size_t> dependents;
};
struct GraphData {
  std::uint32_t exec_graph_id = 0;
  std::vector<GraphNodeData> nodes;
};

class CUDAGraph {
 public:
  // keep_graph=false: capture_end() instantiates and destroys the captured template.
  // keep_graph=true: the template stays (raw_cuda_graph(), get_graph_data(), debug_dump());
  // it is instantiated by instantiate() or on the first replay().
  explicit CUDAGraph(bool keep_graph = false);
  // Fires the destroy hooks and callbacks of the current capture cycle (not during process
  // exit), then frees the graph and releases its pools. Never throws.
  ~CUDAGraph();
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  // Begins capturing work issued on the current stream (which must not be the legacy
  // default stream) of the current device. `pool`: share a pool (another graph's pool(),
  // graph_pool_handle(), a MemPool's id); default: a fresh private pool.
  // `enable_annotations`: record graph_annotations::MarkKernels scopes for this capture.
  void capture_begin(std::optional<MempoolId> pool = std::nullopt,
                     CaptureErrorMode mode = CaptureErrorMode::global,
                     bool enable_annotations = false);
  // capture_end_pre(), capture-end hooks, instantiate() unless keep_graph, capture_end_post().
  // Must be called with the capture stream current. If the capture failed (an illegal
  // operation invalidated it), throws and leaves the graph empty and reusable.
  void capture_end();
  // Ends the capture but keeps the template live (both keep_graph modes).
  void capture_end_pre();
  // Finalises capture_end_pre(): destroys the template when keep_graph=false, which
  // requires the graph to be instantiated first (Error otherwise, state unchanged).
  void capture_end_post();
  // Ends a capture in progress without a graph (error paths): never throws; the graph is
  // left empty, its pool released, the backend and allocator usable. No-op when idle.
  void abort_capture() noexcept;
  // Instantiates the template (again: a fresh exec graph; the previous one is destroyed).
  void instantiate();
  // Launches the graph on the current stream of the capture device. With keep_graph and no
  // exec graph yet, instantiates first. Error before a capture or after reset().
  void replay();
  // Destroy hooks and callbacks of this cycle, then frees everything; the object can capture
  // again. Per-graph lifecycle hooks stay registered.
  void reset();
  // Updates this graph's exec graph in place with the node parameters of `newly_captured`
  // (cudaGraphExecUpdate): a capture of the same work with other pointers, sizes or scalars
  // (a decode step at another position, other buffers) replays through this graph without
  // instantiating again, and this graph keeps its exec graph id (so its profiler ids and
  // kernel annotations stay valid). `newly_captured` must have a live template (keep_graph or
  // before capture_end_post), this graph must be instantiated, and both must have the same
  // topology: the same nodes in the same order, of the same kinds, with the same edges
  // (ValueError saying what differs otherwise; this graph is then unchanged). The memory the
  // new capture allocated belongs to its pool: this graph retains that pool until reset().
  // Graphs that use cudakit's RNG are refused (their Philox offsets are per graph).
  // Must not race with a replay of this graph.
  void update(const CUDAGraph& newly_captured);

  // The last capture ended with no node: nothing ran on the capture stream (torch warns "The
  // CUDA Graph is empty" at capture_end; the Python binding does the same).
  bool captured_empty() const noexcept;
  MempoolId pool() const;               // Error before a capture ended
  std::vector<MempoolId> pools() const;  // this graph's pool + retained ones
  void retain_pool(MempoolId id);       // keeps another pool alive until reset()
  NativeGraph raw_cuda_graph() const;          // Error unless the template is live
  NativeGraphExec raw_cuda_graph_exec() const;  // Error unless instantiated
  void enable_debug_mode();             // == keep_graph=true (torch's compatibility name)
  // Graphviz DOT of the template (live template required, as raw_cuda_graph()).
  void debug_dump(const std::string& path, bool verbose = true) const;
  // Topology with profiler ids. Needs the template live and the graph instantiated, and
  // tools ids (NotSupportedError on a cuda driver < 13.1 without CUPTI). Within one
  // instantiate()'s hooks every call returns the same object.
  std::shared_ptr<const GraphData> get_graph_data() const;

  // Per capture cycle: run `cb` / drop `obj` on reset() or destruction, in registration
  // order, exceptions swallowed. synchronize_before_release: first synchronize every stream
  // this graph was replayed on (for callbacks that free memory the graph uses).
  HookHandle register_destroy_callback(std::function<void()> cb,
                                       bool synchronize_before_release = false);
  HookHandle retain_object(std::shared_ptr<const void> obj,
                           bool synchronize_before_release = false);

  // Per-graph lifecycle hooks (after the global ones; exceptions propagate).
  HookHandle register_capture_start_hook(GraphHook hook);
  HookHandle register_capture_end_hook(GraphHook hook);
  HookHandle register_post_instantiate_hook(GraphHook hook);
  HookHandle register_replay_start_hook(GraphHook hook);
  HookHandle register_replay_end_hook(GraphHook hook);

  bool keep_graph() const noexcept;
  bool is_capturing() const noexcept;
  bool has_graph() const noexcept;       // template live
  bool has_graph_exec() const noexcept;  // instantiated
  int device() const noexcept;           // capture device; -1 before the first capture
  std::uint64_t capture_id() const noexcept;  // backend capture id of the last capture
  // Id of the current exec graph (queried once per instantiation); nullopt when not
  // instantiated or the backend has no tools ids.
  std::optional<std::uint32_t> exec_graph_id() const;

  struct Impl;  // src/graphs/cuda_graph_impl.hpp

 private:
  void replay_with_hooks();
  std::unique_ptr<Impl> impl_;
};

// torch.cuda.graph as RAII. The constructor synchronizes the device, empties the allocator
// cache, makes the capture stream current (options.stream, or one side stream per device
// reused by every capture, as torch) and begins capturing. end() ends the capture
// (capture_end) and restores the previous stream; if end() is never called (an exception
// unwinds), the destructor aborts the capture instead. Not copyable or movable.
struct CaptureOptions {
  std::optional<MempoolId> pool;
  std::optional<StreamRef> stream;
  CaptureErrorMode capture_error_mode = CaptureErrorMode::global;
  bool enable_annotations = false;
};
class GraphCapture {
 public:
  explicit GraphCapture(CUDAGraph& graph, CaptureOptions options = {});
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;
  void end();
  StreamRef stream() const noexcept { return stream_; }

 private:
  CUDAGraph& graph_;
  StreamRef stream_;
  std::optional<StreamGuard> guard_;
  bool open_ = false;
};

// Convenience: captures `fn()` into `graph` (aborting the capture if fn throws).
template <class Fn>
void capture(CUDAGraph& graph, Fn&& fn, CaptureOptions options = {}) {
  GraphCapture c(graph, std::move(options));
  std::forward<Fn>(fn)();
  c.end();
}

}  // namespace cudakit
