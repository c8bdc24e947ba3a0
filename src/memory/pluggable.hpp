// CUDAPluggableAllocator: device memory from a shared library exporting torch's C ABI
//   void* alloc(ssize_t size, int device, cudaStream_t stream);
//   void  free(void* ptr, ssize_t size, int device, cudaStream_t stream);
// Unlike torch, cudakit keeps statistics for plugged allocations (allocated/requested/
// reserved bytes = what the plug-in handed out) so memory_stats() keeps working.
//
// Thread-safety: allocate/free are serialised by an internal mutex around the bookkeeping;
// the plug-in functions are called outside it (they must be thread-safe, as in torch).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <unordered_map>

#include "backend/types.hpp"
#include "cudakit/memory.hpp"
#include "memory/stats.hpp"

namespace cudakit::memory {

// A MemPool's allocator that gets its memory from cudakit's own caching allocator again
// (cudakit_malloc of libcudakit_alloc.so, or torch's pluggable allocator while cudakit serves
// torch) would be called under the device allocator's lock and take it again: a deadlock.
// allocate() marks its call into the plug-in; the plug-in entry points ask
// refuse_reentry_from_plugged_allocator() first, and allocate() turns a refused call into a
// ValueError that says what to do instead. True: refused (the caller must not allocate).
// Inline as far as one relaxed load of the count of plug-in calls in flight in the process:
// torch's every allocation asks, and the thread-local is read only while some plug-in runs
// (a thread sees its own increment, the only one that matters here).
extern std::atomic<int> g_plugged_calls_in_flight;
bool refuse_reentry_slow() noexcept;
inline bool refuse_reentry_from_plugged_allocator() noexcept {
  return g_plugged_calls_in_flight.load(std::memory_order_relaxed) != 0 && refuse_reentry_slow();
}

class PluggedAllocator {
 public:
  using AllocFn = void* (*)(ssize_t size, int device, void* stream);
  using FreeFn = void (*)(void* ptr, ssize_t size, int device, void* stream);

  // dlopen()s `path` and resolves both symbols; ValueError naming what is missing.
  PluggedAllocator(const std::string& path, const std::string& alloc_fn,
                   const std::string& free_fn);
  // From function pointers already in the process.
  PluggedAllocator(AllocFn alloc, FreeFn free, std::string name);
  ~PluggedAllocator();

  void* allocate(std::size_t bytes, int device, detail::StreamHandle stream);
  bool free(void* ptr);
  bool owns(const void* ptr);
  void add_stats(int device, MemoryStats& s);
  const std::string& name() const noexcept { return name_; }

 private:
  struct Info {
    std::size_t size;
    int device;
    detail::StreamHandle stream;
  };
  void* handle_ = nullptr;
  AllocFn alloc_ = nullptr;
  FreeFn free_ = nullptr;
  std::string name_;
  std::mutex mutex_;
  std::unordered_map<void*, Info> live_;
  std::unordered_map<int, DeviceStats> stats_;  // plug-in memory counts in the large pool
};

// The allocator installed by change_current_allocator, or nullptr (one atomic load).
PluggedAllocator* plugged_allocator() noexcept;
void set_plugged_allocator(std::shared_ptr<PluggedAllocator> a);
// Frees `ptr` in whichever plugged allocator (current or earlier) made it; false if none.
// One relaxed atomic load when no allocator was ever plugged.
bool free_in_plugged(void* ptr);
bool owned_by_plugged(const void* ptr);

}  // namespace cudakit::memory
