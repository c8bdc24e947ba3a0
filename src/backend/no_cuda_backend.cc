// Linked instead of src/backend/cuda when the CUDA headers were not found at build time.
#include "backend/backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail {
std::unique_ptr<Backend> make_cuda_backend() {
  throw NotSupportedError(
      "cudakit was built without the CUDA headers, so the 'cuda' backend is absent: "
      "set CUDAKIT_BACKEND=emulated, or rebuild with the CUDA toolkit installed");
}
}  // namespace cudakit::detail
