// Streams that cudakit destroys say so first, to whoever keeps their handles (today the device
// allocator: src/memory/stream_retire.cpp), without the streams module depending on it.
//
// Why: the allocator queries the streams that allocated from it before it moves expandable
// pages (a free block may still be read by work queued before the free, on its own stream or
// on another one that used it without record_stream). Asking the driver about a handle after
// cuStreamDestroy is undefined: on driver 580 it crashed (the H200 suite segfaulted in
// test_memory_plugin / test_memory_stress when every noted stream was queried). So the owner
// of a stream calls stream_retiring() while the handle is still valid; the allocator records
// a fence event there and from then on asks the event, never the stream.
// Rejected: dropping a stream from the allocator's list when it is destroyed (its queued work
// may still run: cuStreamDestroy returns at once); synchronising in the destructor (a
// destructor that blocks on queued work is not what cuStreamDestroy users expect).
//
// Streams cudakit does not own (torch's, CuPy's, ExternalStream) are outside this: torch's
// pooled streams are never destroyed; the CuPy plug-in keeps each stream it allocated on alive
// and retires it through _C._retire_stream once CuPy's last user reference is gone
// (python/cudakit/_cupy_interop.py); a foreign handle destroyed while memory it allocated
// is cached is the caller's contract, as in torch (whose expandable segments synchronise the
// segment's stream on release).
//
// Thread-safety: set_stream_retiring_hook may race with stream_retiring(); a call sees the old
// or the new hook. The hook never throws and must not call back into the streams module.
#pragma once

#include <atomic>

#include "cudakit/stream.hpp"

namespace cudakit::instrument {

using StreamRetiringHook = void (*)(NativeStream s, int device) noexcept;

namespace detail {
extern std::atomic<StreamRetiringHook> g_stream_retiring;
}

// Installed once by the memory module when its first allocator is made (never uninstalled).
inline void set_stream_retiring_hook(StreamRetiringHook hook) noexcept {
  detail::g_stream_retiring.store(hook, std::memory_order_release);
}

// `s` (a stream of `device`, valid now) is about to be destroyed by its owner.
inline void stream_retiring(NativeStream s, int device) noexcept {
  if (!s) return;
  if (StreamRetiringHook h = detail::g_stream_retiring.load(std::memory_order_acquire)) h(s, device);
}

}  // namespace cudakit::instrument
