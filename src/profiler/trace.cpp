// cudakit::profiler::Trace: starts / stops a recording session and wires the event sources
// to the collector (collector.hpp):
//   * the backend's activity records (Backend::activity_start, CUPTI on cuda);
//   * cudakit.nvtx ranges and marks (nvtx/trace_hook.hpp);
//   * caching-allocator events (memory/history.hpp's observer, a marked hook there);
//   * graph lifecycle through the global graph hooks (graphs.hpp), which also snapshot the
//     kernel annotations of a graph destroyed during the trace (its entries are purged then).
// stop() synchronizes the devices the trace saw, flushes the backend, detaches every source,
// and indexes the records once (trace_data.hpp) for export.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "backend/device_ops.hpp"
#include "backend/graph_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/profiler_ops.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/graph_annotations.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/profiler.hpp"
#include "memory/history.hpp"
#include "nvtx/trace_hook.hpp"
#include "profiler/chrome_trace.hpp"
#include "profiler/collector.hpp"
#include "profiler/trace_data.hpp"
#include "profiler/trace_file.hpp"

namespace cudakit::profiler {

using cudakit::detail::ActivityConfig;
using cudakit::detail::ActivityKind;
using cudakit::detail::ActivityRecord;
using cudakit::detail::ActivityStatus;
using cudakit::detail::trace_clock_ns;
using detail::Collector;
using detail::GraphPhase;

namespace {

// ---- event sources ----

void nvtx_push(int slot, const char* domain, const char* message) noexcept {
  Collector::instance().nvtx_push(slot, domain, message);
}
void nvtx_pop(int slot) noexcept { Collector::instance().nvtx_pop(slot); }
void nvtx_start(std::uint64_t id, const char* domain, const char* message) noexcept {
  Collector::instance().nvtx_start(id, domain, message);
}
void nvtx_end(std::uint64_t id) noexcept { Collector::instance().nvtx_end(id); }
void nvtx_mark(const char* domain, const char* message) noexcept {
  ActivityRecord r;
  r.kind = ActivityKind::user_mark;
  r.start_ns = r.end_ns = trace_clock_ns();
  r.stream = Collector::thread_id();
  Collector::instance().record_with_text(r, message ? message : "", domain ? domain : "");
}
constexpr nvtx::detail::TraceHook kNvtxHook{nvtx_push, nvtx_pop, nvtx_start, nvtx_end,
                                           nvtx_mark};

void observe_allocator(const memory::AllocatorEvent& e) noexcept {
  ActivityRecord r;
  r.kind = ActivityKind::memory;
  r.detail = static_cast<std::uint8_t>(detail::memory_action(e.action));
  r.start_ns = r.end_ns = trace_clock_ns();
  r.stream = Collector::thread_id();
  r.device = static_cast<std::int16_t>(e.device);
  r.id = e.addr;
  r.value = e.size;
  r.u.memory = ActivityRecord::Memory{e.allocated, e.reserved};
  Collector::instance().record(r);
}

// State the graph hooks share with the trace; owned by both (a removed hook may still be
// running when stop() returns).
struct GraphShared {
  std::mutex mu;
  std::unordered_map<std::uint64_t, graph_annotations::Annotation> destroyed;  // annotations
};

std::uint32_t exec_id_of(const CUDAGraph& g) noexcept {
  try {
    if (auto id = g.exec_graph_id()) return *id;
  } catch (...) {
  }
  return 0;
}

void graph_record(GraphPhase phase, const CUDAGraph& g, std::int64_t start, std::int64_t end) {
  ActivityRecord r;
  r.kind = ActivityKind::graph;
  r.detail = static_cast<std::uint8_t>(phase);
  r.start_ns = start;
  r.end_ns = end;
  r.stream = Collector::thread_id();
  r.device = static_cast<std::int16_t>(g.device());
  r.id = g.capture_id();
  r.value = exec_id_of(g);
  Collector::instance().record(r);
}

// Open capture / replay spans of this thread (a graph replays on the thread that called
// replay(); captures begin and end on one thread).
struct OpenSpan {
  const CUDAGraph* graph;
  std::int64_t start;
};
std::vector<OpenSpan>& open_spans(GraphPhase phase) {
  thread_local std::vector<OpenSpan> capture, replay;
  return phase == GraphPhase::capture ? capture : replay;
}
void span_begin(GraphPhase phase, const CUDAGraph& g) {
  open_spans(phase).push_back(OpenSpan{&g, trace_clock_ns()});
}
void span_end(GraphPhase phase, const CUDAGraph& g) {
  auto& open = open_spans(phase);
  for (auto it = open.rbegin(); it != open.rend(); ++it) {
    if (it->graph == &g) {
      const std::int64_t start = it->start;
      open.erase(std::next(it).base());
      graph_record(phase, g, start, trace_clock_ns());
      return;
    }
  }
}

std::vector<HookHandle> install_graph_hooks(const std::shared_ptr<GraphShared>& shared) {
  std::vector<HookHandle> h;
  h.push_back(register_graph_capture_start_hook(
      [](CUDAGraph& g) { span_begin(GraphPhase::capture, g); }));
  h.push_back(register_graph_capture_end_hook(
      [](CUDAGraph& g) { span_end(GraphPhase::capture, g); }));
  h.push_back(register_graph_instantiate_hook([](CUDAGraph& g) {
    const std::int64_t now = trace_clock_ns();
    graph_record(GraphPhase::instantiate, g, now, now);
  }));
  h.push_back(register_graph_replay_start_hook(
      [](CUDAGraph& g) { span_begin(GraphPhase::replay, g); }));
  h.push_back(register_graph_replay_end_hook(
      [](CUDAGraph& g) { span_end(GraphPhase::replay, g); }));
  h.push_back(register_graph_destroy_hook([shared](const std::vector<std::uint32_t>& ids) {
    const std::int64_t now = trace_clock_ns();
    for (std::uint32_t id : ids) {
      ActivityRecord r;
      r.kind = ActivityKind::graph;
      r.detail = static_cast<std::uint8_t>(GraphPhase::destroy);
      r.start_ns = r.end_ns = now;
      r.stream = Collector::thread_id();
      r.value = id;
      Collector::instance().record(r);
    }
    // The graph's annotations are purged right after this hook: keep them for the export.
    std::vector<std::uint64_t> wanted;
    for (std::uint64_t node : graph_annotations::annotated_node_ids()) {
      for (std::uint32_t id : ids) {
        if ((node >> 32) == id) wanted.push_back(node);
      }
    }
    if (wanted.empty()) return;
    std::lock_guard lock(shared->mu);
    for (std::uint64_t node : wanted) {
      if (auto a = graph_annotations::kernel_annotation(node)) shared->destroyed[node] = *a;
    }
  }));
  return h;
}

// One trace at a time.
std::mutex g_trace_mu;
Trace::Impl* g_active = nullptr;
std::uint64_t g_sessions = 0;

}  // namespace

struct Trace::Impl {
  TraceOptions options;
  std::uint64_t session = 0;
  bool recording = false;
  bool backend_started = false;
  std::int64_t start_ns = 0;
  ActivityStatus status;
  std::shared_ptr<GraphShared> graph_shared = std::make_shared<GraphShared>();
  std::vector<HookHandle> graph_hooks;
  std::vector<std::string> warnings;
  std::unique_ptr<detail::TraceData> data;

  void detach_sources() noexcept {
    if (options.nvtx) nvtx::detail::set_trace_hook(nullptr);
    if (options.memory) memory::g_allocator_observer.store(nullptr, std::memory_order_relaxed);
    for (HookHandle& h : graph_hooks) h.remove();
    graph_hooks.clear();
    if (backend_started) {
      // Relaxed capture mode, as around activity_start and the flush: stopping disables the
      // device kinds and makes CUPTI flush and release its record buffers, "potentially
      // unsafe" calls that a global-mode capture on another thread forbids (the driver fails
      // them and invalidates that capture; issue 28). Stopping without the guard when the
      // mode cannot be exchanged (the driver is failing anyway) beats leaving CUPTI running;
      // during process exit the backend makes no driver call, and neither does this.
      auto& be = cudakit::detail::profiler_ops();
      std::optional<cudakit::detail::ThreadCaptureModeGuard> relaxed;
      if (!cudakit::detail::is_shutting_down()) {
        try {
          relaxed.emplace(cudakit::detail::graph_ops(), cudakit::detail::CaptureMode::relaxed);
        } catch (...) {
        }
      }
      be.activity_stop();
      backend_started = false;
    }
  }

  const detail::TraceData& result(const char* what) const {
    if (recording) {
      throw Error(std::string("Trace::") + what +
                  ": the trace is still recording; call stop() first (or leave the "
                  "`with cudakit.profiler.trace()` block)");
    }
    return *data;
  }
};

Trace::Trace(TraceOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = options;
  std::lock_guard lock(g_trace_mu);
  if (g_active != nullptr) {
    throw Error("Trace: another trace is already recording in this process (one at a time); "
                "stop it first");
  }
  s.session = ++g_sessions;
  s.start_ns = trace_clock_ns();
  Collector::instance().begin(s.session);
  try {
    if (options.nvtx) nvtx::detail::set_trace_hook(&kNvtxHook);
    if (options.memory) memory::g_allocator_observer.store(&observe_allocator);
    if (options.graphs) s.graph_hooks = install_graph_hooks(s.graph_shared);
    if (options.device || options.api) {
      ActivityConfig cfg;
      cfg.device = options.device;
      cfg.api = options.api;
      cfg.nvtx = options.nvtx;
      // Relaxed capture mode on this thread only: starting device activity allocates the
      // tool's record buffers ("potentially unsafe" under CUDA's capture rules), which would
      // fail and invalidate a global-mode capture on any other thread (issue 28 item 2).
      auto& be = cudakit::detail::profiler_ops();
      cudakit::detail::ThreadCaptureModeGuard relaxed(cudakit::detail::graph_ops(),
                                                      cudakit::detail::CaptureMode::relaxed);
      s.status = be.activity_start(&Collector::instance(), cfg);
      s.backend_started = true;
      if (!s.status.reason.empty()) s.warnings.push_back(s.status.reason);
    }
  } catch (...) {
    s.detach_sources();
    Collector::instance().end(s.session);
    throw;
  }
  s.recording = true;
  g_active = &s;
}

Trace::~Trace() {
  if (!impl_ || !impl_->recording) return;
  try {
    stop();
  } catch (...) {  // destructors never throw; stop() detached everything before failing
  }
}

Trace::Trace(Trace&&) noexcept = default;
Trace& Trace::operator=(Trace&& other) noexcept {
  if (this != &other) {
    if (impl_ && impl_->recording) {
      try {
        stop();
      } catch (...) {
      }
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void Trace::stop() {
  if (!impl_ || !impl_->recording) return;
  Impl& s = *impl_;
  Collector& collector = Collector::instance();
  const bool exiting = cudakit::detail::is_shutting_down();
  // Work enqueued inside the trace completes and is reported (torch.profiler synchronizes
  // too), in this order: first every context the trace may have work on is synchronized, then
  // the backend's records are flushed. Flushing first (as this code once did) hands out the
  // records of work still queued before their timestamps exist: CUPTI returns them with
  // start = end = 0 (issue 28: 6439 of 7000 kernels of a 1000-replay loop). The backend
  // picks the contexts (it knows which exist; the records that would tell are the ones not
  // flushed yet) and never creates one. Skipped while the current stream captures (a
  // synchronize would invalidate the capture): work still running is then left out, and
  // index_trace says how many records lacked timestamps.
  auto& be = cudakit::detail::profiler_ops();
  // Also when cudakit itself never initialised a device (a trace of torch's work): the
  // device activity the backend started is what needs the synchronize.
  if (s.options.synchronize && !exiting && (is_initialized() || s.backend_started)) {
    try {
      // core/capture_gate.hpp: a device synchronize would invalidate live captures
      if (!cudakit::detail::synchronize_unless_capturing([&] { be.activity_synchronize(); })) {
        s.warnings.push_back("stop(): CUDA graph captures were in progress on other threads, so "
                             "the devices were not synchronized (it would invalidate those "
                             "captures): work still running is missing from the trace");
      }
    } catch (const std::exception& e) {
      s.warnings.push_back(std::string("stop(): synchronizing the devices failed (work still "
                                       "running is missing from the trace): ") + e.what());
    }
  }
  if (s.backend_started && !exiting) {
    try {
      // relaxed for the same reason as at start: a forced flush may hand the tool new buffers
      cudakit::detail::ThreadCaptureModeGuard relaxed(cudakit::detail::graph_ops(),
                                                      cudakit::detail::CaptureMode::relaxed);
      be.activity_flush();
    } catch (const std::exception& e) {
      s.warnings.push_back(std::string("stop(): flushing the device records failed: ") +
                           e.what());
    }
  }
  s.detach_sources();
  auto data = std::make_unique<detail::TraceData>();
  data->store = collector.end(s.session);
  s.recording = false;
  {
    std::lock_guard lock(g_trace_mu);
    if (g_active == &s) g_active = nullptr;
  }
  data->base_ns = s.start_ns;
  auto env_int = [](const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return -1;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return (*end == '\0' && n >= 0 && n < (1L << 30)) ? static_cast<int>(n) : -1;
  };
  data->rank = env_int("RANK");
  data->world_size = env_int("WORLD_SIZE");
  data->end_ns = trace_clock_ns();
  data->device_source = s.status.source;
  data->warnings = s.warnings;
  for (std::string& m : data->store.messages) data->warnings.push_back(std::move(m));
  detail::index_trace(*data);
  if (cudakit::detail::backend_created() && !exiting) {
    auto& be = cudakit::detail::device_ops();
    data->backend = be.name();
    std::uint64_t mask = data->store.device_mask;
    for (const ActivityRecord* r : data->records) {
      if (r->device >= 0 && r->device < 64) mask |= std::uint64_t{1} << r->device;
    }
    for (int d = 0; d < 64; ++d) {
      if (!(mask & (std::uint64_t{1} << d))) continue;
      try {
        data->devices[d] = be.device_info(d);
      } catch (...) {  // properties are decoration: the events stand without them
      }
    }
  } else {
    data->backend = cudakit::detail::selected_backend_name();
  }
  // Kernel annotations of the graph nodes the trace saw (graphs destroyed during the trace
  // were snapshotted by the destroy hook).
  if (s.options.graphs) {
    std::unordered_set<std::uint64_t> nodes;
    for (const ActivityRecord* r : data->records) {
      if (r->id != 0 && (r->kind == ActivityKind::kernel || r->kind == ActivityKind::memcpy ||
                         r->kind == ActivityKind::memset)) {
        nodes.insert(r->id);
      }
    }
    if (!nodes.empty()) {
      {
        std::lock_guard lock(s.graph_shared->mu);
        for (auto& [id, ann] : s.graph_shared->destroyed) {
          if (nodes.count(id)) data->annotations[id] = ann;
        }
      }
      for (std::uint64_t id : nodes) {
        if (data->annotations.count(id)) continue;
        if (auto a = graph_annotations::kernel_annotation(id)) data->annotations[id] = *a;
      }
    }
  }
  s.data = std::move(data);
}

bool Trace::recording() const noexcept { return impl_ && impl_->recording; }

namespace {
const Trace::Impl& live(const std::unique_ptr<Trace::Impl>& impl) {
  if (!impl) throw Error("Trace: this object was moved from; use the one it was moved to");
  return *impl;
}
}  // namespace

std::vector<TraceEvent> Trace::events() const {
  return detail::trace_events(live(impl_).result("events"));
}

std::string Trace::chrome_trace_json() const {
  return detail::chrome_trace_json(live(impl_).result("chrome_trace_json"), "");
}

void Trace::export_chrome_trace(const std::string& path) const {
  const detail::TraceData& d = live(impl_).result("export_chrome_trace");
  detail::TraceFile f(path, "export_chrome_trace");
  detail::write_chrome_trace(d, f, path);
  f.close();
}

void Trace::export_perfetto(const std::string& path) const {
  const detail::TraceData& d = live(impl_).result("export_perfetto");
  detail::TraceFile f(path, "export_perfetto");
  detail::write_perfetto(d, f);
  f.close();
}

std::int64_t Trace::base_time_ns() const { return live(impl_).result("base_time_ns").base_ns; }

std::size_t Trace::record_count() const {
  return live(impl_).result("record_count").records.size();
}

std::vector<std::string> Trace::warnings() const {
  const Impl& s = live(impl_);
  return s.recording ? s.warnings : s.data->warnings;
}

std::string Trace::device_source() const { return live(impl_).status.source; }

}  // namespace cudakit::profiler
