// The allocators' locks, and the one rule about waiting.
//
// THE RULE: never wait on a stream, an event or the device while holding a lock that a stream
// task, a host callback or a finaliser may need.
//
// Why: freeing memory takes the allocator's locks, and freeing happens where the waiter cannot
// see it: an emulated stream task owns its operands and frees them when it finishes; a host
// function drops the last reference to a tensor; the garbage collector runs a finaliser on
// whatever thread allocated last. A thread that waits for such work while holding the lock
// waits for itself (issue 14.1: empty_cache() waited for a record_stream event under the lock,
// the stream's task blocked on that lock to free a tensor, and Python froze holding the GIL).
//
// How: collect what to wait for under the lock, release it, wait, take it again and
// re-validate (anything may have changed meanwhile: pools, the free sets, the settings).
// Blocks being waited for are in a state no other path touches (awaiting events, or
// `releasing`), so nobody reuses or merges them in the meantime.
//
// What counts as a wait: event/stream/device synchronisation, and the driver calls that
// synchronise implicitly when they release memory: cuMemFree, cuMemUnmap (documented as
// "synchronous for most use cases"; torch synchronises the stream before it anyway),
// cuMemFreeHost, and plug-in free functions (often cudaFree). Allocation-side calls
// (cuMemAlloc, cuMemCreate/Map/SetAccess, cuMemHostAlloc), event record/query and stream
// query do not wait for queued work and may run under the locks, as in torch. Event
// creation on the free path is nevertheless done outside them (DeviceAllocator::free).
//
// The driver's own locks: a driver call under an allocator lock may wait for a driver lock
// that another thread keeps while the device drains (cuMemFreeHost, cuCtxSynchronize), and
// draining runs host functions. So a host function must never block on an allocator lock:
// frees made inside one are deferred (deferred_free.hpp), which breaks that cycle whatever
// driver call the lock holder is in.
//
// Python: a thread that entered through Python may hold the GIL, and what it waits for (a
// finaliser, a stream task dropping a Python-owned buffer) may need the GIL. Every wait above
// runs inside a WaitScope, which releases the GIL for the wait when the calling thread holds
// it (hooks installed by the bindings; nothing happens in pure C++ programs).
//
// Thread-safety: SpinLock is a plain mutual-exclusion lock (not recursive). The wait hooks are
// set once, by the bindings at import.
#pragma once

#include <pthread.h>

#include <atomic>
#include <thread>

namespace cudakit::memory {

// release(): gives up the GIL if this thread holds it, returning a token (nullptr if it held
// nothing); reacquire(token): takes it back.
struct WaitHooks {
  void* (*release)() = nullptr;
  void (*reacquire)(void*) = nullptr;
};
inline std::atomic<void* (*)()> g_wait_release{nullptr};
inline std::atomic<void (*)(void*)> g_wait_reacquire{nullptr};
inline void set_wait_hooks(WaitHooks h) noexcept {
  g_wait_reacquire.store(h.reacquire);
  g_wait_release.store(h.release);
}

// Marks a wait done without the allocator's locks (see above).
class WaitScope {
 public:
  WaitScope() noexcept {
    if (auto rel = g_wait_release.load(std::memory_order_acquire)) token_ = rel();
  }
  ~WaitScope() {
    if (token_) g_wait_reacquire.load(std::memory_order_acquire)(token_);
  }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  void* token_ = nullptr;
};

// Test-and-test-and-set spin lock: the fast path's critical section is a few dozen
// instructions, far cheaper than a futex round trip under contention.
class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;;) {
      if (!flag_.exchange(true, std::memory_order_acquire)) return;
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
#if defined(__x86_64__) || defined(__i386__)
        else __builtin_ia32_pause();
#endif
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// The device mutex (the slow-path lock). With `spin`, glibc's adaptive mutex
// (PTHREAD_MUTEX_ADAPTIVE_NP): a thread that finds it held retries for a short, self-tuning
// while before it sleeps in the kernel. Slow-path critical sections are a few hundred
// nanoseconds, so under contention the lock is usually free again before a futex sleep and
// wake-up (several microseconds) would end: with a plain mutex, 8 threads allocating mixed
// sizes on one device spent most of their time in those hand-offs (H200: 2.8-3.2 us per pair
// against 0.27-0.40 us on one thread). Without `spin` it is a plain pthread mutex (what
// std::mutex is), kept for A/B measurements (CUDAKIT_ALLOC_CONF=device_mutex_spin:False).
class DeviceMutex {
 public:
  explicit DeviceMutex(bool spin) noexcept {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#if defined(__GLIBC__)
    if (spin) pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#else
    (void)spin;
#endif
    pthread_mutex_init(&m_, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  ~DeviceMutex() { pthread_mutex_destroy(&m_); }
  DeviceMutex(const DeviceMutex&) = delete;
  DeviceMutex& operator=(const DeviceMutex&) = delete;
  void lock() noexcept { pthread_mutex_lock(&m_); }
  void unlock() noexcept { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t m_;
};

}  // namespace cudakit::memory
