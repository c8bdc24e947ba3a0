// Stream capture, CUDA semantics (all bookkeeping under capture_mu_):
//  * begin_capture(s) starts a session with s as origin; work enqueued on a capturing stream
//    (memcpy, memset, host tasks, graph launches, external event waits, mem_alloc/free_async)
//    becomes a graph node depending on the stream's current "tail" instead of running.
//  * event_record on a capturing stream creates no node: the event remembers the stream's
//    tail (fork point). stream_wait_event(B, that event): if B is not capturing, B joins the
//    session with that tail (fork); if B is in the session, the tail is merged (join).
//    Waiting on an event recorded outside any capture records a wait_event node (an
//    "external" wait that, at replay, waits for the event's latest record).
//  * end_capture must be called on the origin; every joined stream's tail must be an
//    ancestor of the origin's tail, else CUDA_ERROR_STREAM_CAPTURE_UNJOINED (the capture
//    ends for all its streams either way).
//  * Illegal operations invalidate the session (later enqueues and end_capture then fail
//    with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): stream_query/stream_synchronize of a
//    capturing stream (CAPTURE_UNSUPPORTED), device_synchronize while any stream of the
//    device captures, in any mode and from any thread (UNSUPPORTED, as driver 580 does), any use of the legacy default stream of a
//    device while a blocking stream of that device is capturing, whatever the mode
//    (CAPTURE_IMPLICIT), joining two different captures (CAPTURE_ISOLATION).
//  * Capture modes govern "potentially unsafe" calls (mem_alloc, graph_exec_destroy, the
//    tracer's record buffers here), as CUDA's
//    cuThreadExchangeStreamCaptureMode rules: a thread whose own mode is global may not make
//    them while any global capture is live; a thread with a live capture of its own (not
//    relaxed) may not either; relaxed threads always may. A prohibited call fails with
//    CAPTURE_UNSUPPORTED and invalidates the capture(s) it violated, so the capture ends with
//    a clear error instead of replaying memory that was never part of the graph.
#include <algorithm>
#include <utility>

#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {
constexpr int kCapturedEvent = 907;

// The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode).
CaptureMode& thread_capture_mode() {
  thread_local CaptureMode mode = CaptureMode::global;
  return mode;
}
}  // namespace

CaptureMode EmulatedBackend::thread_exchange_capture_mode(CaptureMode mode) {
  if (mode != CaptureMode::global && mode != CaptureMode::thread_local_ &&
      mode != CaptureMode::relaxed) {
    fail(errc::invalid_value, "thread_exchange_capture_mode: unknown mode " +
                                  std::to_string(static_cast<int>(mode)));
  }
  return std::exchange(thread_capture_mode(), mode);
}

void EmulatedBackend::check_unsafe_call(const char* what) {
  if (active_captures_.load(std::memory_order_acquire) == 0) return;
  const CaptureMode mine = thread_capture_mode();
  if (mine == CaptureMode::relaxed) return;
  const auto self = std::this_thread::get_id();
  std::lock_guard lock(capture_mu_);
  bool hit = false;
  for (CaptureSession* c : sessions_) {
    const bool own = c->thread == self && c->mode != CaptureMode::relaxed;
    const bool foreign_global =
        mine == CaptureMode::global && c->thread != self && c->mode == CaptureMode::global;
    if (own || foreign_global) {
      invalidate_locked(*c);
      hit = true;
    }
  }
  if (hit) {
    fail(errc::stream_capture_unsupported,
         std::string(what) + ": not permitted while a stream capture is live (capture mode "
                             "rules: it would not be part of the graph); the capture is now "
                             "invalidated. Allocate before capturing, or through the caching "
                             "allocator on the capturing stream");
  }
}

std::uint32_t EmulatedBackend::graph_exec_id(GraphExecHandle g) {
  auto* e = static_cast<GraphExecObj*>(g);
  if (e == nullptr || e->magic != GraphExecObj::kMagic) {
    fail(errc::invalid_handle, "graph_exec_id: not an executable graph of the emulated backend");
  }
  return e->id;
}

std::size_t EmulatedBackend::stream_capture_node_count(StreamHandle h) {
  Stream* s = resolve(h);
  if (!s->capturing.load(std::memory_order_acquire)) return 0;
  std::lock_guard lock(capture_mu_);
  return s->cap ? s->cap->graph->nodes.size() : 0;
}

std::vector<std::uint64_t> EmulatedBackend::stream_capture_frontier(StreamHandle h,
                                                                    bool ancestors) {
  Stream* s = resolve(h);
  if (!s->capturing.load(std::memory_order_acquire)) return {};
  std::lock_guard lock(capture_mu_);
  if (!s->cap) return {};
  // Node indices restart in every graph: the session id in the upper half keeps the ids of
  // two live captures apart (as CUDA's node handles are).
  const std::uint64_t tag = s->cap->id << 32;
  const std::vector<GraphNode>& nodes = s->cap->graph->nodes;
  std::vector<std::uint64_t> out;
  std::vector<char> seen(nodes.size(), 0);
  std::vector<std::uint64_t> work(s->cap_tail.begin(), s->cap_tail.end());
  while (!work.empty()) {
    const std::uint64_t n = work.back();
    work.pop_back();
    if (n >= nodes.size() || seen[n]) continue;
    seen[n] = 1;
    out.push_back(tag | n);
    if (ancestors) work.insert(work.end(), nodes[n].deps.begin(), nodes[n].deps.end());
  }
  return out;
}

void EmulatedBackend::invalidate_locked(CaptureSession& c) { c.invalidated = true; }

void EmulatedBackend::end_session_locked(CaptureSession& c) {
  if (c.ended) return;
  c.ended = true;
  for (auto& st : c.streams) {
    st->capturing.store(false, std::memory_order_release);
    st->cap_tail.clear();
    st->cap.reset();
  }
  c.streams.clear();  // captured events may keep the session alive; not its streams
  sessions_.erase(&c);
  active_captures_.fetch_sub(1, std::memory_order_acq_rel);
}

void EmulatedBackend::record_node_locked(Stream& s, GraphNodeType type,
                                         const std::string& label, HostTask&& fn,
                                         std::uintptr_t event, const OpTrace& trace) {
  CaptureSession& c = *s.cap;
  if (c.invalidated) {
    fail(errc::stream_capture_invalidated,
         "the stream capture was invalidated by an earlier illegal operation; end the capture "
         "and start it again");
  }
  GraphNode n;
  n.id = c.graph->nodes.size();
  n.type = type;
  n.label = label;
  n.fn = std::move(fn);
  n.event = event;
  n.trace = trace;
  n.trace.correlation = 0;  // a replay reports its cuGraphLaunch's correlation id
  n.deps = s.cap_tail;
  s.cap_tail.assign(1, n.id);
  c.graph->nodes.push_back(std::move(n));
}

bool EmulatedBackend::capture_node(Stream& s, GraphNodeType type, const std::string& label,
                                   HostTask&& fn, const OpTrace& trace) {
  if (!s.capturing.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(capture_mu_);
  if (!s.cap) return false;
  record_node_locked(s, type, label, std::move(fn), 0, trace);
  return true;
}

void EmulatedBackend::check_legacy_implicit(Device& d, const char* what) {
  if (active_captures_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(capture_mu_);
  bool hit = false;
  for (CaptureSession* c : sessions_) {
    for (auto& st : c->streams) {
      if (st->device == &d && st->blocking()) {
        invalidate_locked(*c);
        hit = true;
        break;
      }
    }
  }
  if (hit) {
    fail(errc::stream_capture_implicit,
         std::string(what) + ": the legacy default stream implicitly synchronizes with a "
         "capturing blocking stream of this device (the capture is now invalidated); capture "
         "on a non-blocking stream or avoid the default stream during capture");
  }
}

void EmulatedBackend::check_sync_during_capture(Stream& s, const char* what) {
  if (s.legacy) {
    check_legacy_implicit(*s.device, what);
    return;
  }
  if (!s.capturing.load(std::memory_order_acquire)) return;
  std::lock_guard lock(capture_mu_);
  if (!s.cap) return;
  invalidate_locked(*s.cap);
  fail(errc::stream_capture_unsupported,
       std::string(what) + ": not permitted on a capturing stream (the capture is now "
                           "invalidated)");
}

bool EmulatedBackend::capture_record(Event& ev, Stream& s) {
  if (!s.capturing.load(std::memory_order_acquire)) return false;
  std::shared_ptr<CaptureSession> old_capture;  // released after the locks (see below)
  std::lock_guard lock(capture_mu_);
  if (!s.cap) return false;
  if (s.cap->invalidated) {
    fail(errc::stream_capture_invalidated,
         "event_record: the stream capture was invalidated earlier; end it and start again");
  }
  std::lock_guard el(ev.mu);
  ev.stream.reset();
  ev.slot.reset();
  ev.seq = 0;
  old_capture = std::exchange(ev.captured, s.cap);
  ev.captured_nodes = s.cap_tail;
  return true;
}

bool EmulatedBackend::capture_wait(Stream& s, Event& ev) {
  std::shared_ptr<CaptureSession> ec;
  std::vector<std::uint64_t> nodes;
  {
    std::lock_guard el(ev.mu);
    ec = ev.captured;
    if (ec) nodes = ev.captured_nodes;
  }
  if (!ec && !s.capturing.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(capture_mu_);
  if (ec) {
    if (ec->ended) {
      fail(kCapturedEvent, "stream_wait_event: the event was last recorded in a stream "
                           "capture that has ended; record it again outside capture");
    }
    if (ec->invalidated) {
      fail(errc::stream_capture_invalidated,
           "stream_wait_event: the event's capture was invalidated earlier");
    }
    if (s.cap && s.cap != ec) {
      invalidate_locked(*s.cap);
      fail(errc::stream_capture_isolation,
           "stream_wait_event: would merge two different stream captures");
    }
    if (!s.cap) {
      if (s.legacy) {
        invalidate_locked(*ec);
        fail(errc::stream_capture_implicit,
             "stream_wait_event: the legacy default stream cannot join a stream capture "
             "(the capture is now invalidated)");
      }
      s.cap = ec;
      s.cap_tail = std::move(nodes);
      s.capturing.store(true, std::memory_order_release);
      ec->streams.push_back(s.shared_from_this());
    } else {
      for (std::uint64_t n : nodes) {
        if (std::find(s.cap_tail.begin(), s.cap_tail.end(), n) == s.cap_tail.end()) {
          s.cap_tail.push_back(n);
        }
      }
    }
    return true;
  }
  if (!s.cap) return false;  // capture ended concurrently: a normal wait
  std::shared_ptr<Event> evp = ev.shared_from_this();
  record_node_locked(s, GraphNodeType::wait_event, "wait_event", [this, evp] {
    std::shared_ptr<Stream> st;
    std::uint64_t seq;
    {
      std::lock_guard el(evp->mu);
      st = evp->stream;
      seq = evp->seq;
    }
    if (st) wait_reached(*st, seq);
  }, reinterpret_cast<std::uintptr_t>(evp.get()));
  return true;
}

void EmulatedBackend::stream_begin_capture(StreamHandle h, CaptureMode mode) {
  Stream* s = resolve(h);
  if (s->legacy) {
    fail(errc::stream_capture_unsupported,
         "stream_begin_capture: the legacy default stream cannot be captured; capture on a "
         "created (preferably non-blocking) stream");
  }
  std::lock_guard lock(capture_mu_);
  if (s->cap) {
    fail(errc::invalid_value, "stream_begin_capture: the stream is already capturing");
  }
  auto c = std::make_shared<CaptureSession>();
  c->id = next_capture_id_++;
  c->graph->id = next_graph_id_.fetch_add(1, std::memory_order_relaxed);
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  c->streams.push_back(s->shared_from_this());
  s->cap = c;
  s->cap_tail.clear();
  s->capturing.store(true, std::memory_order_release);
  sessions_.insert(c.get());
  active_captures_.fetch_add(1, std::memory_order_acq_rel);
}

GraphHandle EmulatedBackend::stream_end_capture(StreamHandle h) {
  Stream* s = resolve(h);
  // Keeps the session (and a failed capture's graph) alive until capture_mu_ is released:
  // destroying the graph runs its tasks' destructors, which may free device memory through
  // the caching allocator, whose pool filters ask for capture status (capture_mu_).
  std::shared_ptr<CaptureSession> keep;
  std::lock_guard lock(capture_mu_);
  if (!s->cap) {
    fail(errc::stream_capture_unmatched,
         "stream_end_capture: the stream is not capturing (call stream_begin_capture first)");
  }
  keep = s->cap;
  std::shared_ptr<CaptureSession> c = s->cap;
  if (c->origin != s) {
    invalidate_locked(*c);
    fail(errc::stream_capture_unmatched,
         "stream_end_capture: the capture was begun on another stream; end it on the stream "
         "that began it (the capture is now invalidated)");
  }
  if (c->invalidated) {
    end_session_locked(*c);
    fail(errc::stream_capture_invalidated,
         "stream_end_capture: the capture was invalidated by an earlier illegal operation");
  }
  const auto& nodes = c->graph->nodes;
  std::vector<char> ancestor(nodes.size(), 0);
  std::vector<std::uint64_t> work(s->cap_tail.begin(), s->cap_tail.end());
  while (!work.empty()) {
    std::uint64_t n = work.back();
    work.pop_back();
    if (ancestor[n]) continue;
    ancestor[n] = 1;
    for (std::uint64_t d : nodes[n].deps) work.push_back(d);
  }
  for (auto& st : c->streams) {
    if (st.get() == s) continue;
    for (std::uint64_t n : st->cap_tail) {
      if (!ancestor[n]) {
        end_session_locked(*c);
        fail(errc::stream_capture_unjoined,
             "stream_end_capture: a stream forked into the capture has work that was not "
             "joined back: record an event on it and make the origin stream wait on that "
             "event before ending the capture");
      }
    }
  }
  end_session_locked(*c);
  auto* g = new GraphObj;
  g->data = c->graph;
  return g;
}

CaptureStatus EmulatedBackend::stream_capture_status(StreamHandle h, std::uint64_t* id) {
  Stream* s = resolve(h);
  if (!s->capturing.load(std::memory_order_acquire)) return CaptureStatus::none;
  std::lock_guard lock(capture_mu_);
  if (!s->cap) return CaptureStatus::none;
  if (id) *id = s->cap->id;
  return s->cap->invalidated ? CaptureStatus::invalidated : CaptureStatus::active;
}

}  // namespace cudakit::detail::emulated
