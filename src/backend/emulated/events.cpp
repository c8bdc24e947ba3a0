// Events: a record enqueues a marker op; the event is the pair (stream, sequence number) of
// its latest record and is complete once that stream reached the marker. Timing events get
// a fresh TimeSlot per record, stamped with steady_clock by the worker when the marker runs,
// so re-recording re-arms the event without racing the previous record.
// Errors follow CUDA: elapsed time needs two completed timing events (not_ready while
// pending, invalid_handle when never recorded or created with timing disabled); an event
// whose latest record happened inside a stream capture cannot be queried/synchronized
// (CUDA_ERROR_CAPTURED_EVENT, 907).
#include "backend/emulated/ipc.hpp"
#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {
constexpr int kCapturedEvent = 907;
constexpr unsigned kKnownFlags = kEventBlockingSync | kEventDisableTiming | kEventInterprocess;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}
}  // namespace

Event* EmulatedBackend::event_ptr(EventHandle e) {
  auto* ev = static_cast<Event*>(e);
  if (ev == nullptr || ev->magic != Event::kMagic) {
    fail(errc::invalid_handle, "not an event handle created by the emulated backend");
  }
  return ev;
}

EventHandle EmulatedBackend::event_create(int device, unsigned flags) {
  dev(device);
  if (flags & ~kKnownFlags) {
    fail(errc::invalid_value, "event_create: unknown flags " + std::to_string(flags));
  }
  if ((flags & kEventInterprocess) && !(flags & kEventDisableTiming)) {
    fail(errc::invalid_value,
         "event_create: an interprocess event must also disable timing (as on CUDA)");
  }
  auto ev = std::make_shared<Event>();
  ev->device = device;
  ev->flags = flags;  // kEventBlockingSync is stored only: waits always block on a condvar
  Event* raw = ev.get();
  std::lock_guard lock(events_mu_);
  events_.emplace(raw, std::move(ev));
  return raw;
}

void EmulatedBackend::event_destroy(EventHandle e) {
  Event* ev = event_ptr(e);
  std::shared_ptr<Event> drop;  // released outside the lock
  std::lock_guard lock(events_mu_);
  auto it = events_.find(ev);
  if (it == events_.end()) fail(errc::invalid_handle, "event_destroy: event already destroyed");
  if (--ev->handle_refs == 0) {
    drop = std::move(it->second);
    events_.erase(it);
  }
}

void EmulatedBackend::event_record(EventHandle e, StreamHandle h) {
  Event* ev = event_ptr(e);
  Stream* s = resolve(h);
  if (capture_record(*ev, *s)) return;
  std::shared_ptr<TimeSlot> slot;
  HostTask marker;
  if (!(ev->flags & kEventDisableTiming)) {
    slot = std::make_shared<TimeSlot>();
    marker = [slot] { slot->ns.store(now_ns(), std::memory_order_release); };
  }
  std::uint64_t seq = submit(*s, std::move(marker));
  // A capture the event last saw may die with this reference; its graph's tasks can free
  // device memory (allocator locks), so it is released after ev->mu.
  std::shared_ptr<CaptureSession> old_capture;
  std::lock_guard lk(ev->mu);
  ev->stream = s->shared_from_this();
  ev->seq = seq;
  ev->slot = std::move(slot);
  old_capture = std::move(ev->captured);
  ev->captured_nodes.clear();
}

namespace {
// Where an event was last recorded: its stream (null if never recorded) and the stream's
// sequence number at that point. Events recorded inside a capture cannot be waited on.
std::pair<std::shared_ptr<Stream>, std::uint64_t> recorded_position(Event& ev, const char* what) {
  std::lock_guard lk(ev.mu);
  if (ev.captured) {
    fail(kCapturedEvent, std::string(what) + ": the event was last recorded inside a stream capture");
  }
  return {ev.stream, ev.seq};
}
}  // namespace

bool EmulatedBackend::event_query(EventHandle e) {
  check_unsafe_call("event_query");
  auto [st, seq] = recorded_position(*event_ptr(e), "event_query");
  return !st || reached(*st, seq);  // never recorded → complete, as CUDA
}

void EmulatedBackend::event_synchronize(EventHandle e) {
  ApiCall api(*this, "cuEventSynchronize", cbid::cuEventSynchronize);
  Event* ev = event_ptr(e);
  auto [st, seq] = recorded_position(*ev, "event_synchronize");
  SyncWait wait(*this, SyncKind::event_synchronize, st.get(), ev->device, api.correlation());
  if (st) wait_reached(*st, seq);
  throw_if_faulted(dev(ev->device));  // the context's sticky error, as cuEventSynchronize
}

float EmulatedBackend::event_elapsed_ms(EventHandle start, EventHandle end) {
  Event* evs[2] = {event_ptr(start), event_ptr(end)};
  std::shared_ptr<Stream> st[2];
  std::shared_ptr<TimeSlot> slot[2];
  std::uint64_t seq[2] = {0, 0};
  // Handle errors (timing disabled, never recorded) win over "not ready", as on CUDA.
  for (int i = 0; i < 2; ++i) {
    Event* ev = evs[i];
    if (ev->flags & kEventDisableTiming) {
      fail(errc::invalid_handle, "event_elapsed_ms: event created with timing disabled "
                                 "(create it with enable_timing)");
    }
    std::lock_guard lk(ev->mu);
    st[i] = ev->stream;
    slot[i] = ev->slot;
    seq[i] = ev->seq;
    if (!st[i] || !slot[i]) {
      fail(errc::invalid_handle, "event_elapsed_ms: both events must be recorded first "
                                 "(outside stream capture)");
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (!reached(*st[i], seq[i])) {
      fail(errc::not_ready, "event_elapsed_ms: an event has not completed yet "
                            "(synchronize it first)");
    }
  }
  std::int64_t t0 = slot[0]->ns.load(std::memory_order_acquire);
  std::int64_t t1 = slot[1]->ns.load(std::memory_order_acquire);
  return static_cast<float>(static_cast<double>(t1 - t0) / 1e6);
}

IpcHandle EmulatedBackend::event_ipc_handle(EventHandle e) {
  Event* ev = event_ptr(e);
  if (!(ev->flags & kEventInterprocess)) {
    fail(errc::invalid_value, "event_ipc_handle: the event was not created as interprocess "
                              "(create it with interprocess=True)");
  }
  return encode_ipc(1, reinterpret_cast<std::uintptr_t>(ev), 0, ev->device);
}

EventHandle EmulatedBackend::event_open_ipc(const IpcHandle& h) {
  IpcPayload p = decode_ipc(h, 1, "event_open_ipc");
  auto* ev = reinterpret_cast<Event*>(static_cast<std::uintptr_t>(p.id));
  std::lock_guard lock(events_mu_);
  if (events_.find(ev) == events_.end()) {
    fail(errc::invalid_value, "event_open_ipc: the shared event has been destroyed");
  }
  ++ev->handle_refs;  // the opened handle is the same event; destroy it like any other
  return ev;
}

}  // namespace cudakit::detail::emulated
