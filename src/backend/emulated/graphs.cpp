// Graphs produced by stream capture: inspection, DOT output, instantiation and replay.
// Node ids are assigned in capture order and every dependency points to an earlier node, so
// capture order is a topological order. A launch is one op on the launch stream (ordered
// with the stream's other work) that runs the nodes in that order on the stream's worker;
// a failing node stops the replay and becomes the stream's sticky error.
// Ids: a graph gets its id when its capture begins and an executable graph when it is
// instantiated, from one counter (so an exec id never equals a template id, which catches
// callers that forget to remap); a node's tools id is (graph id << 32) | node id, the layout
// CUPTI and cuGraphNodeGetToolsId use.
#include <fstream>

#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {

const char* type_name(GraphNodeType t) {
  switch (t) {
    case GraphNodeType::kernel: return "kernel";
    case GraphNodeType::memcpy: return "memcpy";
    case GraphNodeType::memset: return "memset";
    case GraphNodeType::host: return "host";
    case GraphNodeType::graph: return "graph";
    case GraphNodeType::empty: return "empty";
    case GraphNodeType::wait_event: return "wait_event";
    case GraphNodeType::event_record: return "event_record";
    case GraphNodeType::mem_alloc: return "mem_alloc";
    case GraphNodeType::mem_free: return "mem_free";
    default: return "other";
  }
}

GraphObj* graph_ptr(GraphHandle g) {
  auto* p = static_cast<GraphObj*>(g);
  if (p == nullptr || p->magic != GraphObj::kMagic) {
    fail(errc::invalid_handle, "not a graph handle created by the emulated backend");
  }
  return p;
}

GraphExecObj* exec_ptr(GraphExecHandle g) {
  auto* p = static_cast<GraphExecObj*>(g);
  if (p == nullptr || p->magic != GraphExecObj::kMagic) {
    fail(errc::invalid_handle, "not an executable graph created by the emulated backend");
  }
  return p;
}

}  // namespace

GraphData::~GraphData() {
  if (is_shutting_down()) return;
  for (auto& f : on_destroy) {
    try {
      f();
    } catch (...) {  // destructors never throw
    }
  }
}

void run_host_node(const HostTask& fn) { fn(); }

void EmulatedBackend::run_graph(const GraphData& g, const std::vector<std::size_t>& order) {
  for (std::size_t i : order) {
    const GraphNode& n = g.nodes[i];
    if (!n.fn) continue;
    if (n.type == GraphNodeType::host) {
      run_host_node(n.fn);
    } else {
      n.fn();
    }
  }
}

GraphExecHandle EmulatedBackend::graph_instantiate(GraphHandle h) {
  GraphObj* g = graph_ptr(h);
  auto* e = new GraphExecObj;
  e->id = next_graph_id_.fetch_add(1, std::memory_order_relaxed);
  e->data = g->data;
  e->order.resize(g->data->nodes.size());
  for (std::size_t i = 0; i < e->order.size(); ++i) e->order[i] = i;
  return e;
}

void EmulatedBackend::graph_launch(GraphExecHandle h, StreamHandle sh) {
  ApiCall api(*this, "cuGraphLaunch", cbid::cuGraphLaunch);
  GraphExecObj* e = exec_ptr(h);
  Stream* s = resolve(sh);
  if (device_sink() != nullptr) {  // a trace records: report every node (activity.cpp)
    // Captured into another graph: its replays report the nodes as they run.
    HostTask captured = [this, data = e->data, order = e->order, st = s->shared_from_this(),
                         id = e->id, corr = api.correlation()] {
      std::vector<PendingRecord*> none;
      run_graph_traced(*data, order, *st, id, corr, none);
    };
    if (capture_node(*s, GraphNodeType::graph, "graph", std::move(captured))) return;
    // Launched: the nodes' records are reserved now, as CUPTI does at launch.
    // Owned by the task: records of nodes that never ran (the task failed or was skipped at
    // exit, or was never enqueued) are cancelled when it is destroyed. run_graph_traced
    // clears each entry it times: a timed record may leave the buffer (and be freed) at the
    // next flush, so the destructor must not touch it.
    struct Slots {
      EmulatedBackend* b = nullptr;
      std::vector<PendingRecord*> v;
      ~Slots() {
        for (PendingRecord* p : v) {
          if (p) b->cancel_record(p);
        }
      }
    };
    auto slots = std::make_shared<Slots>();
    slots->b = this;
    slots->v = reserve_graph_records(*e->data, e->order, *s, e->id, api.correlation());
    HostTask fn = [this, data = e->data, order = e->order, st = s->shared_from_this(),
                   id = e->id, corr = api.correlation(), slots] {
      run_graph_traced(*data, order, *st, id, corr, slots->v);
    };
    submit(*s, std::move(fn));
    return;
  }
  HostTask fn = [data = e->data, order = e->order] { run_graph(*data, order); };
  if (capture_node(*s, GraphNodeType::graph, "graph", std::move(fn))) return;
  submit(*s, std::move(fn));
}

// The rules of cuGraphExecUpdate that apply to the emulator's nodes: the same nodes in the
// same order, of the same kinds, with the same dependencies; memory nodes are not updated.
// The new parameters are the new graph's node actions, so the exec graph takes its data;
// launches enqueued before hold their own reference to the old nodes.
bool EmulatedBackend::graph_exec_update(GraphExecHandle h, GraphHandle gh, std::string* why) {
  GraphExecObj* e = exec_ptr(h);
  GraphObj* g = graph_ptr(gh);
  auto refuse = [&](std::string text) {
    if (why) *why = "graph update: " + std::move(text);
    return false;
  };
  const std::vector<GraphNode>& was = e->data->nodes;
  const std::vector<GraphNode>& now = g->data->nodes;
  if (was.size() != now.size()) {
    return refuse("the topology differs: " + std::to_string(was.size()) + " nodes instantiated, " +
                  std::to_string(now.size()) + " in the new graph");
  }
  for (std::size_t i = 0; i < was.size(); ++i) {
    if (was[i].type != now[i].type) {
      return refuse("node " + std::to_string(i) + " is a " + type_name(was[i].type) +
                    " node in the instantiated graph and a " + type_name(now[i].type) +
                    " node in the new one");
    }
    if (was[i].deps != now[i].deps) {
      return refuse("the topology differs: node " + std::to_string(i) +
                    " has other dependencies");
    }
    if (was[i].type == GraphNodeType::mem_alloc || was[i].type == GraphNodeType::mem_free) {
      return refuse("node " + std::to_string(i) + " is a memory " +
                    (was[i].type == GraphNodeType::mem_alloc ? "allocation" : "free") +
                    " node, which cannot be updated (as in CUDA)");
    }
  }
  e->data = g->data;
  return true;
}

void EmulatedBackend::graph_destroy(GraphHandle h) { delete graph_ptr(h); }

void EmulatedBackend::graph_exec_destroy(GraphExecHandle h) {
  // As driver 580 on the H200: destroying an executable graph is a "potentially unsafe" call
  // under the capture-mode rules (CAPTURE_UNSUPPORTED from a thread whose capture it would
  // conflict with, and that capture is invalidated); the graph is left as it was.
  check_unsafe_call("graph_exec_destroy");
  delete exec_ptr(h);
}

std::vector<GraphNodeInfo> EmulatedBackend::graph_nodes(GraphHandle h) {
  GraphObj* g = graph_ptr(h);
  std::vector<GraphNodeInfo> out;
  out.reserve(g->data->nodes.size());
  const std::uint64_t graph_bits = static_cast<std::uint64_t>(g->data->id) << 32;
  for (const GraphNode& n : g->data->nodes) {
    GraphNodeInfo info{n.id, n.type, n.label};
    info.tools_id = graph_bits | (n.id & 0xFFFFFFFFull);
    info.event = n.event;
    if (n.type == GraphNodeType::host) {
      info.host_fn = reinterpret_cast<std::uintptr_t>(&run_host_node);
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<GraphEdge> EmulatedBackend::graph_edges(GraphHandle h) {
  GraphObj* g = graph_ptr(h);
  std::vector<GraphEdge> out;
  for (const GraphNode& n : g->data->nodes) {
    for (std::uint64_t d : n.deps) out.push_back(GraphEdge{d, n.id});
  }
  return out;
}

void EmulatedBackend::graph_debug_dot_print(GraphHandle h, const std::string& path,
                                            bool verbose) {
  GraphObj* g = graph_ptr(h);
  std::ofstream out(path);
  if (!out) {
    throw Error("graph_debug_dot_print: cannot open '" + path +
                "' for writing (check the directory exists and is writable)");
  }
  out << "digraph cudakit_emulated_graph_" << g->data->id << " {\n  node [shape=box];\n";
  for (const GraphNode& n : g->data->nodes) {
    out << "  n" << n.id << " [label=\"" << n.id << ": " << type_name(n.type);
    if (verbose) {
      out << "\\n";
      for (char c : n.label) {
        if (c == '"' || c == '\\') out << '\\';
        out << c;
      }
    }
    out << "\"];\n";
  }
  for (const GraphNode& n : g->data->nodes) {
    for (std::uint64_t d : n.deps) out << "  n" << d << " -> n" << n.id << ";\n";
  }
  out << "}\n";
  if (!out) throw Error("graph_debug_dot_print: writing '" + path + "' failed");
}

}  // namespace cudakit::detail::emulated
