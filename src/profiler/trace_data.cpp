// Post-processing of a finished trace (trace_data.hpp).
#include "profiler/trace_data.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <tuple>

namespace cudakit::profiler::detail {
namespace {

bool is_device_work(ActivityKind k) noexcept {
  return k == ActivityKind::kernel || k == ActivityKind::memcpy || k == ActivityKind::memset;
}
bool is_api(ActivityKind k) noexcept {
  return k == ActivityKind::runtime_api || k == ActivityKind::driver_api;
}
bool is_range(ActivityKind k) noexcept {
  return k == ActivityKind::user_range || k == ActivityKind::marker;
}

std::string read_comm(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// CUPTI's NVTX ranges that are cudakit.nvtx ranges the tracer recorded itself (an NVTX tool
// injected into cudakit's NVTX sees them too): same thread, same text, starts within 50 µs.
std::size_t drop_duplicate_markers(std::vector<const ActivityRecord*>& recs) {
  constexpr std::int64_t kWindowNs = 50000;
  std::unordered_map<std::string, std::vector<std::int64_t>> own;
  bool any_marker = false;
  for (const ActivityRecord* r : recs) {
    if (r->kind == ActivityKind::user_range) {
      own[std::to_string(r->stream) + '\n' + (r->name ? r->name : "")].push_back(r->start_ns);
    } else if (r->kind == ActivityKind::marker) {
      any_marker = true;
    }
  }
  if (!any_marker || own.empty()) return 0;
  const std::size_t before = recs.size();
  std::erase_if(recs, [&](const ActivityRecord* r) {
    if (r->kind != ActivityKind::marker) return false;
    auto it = own.find(std::to_string(r->stream) + '\n' + (r->name ? r->name : ""));
    if (it == own.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [&](std::int64_t t) {
      return std::llabs(t - r->start_ns) <= kWindowNs;
    });
  });
  return before - recs.size();
}

void compute_gpu_spans(TraceData& d) {
  // Per host thread: its ranges and its launching API calls, by start time.
  struct PerThread {
    std::vector<std::size_t> ranges;  // indices into d.records
    std::vector<std::size_t> apis;
  };
  std::unordered_map<std::uint32_t, PerThread> threads;
  for (std::size_t i = 0; i < d.records.size(); ++i) {
    const ActivityRecord& r = *d.records[i];
    if (is_range(r.kind)) {
      threads[r.stream].ranges.push_back(i);
    } else if (is_api(r.kind) && d.device_correlations.count(r.correlation)) {
      threads[r.stream].apis.push_back(i);
    }
  }
  // Correlation id -> the ranges open on its thread when it was launched.
  std::unordered_map<std::uint32_t, std::vector<std::size_t>> enclosing;
  for (auto& [tid, t] : threads) {
    if (t.ranges.empty() || t.apis.empty()) continue;
    std::vector<std::size_t> active;
    std::size_t next = 0;
    for (std::size_t a : t.apis) {  // records are sorted: both lists are by start time
      const ActivityRecord& api = *d.records[a];
      for (; next < t.ranges.size() && d.records[t.ranges[next]]->start_ns <= api.start_ns;
           ++next) {
        active.push_back(t.ranges[next]);
      }
      std::erase_if(active, [&](std::size_t r) { return d.records[r]->end_ns < api.start_ns; });
      if (!active.empty()) enclosing[api.correlation] = active;
    }
  }
  if (enclosing.empty()) return;
  std::map<std::tuple<std::size_t, int, std::uint32_t>, std::pair<std::int64_t, std::int64_t>>
      spans;
  for (const ActivityRecord* r : d.records) {
    if (!is_device_work(r->kind)) continue;
    auto it = enclosing.find(r->correlation);
    if (it == enclosing.end()) continue;
    for (std::size_t range : it->second) {
      auto [s, inserted] =
          spans.try_emplace({range, r->device, r->stream}, r->start_ns, r->end_ns);
      if (!inserted) {
        s->second.first = std::min(s->second.first, r->start_ns);
        s->second.second = std::max(s->second.second, r->end_ns);
      }
    }
  }
  for (const auto& [key, span] : spans) {
    d.gpu_spans.push_back(GpuSpan{d.records[std::get<0>(key)], std::get<1>(key),
                                  std::get<2>(key), span.first, span.second});
  }
}

}  // namespace

MemoryAction memory_action(const char* a) noexcept {
  if (!a) return MemoryAction::other;
  static const std::pair<const char*, MemoryAction> table[] = {
      {"alloc", MemoryAction::alloc},
      {"free_requested", MemoryAction::free_requested},
      {"free_completed", MemoryAction::free_completed},
      {"segment_alloc", MemoryAction::segment_alloc},
      {"segment_free", MemoryAction::segment_free},
      {"segment_map", MemoryAction::segment_map},
      {"segment_unmap", MemoryAction::segment_unmap},
      {"oom", MemoryAction::oom},
  };
  for (const auto& [name, action] : table) {
    if (std::strcmp(a, name) == 0) return action;
  }
  return MemoryAction::other;
}

const char* memory_action_name(MemoryAction a) noexcept {
  switch (a) {
    case MemoryAction::alloc: return "alloc";
    case MemoryAction::free_requested: return "free_requested";
    case MemoryAction::free_completed: return "free_completed";
    case MemoryAction::segment_alloc: return "segment_alloc";
    case MemoryAction::segment_free: return "segment_free";
    case MemoryAction::segment_map: return "segment_map";
    case MemoryAction::segment_unmap: return "segment_unmap";
    case MemoryAction::oom: return "oom";
    default: return "other";
  }
}

void index_trace(TraceData& d) {
  d.records.clear();
  d.records.reserve(d.store.records);
  for (std::size_t c = 0; c < d.store.chunks.size(); ++c) {
    const ActivityRecord* chunk = d.store.chunks[c].get();
    for (std::size_t i = 0; i < d.store.chunk_sizes[c]; ++i) d.records.push_back(chunk + i);
  }
  d.dropped_duplicates = drop_duplicate_markers(d.records);
  // A record without timestamps (CUPTI gives start = end = 0 for work that had not completed
  // when its buffer was flushed) cannot be placed: exported, it would sit at 1970 and drag the
  // trace's base time there. Left out and counted; stop() synchronizes and waits for the
  // records first, so this happens only with synchronize=false or work still running.
  const std::size_t before = d.records.size();
  std::erase_if(d.records, [](const ActivityRecord* r) {
    return r->start_ns <= 0 || r->end_ns < r->start_ns;
  });
  d.untimed = before - d.records.size();
  if (d.untimed) {
    d.warnings.push_back(std::to_string(d.untimed) +
                         " device records had no timestamps (their work had not completed when "
                         "the trace stopped) and were left out; keep synchronize=True, or "
                         "synchronize the streams before stop()");
  }
  // By start; of two records starting together the longer first, so an enclosing range
  // precedes what it encloses (Perfetto's protobuf form nests slices by event order).
  std::stable_sort(d.records.begin(), d.records.end(),
                   [](const ActivityRecord* a, const ActivityRecord* b) {
                     if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
                     return a->end_ns > b->end_ns;
                   });
  for (const ActivityRecord* r : d.records) {
    if (r->correlation == 0) continue;
    if (is_api(r->kind)) d.api_correlations.insert(r->correlation);
    if (is_device_work(r->kind)) d.device_correlations.insert(r->correlation);
  }
  d.flow.assign(d.records.size(), 0);
  for (std::size_t i = 0; i < d.records.size(); ++i) {
    const ActivityRecord& r = *d.records[i];
    if (r.correlation == 0) continue;
    if (is_api(r.kind) && d.device_correlations.count(r.correlation)) {
      d.flow[i] = TraceData::kFlowStart;
    } else if (is_device_work(r.kind) && d.api_correlations.count(r.correlation)) {
      d.flow[i] = TraceData::kFlowEnd;
    }
  }
  compute_gpu_spans(d);

  if (!d.records.empty()) d.base_ns = std::min(d.base_ns, d.records.front()->start_ns);
  d.pid = Collector::process_id();
  d.process_name = read_comm("/proc/self/comm");
  for (const ActivityRecord* r : d.records) {
    const bool host_row = is_api(r->kind) || is_range(r->kind) ||
                          r->kind == ActivityKind::user_mark || r->kind == ActivityKind::memory ||
                          r->kind == ActivityKind::graph;
    if (!host_row || d.thread_names.count(r->stream)) continue;
    d.thread_names[r->stream] =
        read_comm("/proc/self/task/" + std::to_string(r->stream) + "/comm");  // "" once exited
  }
}

}  // namespace cudakit::profiler::detail
