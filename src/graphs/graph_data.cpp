// CUDAGraph::get_graph_data(): the template's nodes and edges, read through the backend seam
// (no cuda-bindings), with ids remapped to the exec graph as a CUPTI-based profiler sees them.
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <unordered_map>

#include "backend/device_ops.hpp"
#include "backend/graph_ops.hpp"
#include "cudakit/error.hpp"
#include "graphs/cuda_graph_impl.hpp"

namespace cudakit {
namespace {

const char* node_type_name(const detail::GraphNodeInfo& n) {
  using T = detail::GraphNodeType;
  switch (n.type) {
    case T::kernel: return "kernel";
    case T::memcpy: return "memcpy";
    case T::memset: return "memset";
    case T::host: return "host";
    case T::graph: return "child_graph";
    case T::empty: return "empty";
    case T::wait_event: return "wait_event";
    case T::event_record: return "event_record";
    case T::mem_alloc: return "mem_alloc";
    case T::mem_free: return "mem_free";
    case T::other: break;
  }
  return nullptr;  // the backend's label names it ("conditional", "batch_mem_op", ...)
}

// Demangled name of the exported symbol whose body contains `addr`, or nullopt. dladdr
// alone would name the nearest preceding exported symbol even for a local function, so the
// symbol's size is checked (dladdr1 + RTLD_DL_SYMENT).
std::optional<std::string> symbol_name(std::uintptr_t addr) {
  if (addr == 0) return std::nullopt;
  Dl_info info{};
  void* extra = nullptr;
  if (dladdr1(reinterpret_cast<void*>(addr), &info, &extra, RTLD_DL_SYMENT) == 0 ||
      info.dli_sname == nullptr || info.dli_saddr == nullptr) {
    return std::nullopt;
  }
  const auto start = reinterpret_cast<std::uintptr_t>(info.dli_saddr);
  const auto* sym = static_cast<const ElfW(Sym)*>(extra);
  const std::uintptr_t size = sym != nullptr ? sym->st_size : 0;
  if (addr != start && (size == 0 || addr >= start + size)) return std::nullopt;
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string out = (status == 0 && demangled != nullptr) ? demangled : info.dli_sname;
  std::free(demangled);
  return out;
}

// Kernels of .cu files carry their C++ mangled names ("_Z6decodePfi"); readers want
// "decode(float*, int)". Names that are not mangled (extern "C", cudakit's built-ins on the
// emulated backend) stay as they are.
std::string kernel_display_name(const std::string& name) {
  if (name.size() < 3 || name.compare(0, 2, "_Z") != 0) return name;
  int status = 0;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = (status == 0 && demangled != nullptr) ? demangled : name;
  std::free(demangled);
  return out;
}

}  // namespace

std::shared_ptr<const GraphData> CUDAGraph::get_graph_data() const {
  Impl& s = *impl_;
  if (s.caching_graph_data && s.graph_data_cache) return s.graph_data_cache;
  if (s.graph == nullptr) {
    throw Error("get_graph_data: the captured template is not live: use keep_graph=True, or "
                "call it from a capture-end or post-instantiate hook");
  }
  if (s.exec == nullptr) {
    throw Error("get_graph_data: instantiate() the graph first (node ids are remapped to the "
                "exec graph)");
  }
  detail::GraphOps& b = detail::graph_ops();
  if (!b.graph_tools_ids_available()) {
    throw NotSupportedError(
        "get_graph_data: graph tools ids are unavailable: they need a CUDA 13.1+ driver "
        "(cuGraphNodeGetToolsId) or CUPTI (libcupti.so; set CUDAKIT_CUPTI_PATH to point at it)");
  }
  const std::uint32_t exec_id = *s.query_exec_id();
  const std::vector<detail::GraphNodeInfo> nodes = b.graph_nodes(s.graph);
  const std::vector<detail::GraphEdge> edges = b.graph_edges(s.graph);

  auto data = std::make_shared<GraphData>();
  data->exec_graph_id = exec_id;
  data->nodes.reserve(nodes.size());
  std::unordered_map<std::uint64_t, std::size_t> index_of;  // seam node id -> index
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const detail::GraphNodeInfo& n = nodes[i];
    index_of.emplace(n.id, i);
    GraphNodeData d;
    d.index = i;
    const char* type = node_type_name(n);
    d.node_type = type ? type : n.label;
    if (n.tools_id == 0) {
      throw AcceleratorError(errc::unknown, "CUDA_ERROR_UNKNOWN",
                             "get_graph_data: the " + std::string(detail::device_ops().name()) +
                                 " backend returned no tools id for node " + std::to_string(i) +
                                 " (cuGraphNodeGetToolsId / cuptiGetGraphNodeId failed)");
    }
    d.node_id = static_cast<std::uint32_t>(n.tools_id & 0xFFFFFFFFull);
    d.graph_id = exec_id;
    d.tools_id = (static_cast<std::uint64_t>(exec_id) << 32) | d.node_id;
    if (n.type == detail::GraphNodeType::kernel) d.kernel_name = kernel_display_name(n.label);
    if (n.type == detail::GraphNodeType::event_record ||
        n.type == detail::GraphNodeType::wait_event) {
      d.event_ptr = n.event;
    }
    if (n.type == detail::GraphNodeType::host) {
      d.host_fn_addr = n.host_fn;
      d.host_fn_name = symbol_name(n.host_fn);
    }
    data->nodes.push_back(std::move(d));
  }
  for (const detail::GraphEdge& e : edges) {
    auto from = index_of.find(e.from);
    auto to = index_of.find(e.to);
    if (from == index_of.end() || to == index_of.end()) continue;
    data->nodes[from->second].dependents.push_back(to->second);
    data->nodes[to->second].dependencies.push_back(from->second);
  }
  if (s.caching_graph_data) s.graph_data_cache = data;
  return data;
}

}  // namespace cudakit
