// The span of storage a strided view touches, for wrapping foreign memory (DLPack, NumPy).
// Internal header shared by the DLPack importer and the NumPy binding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cudakit/tensor.hpp"

namespace cudakit::detail {

struct StridedExtent {
  std::int64_t lo = 0;  // lowest element offset reached (<= 0 with negative strides)
  std::int64_t hi = 0;  // highest element offset reached
  bool empty = false;   // some dimension has size 0
  std::size_t nbytes(std::int64_t element_size) const {
    return empty ? 0 : static_cast<std::size_t>((hi - lo + 1) * element_size);
  }
};

inline StridedExtent strided_extent(const Shape& sizes, const Shape& strides) {
  StridedExtent e;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) e.empty = true;
    if (strides[i] >= 0) e.hi += (sizes[i] - 1) * strides[i];
    else e.lo += (sizes[i] - 1) * strides[i];
  }
  if (e.empty) e.lo = e.hi = 0;
  return e;
}

}  // namespace cudakit::detail
