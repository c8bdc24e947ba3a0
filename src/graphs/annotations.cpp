// Graph kernel annotations: scopes, resolution, the published registry (annotations.hpp).
#include "graphs/annotations.hpp"

#include <algorithm>
#include <unordered_map>

#include "backend/graph_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"

namespace cudakit::graphs::detail {
namespace {

struct Recorders {
  std::mutex mu;
  std::unordered_map<std::uint64_t, std::shared_ptr<Recorder>> by_capture;
  std::atomic<int> live{0};
};
Recorders& recorders() {
  static auto* r = new Recorders();  // leaked: used until exit
  return *r;
}

struct Registry {
  std::mutex mu;
  std::map<std::uint64_t, Annotation> by_node;  // tools id -> merged annotation
  std::atomic<std::uint64_t> generation{1};
};
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

bool annotatable(cudakit::detail::GraphNodeType t) {
  using cudakit::detail::GraphNodeType;
  return t == GraphNodeType::kernel || t == GraphNodeType::memcpy || t == GraphNodeType::memset;
}

}  // namespace

void Recorder::add(std::shared_ptr<const Annotation> a, std::size_t begin, std::size_t end) {
  std::lock_guard lock(mu);
  scopes.push_back(Scope{std::move(a), begin, end, next_seq++});
}

void register_recorder(std::uint64_t capture_id, std::shared_ptr<Recorder> r) {
  Recorders& rs = recorders();
  std::lock_guard lock(rs.mu);
  if (rs.by_capture.emplace(capture_id, std::move(r)).second) {
    rs.live.fetch_add(1, std::memory_order_relaxed);
  }
}

void unregister_recorder(std::uint64_t capture_id) noexcept {
  Recorders& rs = recorders();
  std::lock_guard lock(rs.mu);
  if (rs.by_capture.erase(capture_id)) rs.live.fetch_sub(1, std::memory_order_relaxed);
}

std::shared_ptr<Recorder> find_recorder(std::uint64_t capture_id) {
  Recorders& rs = recorders();
  std::lock_guard lock(rs.mu);
  auto it = rs.by_capture.find(capture_id);
  return it == rs.by_capture.end() ? nullptr : it->second;
}

bool any_recorder() noexcept { return recorders().live.load(std::memory_order_relaxed) > 0; }

Annotation merge(const Annotation& inner, const Annotation& outer) {
  Annotation out = inner;
  for (const auto& [k, v] : outer) {
    auto same = [&](const auto& e) { return e.first == k; };
    if (std::none_of(out.begin(), out.end(), same)) out.emplace_back(k, v);
  }
  return out;
}

std::map<std::uint32_t, Annotation> resolve(const Recorder& r,
                                            const std::vector<cudakit::detail::GraphNodeInfo>& nodes) {
  std::vector<Recorder::Scope> scopes = r.scopes;
  // By start, then longer first, then later exit first: among equal ranges the outer scope
  // (which exits later) comes first, so the inner one ends up innermost.
  std::sort(scopes.begin(), scopes.end(), [](const auto& a, const auto& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end > b.end;
    return a.seq > b.seq;
  });
  std::map<std::uint32_t, Annotation> out;
  std::vector<const Recorder::Scope*> active;  // outermost first
  std::size_t next = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::erase_if(active, [&](const Recorder::Scope* s) { return s->end <= i; });
    for (; next < scopes.size() && scopes[next].begin <= i; ++next) {
      if (scopes[next].end > i) active.push_back(&scopes[next]);
    }
    if (active.empty() || !annotatable(nodes[i].type) || nodes[i].tools_id == 0) continue;
    Annotation merged = *active.back()->annotation;
    for (auto it = std::next(active.rbegin()); it != active.rend(); ++it) {
      merged = merge(merged, *(*it)->annotation);
    }
    out[static_cast<std::uint32_t>(nodes[i].tools_id & 0xFFFFFFFFull)] = std::move(merged);
  }
  return out;
}

std::uint64_t annotations_generation() noexcept {
  return registry().generation.load(std::memory_order_acquire);
}

void publish(std::uint32_t exec_id, std::uint32_t previous_exec_id,
             const std::map<std::uint32_t, Annotation>& resolved, std::uint64_t generation) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  if (previous_exec_id != 0) {
    const std::uint64_t lo = static_cast<std::uint64_t>(previous_exec_id) << 32;
    reg.by_node.erase(reg.by_node.lower_bound(lo), reg.by_node.lower_bound(lo + (1ull << 32)));
  }
  if (generation != reg.generation.load(std::memory_order_relaxed)) return;
  const std::uint64_t hi = static_cast<std::uint64_t>(exec_id) << 32;
  for (const auto& [node, ann] : resolved) reg.by_node[hi | node] = ann;
}

void purge(const std::vector<std::uint32_t>& exec_ids) noexcept {
  if (exec_ids.empty()) return;
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  for (std::uint32_t id : exec_ids) {
    const std::uint64_t lo = static_cast<std::uint64_t>(id) << 32;
    reg.by_node.erase(reg.by_node.lower_bound(lo), reg.by_node.lower_bound(lo + (1ull << 32)));
  }
}

}  // namespace cudakit::graphs::detail

namespace cudakit::graph_annotations {
using namespace cudakit::graphs::detail;

bool is_available() noexcept {
  try {
    return cudakit::is_available() && detail::graph_ops().graph_tools_ids_available();
  } catch (...) {
    return false;
  }
}

MarkKernels::MarkKernels(std::string name)
    : MarkKernels(Annotation{{"name", AnnotationValue(std::move(name))}}) {}

MarkKernels::MarkKernels(Annotation annotation) {
  if (!any_recorder()) return;  // nothing records: a no-op without touching the device
  StreamRef s = current_stream();
  if (s.is_default()) return;  // never captures (and is not asked: see is_current_stream_capturing)
  std::uint64_t capture_id = 0;
  auto& be = detail::graph_ops();
  if (be.stream_capture_status(s.handle(), &capture_id) != detail::CaptureStatus::active) return;
  std::shared_ptr<Recorder> r = find_recorder(capture_id);
  if (!r) return;
  begin_ = be.stream_capture_node_count(s.handle());
  stream_ = s;
  annotation_ = std::make_shared<const Annotation>(std::move(annotation));
  recorder_ = std::move(r);
}

MarkKernels::~MarkKernels() {
  if (!recorder_) return;
  try {
    const std::size_t end = detail::graph_ops().stream_capture_node_count(stream_.handle());
    if (end > begin_) {
      static_cast<Recorder*>(recorder_.get())->add(annotation_, begin_, end);
    }
  } catch (...) {  // the capture failed meanwhile: nothing to record; never throw
  }
}

std::map<std::uint64_t, std::vector<Annotation>> get_kernel_annotations() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  std::map<std::uint64_t, std::vector<Annotation>> out;
  for (const auto& [id, ann] : reg.by_node) out.emplace(id, std::vector<Annotation>{ann});
  return out;
}

std::optional<Annotation> kernel_annotation(std::uint64_t node_id) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  auto it = reg.by_node.find(node_id);
  if (it == reg.by_node.end()) return std::nullopt;
  return it->second;
}

std::vector<std::uint64_t> annotated_node_ids() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  std::vector<std::uint64_t> out;
  out.reserve(reg.by_node.size());
  for (const auto& e : reg.by_node) out.push_back(e.first);
  return out;
}

std::size_t annotated_node_count() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  return reg.by_node.size();
}

void clear_kernel_annotations() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  reg.by_node.clear();
  reg.generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace cudakit::graph_annotations
