// The instrumentation floor: how the modules that issue device work, allocate device memory
// or synchronise (ops, tensor, random, streams, devices, memory, graphs) report what they do
// to an observer above them (today the stream sanitizer, src/sanitizer), without depending on
// it. The observer installs a table of functions here while it observes, as the profiler's
// tracer does for NVTX (src/nvtx/trace_hook.hpp); this header includes public headers only,
// so every module may include it and none calls upward (tests/layout checks both).
//
// Every call site has the same shape and a "// sanitizer" tag:
//
//     if (const auto* o = instrument::stream_observer()) [[unlikely]] o->op(...);  // sanitizer
//
// so with nothing observing it costs one load and a not-taken branch, and the sites are easy
// to find (grep "// sanitizer").
//
// Thread-safety: set_stream_observer may race with the calls; a call sees the old or the new
// table, and tables are never freed (static objects of the observer). The functions tolerate
// being called just after their observer stopped. op(), raw_access() and graph_replayed() may
// throw (the sanitizer's raise mode, before the work is enqueued); the others never throw.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>

#include "cudakit/stream.hpp"

namespace cudakit {
class Tensor;
}

namespace cudakit::instrument {

// One operand of a built-in op: a tensor (its storage and the bytes its view covers). `name`
// is the argument's name (a string literal); nullptr marks the op's result ("the output").
struct Operand {
  const Tensor* tensor;
  const char* name;
};

struct StreamObserver {
  // ---- work (src/ops, src/tensor, src/random, src/streams) ----
  // A built-in op (`kernel`: a string literal, e.g. "add") about to be enqueued on stream `s`
  // of `device`: what it reads and writes. Host tensors are ignored.
  void (*op)(const char* kernel, NativeStream s, int device, std::initializer_list<Operand> reads,
             std::initializer_list<Operand> writes);
  // A raw-pointer copy or set (`what`: "memcpy_async", ...) just enqueued on `stream`: reads
  // `src` (nullptr for a set) and writes `dst`, `bytes` each.
  void (*raw_access)(const char* what, const void* src, void* dst, std::size_t bytes,
                     StreamRef stream);

  // ---- memory (src/memory) ----
  // `p` (n bytes of `device`) was handed out ordered on stream `s`.
  void (*allocated)(void* p, std::size_t n, int device, NativeStream s) noexcept;
  // `p` is being returned to its allocator.
  void (*freeing)(void* p) noexcept;
  // record_stream(p, s): the allocator waits for `s` before reusing `p`.
  void (*stream_recorded)(void* p, NativeStream s, int device) noexcept;

  // ---- streams, events, devices (src/streams, src/devices, src/ops) ----
  void (*event_recorded)(NativeEvent e, NativeStream s, int device) noexcept;
  void (*stream_waited)(NativeStream s, int device, NativeEvent e) noexcept;
  // The host waited for (or a query found complete) an event / a stream / a device.
  void (*host_waited_event)(NativeEvent e) noexcept;
  void (*host_waited_stream)(NativeStream s, int device) noexcept;
  void (*host_waited_device)(int device) noexcept;
  void (*stream_destroyed)(NativeStream s, int device) noexcept;
  void (*event_destroyed)(NativeEvent e) noexcept;

  // ---- graphs (src/graphs) ----
  // Ops issued on a stream of capture `id` are recorded into it instead of being checked.
  void (*capture_begin)(std::uint64_t id) noexcept;
  // What the capture recorded (nullptr when nothing was); also the way to discard an aborted
  // capture. Reached through installed_stream_observer(): an observer stopped during the
  // capture still hands back (or drops) what it recorded.
  std::shared_ptr<const void> (*capture_end)(std::uint64_t id) noexcept;
  // A replay of a graph whose capture recorded `captured`, on stream `s` of `device`: its
  // accesses count as one op.
  void (*graph_replayed)(const std::shared_ptr<const void>& captured, NativeStream s, int device);
};

namespace detail {
extern std::atomic<const StreamObserver*> g_stream_observer;  // null while nothing observes
extern std::atomic<const StreamObserver*> g_installed;        // the last table ever set
}  // namespace detail

// The table of the observer that is observing now, or nullptr.
inline const StreamObserver* stream_observer() noexcept {
  return detail::g_stream_observer.load(std::memory_order_acquire);
}
// The last table installed, observing or not (nullptr before the first one): for the calls
// that finish what an observer began (capture_end).
inline const StreamObserver* installed_stream_observer() noexcept {
  return detail::g_installed.load(std::memory_order_acquire);
}
// `table` (a static object, never freed) starts observing; nullptr stops it.
inline void set_stream_observer(const StreamObserver* table) noexcept {
  if (table) detail::g_installed.store(table, std::memory_order_release);
  detail::g_stream_observer.store(table, std::memory_order_release);
}

}  // namespace cudakit::instrument
