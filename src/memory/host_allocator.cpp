#include "memory/host_allocator.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <optional>
#include <thread>

#include "backend/graph_ops.hpp"
#include "backend/relaxed_capture.hpp"
#include "backend/lifetime.hpp"
#include "backend/memory_ops.hpp"
#include "backend/stream_ops.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/error.hpp"
#include "devices/resolve.hpp"
#include "memory/deferred_free.hpp"
#include "memory/locks.hpp"
#include "memory/stats.hpp"

namespace cudakit::memory {
namespace {

void bump(MemoryStat& s, std::int64_t d) { stat_update(s, d); }

std::size_t page_size() {
  static const std::size_t n = [] {
    long v = sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<std::size_t>(v) : std::size_t(4096);
  }();
  return n;
}

// Physical memory of the host: pinned memory is resident, so no request above it can succeed.
std::size_t physical_memory() {
  static const std::size_t n = [] {
    long pages = sysconf(_SC_PHYS_PAGES);
    return pages > 0 ? static_cast<std::size_t>(pages) * page_size() : SIZE_MAX;
  }();
  return n;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

HostAllocator::HostAllocator(const AllocatorConfig& cfg) { apply_settings(cfg); }

void HostAllocator::apply_settings(const AllocatorConfig& cfg) {
  std::lock_guard lock(mutex_);
  settings_.use_host_register = cfg.pinned_use_host_register;
  settings_.register_threads = cfg.pinned_num_register_threads;
  settings_.background = cfg.pinned_use_background_threads;
  if (settings_.background) start_background_thread();
  work_cv_.notify_all();
}

void* HostAllocator::allocate(std::size_t bytes) {
  drain_deferred_frees();
  if (bytes == 0) return nullptr;
  // Power-of-two classes: a request above the largest one would round to 0, and one above
  // the host's physical memory can never be page-locked; refuse both before any arithmetic.
  constexpr std::size_t kLargestClass = std::size_t{1} << (std::numeric_limits<std::size_t>::digits - 1);
  if (bytes > kLargestClass || bytes > physical_memory())
    throw OutOfMemoryError("pinned host allocation of " + std::to_string(bytes) +
                           " bytes is larger than this host's physical memory (" +
                           std::to_string(physical_memory()) +
                           " bytes): check the size computation", -1, bytes);
  const std::size_t size = std::max<std::size_t>(512, std::bit_ceil(bytes));
  Settings s;
  {
    std::lock_guard lock(mutex_);
    if (!pending_.empty()) process_events();
    std::vector<HostBlock*>& cached = free_[std::countr_zero(size)];
    if (!cached.empty()) {
      HostBlock& b = *cached.back();
      cached.pop_back();
      void* p = b.ptr;
      b.allocated = true;
      bump(stats_.allocations, 1);
      bump(stats_.allocated_bytes, static_cast<std::int64_t>(size));
      bump(stats_.active_requests, 1);
      bump(stats_.active_bytes, static_cast<std::int64_t>(size));
      return p;
    }
    s = settings_;
  }
  const auto t0 = now_us();
  bool registered = false;
  void* p = new_block(size, s, registered);
  if (!p) {
    empty_cache();
    p = new_block(size, s, registered);
  }
  if (!p)
    throw OutOfMemoryError("pinned host allocation of " + std::to_string(bytes) +
                           " bytes failed (page-locked memory exhausted): free pinned buffers "
                           "or call empty_cache()", -1, bytes);
  std::lock_guard lock(mutex_);
  stats_.host_alloc_time.add(now_us() - t0);
  ++stats_.num_host_alloc;
  HostBlock& b = blocks_[p];
  b.ptr = p;
  b.size = size;
  b.allocated = true;
  b.registered = registered;
  bump(stats_.segment, 1);
  bump(stats_.reserved_bytes, static_cast<std::int64_t>(size));
  bump(stats_.allocations, 1);
  bump(stats_.allocated_bytes, static_cast<std::int64_t>(size));
  bump(stats_.active_requests, 1);
  bump(stats_.active_bytes, static_cast<std::int64_t>(size));
  return p;
}

void* HostAllocator::new_block(std::size_t size, const Settings& s, bool& registered) {
  detail::MemoryOps& be = detail::memory_ops();
  registered = s.use_host_register;
  if (!s.use_host_register) return be.host_alloc_pinned(size);
  // torch's cudaHostRegister mode: ordinary memory, its pages faulted in first (in parallel
  // for large blocks) so the registration itself only locks them.
  const std::size_t page = page_size();
  const std::size_t bytes = (size + page - 1) / page * page;
  void* p = std::aligned_alloc(page, bytes);
  if (!p) return nullptr;
  const std::size_t pages = bytes / page;
  const std::size_t nthreads = std::min<std::size_t>(s.register_threads, pages);
  auto touch = [p, page](std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i) static_cast<volatile char*>(p)[i * page] = 0;
  };
  if (nthreads > 1) {
    std::vector<std::thread> workers;
    const std::size_t per = (pages + nthreads - 1) / nthreads;
    for (std::size_t t = 1; t < nthreads; ++t)
      workers.emplace_back(touch, std::min(pages, t * per), std::min(pages, (t + 1) * per));
    touch(0, std::min(pages, per));
    for (auto& w : workers) w.join();
  } else {
    touch(0, pages);
  }
  try {
    if (be.host_register(p, bytes)) return p;
  } catch (...) {
    std::free(p);
    throw;
  }
  std::free(p);
  return nullptr;
}

void HostAllocator::release_block(void* p, bool registered) {
  detail::MemoryOps& be = detail::memory_ops();
  if (!registered) {
    be.host_free_pinned(p);
    return;
  }
  be.host_unregister(p);
  std::free(p);
}

bool HostAllocator::free(void* ptr) {
  if (detail::in_host_function()) [[unlikely]] {  // deferred_free.hpp says why
    defer_free(ptr, -1, DeferredKind::pinned_host);
    return true;
  }
  drain_deferred_frees();
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second.allocated) return false;
  HostBlock& b = it->second;
  b.allocated = false;
  bump(stats_.allocations, -1);
  bump(stats_.allocated_bytes, -static_cast<std::int64_t>(b.size));
  if (!b.streams.empty() && !detail::is_shutting_down()) {
    detail::StreamOps& be = detail::stream_ops();
    for (auto [s, dev] : b.streams) {
      detail::EventHandle e = take_event(dev);
      be.event_record(e, s);  // enqueues a marker: no wait under the lock
      b.events.emplace_back(e, dev);
    }
    b.streams.clear();
    pending_.push_back(ptr);
    if (settings_.background) work_cv_.notify_one();
    return true;
  }
  bump(stats_.active_requests, -1);
  bump(stats_.active_bytes, -static_cast<std::int64_t>(b.size));
  free_[std::countr_zero(b.size)].push_back(&b);
  return true;
}

void HostAllocator::process_events() {
  detail::StreamOps& be = detail::stream_ops();
  // While a graph is captured on some thread, the queries (of events recorded outside it) run
  // in relaxed mode: CUDA refuses them as "potentially unsafe" otherwise, and invalidates the
  // capture, from the capturing thread or, in global mode, from this background thread.
  detail::RelaxedCaptureScope relaxed(detail::graph_ops(), detail::live_captures() != 0);
  std::size_t keep = 0;
  for (void* p : pending_) {
    HostBlock& b = blocks_[p];
    std::size_t k = 0;
    for (auto& ev : b.events) {
      if (be.event_query(ev.first)) event_pool_[ev.second].push_back(ev.first);
      else b.events[k++] = ev;
    }
    b.events.resize(k);
    if (b.events.empty()) {
      bump(stats_.active_requests, -1);
      bump(stats_.active_bytes, -static_cast<std::int64_t>(b.size));
      free_[std::countr_zero(b.size)].push_back(&b);
    } else {
      pending_[keep++] = p;
    }
  }
  pending_.resize(keep);
}

detail::EventHandle HostAllocator::take_event(int device) {
  std::vector<detail::EventHandle>& pool = event_pool_[device];
  if (pool.empty()) return detail::stream_ops().event_create(device, detail::kEventDisableTiming);
  detail::EventHandle e = pool.back();
  pool.pop_back();
  return e;
}

bool HostAllocator::record_event(void* ptr, detail::StreamHandle stream, int device) {
  if (device < 0 || device >= kMaxDevices) [[unlikely]] detail::throw_invalid_device(device);
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second.allocated) return false;
  // One event per distinct stream at free time, however often a stream was recorded
  // (a buffer copied 1000 times on one stream would otherwise record 1000 events).
  auto& streams = it->second.streams;
  const std::pair<detail::StreamHandle, int> use(stream, device);
  if (std::find(streams.begin(), streams.end(), use) == streams.end()) streams.push_back(use);
  return true;
}

bool HostAllocator::owns(const void* ptr) {
  std::lock_guard lock(mutex_);
  auto it = blocks_.find(const_cast<void*>(ptr));
  return it != blocks_.end() && it->second.allocated;
}

void HostAllocator::empty_cache() {
  drain_deferred_frees();  // host functions' frees first: their blocks are released too
  std::vector<std::pair<void*, bool>> release;  // (block, registered)
  {
    std::lock_guard lock(mutex_);
    if (!pending_.empty()) process_events();
    for (std::vector<HostBlock*>& v : free_) {
      for (HostBlock* b : v) {
        const std::int64_t size = static_cast<std::int64_t>(b->size);
        release.emplace_back(b->ptr, b->registered);
        blocks_.erase(b->ptr);  // destroys *b
        bump(stats_.segment, -1);
        bump(stats_.reserved_bytes, -size);
      }
      v.clear();
    }
  }
  if (release.empty()) return;
  const auto t0 = now_us();
  {
    WaitScope wait;  // cuMemFreeHost synchronises the device
    for (auto [p, registered] : release) release_block(p, registered);
  }
  std::lock_guard lock(mutex_);
  stats_.num_host_free += static_cast<std::int64_t>(release.size());
  stats_.host_free_time.add(now_us() - t0);
}

HostMemoryStats HostAllocator::stats() {
  drain_deferred_frees();  // so a synchronised caller sees host functions' frees
  std::lock_guard lock(mutex_);
  return stats_;
}

void HostAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  for (MemoryStat* s : {&stats_.allocations, &stats_.allocated_bytes, &stats_.segment,
                        &stats_.reserved_bytes, &stats_.active_requests, &stats_.active_bytes})
    s->peak = s->current;
  stats_.host_alloc_time.max = stats_.host_alloc_time.min = 0;
  stats_.host_free_time.max = stats_.host_free_time.min = 0;
}

void HostAllocator::reset_accumulated() {
  std::lock_guard lock(mutex_);
  for (MemoryStat* s : {&stats_.allocations, &stats_.allocated_bytes, &stats_.segment,
                        &stats_.reserved_bytes, &stats_.active_requests, &stats_.active_bytes})
    s->allocated = s->freed = 0;
  stats_.num_host_alloc = stats_.num_host_free = 0;
  stats_.host_alloc_time = {};
  stats_.host_free_time = {};
}

std::size_t HostAllocator::pending_event_count() {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (void* p : pending_) n += blocks_[p].events.size();
  return n;
}

std::size_t HostAllocator::registered_block_count() {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [p, b] : blocks_) n += b.registered ? 1 : 0;
  return n;
}

void HostAllocator::start_background_thread() {
  if (background_started_) return;
  background_started_ = true;
  // Detached and leaked with the allocator: never joined at exit (no driver calls then).
  std::thread([this] { background_loop(); }).detach();
}

void HostAllocator::background_loop() {
  // Polls the pending blocks' events (queries never wait, so holding the mutex is fine),
  // backing off while they stay busy; sleeps while nothing is pending or the setting is off.
  auto backoff = std::chrono::microseconds(20);
  std::unique_lock lock(mutex_);
  while (!detail::is_shutting_down()) {
    if (pending_.empty() || !settings_.background) {
      work_cv_.wait_for(lock, std::chrono::milliseconds(100));
      backoff = std::chrono::microseconds(20);
      continue;
    }
    try {
      process_events();
    } catch (...) {
      // e.g. an event recorded inside a stream capture cannot be queried: leave the block
      // to the next allocation / empty_cache, which report the error to their caller.
    }
    if (pending_.empty()) continue;
    lock.unlock();
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(2000));
    lock.lock();
  }
}

std::size_t HostAllocator::pooled_event_count() {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& pool : event_pool_) n += pool.size();
  return n;
}

HostAllocator& host_allocator() {
  static HostAllocator* a = new HostAllocator(config());  // leaked: no frees at exit
  warn_about_env_config_once();
  return *a;
}

}  // namespace cudakit::memory
