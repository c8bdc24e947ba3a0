// MemPool, use_mem_pool, graph_pool_handle, general pool routing, pluggable allocators.
#include <atomic>
#include <thread>
#include <type_traits>

#include "backend/lifetime.hpp"
#include "backend/types.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "memory/device_allocator.hpp"
#include "memory/pluggable.hpp"
#include "memory/raw.hpp"

namespace cudakit {
namespace memory {

// ---- DeviceAllocator: private pools and routes ----

void DeviceAllocator::create_pool(MempoolId id, bool no_split, bool use_on_oom,
                                  std::shared_ptr<PluggedAllocator> source) {
  Locked lock(*this);
  auto it = pools_.find(id);
  if (it != pools_.end()) {
    ++it->second->use_count;
    return;
  }
  auto p = std::make_unique<PrivatePool>(id, &node_resource_);
  p->no_split = no_split;
  p->use_on_oom = use_on_oom;
  p->source = std::move(source);
  pools_.emplace(id, std::move(p));
}

void DeviceAllocator::release_pool(MempoolId id) {
  Locked lock(*this);
  auto it = pools_.find(id);
  if (it == pools_.end()) return;
  if (--it->second->use_count > 0) return;
  // During a capture no device memory is freed (empty_cache()): the pool's cached segments
  // go at the next empty_cache or out-of-memory retry with no capture underway.
  if (capture_underway()) return;
  quick_flush();
  PrivatePool& p = *it->second;
  release_pool_blocks(p.small);
  release_pool_blocks(p.large);
  // Blocks still allocated or awaiting record_stream events keep the pool; empty_cache()
  // drops it once they are back.
  if (p.live_blocks == 0 && p.small.blocks.empty() && p.large.blocks.empty()) pools_.erase(it);
  lock.unlock();  // the segments go back to the device (or the pool's allocator) here
}

int DeviceAllocator::pool_use_count(MempoolId id) {
  Locked lock(*this);
  auto it = pools_.find(id);
  return it == pools_.end() ? 0 : it->second->use_count;
}

void DeviceAllocator::begin_allocate_to_pool(MempoolId id,
                                             std::function<bool(detail::StreamHandle)> filter) {
  Locked lock(*this);
  if (!pools_.count(id))
    throw ValueError("allocate to pool (" + std::to_string(id.first) + ", " +
                     std::to_string(id.second) + "): no such pool on device " +
                     std::to_string(device_));
  routes_.push_back(PoolRoute{id, std::move(filter)});
}

void DeviceAllocator::end_allocate_to_pool(MempoolId id) {
  Locked lock(*this);
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (it->pool == id) {
      routes_.erase(std::next(it).base());
      return;
    }
  }
}

}  // namespace memory

namespace {
std::atomic<std::uint64_t> g_next_user_pool{1};   // MemPool ids: (n, 0) like torch
std::atomic<std::uint64_t> g_next_graph_pool{1};  // graph pools: (0, n)
}  // namespace

// Tagged pools take their ids from the MemPool sequence: one id space for private pools.
MempoolId memory::new_user_pool_id() { return {g_next_user_pool.fetch_add(1), 0}; }

MemPool::MemPool(bool use_on_oom, bool no_split, int device)
    : id_{g_next_user_pool.fetch_add(1), 0}, device_(memory::resolve_alloc_device(device)) {
  memory::device_allocator(device_).create_pool(id_, no_split, use_on_oom);
}

MemPool::MemPool(const PluggableAllocator& allocator, bool use_on_oom, bool no_split, int device)
    : id_{g_next_user_pool.fetch_add(1), 0}, device_(memory::resolve_alloc_device(device)) {
  memory::device_allocator(device_).create_pool(
      id_, no_split, use_on_oom, std::static_pointer_cast<memory::PluggedAllocator>(allocator.impl()));
}

MemPool::MemPool(MempoolId id, int device)
    : id_(id), device_(memory::resolve_alloc_device(device)) {
  memory::device_allocator(device_).create_pool(id_, false, false);
}

MemPool::~MemPool() {
  if (detail::is_shutting_down()) return;
  try {
    memory::device_allocator(device_).release_pool(id_);
  } catch (...) {
  }
}

int MemPool::use_count() const { return memory::device_allocator(device_).pool_use_count(id_); }

MempoolId graph_pool_handle() { return {0, g_next_graph_pool.fetch_add(1)}; }

UseMemPool::UseMemPool(const MemPool& pool, int device)
    : id_(pool.id()), device_(device == kCurrentDevice ? pool.device()
                                                       : memory::resolve_alloc_device(device)) {
  if (device_ != pool.device())
    throw ValueError("use_mem_pool: the pool lives on device " + std::to_string(pool.device()) +
                     ", not device " + std::to_string(device_));
  const auto tid = std::this_thread::get_id();
  memory::device_allocator(device_).begin_allocate_to_pool(
      id_, [tid](detail::StreamHandle) { return std::this_thread::get_id() == tid; });
}

UseMemPool::~UseMemPool() {
  try {
    memory::device_allocator(device_).end_allocate_to_pool(id_);
  } catch (...) {
  }
}

void begin_allocate_to_pool(int device, MempoolId id,
                            std::function<bool(detail::StreamHandle)> filter) {
  auto& a = memory::device_allocator(memory::resolve_alloc_device(device));
  a.create_pool(id, false, false);
  a.begin_allocate_to_pool(id, std::move(filter));
}
void end_allocate_to_pool(int device, MempoolId id) {
  memory::device_allocator(memory::resolve_alloc_device(device)).end_allocate_to_pool(id);
}
void release_pool(int device, MempoolId id) {
  memory::device_allocator(memory::resolve_alloc_device(device)).release_pool(id);
}

PluggableAllocator::PluggableAllocator(const std::string& path, const std::string& alloc_fn,
                                       const std::string& free_fn)
    : impl_(std::make_shared<memory::PluggedAllocator>(path, alloc_fn, free_fn)) {}

static_assert(std::is_same_v<PluggableAllocator::AllocFn, memory::PluggedAllocator::AllocFn>,
              "ssize_t and std::ptrdiff_t differ on this platform");
PluggableAllocator::PluggableAllocator(AllocFn alloc_fn, FreeFn free_fn, const std::string& name)
    : impl_(std::make_shared<memory::PluggedAllocator>(alloc_fn, free_fn, name)) {}

void change_current_allocator(const PluggableAllocator& allocator) {
  memory::set_plugged_allocator(std::static_pointer_cast<memory::PluggedAllocator>(allocator.impl()));
}
void reset_current_allocator() { memory::set_plugged_allocator(nullptr); }

}  // namespace cudakit
