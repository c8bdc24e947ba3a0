#include "cudakit/libraries.hpp"

#include "backend/backend.hpp"

namespace cudakit {

std::vector<LibraryInfo> optional_libraries() { return detail::backend().optional_libraries(); }

}  // namespace cudakit
