// CUDAGraph: capture, instantiate, replay, reset; pools, RNG and the destroy cycle.
//
// Replay fast path (why it is shaped this way): with no hook registered a replay is
// "exec present?", three relaxed atomic loads (global replay start/end lists, the graph's
// two lists), the current-device check, current_stream() and the backend launch. No
// std::function call, lock or allocation; the RNG prologue (one fill on the stream) runs
// only for graphs that sample. Hooks go through replay_with_hooks(), out of line.
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "backend/device_ops.hpp"
#include "backend/relaxed_capture.hpp"
#include "backend/graph_ops.hpp"
#include "backend/lifetime.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "graphs/cuda_graph_impl.hpp"
#include "instrument/observers.hpp"

namespace cudakit {

using graphs::detail::fire;
using graphs::detail::fire_swallow;
using graphs::detail::global_hooks;

namespace {

detail::GraphOps& be() { return detail::graph_ops(); }

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

bool replay_hooks_registered(const CUDAGraph::Impl& s) noexcept {
  const auto& g = global_hooks();
  return !g.replay_start->empty() || !g.replay_end->empty() || !s.replay_start_hooks->empty() ||
         !s.replay_end_hooks->empty();
}

// Clears the get_graph_data() cache when one instantiate()'s hooks are done.
struct GraphDataCacheWindow {
  explicit GraphDataCacheWindow(CUDAGraph::Impl& s) : s(s) { s.caching_graph_data = true; }
  ~GraphDataCacheWindow() {
    s.caching_graph_data = false;
    s.graph_data_cache.reset();
  }
  CUDAGraph::Impl& s;
};

}  // namespace

// ---- Impl helpers ----

void CUDAGraph::Impl::end_routing() noexcept {
  if (!routing) return;
  routing = false;
  try {
    end_allocate_to_pool(device, pool);
  } catch (...) {
  }
}

void CUDAGraph::Impl::release_pools() noexcept {
  if (detail::is_shutting_down()) return;
  if (pool_held) {
    pool_held = false;
    try {
      release_pool(device, pool);
    } catch (...) {
    }
  }
  for (const MempoolId& id : retained_pools) {
    try {
      release_pool(device, id);
    } catch (...) {
    }
  }
  retained_pools.clear();
}

void CUDAGraph::Impl::finish_rng() noexcept {
  if (rng != nullptr) {
    try {
      rng->capture_epilogue();
    } catch (...) {
    }
  }
  rng = nullptr;
  rng_blocks = 0;
}

std::optional<std::uint32_t> CUDAGraph::Impl::query_exec_id() {
  if (exec_id) return exec_id;
  if (exec == nullptr || !be().graph_tools_ids_available()) return std::nullopt;
  const std::uint32_t id = be().graph_exec_id(exec);
  exec_id = id;
  if (std::find(exec_ids.begin(), exec_ids.end(), id) == exec_ids.end()) exec_ids.push_back(id);
  return exec_id;
}

void CUDAGraph::Impl::fire_destroy() noexcept {
  auto callbacks = destroy_callbacks->take();
  auto objects = retained->take();
  if (detail::is_shutting_down()) {
    // Process exit: no user code and no device calls. The callables may belong to an
    // interpreter that is gone, so they are deliberately leaked rather than destroyed.
    (void)new auto(std::move(callbacks));
    (void)new auto(std::move(objects));
    return;
  }
  if (sync_before_release) {
    std::vector<StreamRef> streams;
    {
      std::lock_guard lock(replay_streams_mu);
      streams = replay_streams;
    }
    for (const StreamRef& s : streams) {
      try {
        // A replay stream that is capturing now (another graph, perhaps on another thread:
        // the garbage collector can destroy this one anywhere) is skipped: an event recorded
        // there would join that capture, and waiting on it would invalidate the capture.
        // The replays queued before that capture began are ordered before everything the
        // new graph does; they are not waited for here.
        if (s.handle() &&
            be().stream_capture_status(s.handle(), nullptr) != detail::CaptureStatus::none)
          continue;
        // Through an event, which the sync debug mode does not report (as torch): a reported
        // Stream.synchronize would throw under "error" and skip the wait the caller asked for.
        Event done;
        done.record(s);
        done.sync();
      } catch (...) {
      }
    }
  }
  if (cycle_captured && !global_hooks().destroy->empty()) {
    try {
      query_exec_id();  // the live exec graph's id, if nobody asked for it yet
    } catch (...) {
    }
    std::vector<std::uint32_t> ids = exec_ids;
    fire_swallow(*global_hooks().destroy, ids);
  }
  if (callbacks) {
    for (const auto& e : *callbacks) {
      try {
        e.second();
      } catch (...) {
      }
    }
  }
  callbacks.reset();
  objects.reset();  // drops the retained references
}

void CUDAGraph::Impl::free_graph_objects() noexcept {
  std::vector<std::uint32_t> ids = exec_ids;
  if (published_exec_id != 0) ids.push_back(published_exec_id);
  graphs::detail::purge(ids);
  if (!detail::is_shutting_down()) {
    // The garbage collector destroys graphs on whatever thread it runs, also one that is
    // capturing another graph: destroying an executable graph is a "potentially unsafe" call
    // under CUDA's capture-mode rules, which fails (CAPTURE_UNSUPPORTED) and invalidates that
    // capture in global and thread_local modes (the H200 driver's log of
    // test_traces_beside_16_graph_threads: "API call conflicts with a stream capture sequence
    // initiated from the calling thread ... from cuGraphExecDestroy"). Relaxed mode on this
    // thread for the destroys; the exec graph has no part in the capture either way.
    detail::RelaxedCaptureScope relaxed(be());
    if (exec != nullptr) {
      try {
        be().graph_exec_destroy(exec);
      } catch (...) {
      }
    }
    if (graph != nullptr) {
      try {
        be().graph_destroy(graph);
      } catch (...) {
      }
    }
  }
  exec = nullptr;
  graph = nullptr;
  exec_id.reset();
}

// ---- construction / destruction ----

CUDAGraph::CUDAGraph(bool keep_graph) : impl_(std::make_unique<Impl>(keep_graph)) {}

CUDAGraph::~CUDAGraph() {
  Impl& s = *impl_;
  abort_capture();
  s.fire_destroy();
  s.free_graph_objects();
  s.release_pools();
}

// ---- capture ----

void CUDAGraph::capture_begin(std::optional<MempoolId> pool, CaptureErrorMode mode,
                              bool enable_annotations) {
  Impl& s = *impl_;
  if (mode != CaptureErrorMode::global && mode != CaptureErrorMode::thread_local_ &&
      mode != CaptureErrorMode::relaxed) {
    throw ValueError("capture_begin: capture_error_mode must be global, thread_local or relaxed, "
                     "got " + std::to_string(static_cast<int>(mode)));
  }
  if (s.capturing) throw Error("capture_begin: this CUDAGraph is already capturing");
  if (s.graph != nullptr || s.exec != nullptr) {
    throw Error("capture_begin: this CUDAGraph already owns a captured graph; call reset() "
                "first or capture into a new CUDAGraph");
  }
  if (pool && *pool == MempoolId{0, 0}) {
    throw ValueError("capture_begin: pool (0, 0) is the default pool; pass graph_pool_handle(), "
                     "another graph's pool() or a MemPool");
  }
  const StreamRef stream = current_stream();
  if (stream.is_default()) {
    throw Error("capture_begin: CUDA graphs must be captured on a non-default stream, but the "
                "current stream of device " + std::to_string(stream.device()) +
                " is the legacy default stream; use cudakit.graph(...) / GraphCapture (they "
                "capture on a side stream) or make a created stream current. Replay works on "
                "any stream");
  }
  const int device = stream.device();
  detail::GraphOps& b = be();
  const MempoolId pool_id = pool ? *pool : graph_pool_handle();

  // The default generator reads its offset from device memory during this capture (the
  // prologue allocates that word on first use, so it runs before capturing). A generator
  // already serving a concurrent capture on this device is left to it (as torch, sampling
  // in two concurrent captures of one device is not supported).
  Generator* rng = nullptr;
  {
    Generator& gen = default_generator(device);
    if (!gen.capturing()) {
      try {
        gen.capture_prologue();
        rng = &gen;
      } catch (const Error&) {  // lost a race with another capture: same as above
      }
    }
  }
  // Before capturing: on a cuda driver without tools-id entry points this loads CUPTI (once),
  // so it is in the process before the graph's nodes are created.
  const bool tools_ids = b.graph_tools_ids_available();
  // From the driver's begin-capture until the capture is counted (core/capture_gate.hpp).
  std::optional<detail::CaptureStartGate> start_gate(std::in_place);
  try {
    b.stream_begin_capture(stream.handle(), static_cast<detail::CaptureMode>(mode));
  } catch (...) {
    if (rng) rng->capture_epilogue();
    throw;
  }
  std::uint64_t id = 0;
  try {
    b.stream_capture_status(stream.handle(), &id);
    // Every stream of this capture (forked ones too) allocates from the graph's pool.
    // The filter runs on every allocation of the device while the route exists, from any
    // thread. The legacy default stream never captures, and asking the driver about it while
    // a blocking stream captures is an error (CAPTURE_IMPLICIT), so it is not asked.
    begin_allocate_to_pool(device, pool_id, [id](detail::StreamHandle st) {
      if (st == nullptr) return false;
      std::uint64_t cid = 0;
      try {
        return detail::graph_ops().stream_capture_status(st, &cid) ==
                   detail::CaptureStatus::active &&
               cid == id;
      } catch (...) {
        return false;
      }
    });
  } catch (...) {
    try {
      if (detail::GraphHandle g = b.stream_end_capture(stream.handle())) b.graph_destroy(g);
    } catch (...) {
    }
    if (rng) rng->capture_epilogue();
    throw;
  }
  if (const auto* o = instrument::stream_observer())  // sanitizer: ops on this capture's
    o->capture_begin(id);                              // streams are recorded
  s.device = device;
  s.capture_stream = stream;
  s.capture_id = id;
  s.pool = pool_id;
  s.pool_held = true;
  s.routing = true;
  s.rng = rng;
  s.rng_blocks = 0;
  s.capturing = true;
  detail::note_capture_begun();
  start_gate.reset();
  s.capture_ended = false;
  s.cycle_captured = true;
  if (enable_annotations && tools_ids) {
    s.recorder = std::make_shared<graphs::detail::Recorder>();
    graphs::detail::register_recorder(id, s.recorder);
  }
  fire_swallow(*global_hooks().capture_start, *this);
  try {
    fire(*s.capture_start_hooks, *this);
  } catch (...) {
    abort_capture();  // never leave a capture live behind an exception
    throw;
  }
}

void CUDAGraph::abort_capture() noexcept {
  Impl& s = *impl_;
  if (!s.capturing) return;
  s.capturing = false;
  detail::note_capture_ended();
  s.end_routing();
  if (!detail::is_shutting_down()) {
    try {
      // On the stream that began it, whatever is current now; CUDA ends an invalidated
      // capture with an error and no graph, which is what we want here.
      if (detail::GraphHandle g = be().stream_end_capture(s.capture_stream.handle())) {
        be().graph_destroy(g);
      }
    } catch (...) {
    }
  }
  s.finish_rng();
  if (s.recorder) {
    graphs::detail::unregister_recorder(s.capture_id);
    s.recorder.reset();
  }
  if (const auto* o = instrument::installed_stream_observer())  // sanitizer: discards what
    o->capture_end(s.capture_id);                               // was recorded
  s.release_pools();
}

void CUDAGraph::capture_end_pre() {
  Impl& s = *impl_;
  if (!s.capturing) {
    throw Error("capture_end: no capture in progress on this CUDAGraph (call capture_begin "
                "first)");
  }
  const StreamRef current = current_stream(s.device);
  if (!(current == s.capture_stream)) {
    throw Error("capture_end: the capture must end on the stream it began on (" +
                hex(s.capture_stream.handle()) + "), but the current stream of device " +
                std::to_string(s.device) + " is " + hex(current.handle()) +
                "; make the capture stream current again");
  }
  s.end_routing();
  detail::GraphHandle g = nullptr;
  bool empty = false;
  try {
    empty = be().stream_capture_node_count(s.capture_stream.handle()) == 0;
  } catch (...) {  // only the warning depends on it; ending the capture reports real errors
  }
  try {
    g = be().stream_end_capture(s.capture_stream.handle());
  } catch (const AcceleratorError& e) {
    abort_capture();
    throw AcceleratorError(e.code(), e.code_name(),
                           std::string("capture_end: the capture failed and was discarded (this "
                                       "CUDAGraph is empty and can capture again): ") + e.what());
  } catch (...) {
    abort_capture();
    throw;
  }
  s.capturing = false;
  detail::note_capture_ended();
  s.graph = g;
  s.capture_ended = true;
  s.captured_empty = empty;
  const auto* observer = instrument::installed_stream_observer();  // sanitizer
  s.sanitizer_accesses = observer ? observer->capture_end(s.capture_id) : nullptr;
  if (s.rng != nullptr) {
    try {
      s.rng_blocks = s.rng->capture_epilogue();
    } catch (...) {
      s.rng_blocks = 0;
    }
  }
  if (s.recorder) {
    graphs::detail::unregister_recorder(s.capture_id);
    try {
      // Annotations are best effort: a failed lookup must not fail the capture.
      s.annotations = graphs::detail::resolve(*s.recorder, be().graph_nodes(s.graph));
      s.annotations_generation = graphs::detail::annotations_generation();
    } catch (...) {
      s.annotations.clear();
    }
    s.recorder.reset();
  }
}

void CUDAGraph::capture_end() {
  capture_end_pre();
  fire_swallow(*global_hooks().capture_end, *this);
  fire(*impl_->capture_end_hooks, *this);
  if (!impl_->keep_graph) instantiate();
  capture_end_post();
}

void CUDAGraph::capture_end_post() {
  Impl& s = *impl_;
  if (s.capturing) {
    throw Error("capture_end_post: the capture has not ended (call capture_end_pre first)");
  }
  if (s.keep_graph) return;
  if (s.graph == nullptr) {
    if (s.exec != nullptr) return;  // already finalized
    throw Error("capture_end_post: no captured graph to finalize (capture first)");
  }
  if (s.exec == nullptr) {
    throw Error("capture_end_post: with keep_graph=False the template is destroyed here, so the "
                "graph must be instantiated first: call instantiate() (capture_end does both)");
  }
  detail::GraphHandle g = std::exchange(s.graph, nullptr);
  be().graph_destroy(g);
}

// ---- instantiate / replay ----

void CUDAGraph::instantiate() {
  Impl& s = *impl_;
  if (s.capturing) {
    throw Error("instantiate: the graph is still capturing (call capture_end first)");
  }
  if (s.graph == nullptr) {
    throw Error(s.exec != nullptr
                    ? "instantiate: the captured template is gone (keep_graph=False destroys it "
                      "after capture_end, which instantiated the graph already); use "
                      "CUDAGraph(keep_graph=True) to re-instantiate"
                    : "instantiate: no captured graph (capture first)");
  }
  detail::GraphOps& b = be();
  DeviceGuard guard(s.device);
  detail::GraphExecHandle exec = b.graph_instantiate(s.graph);
  if (s.exec != nullptr) {
    if (!global_hooks().destroy->empty()) {
      try {
        s.query_exec_id();  // the destroy hooks will be told about this exec graph too
      } catch (...) {
      }
    }
    detail::GraphExecHandle old = std::exchange(s.exec, nullptr);
    s.exec_id.reset();
    try {
      b.graph_exec_destroy(old);
    } catch (...) {
      b.graph_exec_destroy(exec);
      s.exec = old;
      throw;
    }
  }
  s.exec = exec;
  s.exec_id.reset();
  if (!s.annotations.empty()) {
    if (auto id = s.query_exec_id()) {
      graphs::detail::publish(*id, s.published_exec_id, s.annotations, s.annotations_generation);
      s.published_exec_id = *id;
    }
  } else if (!global_hooks().destroy->empty()) {
    s.query_exec_id();
  }
  GraphDataCacheWindow window(s);
  fire_swallow(*global_hooks().instantiate, *this);
  fire(*s.post_instantiate_hooks, *this);
}

namespace {

void launch_on(CUDAGraph::Impl& s, detail::GraphOps& b) {
  const StreamRef stream = current_stream(s.device);
  if (const auto* o = instrument::stream_observer(); o && s.sanitizer_accesses) [[unlikely]]
    o->graph_replayed(s.sanitizer_accesses, stream.handle(), s.device);  // sanitizer
  if (s.rng_blocks != 0) s.rng->replay_prologue(s.rng_blocks, stream);
  if (s.sync_before_release) [[unlikely]] {
    std::lock_guard lock(s.replay_streams_mu);
    if (std::find(s.replay_streams.begin(), s.replay_streams.end(), stream) ==
        s.replay_streams.end()) {
      s.replay_streams.push_back(stream);
    }
  }
  b.graph_launch(s.exec, stream.handle());
}

void launch(CUDAGraph::Impl& s) {
  detail::GraphOps& b = be();
  if (detail::device_ops().current_device() != s.device) [[unlikely]] {
    DeviceGuard guard(s.device);
    launch_on(s, b);
    return;
  }
  launch_on(s, b);
}

}  // namespace

void CUDAGraph::replay() {
  Impl& s = *impl_;
  if (s.exec == nullptr) [[unlikely]] {
    if (s.capturing) throw Error("replay: the graph is still capturing (call capture_end first)");
    if (s.graph == nullptr) {
      throw Error("replay: nothing to replay: capture a graph first (replay() was called before "
                  "a successful capture, or after reset())");
    }
    instantiate();  // keep_graph (or a capture_end cut short by a hook): on first replay, as torch
  }
  if (replay_hooks_registered(s)) [[unlikely]] {
    replay_with_hooks();
    return;
  }
  launch(s);
}

void CUDAGraph::replay_with_hooks() {
  Impl& s = *impl_;
  auto& g = global_hooks();
  fire_swallow(*g.replay_start, *this);
  fire(*s.replay_start_hooks, *this);  // a raising hook aborts the replay: no end hooks
  try {
    launch(s);
  } catch (...) {
    fire_swallow(*g.replay_end, *this);
    try {
      fire(*s.replay_end_hooks, *this);
    } catch (...) {  // the launch error is the one that propagates
    }
    throw;
  }
  fire_swallow(*g.replay_end, *this);
  fire(*s.replay_end_hooks, *this);
}

void CUDAGraph::reset() {
  Impl& s = *impl_;
  abort_capture();
  s.fire_destroy();
  s.free_graph_objects();
  s.release_pools();
  s.capture_ended = false;
  s.cycle_captured = false;
  s.rng = nullptr;
  s.rng_blocks = 0;
  s.exec_ids.clear();
  s.annotations.clear();
  s.published_exec_id = 0;
  s.sync_before_release = false;
  s.replay_streams.clear();
  s.sanitizer_accesses.reset();
}

// ---- accessors ----

MempoolId CUDAGraph::pool() const {
  if (!impl_->capture_ended) {
    throw Error("pool(): no capture has ended on this CUDAGraph yet (capture first)");
  }
  return impl_->pool;
}

std::vector<MempoolId> CUDAGraph::pools() const {
  std::vector<MempoolId> out;
  if (impl_->pool_held) out.push_back(impl_->pool);
  for (const MempoolId& id : impl_->retained_pools) {
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

void CUDAGraph::retain_pool(MempoolId id) {
  if (id == MempoolId{0, 0}) {
    throw ValueError("retain_pool: (0, 0) is the default pool, not a private pool");
  }
  Impl& s = *impl_;
  if (s.device < 0) s.device = current_device();
  // begin/end with a filter that routes nothing: creates the pool or adds a use.
  begin_allocate_to_pool(s.device, id, [](detail::StreamHandle) { return false; });
  end_allocate_to_pool(s.device, id);
  s.retained_pools.push_back(id);
}

NativeGraph CUDAGraph::raw_cuda_graph() const {
  if (impl_->graph == nullptr) {
    throw Error("raw_cuda_graph: the captured template is not live: use keep_graph=True (it "
                "persists after capture_end), or call it from a capture-end hook");
  }
  return impl_->graph;
}

NativeGraphExec CUDAGraph::raw_cuda_graph_exec() const {
  if (impl_->exec == nullptr) {
    throw Error("raw_cuda_graph_exec: the graph is not instantiated (capture_end instantiates "
                "with keep_graph=False; call instantiate() with keep_graph=True)");
  }
  return impl_->exec;
}

void CUDAGraph::enable_debug_mode() { impl_->keep_graph = true; }

void CUDAGraph::debug_dump(const std::string& path, bool verbose) const {
  if (impl_->graph == nullptr) {
    throw Error("debug_dump: the captured template is not live: use keep_graph=True (or "
                "enable_debug_mode() before capturing), or call it from a capture-end hook");
  }
  if (path.empty()) throw ValueError("debug_dump: path is empty");
  be().graph_debug_dot_print(impl_->graph, path, verbose);
}

HookHandle CUDAGraph::register_destroy_callback(std::function<void()> cb,
                                                bool synchronize_before_release) {
  if (!cb) throw ValueError("register_destroy_callback: the callback is empty");
  if (synchronize_before_release) impl_->sync_before_release = true;
  return HookHandle(impl_->destroy_callbacks, impl_->destroy_callbacks->add(std::move(cb)));
}

HookHandle CUDAGraph::retain_object(std::shared_ptr<const void> obj,
                                    bool synchronize_before_release) {
  if (synchronize_before_release) impl_->sync_before_release = true;
  return HookHandle(impl_->retained, impl_->retained->add(std::move(obj)));
}

namespace {
HookHandle add_hook(const std::shared_ptr<graphs::detail::GraphHookList>& list, GraphHook hook,
                    const char* what) {
  if (!hook) throw ValueError(std::string(what) + ": the hook is empty");
  return HookHandle(list, list->add(std::move(hook)));
}
}  // namespace

HookHandle CUDAGraph::register_capture_start_hook(GraphHook hook) {
  return add_hook(impl_->capture_start_hooks, std::move(hook), "register_capture_start_hook");
}
HookHandle CUDAGraph::register_capture_end_hook(GraphHook hook) {
  return add_hook(impl_->capture_end_hooks, std::move(hook), "register_capture_end_hook");
}
HookHandle CUDAGraph::register_post_instantiate_hook(GraphHook hook) {
  return add_hook(impl_->post_instantiate_hooks, std::move(hook),
                  "register_post_instantiate_hook");
}
HookHandle CUDAGraph::register_replay_start_hook(GraphHook hook) {
  return add_hook(impl_->replay_start_hooks, std::move(hook), "register_replay_start_hook");
}
HookHandle CUDAGraph::register_replay_end_hook(GraphHook hook) {
  return add_hook(impl_->replay_end_hooks, std::move(hook), "register_replay_end_hook");
}

bool CUDAGraph::keep_graph() const noexcept { return impl_->keep_graph; }
bool CUDAGraph::captured_empty() const noexcept { return impl_->capture_ended && impl_->captured_empty; }
bool CUDAGraph::is_capturing() const noexcept { return impl_->capturing; }
bool CUDAGraph::has_graph() const noexcept { return impl_->graph != nullptr; }
bool CUDAGraph::has_graph_exec() const noexcept { return impl_->exec != nullptr; }
int CUDAGraph::device() const noexcept { return impl_->device; }
std::uint64_t CUDAGraph::capture_id() const noexcept { return impl_->capture_id; }
std::optional<std::uint32_t> CUDAGraph::exec_graph_id() const { return impl_->query_exec_id(); }

}  // namespace cudakit

