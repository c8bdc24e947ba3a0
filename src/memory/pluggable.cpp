#include "memory/pluggable.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <utility>

#include "backend/types.hpp"
#include "cudakit/error.hpp"

namespace cudakit::memory {
namespace {
std::atomic<PluggedAllocator*> g_plugged{nullptr};
std::mutex g_keep_mutex;
std::vector<std::shared_ptr<PluggedAllocator>> g_keep;  // plugged allocators stay alive
}  // namespace

PluggedAllocator::PluggedAllocator(const std::string& path, const std::string& alloc_fn,
                                   const std::string& free_fn)
    : name_(path) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    throw ValueError("CUDAPluggableAllocator: cannot load '" + path + "': " +
                     (err ? err : "unknown error") + " (pass the path of a shared library)");
  }
  alloc_ = reinterpret_cast<AllocFn>(dlsym(handle_, alloc_fn.c_str()));
  free_ = reinterpret_cast<FreeFn>(dlsym(handle_, free_fn.c_str()));
  if (!alloc_ || !free_) {
    dlclose(handle_);
    handle_ = nullptr;
    throw ValueError("CUDAPluggableAllocator: '" + path + "' does not export " +
                     (!alloc_ ? "'" + alloc_fn + "'" : "'" + free_fn + "'") +
                     " (declare it extern \"C\" with torch's signature: void* " + alloc_fn +
                     "(ssize_t, int, cudaStream_t) / void " + free_fn +
                     "(void*, ssize_t, int, cudaStream_t))");
  }
}

PluggedAllocator::PluggedAllocator(AllocFn alloc, FreeFn free, std::string name)
    : alloc_(alloc), free_(free), name_(std::move(name)) {
  if (!alloc_ || !free_) throw ValueError("CUDAPluggableAllocator: null function pointer");
}

PluggedAllocator::~PluggedAllocator() = default;  // never dlclose: pointers may outlive us

namespace {
struct PluggedCall {
  int depth = 0;
  bool reentered = false;
};
thread_local PluggedCall t_plugged_call;
}  // namespace

std::atomic<int> g_plugged_calls_in_flight{0};

bool refuse_reentry_slow() noexcept {
  PluggedCall& c = t_plugged_call;
  if (c.depth == 0) return false;
  c.reentered = true;
  return true;
}

void* PluggedAllocator::allocate(std::size_t bytes, int device, detail::StreamHandle stream) {
  if (bytes == 0) return nullptr;
  // The C ABI takes a signed size: a larger request would reach the plug-in as negative.
  if (bytes > static_cast<std::size_t>(PTRDIFF_MAX)) {
    std::lock_guard lock(mutex_);
    stats_[device].oom();
    throw OutOfMemoryError("CUDA out of memory: " + std::to_string(bytes) + " bytes requested "
                           "from the plugged allocator '" + name_ + "' on device " +
                           std::to_string(device) + " is more than any device holds (check the "
                           "size computation)", device, bytes);
  }
  PluggedCall& call = t_plugged_call;
  ++call.depth;
  call.reentered = false;
  g_plugged_calls_in_flight.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  std::exception_ptr error;  // a plug-in that throws (torch's hooks do): after the bookkeeping
  try {
    p = alloc_(static_cast<ssize_t>(bytes), device, stream);
  } catch (...) {
    error = std::current_exception();
  }
  g_plugged_calls_in_flight.fetch_sub(1, std::memory_order_relaxed);
  --call.depth;
  if (std::exchange(call.reentered, false)) {
    if (p) free_(p, static_cast<ssize_t>(bytes), device, stream);
    throw ValueError("CUDAPluggableAllocator '" + name_ + "' (a MemPool's allocator, or the "
                     "current allocator) called cudakit's own caching allocator again "
                     "(cudakit_malloc, or torch's allocator while cudakit serves torch), which "
                     "would deadlock or recurse for ever. A MemPool of cudakit's allocator needs "
                     "no allocator: use MemPool(); give allocator= a library that gets device "
                     "memory elsewhere (cudaMalloc, cuMemCreate)");
  }
  if (error) std::rethrow_exception(error);
  if (!p) {
    std::lock_guard lock(mutex_);
    stats_[device].oom();
    throw OutOfMemoryError("CUDA out of memory: the plugged allocator '" + name_ +
                           "' returned null for " + std::to_string(bytes) + " bytes on device " +
                           std::to_string(device), device, bytes);
  }
  std::lock_guard lock(mutex_);
  live_[p] = Info{bytes, device, stream};
  DeviceStats& s = stats_[device];
  s.segment_created(/*small=*/false, bytes, /*oversize=*/false);
  s.alloc(/*small=*/false, bytes, bytes, /*oversize=*/false);
  return p;
}

bool PluggedAllocator::free(void* ptr) {
  Info info;
  {
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return false;
    info = it->second;
    live_.erase(it);
    DeviceStats& s = stats_[info.device];
    s.free_requested(/*small=*/false, info.size, info.size, /*oversize=*/false);
    s.free_completed(/*small=*/false, info.size);
    s.segment_released(/*small=*/false, info.size, /*oversize=*/false);
  }
  free_(ptr, static_cast<ssize_t>(info.size), info.device, info.stream);
  return true;
}

bool PluggedAllocator::owns(const void* ptr) {
  std::lock_guard lock(mutex_);
  return live_.count(const_cast<void*>(ptr)) != 0;
}

void PluggedAllocator::add_stats(int device, MemoryStats& out) {
  std::lock_guard lock(mutex_);
  auto it = stats_.find(device);
  if (it == stats_.end()) return;
  const MemoryStats& s = it->second.get();
  auto add = [](MemoryStat* dst, const MemoryStat* src) {
    for (int i = 0; i < kNumStatPools; ++i) {
      dst[i].current += src[i].current;
      dst[i].peak += src[i].peak;  // upper bound of the combined peak
      dst[i].allocated += src[i].allocated;
      dst[i].freed += src[i].freed;
    }
  };
  add(out.allocation, s.allocation);
  add(out.segment, s.segment);
  add(out.active, s.active);
  add(out.allocated_bytes, s.allocated_bytes);
  add(out.reserved_bytes, s.reserved_bytes);
  add(out.active_bytes, s.active_bytes);
  add(out.requested_bytes, s.requested_bytes);
  auto add_one = [](MemoryStat& dst, const MemoryStat& src) {
    dst.current += src.current;
    dst.peak += src.peak;
    dst.allocated += src.allocated;
    dst.freed += src.freed;
  };
  for (int c = 0; c < kNumMemoryClients; ++c) {
    add_one(out.by_client[c].allocation, s.by_client[c].allocation);
    add_one(out.by_client[c].allocated_bytes, s.by_client[c].allocated_bytes);
    add_one(out.by_client[c].requested_bytes, s.by_client[c].requested_bytes);
  }
  out.num_ooms += s.num_ooms;
  out.num_device_alloc += s.num_device_alloc;
  out.num_device_free += s.num_device_free;
}

PluggedAllocator* plugged_allocator() noexcept {
  return g_plugged.load(std::memory_order_acquire);
}

namespace {
std::atomic<bool> g_ever_plugged{false};
}

bool free_in_plugged(void* ptr) {
  if (!g_ever_plugged.load(std::memory_order_relaxed)) return false;
  if (PluggedAllocator* cur = plugged_allocator(); cur && cur->free(ptr)) return true;
  std::vector<std::shared_ptr<PluggedAllocator>> all;
  {
    std::lock_guard lock(g_keep_mutex);
    all = g_keep;
  }
  for (auto& a : all)
    if (a->free(ptr)) return true;
  return false;
}

bool owned_by_plugged(const void* ptr) {
  if (!g_ever_plugged.load(std::memory_order_relaxed)) return false;
  std::lock_guard lock(g_keep_mutex);
  for (auto& a : g_keep)
    if (a->owns(ptr)) return true;
  return false;
}

void set_plugged_allocator(std::shared_ptr<PluggedAllocator> a) {
  std::lock_guard lock(g_keep_mutex);
  if (a) {
    g_keep.push_back(a);
    g_ever_plugged.store(true);
  }
  g_plugged.store(a.get(), std::memory_order_release);
}

}  // namespace cudakit::memory
