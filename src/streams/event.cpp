// Event: lazily created on first record, as torch.cuda.Event.
#include <cstring>

#include "backend/device_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/stream_ops.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
#include "devices/sync_debug.hpp"
#include "instrument/observers.hpp"

namespace cudakit {

Event::Event(EventOptions options) : options_(options) {
  if (options_.interprocess && options_.enable_timing) {
    throw ValueError(
        "Event: interprocess events cannot have timing enabled (a CUDA restriction); "
        "create it with enable_timing=False");
  }
}

Event::~Event() {
  if (const auto* o = instrument::stream_observer(); handle_ && o) [[unlikely]] o->event_destroyed(handle_);  // sanitizer
  if (handle_ && !detail::is_shutting_down()) {
    try {
      detail::stream_ops().event_destroy(handle_);
    } catch (...) {
    }
  }
}

Event::Event(Event&& other) noexcept
    : options_(other.options_), handle_(std::exchange(other.handle_, nullptr)),
      device_(std::exchange(other.device_, -1)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event old(std::move(*this));
    options_ = other.options_;
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

unsigned Event::backend_flags() const noexcept {
  unsigned f = 0;
  if (!options_.enable_timing) f |= detail::kEventDisableTiming;
  if (options_.blocking) f |= detail::kEventBlockingSync;
  if (options_.interprocess) f |= detail::kEventInterprocess;
  return f;
}

void Event::create_on(int device) {
  handle_ = detail::stream_ops().event_create(device, backend_flags());
  device_ = device;
}

void Event::record(StreamRef stream) {
  if (!handle_) {
    create_on(stream.device());
  } else if (device_ != stream.device()) {
    throw ValueError("Event.record: event was created on device " + std::to_string(device_) +
                     " but the stream is on device " + std::to_string(stream.device()) +
                     "; record it on a stream of device " + std::to_string(device_));
  }
  if (stream.is_default() && stream.device() != detail::device_ops().current_device()) {
    DeviceGuard guard(stream.device());
    detail::stream_ops().event_record(handle_, nullptr);
  } else {
    detail::stream_ops().event_record(handle_, stream.handle());
  }
  if (const auto* o = instrument::stream_observer()) [[unlikely]] o->event_recorded(handle_, stream.handle(), stream.device());  // sanitizer
}

void Event::record() { record(current_stream()); }

void Event::wait(StreamRef stream) const { stream.wait(*this); }

bool Event::is_done() const {
  if (!handle_) return true;
  const bool done = detail::stream_ops().event_query(handle_);
  if (const auto* o = instrument::stream_observer(); done && o) [[unlikely]] o->host_waited_event(handle_);  // sanitizer
  return done;
}

void Event::sync() const {
  if (!handle_) return;
  // Not a sync-debug report, as torch's CUDAEvent::synchronize.
  detail::stream_ops().event_synchronize(handle_);
  if (const auto* o = instrument::stream_observer()) [[unlikely]] o->host_waited_event(handle_);  // sanitizer
}

float Event::elapsed_time(const Event& end) const {
  if (!options_.enable_timing || !end.options_.enable_timing) {
    throw ValueError(
        "elapsed_time: both events must be created with enable_timing=True");
  }
  if (!handle_ || !end.handle_) {
    throw ValueError("elapsed_time: both events must be recorded before calculating elapsed time");
  }
  if (device_ != end.device_) {
    // CUDA cannot time across devices (the driver would fail with an invalid handle).
    throw ValueError("elapsed_time: both events must be recorded on the same device, but this event "
                     "is on cuda:" + std::to_string(device_) + " and end_event on cuda:" +
                     std::to_string(end.device_));
  }
  return detail::stream_ops().event_elapsed_ms(handle_, end.handle_);
}

Event::IpcHandle Event::ipc_handle() const {
  if (!options_.interprocess) {
    throw ValueError("ipc_handle: the event was not created with interprocess=True");
  }
  if (!handle_) {
    const_cast<Event*>(this)->create_on(current_device());
  }
  detail::IpcHandle h = detail::stream_ops().event_ipc_handle(handle_);
  IpcHandle out;
  std::memcpy(out.bytes, h.bytes, sizeof out.bytes);
  return out;
}

Event Event::from_ipc_handle(int device, const IpcHandle& handle) {
  device = resolve_device(device);
  DeviceGuard guard(device);
  detail::IpcHandle h;
  std::memcpy(h.bytes, handle.bytes, sizeof h.bytes);
  Event e(EventOptions{false, false, true});
  e.handle_ = detail::stream_ops().event_open_ipc(h);
  e.device_ = device;
  return e;
}

}  // namespace cudakit
