// Frees issued inside a stream host function, deferred to the next allocator call made from an
// ordinary thread.
//
// Why: a host function (cuLaunchHostFunc callback) may drop the last reference to device or
// pinned memory. Freeing there would take an allocator lock, and the lock's holder may be
// inside a driver call (cuMemAlloc, cuEventCreate) that waits for a driver lock another thread
// keeps while the device drains, and draining waits for this host function: a three-thread
// deadlock the H200 stress test hit. The free paths would also make CUDA calls (event record),
// which the driver forbids in host functions. So a free on such a thread
// (detail::in_host_function()) only appends the pointer to a queue under a leaf mutex that
// guards nothing else; any later allocation, free, empty_cache or statistics query drains it.
// Rejected: try_lock and free when uncontended (the free path may still call the driver);
// a dedicated freeing thread (a thread per process for a rare case, and frees would then race
// the statistics a test reads right after synchronising).
//
// Thread-safety: all functions are thread-safe; drain() takes no allocator lock itself.
#pragma once

namespace cudakit::memory {

enum class DeferredKind { device, pinned_host };

// Queues `ptr` (freed later by raw_free(ptr, dev_hint) or the pinned-host cache).
void defer_free(void* ptr, int dev_hint, DeferredKind kind);

// drain_deferred_frees()'s slow path, and its hint: written under the queue mutex, read
// racily. (No nested `detail` namespace here: inside cudakit::memory it would hide
// cudakit::detail, docs/architecture.md "Namespaces".)
void drain_deferred_slow();
extern bool g_deferred_maybe_pending;

// Frees what host functions deferred. Cheap when nothing is queued (one load). Never call it
// with an allocator lock held, nor from a host function.
inline void drain_deferred_frees() {
  if (__atomic_load_n(&g_deferred_maybe_pending, __ATOMIC_ACQUIRE)) [[unlikely]] {
    drain_deferred_slow();
  }
}

}  // namespace cudakit::memory
