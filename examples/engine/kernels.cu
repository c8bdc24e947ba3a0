// Compiled by nvcc in its default dialect (C++17): cudakit's stream.hpp is one of the headers
// that work there (tests/layout/test_headers.py keeps it so).
#include "kernels.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace engine {
namespace {

__global__ void scale_bias_kernel(float* x, std::int64_t n, float scale, float bias) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    x[i] = x[i] * scale + bias;
  }
}

}  // namespace

void scale_bias(float* x, std::int64_t n, float scale, float bias, cudakit::StreamRef stream) {
  const int threads = 256;
  const int blocks = static_cast<int>((n + threads - 1) / threads < 1024 ? (n + threads - 1) / threads : 1024);
  // The interop: cudakit's native stream handle is the runtime's cudaStream_t.
  scale_bias_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
      x, n, scale, bias);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("scale_bias launch failed: ") + cudaGetErrorString(err));
  }
}

}  // namespace engine
