// Frees deferred out of stream host functions (see deferred_free.hpp).
#include "memory/deferred_free.hpp"

#include <mutex>
#include <vector>

#include "memory/host_allocator.hpp"
#include "memory/raw.hpp"

namespace cudakit::memory {
bool g_deferred_maybe_pending = false;

namespace {
struct Deferred {
  void* ptr;
  int dev_hint;
  DeferredKind kind;
};
std::mutex g_mu;  // a leaf: nothing else is locked while it is held
std::vector<Deferred>& queue() {
  static auto* q = new std::vector<Deferred>();  // leaked: frees may come during exit
  return *q;
}
}  // namespace

void defer_free(void* ptr, int dev_hint, DeferredKind kind) {
  std::lock_guard lock(g_mu);
  queue().push_back({ptr, dev_hint, kind});
  __atomic_store_n(&g_deferred_maybe_pending, true, __ATOMIC_RELEASE);
}

void drain_deferred_slow() {
  std::vector<Deferred> work;
  {
    std::lock_guard lock(g_mu);
    work.swap(queue());
    __atomic_store_n(&g_deferred_maybe_pending, false, __ATOMIC_RELEASE);
  }
  for (const Deferred& d : work) {
    try {
      if (d.kind == DeferredKind::device) {
        raw_free(d.ptr, d.dev_hint);
      } else {
        host_allocator().free(d.ptr);
      }
    } catch (...) {
      // As a destructor's free: a failing free leaves the block cached; nobody to tell.
    }
  }
}

}  // namespace cudakit::memory
