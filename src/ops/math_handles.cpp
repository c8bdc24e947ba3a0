// current_blas_handle() / current_solver_handle(): the vendor math-library handles of the
// calling thread, owned by the backend (loading, per-thread caching, never destroyed).
#include "backend/math_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/stream.hpp"

namespace cudakit {

void* current_blas_handle() {
  int dev = current_device();
  return detail::math_ops().blas_handle(dev);
}

void* current_solver_handle() {
  int dev = current_device();
  return detail::math_ops().solver_handle(dev, current_stream(dev).handle());
}

}  // namespace cudakit
