#include "cudakit/libraries.hpp"

#include "backend/device_ops.hpp"

namespace cudakit {

std::vector<LibraryInfo> optional_libraries() { return detail::device_ops().optional_libraries(); }

}  // namespace cudakit
