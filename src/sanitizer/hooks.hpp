// Instrumentation points of the stream sanitizer (include/cudakit/sanitizer.hpp), called by
// the modules that issue device work, allocate device memory or synchronise. Every call site
// has the same shape and a "// sanitizer" tag:
//
//     if (detail::sanitizer::on()) [[unlikely]] detail::sanitizer::op(...);  // sanitizer
//
// so a disabled sanitizer costs one relaxed atomic load and a not-taken branch, and the sites
// are easy to find (grep "// sanitizer"). The functions here are called only when on() was
// true, but tolerate a disable() racing with them.
//
// Thread-safety: every function may be called from any thread. op() throws
// CUDASanitizerErrors in raise mode (before the work is enqueued); the others never throw
// into their caller except op-like entry points documented so.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>

#include "backend/backend.hpp"

namespace cudakit {
class Tensor;
}

namespace cudakit::detail::sanitizer {

extern std::atomic<bool> g_on;
inline bool on() noexcept { return g_on.load(std::memory_order_relaxed); }

// One operand of a built-in op: a tensor (its storage and the bytes its view covers). `name`
// is the argument's name (a string literal); nullptr marks the op's result ("the output").
struct Operand {
  const Tensor* tensor;
  const char* name;
};

// A built-in op (`kernel`: a string literal, e.g. "add") about to be enqueued on stream `s` of
// `device`: checks and records its reads and writes. Host tensors are ignored. Throws
// CUDASanitizerErrors in raise mode, before anything is recorded.
void op(const char* kernel, StreamHandle s, int device, std::initializer_list<Operand> reads,
        std::initializer_list<Operand> writes);

// ---- memory (src/memory) ----
// `p` (n bytes of `device`) was handed out ordered on stream `s`. Never throws.
void allocated(void* p, std::size_t n, int device, StreamHandle s) noexcept;
// `p` is being returned to its allocator: reports (as a warning) accesses of streams that
// neither record_stream named nor synchronised with the allocation stream. Never throws.
void freeing(void* p) noexcept;
// record_stream(p, s): the allocator waits for `s` before reusing `p`.
void stream_recorded(void* p, StreamHandle s, int device) noexcept;

// ---- streams, events, devices (src/streams, src/devices) ----
void event_recorded(EventHandle e, StreamHandle s, int device) noexcept;
void stream_waited(StreamHandle s, int device, EventHandle e) noexcept;
// The host waited for (or a query found complete) an event / a stream / a device.
void host_waited_event(EventHandle e) noexcept;
void host_waited_stream(StreamHandle s, int device) noexcept;
void host_waited_device(int device) noexcept;
void stream_destroyed(StreamHandle s, int device) noexcept;
void event_destroyed(EventHandle e) noexcept;

// ---- graphs (src/graphs) ----
// Called whatever on() says (cheap when no capture is registered): ops issued on a stream of
// capture `id` are recorded into it instead of being checked.
void capture_begin(std::uint64_t id) noexcept;
// The accesses captured (nullptr when the sanitizer was off at capture_begin). Also the way to
// discard an aborted capture.
std::shared_ptr<const void> capture_end(std::uint64_t id) noexcept;
// A replay of a graph whose capture recorded `captured`, on stream `s` of `device`: its
// accesses are checked and recorded as one op. Throws like op().
void graph_replayed(const std::shared_ptr<const void>& captured, StreamHandle s, int device);

}  // namespace cudakit::detail::sanitizer
