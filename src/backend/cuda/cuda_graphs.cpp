// CudaBackend: stream capture, graph instantiation/launch and graph introspection.
//
// Tools ids (what profilers call a node's "graph node id"): a 13.1+ driver's
// cuGraphNodeGetToolsId / cuGraphExecGetId when it has both, otherwise CUPTI's
// cuptiGetGraphNodeId / cuptiGetGraphExecId (cupti.hpp). Node and exec ids always come from
// the same source, so the remapped id (exec id << 32 | node id) is consistent.
#include <unordered_map>
#include <unordered_set>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cupti.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

CUstream cu(StreamHandle s) { return static_cast<CUstream>(s); }
CUgraph graph(GraphHandle g) { return static_cast<CUgraph>(g); }
bool ignorable_at_release(CUresult rc) { return rc == CUDA_ERROR_DEINITIALIZED; }

static_assert(static_cast<int>(CaptureMode::global) == CU_STREAM_CAPTURE_MODE_GLOBAL);
static_assert(static_cast<int>(CaptureMode::thread_local_) == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(static_cast<int>(CaptureMode::relaxed) == CU_STREAM_CAPTURE_MODE_RELAXED);

GraphNodeType map_type(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return GraphNodeType::kernel;
    case CU_GRAPH_NODE_TYPE_MEMCPY: return GraphNodeType::memcpy;
    case CU_GRAPH_NODE_TYPE_MEMSET: return GraphNodeType::memset;
    case CU_GRAPH_NODE_TYPE_HOST: return GraphNodeType::host;
    case CU_GRAPH_NODE_TYPE_GRAPH: return GraphNodeType::graph;
    case CU_GRAPH_NODE_TYPE_EMPTY: return GraphNodeType::empty;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return GraphNodeType::wait_event;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return GraphNodeType::event_record;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return GraphNodeType::mem_alloc;
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return GraphNodeType::mem_free;
    default: return GraphNodeType::other;
  }
}

const char* type_label(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "memcpy";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "memset";
    case CU_GRAPH_NODE_TYPE_HOST: return "host";
    case CU_GRAPH_NODE_TYPE_GRAPH: return "graph";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "empty";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "wait_event";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "event_record";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL: return "ext_semaphore_signal";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return "ext_semaphore_wait";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "mem_alloc";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "mem_free";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "batch_mem_op";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "conditional";
    default: return "other";
  }
}

// Kernel name of a kernel node, or "kernel" when the driver cannot tell.
std::string kernel_label(const EntryPoints& t, CUgraphNode node) {
  if (!t.cuGraphKernelNodeGetParams) return "kernel";
  CUDA_KERNEL_NODE_PARAMS params{};
  if (t.cuGraphKernelNodeGetParams(node, &params) != CUDA_SUCCESS) return "kernel";
  const char* name = nullptr;
  if (params.func && t.cuFuncGetName) {
    t.cuFuncGetName(&name, params.func);
  } else if (!params.func && params.kern && t.cuKernelGetName) {
    t.cuKernelGetName(&name, params.kern);
  }
  return name ? std::string(name) : std::string("kernel");
}

enum class ToolsSource { none, driver, cupti };

ToolsSource tools_source(const EntryPoints& t) {
  if (t.cuGraphNodeGetToolsId && t.cuGraphExecGetId) return ToolsSource::driver;
  return cupti().available ? ToolsSource::cupti : ToolsSource::none;
}

// (graph id << 32) | node id of a template node, or 0 when unavailable or the source failed
// (get_graph_data reports a 0 as an error; annotations skip such nodes).
std::uint64_t tools_id_of(const EntryPoints& t, ToolsSource src, CUgraphNode node) {
  if (src == ToolsSource::driver) {
    unsigned long long id = 0;
    return t.cuGraphNodeGetToolsId(node, &id) == CUDA_SUCCESS ? id : 0;
  }
  if (src == ToolsSource::cupti) {
    std::uint64_t id = 0;
    return cupti().get_graph_node_id(node, &id) == 0 ? id : 0;
  }
  return 0;
}

std::vector<CUgraphNode> nodes_of(const EntryPoints& t, CUgraph g) {
  std::size_t n = 0;
  check(t.cuGraphGetNodes(g, nullptr, &n), "cuGraphGetNodes");
  std::vector<CUgraphNode> nodes(n);
  if (n) check(t.cuGraphGetNodes(g, nodes.data(), &n), "cuGraphGetNodes");
  nodes.resize(n);
  return nodes;
}

// Stable id of a node: the driver's tools id or local id where available, else its index in
// cuGraphGetNodes order (stable for an unmodified graph).
std::uint64_t node_id(const EntryPoints& t, CUgraphNode node, std::size_t index) {
  if (t.cuGraphNodeGetToolsId) {
    unsigned long long id = 0;
    if (t.cuGraphNodeGetToolsId(node, &id) == CUDA_SUCCESS) return id;
  }
  if (t.cuGraphNodeGetLocalId) {
    unsigned int id = 0;
    if (t.cuGraphNodeGetLocalId(node, &id) == CUDA_SUCCESS) return id;
  }
  return index;
}

}  // namespace

void CudaBackend::stream_begin_capture(StreamHandle s, CaptureMode mode) {
  ensure_context(s, "stream_begin_capture");
  check(api("stream_begin_capture")
            .cuStreamBeginCapture(cu(s), static_cast<CUstreamCaptureMode>(mode)),
        "cuStreamBeginCapture");
}

GraphHandle CudaBackend::stream_end_capture(StreamHandle s) {
  ensure_context(s, "stream_end_capture");
  CUgraph g = nullptr;
  check(api("stream_end_capture").cuStreamEndCapture(cu(s), &g), "cuStreamEndCapture");
  return g;
}

CaptureStatus CudaBackend::stream_capture_status(StreamHandle s, std::uint64_t* capture_id) {
  ensure_context(s, "stream_capture_status");
  const EntryPoints& t = api("stream_capture_status");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  // CUDA 12.3+ signature (graph, dependencies, edge data, count): all optional outputs.
  check(CUDAKIT_CU_OPTIONAL(t, cuStreamGetCaptureInfo)(cu(s), &status, &id, nullptr, nullptr,
                                                       nullptr, nullptr),
        "cuStreamGetCaptureInfo");
  switch (status) {
    case CU_STREAM_CAPTURE_STATUS_ACTIVE:
      if (capture_id) *capture_id = id;
      return CaptureStatus::active;
    case CU_STREAM_CAPTURE_STATUS_INVALIDATED:
      if (capture_id) *capture_id = id;
      return CaptureStatus::invalidated;
    default:
      return CaptureStatus::none;
  }
}

GraphExecHandle CudaBackend::graph_instantiate(GraphHandle g) {
  const EntryPoints& t = api("graph_instantiate");
  CUgraphExec exec = nullptr;
  check(with_context_retry("graph_instantiate",
                           [&] { return t.cuGraphInstantiateWithFlags(&exec, graph(g), 0); }),
        "cuGraphInstantiateWithFlags");
  return exec;
}

void CudaBackend::graph_launch(GraphExecHandle g, StreamHandle s) {
  ensure_context(s, "graph_launch");
  check(api("graph_launch").cuGraphLaunch(static_cast<CUgraphExec>(g), cu(s)), "cuGraphLaunch");
}

void CudaBackend::graph_destroy(GraphHandle g) {
  if (!g || is_shutting_down()) return;
  CUresult rc = api("graph_destroy").cuGraphDestroy(graph(g));
  if (!ignorable_at_release(rc)) check(rc, "cuGraphDestroy");
}

void CudaBackend::graph_exec_destroy(GraphExecHandle g) {
  if (!g || is_shutting_down()) return;
  CUresult rc = api("graph_exec_destroy").cuGraphExecDestroy(static_cast<CUgraphExec>(g));
  if (!ignorable_at_release(rc)) check(rc, "cuGraphExecDestroy");
}

namespace {
const char* update_result_text(CUgraphExecUpdateResult r) {
  switch (r) {
    case CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED:
      return "the topology differs (nodes or edges were added, removed or reordered)";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: return "a node's kind differs";
    case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED:
      return "a kernel node's function changed in a way the driver cannot update";
    case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED:
      return "a node's parameters changed in a way the driver cannot update (e.g. a copy "
             "between other kinds of memory)";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED:
      return "a node cannot be updated (memory allocation/free nodes, ...)";
    case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
      return "a kernel changed in a way that cannot be updated (e.g. to dynamic parallelism)";
    case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED: return "a node's attributes differ";
    default: return "the driver refused the update";
  }
}
}  // namespace

bool CudaBackend::graph_exec_update(GraphExecHandle e, GraphHandle g, std::string* why) {
  const EntryPoints& t = api("graph_exec_update");
  CUgraphExecUpdateResultInfo info{};
  CUresult rc = CUDAKIT_CU_OPTIONAL(t, cuGraphExecUpdate)(static_cast<CUgraphExec>(e),
                                                         graph(g), &info);
  if (rc == CUDA_SUCCESS) return true;
  if (rc == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
    if (why) *why = std::string("cuGraphExecUpdate: ") + update_result_text(info.result);
    return false;
  }
  check(rc, "cuGraphExecUpdate");
  return false;
}

std::vector<GraphNodeInfo> CudaBackend::graph_nodes(GraphHandle g) {
  const EntryPoints& t = api("graph_nodes");
  std::vector<CUgraphNode> nodes = nodes_of(t, graph(g));
  std::vector<GraphNodeInfo> out;
  out.reserve(nodes.size());
  const ToolsSource src = tools_source(t);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    check(t.cuGraphNodeGetType(nodes[i], &type), "cuGraphNodeGetType");
    GraphNodeInfo info;
    info.id = node_id(t, nodes[i], i);
    info.type = map_type(type);
    info.label = type == CU_GRAPH_NODE_TYPE_KERNEL ? kernel_label(t, nodes[i])
                                                   : std::string(type_label(type));
    info.tools_id = tools_id_of(t, src, nodes[i]);
    CUevent ev = nullptr;
    if (type == CU_GRAPH_NODE_TYPE_EVENT_RECORD && t.cuGraphEventRecordNodeGetEvent &&
        t.cuGraphEventRecordNodeGetEvent(nodes[i], &ev) == CUDA_SUCCESS) {
      info.event = reinterpret_cast<std::uintptr_t>(ev);
    } else if (type == CU_GRAPH_NODE_TYPE_WAIT_EVENT && t.cuGraphEventWaitNodeGetEvent &&
               t.cuGraphEventWaitNodeGetEvent(nodes[i], &ev) == CUDA_SUCCESS) {
      info.event = reinterpret_cast<std::uintptr_t>(ev);
    }
    CUDA_HOST_NODE_PARAMS host{};
    if (type == CU_GRAPH_NODE_TYPE_HOST && t.cuGraphHostNodeGetParams &&
        t.cuGraphHostNodeGetParams(nodes[i], &host) == CUDA_SUCCESS) {
      info.host_fn = reinterpret_cast<std::uintptr_t>(host.fn);
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<GraphEdge> CudaBackend::graph_edges(GraphHandle g) {
  const EntryPoints& t = api("graph_edges");
  auto get_edges = CUDAKIT_CU_OPTIONAL(t, cuGraphGetEdges);
  std::vector<CUgraphNode> nodes = nodes_of(t, graph(g));
  std::unordered_map<CUgraphNode, std::uint64_t> ids;
  for (std::size_t i = 0; i < nodes.size(); ++i) ids.emplace(nodes[i], node_id(t, nodes[i], i));

  std::size_t n = 0;
  check(get_edges(graph(g), nullptr, nullptr, nullptr, &n), "cuGraphGetEdges");
  std::vector<CUgraphNode> from(n), to(n);
  // Edge data is requested too: with a null array the driver reports CUDA_ERROR_LOSSY_QUERY
  // for graphs whose edges carry non-default data (programmatic dependencies).
  std::vector<CUgraphEdgeData> data(n);
  if (n) check(get_edges(graph(g), from.data(), to.data(), data.data(), &n), "cuGraphGetEdges");
  std::vector<GraphEdge> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n && i < from.size(); ++i) {
    auto f = ids.find(from[i]);
    auto d = ids.find(to[i]);
    if (f == ids.end() || d == ids.end()) continue;  // cannot happen for a stable graph
    out.push_back(GraphEdge{f->second, d->second});
  }
  return out;
}

void CudaBackend::graph_debug_dot_print(GraphHandle g, const std::string& path, bool verbose) {
  const EntryPoints& t = api("graph_debug_dot_print");
  check(CUDAKIT_CU_OPTIONAL(t, cuGraphDebugDotPrint)(
            graph(g), path.c_str(), verbose ? static_cast<unsigned>(CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE) : 0u),
        "cuGraphDebugDotPrint");
}

bool CudaBackend::graph_tools_ids_available() noexcept {
  const DriverState& s = driver();
  if (!s.available) return false;
  return tools_source(s.api) != ToolsSource::none;
}

std::uint32_t CudaBackend::graph_exec_id(GraphExecHandle g) {
  const EntryPoints& t = api("graph_exec_id");
  auto exec = static_cast<CUgraphExec>(g);
  switch (tools_source(t)) {
    case ToolsSource::driver: {
      unsigned int id = 0;
      check(t.cuGraphExecGetId(exec, &id), "cuGraphExecGetId");
      return id;
    }
    case ToolsSource::cupti: {
      std::uint32_t id = 0;
      if (int rc = cupti().get_graph_exec_id(exec, &id); rc != 0) {
        throw AcceleratorError(errc::unknown, "CUPTI_ERROR",
                               "cuptiGetGraphExecId failed with CUptiResult " +
                                   std::to_string(rc) + " (" + cupti().path + ")");
      }
      return id;
    }
    case ToolsSource::none: break;
  }
  throw NotSupportedError(
      "graph_exec_id: graph tools ids need a CUDA 13.1+ driver (cuGraphExecGetId) or CUPTI: " +
      cupti().reason);
}

std::size_t CudaBackend::stream_capture_node_count(StreamHandle s) {
  ensure_context(s, "stream_capture_node_count");
  const EntryPoints& t = api("stream_capture_node_count");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph g = nullptr;
  check(CUDAKIT_CU_OPTIONAL(t, cuStreamGetCaptureInfo)(cu(s), &status, nullptr, &g, nullptr,
                                                       nullptr, nullptr),
        "cuStreamGetCaptureInfo");
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || g == nullptr) return 0;
  std::size_t n = 0;
  check(t.cuGraphGetNodes(g, nullptr, &n), "cuGraphGetNodes");
  return n;
}

std::vector<std::uint64_t> CudaBackend::stream_capture_frontier(StreamHandle s, bool ancestors) {
  ensure_context(s, "stream_capture_frontier");
  const EntryPoints& t = api("stream_capture_frontier");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph g = nullptr;
  const CUgraphNode* deps = nullptr;
  std::size_t n_deps = 0;
  // The dependency array belongs to the driver and stays valid until the next call on `s`.
  check(CUDAKIT_CU_OPTIONAL(t, cuStreamGetCaptureInfo)(cu(s), &status, nullptr, &g, &deps,
                                                       nullptr, &n_deps),
        "cuStreamGetCaptureInfo");
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || n_deps == 0) return {};
  std::vector<std::uint64_t> out;
  out.reserve(n_deps);
  for (std::size_t i = 0; i < n_deps; ++i) out.push_back(reinterpret_cast<std::uint64_t>(deps[i]));
  if (!ancestors) return out;
  // One edge query of the graph under capture (a read, which capture allows), then a walk
  // backwards from the dependencies: cheaper than a cuGraphNodeGetDependencies per node.
  auto get_edges = CUDAKIT_CU_OPTIONAL(t, cuGraphGetEdges);
  std::size_t n = 0;
  check(get_edges(g, nullptr, nullptr, nullptr, &n), "cuGraphGetEdges");
  std::vector<CUgraphNode> from(n), to(n);
  std::vector<CUgraphEdgeData> data(n);  // graph_edges() says why it is asked for
  if (n) check(get_edges(g, from.data(), to.data(), data.data(), &n), "cuGraphGetEdges");
  std::unordered_multimap<CUgraphNode, CUgraphNode> parents;
  parents.reserve(n);
  for (std::size_t i = 0; i < n && i < from.size(); ++i) parents.emplace(to[i], from[i]);
  std::unordered_set<CUgraphNode> seen;
  std::vector<CUgraphNode> work(deps, deps + n_deps);
  out.clear();
  while (!work.empty()) {
    CUgraphNode v = work.back();
    work.pop_back();
    if (!seen.insert(v).second) continue;
    out.push_back(reinterpret_cast<std::uint64_t>(v));
    auto [lo, hi] = parents.equal_range(v);
    for (auto it = lo; it != hi; ++it) work.push_back(it->second);
  }
  return out;
}

CaptureMode CudaBackend::thread_exchange_capture_mode(CaptureMode mode) {
  const EntryPoints& t = api("thread_exchange_capture_mode");
  auto m = static_cast<CUstreamCaptureMode>(mode);
  check(CUDAKIT_CU_OPTIONAL(t, cuThreadExchangeStreamCaptureMode)(&m),
        "cuThreadExchangeStreamCaptureMode");
  return static_cast<CaptureMode>(m);
}

}  // namespace cudakit::detail::cuda
