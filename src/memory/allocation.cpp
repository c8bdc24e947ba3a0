// include/cudakit/allocation.hpp: the allocation contract other modules use.
#include "cudakit/allocation.hpp"

#include <cstdlib>
#include <string>

#include "backend/device_ops.hpp"
#include "backend/lifetime.hpp"
#include "cudakit/error.hpp"
#include "instrument/observers.hpp"
#include "memory/deferred_free.hpp"
#include "memory/device_allocator.hpp"
#include "memory/host_allocator.hpp"
#include "memory/pluggable.hpp"
#include "memory/raw.hpp"

namespace cudakit {

namespace memory {

namespace {
// native_alloc / native_free without draining the deferred frees (their callers have), as
// local copies the raw paths inline: a call through an exported (interposable) function costs
// a few instructions per allocation, measurable on the hot path.
inline void* native_alloc_inline(std::size_t bytes, int dev, detail::StreamHandle stream,
                                 std::uint8_t client = 0) {
  return reinterpret_cast<void*>(device_allocator(dev).malloc(bytes, stream, client)->ptr);
}
inline bool native_free_inline(void* ptr, int dev_hint) {
  if (dev_hint >= 0 && device_allocator(dev_hint).free(ptr)) return true;
  return free_in_any_allocator(ptr, dev_hint);
}
}  // namespace

void* native_alloc(std::size_t bytes, int dev, detail::StreamHandle stream, std::uint8_t client) {
  drain_deferred_frees();
  return native_alloc_inline(bytes, dev, stream, client);
}

bool native_free(void* ptr, int dev_hint) {
  if (detail::in_host_function()) [[unlikely]] {  // deferred_free.hpp says why
    defer_free(ptr, dev_hint, DeferredKind::device);
    return true;
  }
  drain_deferred_frees();
  return native_free_inline(ptr, dev_hint);
}

bool native_record_stream(void* ptr, detail::StreamHandle stream) {
  for (DeviceAllocator* a : existing_allocators())
    if (a->record_stream(ptr, stream)) return true;
  return false;
}

// Exported (not public): it is the first frame of allocation-history stacks for allocations
// through allocate_device, and history names frames through the dynamic symbol table.
void* raw_alloc(std::size_t bytes, int dev, detail::StreamHandle stream) {
  drain_deferred_frees();
  PluggedAllocator* plugged = plugged_allocator();
  void* p = plugged ? plugged->allocate(bytes, dev, stream)
                    : native_alloc_inline(bytes, dev, stream);
  if (const auto* o = instrument::stream_observer()) [[unlikely]] o->allocated(p, bytes, dev, stream);  // sanitizer
  return p;
}

void* raw_alloc_for(std::uint8_t client, std::size_t bytes, int dev,
                    detail::StreamHandle stream) {
  drain_deferred_frees();
  if (PluggedAllocator* p = plugged_allocator()) return p->allocate(bytes, dev, stream);
  return native_alloc_inline(bytes, dev, stream, client);
}

bool raw_free(void* ptr, int dev_hint) {
  if (const auto* o = instrument::stream_observer()) [[unlikely]] o->freeing(ptr);  // sanitizer
  if (detail::in_host_function()) [[unlikely]] {  // deferred_free.hpp says why
    defer_free(ptr, dev_hint, DeferredKind::device);
    return true;
  }
  drain_deferred_frees();
  return free_in_plugged(ptr) || native_free_inline(ptr, dev_hint);
}
}  // namespace memory

void Allocation::reset() noexcept {
  if (!ptr_) return;
  void* p = std::exchange(ptr_, nullptr);
  size_ = 0;
  if (detail::is_shutting_down()) return;  // no device calls at exit
  try {
    switch (kind_) {
      case MemoryKind::device:
        memory::raw_free(p, device_);
        break;
      case MemoryKind::pinned_host:
        memory::host_allocator().free(p);
        break;
      case MemoryKind::pageable_host:
        std::free(p);
        break;
    }
  } catch (...) {
    // Destructors never throw; a failing free leaves the block cached.
  }
}

Allocation allocate_device(std::size_t bytes, int device, std::optional<StreamRef> stream) {
  const int dev = memory::resolve_alloc_device(device);
  StreamRef s = stream ? *stream : current_stream(dev);
  if (bytes == 0) return Allocation(nullptr, 0, dev, MemoryKind::device, s);
  if (s.device() >= 0 && s.device() != dev)
    throw ValueError("allocate_device: stream belongs to device " + std::to_string(s.device()) +
                     " but memory was requested on device " + std::to_string(dev) +
                     ": pass a stream of the same device");
  void* p = memory::raw_alloc(bytes, dev, s.handle());
  return Allocation(p, bytes, dev, MemoryKind::device, s);
}

Allocation allocate_host(std::size_t bytes, bool pinned) {
  if (bytes == 0)
    return Allocation(nullptr, 0, -1, pinned ? MemoryKind::pinned_host : MemoryKind::pageable_host,
                      StreamRef::default_for(-1));
  if (pinned) {
    void* p = memory::host_allocator().allocate(bytes);
    return Allocation(p, bytes, -1, MemoryKind::pinned_host, StreamRef::default_for(-1));
  }
  void* p = std::malloc(bytes);
  if (!p)
    throw OutOfMemoryError("host allocation of " + std::to_string(bytes) + " bytes failed", -1,
                           bytes);
  return Allocation(p, bytes, -1, MemoryKind::pageable_host, StreamRef::default_for(-1));
}

void record_stream(void* ptr, StreamRef stream) {
  if (!ptr) return;
  int dev = stream.device() >= 0 ? stream.device() : detail::device_ops().current_device();
  if (memory::host_allocator().record_event(ptr, stream.handle(), dev)) return;
  if (memory::owned_by_plugged(ptr)) return;  // a plugged allocator has no stream semantics
  if (memory::native_record_stream(ptr, stream.handle())) {
    if (const auto* o = instrument::stream_observer()) [[unlikely]] o->stream_recorded(ptr, stream.handle(), dev);  // sanitizer
    return;
  }
  throw ValueError("record_stream: pointer is not a live allocation of cudakit's caching "
                   "allocator (already freed, or allocated elsewhere)");
}

}  // namespace cudakit
