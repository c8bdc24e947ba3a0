// Device caching allocator, backend:cudaMallocAsync: the driver's stream-ordered pool does the
// caching; we keep the bookkeeping (statistics, snapshots, record_stream) so the rest of
// cudakit works unchanged.
#include "memory/device_allocator.hpp"

namespace cudakit::memory {

Block* DeviceAllocator::malloc_async(Locked& lock, std::size_t size, detail::StreamHandle stream,
                                     std::uint8_t client) {
  void* p = would_exceed_limit(size) ? nullptr : memory_.mem_alloc_async(device_, size, stream);
  if (!p) {
    // Frees queued on streams return memory to the driver's pool once they run: wait for the
    // device (without the locks), then retry.
    stats_.alloc_retry();
    wait_for_pending_events(lock);
    lock.unlock();
    {
      WaitScope wait;
      devices_.device_synchronize(device_);
    }
    lock.lock();
    p = would_exceed_limit(size) ? nullptr : memory_.mem_alloc_async(device_, size, stream);
  }
  if (!p) raise_oom(size, size, stream);
  Block* b = new_block();
  b->ptr = reinterpret_cast<std::uintptr_t>(p);
  b->size = size;
  b->stream = stream;
  b->pool = size <= kSmallSize ? &small_ : &large_;
  b->async = true;
  b->uncached = true;
  const bool small = b->pool->is_small;
  stats_.segment_created(small, size, /*oversize=*/false);
  b->allocated = true;
  b->requested = size;
  b->client = client;
  active_.insert(b->ptr, b);
  stats_.alloc(small, size, size, oversize(size), client);
  if (allocator_events_wanted()) note_event("alloc", b->ptr, size, stream, b);
  return b;
}

DeviceAllocator::AsyncFree DeviceAllocator::free_async(Block* b) {
  // Locks held: bookkeeping only. The driver calls happen in finish_free_async(), after the
  // unlock (no driver call under the allocator's locks: see free()).
  AsyncFree work{reinterpret_cast<void*>(b->ptr), b->stream, b->stream_uses};
  b->stream_uses.clear();
  const bool small = b->pool->is_small;
  stats_.free_completed(small, b->size);
  stats_.segment_released(small, b->size, /*oversize=*/false);
  if (allocator_events_wanted()) note_event("free_completed", b->ptr, b->requested, b->stream, b);
  trace_.drop_stack(b);
  recycle(b);
  return work;
}

void DeviceAllocator::finish_free_async(AsyncFree& work) {
  // Stream uses: the free is ordered after their work by making the allocation stream wait
  // (event record and stream wait enqueue; neither blocks). The memory is the driver's again
  // after mem_free_async; this allocator forgot the block already.
  for (detail::StreamHandle s : work.stream_uses) {
    detail::EventHandle e = streams_.event_create(device_, detail::kEventDisableTiming);
    streams_.event_record(e, s);
    streams_.stream_wait_event(work.stream, e);
    streams_.event_destroy(e);
  }
  memory_.mem_free_async(work.ptr, work.stream);
}

}  // namespace cudakit::memory
