// The stream sanitizer's side of the instrumentation floor (src/instrument/observers.hpp):
// the functions its observer table points to. enable() installs the table and disable()
// removes it (sanitizer.cpp), so the modules that issue work, allocate or synchronise reach
// these only through instrument::stream_observer() and never include this header.
//
// Thread-safety: every function may be called from any thread, and tolerates a disable()
// racing with it. op() throws CUDASanitizerErrors in raise mode (before the work is
// enqueued); the others never throw into their caller except op-like entry points documented
// so.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>

#include "backend/types.hpp"
#include "instrument/observers.hpp"

namespace cudakit::sanitizer::detail {

// The seam's names the sanitizer's code uses unqualified.
using cudakit::detail::CaptureStatus;
using cudakit::detail::EventHandle;
using cudakit::detail::StreamHandle;

extern std::atomic<bool> g_on;
inline bool on() noexcept { return g_on.load(std::memory_order_relaxed); }

using Operand = instrument::Operand;

// A built-in op (`kernel`: a string literal, e.g. "add") about to be enqueued on stream `s` of
// `device`: checks and records its reads and writes. Host tensors are ignored. Throws
// CUDASanitizerErrors in raise mode, before anything is recorded.
void op(const char* kernel, StreamHandle s, int device, std::initializer_list<Operand> reads,
        std::initializer_list<Operand> writes);
// A raw-pointer copy or set just enqueued on `stream` (reads `src` unless null, writes
// `dst`): declared as declare_access() declares a foreign kernel's buffers.
void raw_access(const char* what, const void* src, void* dst, std::size_t bytes,
                StreamRef stream);

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
// Ops issued on a stream of capture `id` are recorded into it instead of being checked.
void capture_begin(std::uint64_t id) noexcept;
// The accesses captured (nullptr when the sanitizer was off at capture_begin). Also the way to
// discard an aborted capture. Called also after disable() (through the installed table).
std::shared_ptr<const void> capture_end(std::uint64_t id) noexcept;
// A replay of a graph whose capture recorded `captured`, on stream `s` of `device`: its
// accesses are checked and recorded as one op. Throws like op().
void graph_replayed(const std::shared_ptr<const void>& captured, StreamHandle s, int device);

}  // namespace cudakit::sanitizer::detail
