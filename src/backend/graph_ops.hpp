// Driver seam, graphs topic: stream capture, graphs and their executable instances, graph
// inspection, and the thread's capture interaction mode (with its RAII guard).
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/types.hpp"

namespace cudakit::detail {

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

struct GraphOps {
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

 protected:
  ~GraphOps() = default;
};

// RAII: the calling thread's capture mode is `mode` in this scope (used around the caching
// allocator's segment allocations for graph pools, as torch's CUDAStreamCaptureModeGuard).
class ThreadCaptureModeGuard {
 public:
  ThreadCaptureModeGuard(GraphOps& b, CaptureMode mode)
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
  GraphOps& backend_;
  CaptureMode previous_;
};

// The process's backend (backend() in backend.hpp) as its GraphOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
GraphOps& graph_ops();

}  // namespace cudakit::detail
