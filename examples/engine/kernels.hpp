// The engine example's own kernels (kernels.cu, built with nvcc when a CUDA toolkit is
// found): plain CUDA C++ launched on cudakit streams. On the cuda backend a cudakit Stream's
// handle() is a cudaStream_t of the device's primary context, the context the CUDA runtime
// uses, and cudakit's device pointers are ordinary CUDA device pointers.
#pragma once

#include <cstdint>

#include <cudakit/stream.hpp>

namespace engine {

// x[i] = x[i] * scale + bias for i < n, on `stream` (a grid-stride loop).
void scale_bias(float* x, std::int64_t n, float scale, float bias, cudakit::StreamRef stream);

}  // namespace engine
