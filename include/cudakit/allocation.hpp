// The allocation contract every cudakit module uses to obtain memory (tensors, RNG state,
// collectives, ...). Implemented by the memory module (src/memory): device memory comes
// from the caching allocator on the given stream, host memory from the pinned-host cache
// (or plain malloc for pageable).
//
// Thread-safety: allocate/record_stream are thread-safe. An Allocation object is a unique
// owner: move it, do not share it between threads without synchronisation.
#pragma once

#include <cstddef>
#include <optional>
#include <utility>

#include "cudakit/export.hpp"
#include "cudakit/stream.hpp"

namespace CUDAKIT_API cudakit {

enum class MemoryKind { device, pinned_host, pageable_host };

class Allocation {
 public:
  Allocation() noexcept = default;
  ~Allocation() { reset(); }
  Allocation(Allocation&& o) noexcept { *this = std::move(o); }
  Allocation& operator=(Allocation&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
      device_ = o.device_;
      kind_ = o.kind_;
      stream_ = o.stream_;
    }
    return *this;
  }
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  void* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }   // -1 for host memory
  MemoryKind kind() const noexcept { return kind_; }
  StreamRef stream() const noexcept { return stream_; }  // allocation stream
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  void reset() noexcept;  // returns the memory to its allocator (never throws)

  // For the memory module only.
  Allocation(void* p, std::size_t n, int device, MemoryKind kind, StreamRef s) noexcept
      : ptr_(p), size_(n), device_(device), kind_(kind), stream_(s) {}

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  int device_ = -1;
  MemoryKind kind_ = MemoryKind::device;
  StreamRef stream_ = StreamRef::default_for(-1);
};

// Device memory from the caching allocator, ordered on `stream` (default: current stream
// of `device`). Zero bytes gives an empty Allocation. Throws OutOfMemoryError.
Allocation allocate_device(std::size_t bytes, int device = kCurrentDevice,
                           std::optional<StreamRef> stream = std::nullopt);
// Host memory: pinned (page-locked, from the pinned cache) or pageable.
Allocation allocate_host(std::size_t bytes, bool pinned = true);
// Marks device memory at `ptr` as used by `stream`: its reuse waits for that stream's
// work enqueued so far (torch's Tensor.record_stream).
void record_stream(void* ptr, StreamRef stream);

}  // namespace cudakit
