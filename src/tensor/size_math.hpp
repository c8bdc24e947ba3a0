// Checked size arithmetic: the one place that turns a shape (and strides) into element
// counts, storage offsets and byte sizes. Factories, views, reshape, expand, from_blob,
// DLPack/NumPy import and the Tensor constructor all go through it, so an overflow or an
// impossible size is an error that names the requested size, never a smaller allocation.
//
// Errors: a negative size, more than INT64_MAX elements or offsets beyond 64 bits are a
// ValueError (the shape cannot exist); a byte size over kMaxAllocBytes is an
// OutOfMemoryError carrying the requested bytes (the shape exists, no allocation can hold
// it), like any other allocation that cannot be satisfied.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cudakit/tensor.hpp"

namespace cudakit::detail {

// Largest allocation in bytes: pointer differences inside one object must fit ptrdiff_t.
inline constexpr std::uint64_t kMaxAllocBytes = static_cast<std::uint64_t>(PTRDIFF_MAX);

// The storage a strided view reaches, as element offsets from its first element.
struct StorageSpan {
  std::int64_t numel = 0;
  std::int64_t lo = 0;     // lowest offset reached (<= 0 with negative strides)
  std::int64_t hi = 0;     // highest offset reached
  std::size_t nbytes = 0;  // bytes of [lo, hi]; 0 when numel == 0
  bool empty() const noexcept { return numel == 0; }
};

// Element count of `sizes`: ValueError for a negative size or more than INT64_MAX
// elements. `what` prefixes the message ("empty()", "view()", "from_dlpack").
std::int64_t checked_numel(const Shape& sizes, const char* what);

// Span and byte size of a (sizes, strides) view of `dtype`: ValueError as checked_numel, or
// when an offset overflows 64 bits. Bytes over kMaxAllocBytes: for an `allocation`, an
// OutOfMemoryError (device = `device`'s index, -1 for host) carrying the requested bytes;
// for a view of existing memory (views, from_blob, DLPack), a ValueError.
StorageSpan checked_span(const Shape& sizes, const Shape& strides, DType dtype,
                         const Device& device, const char* what, bool allocation = true);

}  // namespace cudakit::detail
