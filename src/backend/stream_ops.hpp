// Driver seam, streams topic: streams, host tasks enqueued on them, and events (with their
// IPC handles).
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include <cstdint>
#include <functional>

#include "backend/types.hpp"

namespace cudakit::detail {

// Stream creation flags.
inline constexpr unsigned kStreamNonBlocking = 0x1;  // CU_STREAM_NON_BLOCKING
// Event creation flags (bit-compatible with CUevent_flags).
inline constexpr unsigned kEventBlockingSync = 0x1;
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr unsigned kEventInterprocess = 0x4;

// A unit of host work enqueued on a stream (host functions, and built-in ops on emulated).
using HostTask = std::function<void()>;

struct StreamOps {
  // ---- streams ----
  virtual StreamHandle stream_create(int device, int priority, unsigned flags) = 0;
  virtual void stream_destroy(StreamHandle s) = 0;
  virtual bool stream_query(StreamHandle s) = 0;  // true when all work is done
  virtual void stream_synchronize(StreamHandle s) = 0;
  virtual void stream_wait_event(StreamHandle s, EventHandle e) = 0;
  virtual int stream_priority(StreamHandle s) = 0;
  virtual int stream_device(StreamHandle s) = 0;  // device a (possibly foreign) stream is on
  // Process-unique id of a stream, never reused (cuStreamGetId on cuda). The legacy default
  // stream of each device has its own id.
  virtual std::uint64_t stream_id(StreamHandle s) = 0;
  // Runs `task` on the host once all prior work in `s` is done; later work in `s` waits.
  virtual void launch_host_task(StreamHandle s, HostTask task) = 0;
  // A host task that stands for a device kernel named `kernel_name` (the emulated backend
  // runs built-in ops on the host): the emulated backend captures it as a kernel node, so
  // graph inspection and kernel annotations see the same node kinds on both backends.
  // `kernel_name` must outlive the call (a string literal). Default: launch_host_task.
  virtual void launch_host_kernel(StreamHandle s, const char* kernel_name, HostTask task) {
    launch_host_task(s, std::move(task));
  }

  // ---- events ----
  virtual EventHandle event_create(int device, unsigned flags) = 0;
  virtual void event_destroy(EventHandle e) = 0;
  virtual void event_record(EventHandle e, StreamHandle s) = 0;
  virtual bool event_query(EventHandle e) = 0;
  virtual void event_synchronize(EventHandle e) = 0;
  virtual float event_elapsed_ms(EventHandle start, EventHandle end) = 0;
  virtual IpcHandle event_ipc_handle(EventHandle e) = 0;
  virtual EventHandle event_open_ipc(const IpcHandle& h) = 0;

 protected:
  ~StreamOps() = default;
};

// The process's backend (backend() in backend.hpp) as its StreamOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
StreamOps& stream_ops();

}  // namespace cudakit::detail
