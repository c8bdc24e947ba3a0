// Streams and events (seed: Stream, ExternalStream, Event, StreamContext, stream(),
// set_stream, current_stream, default_stream, get_stream_from_external).
//
// Style follows CCCL's runtime: `StreamRef` is a cheap non-owning view, `Stream` owns its
// handle (RAII), `Event` owns its event. No constructor takes a raw handle implicitly, and
// integers / nullptr are rejected at compile time (use StreamRef::from_handle). The verbs
// are CCCL's (sync, is_done, wait, record); Event::query() keeps torch's name beside is_done().
//
// Thread-safety: StreamRef is a value type (copy freely). Stream and Event objects may be
// used from several threads for query/sync/wait/record; moving or destroying one must not
// race with other uses. The current stream is per thread and per device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "cudakit/device.hpp"
#include "cudakit/export.hpp"

namespace CUDAKIT_API cudakit {

// Native handles, as the driver knows them: CUstream / cudaStream_t and CUevent / cudaEvent_t
// on the cuda backend; opaque handles of the emulated backend.
using NativeStream = void*;
using NativeEvent = void*;

class Event;

class StreamRef {
 public:
  // Wraps a handle that someone else owns. `device` is where the stream lives; pass
  // kCurrentDevice to ask the backend (cost: one driver call).
  static StreamRef from_handle(NativeStream handle, int device = kCurrentDevice);
  // The legacy default stream of `device`.
  static StreamRef default_for(int device) noexcept { return StreamRef(nullptr, device); }

  StreamRef(int) = delete;             // no accidental 0 → default stream
  StreamRef(std::nullptr_t) = delete;

  NativeStream handle() const noexcept { return handle_; }
  int device() const noexcept { return device_; }
  bool is_default() const noexcept { return handle_ == nullptr; }
  // Process-unique id of the stream, never reused while the process runs (cuStreamGetId on
  // cuda; a counter on emulated). Each device's default stream has its own. One backend call.
  std::uint64_t id() const;

  bool is_done() const;            // all work enqueued so far has completed (cuStreamQuery)
  [[deprecated("use is_done() (CCCL's current name)")]] bool ready() const { return is_done(); }
  void sync() const;               // wait for all work (respects sync-debug mode)
  void wait(const Event& event) const;   // later work waits for `event`
  void wait(StreamRef other) const;      // later work waits for all current work on `other`
  Event record_event() const;             // new event recorded here
  int priority() const;
  // Runs `fn` on a host thread once prior work is done; later work waits for it.
  void launch_host_func(std::function<void()> fn) const;

  friend bool operator==(StreamRef a, StreamRef b) noexcept {
    return a.handle_ == b.handle_ && a.device_ == b.device_;
  }

 protected:
  constexpr StreamRef(NativeStream h, int device) noexcept : handle_(h), device_(device) {}
  NativeStream handle_;
  int device_;
};

// An owning stream: created on construction, destroyed (after the device is done with it
// is not required: CUDA defers) on destruction. Movable, not copyable.
class Stream : public StreamRef {
 public:
  explicit Stream(int device = kCurrentDevice, int priority = 0, bool non_blocking = true);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  StreamRef ref() const noexcept { return *this; }
  NativeStream release() noexcept;  // gives up ownership
};

// Event flags as torch.cuda.Event's arguments.
struct EventOptions {
  bool enable_timing = false;
  bool blocking = false;
  bool interprocess = false;
};

// An owning event. Like torch, the device event is created lazily on first record (on the
// recording stream's device) unless created from an IPC handle.
class Event {
 public:
  explicit Event(EventOptions options = {});
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(StreamRef stream);
  void record();                  // on the current stream
  void wait(StreamRef stream) const;  // stream waits for this event (no-op if never recorded)
  bool is_done() const;           // true if completed or never recorded
  bool query() const { return is_done(); }  // torch's name for is_done()
  void sync() const;              // blocks the host (respects sync-debug mode)
  // Milliseconds between this event and `end`; both recorded, both with timing.
  float elapsed_time(const Event& end) const;

  struct IpcHandle {
    unsigned char bytes[64];
  };
  IpcHandle ipc_handle() const;   // requires interprocess=True and a recorded event
  static Event from_ipc_handle(int device, const IpcHandle& handle);

  bool is_created() const noexcept { return handle_ != nullptr; }
  NativeEvent handle() const noexcept { return handle_; }
  int device() const noexcept { return device_; }  // -1 before the first record
  const EventOptions& options() const noexcept { return options_; }

 private:
  unsigned backend_flags() const noexcept;
  void create_on(int device);
  EventOptions options_;
  NativeEvent handle_ = nullptr;
  int device_ = -1;
};

// Current stream of the calling thread for `device` (default stream until set).
StreamRef current_stream(int device = kCurrentDevice);
StreamRef default_stream(int device = kCurrentDevice);
// Sets the current stream of the calling thread on the stream's device.
void set_stream(StreamRef stream);
// A stream from the per-device pool (round-robin, 32 per priority class, created lazily),
// like torch's getStreamFromPool. priority < 0: a high-priority pool; below the device's
// highest priority it is the highest (silently, as torch); above the lowest (0): ValueError.
StreamRef stream_from_pool(int device = kCurrentDevice, int priority = 0);
// Wraps an externally created stream; the caller keeps it alive.
StreamRef get_stream_from_external(std::uintptr_t data_ptr, int device = kCurrentDevice);
// Valid stream priorities of `device` as {least, greatest} (cudaDeviceGetStreamPriorityRange
// order: lower is higher priority, e.g. {0, -5}). Stream(device, priority) refuses others with
// a ValueError naming this range (a priority that does not exist is a caller's bug); the pool
// (stream_from_pool, Python Stream(priority=)) follows torch: too high a priority is the
// highest, a priority above the lowest is a ValueError.
std::pair<int, int> stream_priority_range(int device = kCurrentDevice);

// ---- raw-pointer copies and fills, ordered on a stream ----
// For code that manages its own buffers (an engine's KV cache, staging areas): the same
// cuMemcpyAsync / cuMemsetD8Async cudakit's arrays use, enqueued on `stream` and captured
// into a graph when `stream` is capturing. Unified addressing: dst and src may each be device
// memory of any device, pinned host memory or (synchronous for the host, as in CUDA)
// pageable host memory. The caller orders the memory's use on other streams (events,
// record_stream) as with any stream-ordered work. bytes == 0 is a no-op; null pointers with
// bytes > 0 are a ValueError.
void memcpy_async(void* dst, const void* src, std::size_t bytes, StreamRef stream);
// Sets `bytes` bytes at dst to (unsigned char)value (cudaMemsetAsync). ValueError for a value
// outside [-128, 255].
void memset_async(void* dst, int value, std::size_t bytes, StreamRef stream);
// A copy between two devices' memory (cudaMemcpyPeerAsync): checks that dst lives on
// dst_device and src on src_device (ValueError naming the devices otherwise), then copies
// on `stream` (peer access, when enabled, makes it a direct copy; otherwise the driver
// stages it).
void memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device,
                       std::size_t bytes, StreamRef stream);
// The same on the current stream of the current device.
inline void memcpy_async(void* dst, const void* src, std::size_t bytes) {
  memcpy_async(dst, src, bytes, current_stream());
}
inline void memset_async(void* dst, int value, std::size_t bytes) {
  memset_async(dst, value, bytes, current_stream());
}

// RAII: makes `stream` (and its device) current; restores both on destruction.
class StreamGuard {
 public:
  explicit StreamGuard(StreamRef stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  StreamRef prev_stream_;  // previous current stream on the stream's device
  int prev_device_;        // previous current device of the thread
};

}  // namespace cudakit

// Hashes what operator== compares (handle and device), without a backend call.
template <>
struct std::hash<cudakit::StreamRef> {
  std::size_t operator()(cudakit::StreamRef s) const noexcept {
    return std::hash<const void*>()(s.handle()) ^ (static_cast<std::size_t>(s.device()) << 48);
  }
};
