// cuBLAS, loaded with dlopen at first use (libcublas.so.13), never linked. One handle per
// (device, thread), created lazily and intentionally never destroyed (destroying at thread
// or process exit would call into the driver during teardown, see backend.hpp).
#pragma once

#include "backend/backend.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::detail {
// The calling thread's cuBLAS handle for the current device (cublasHandle_t), bound to no
// particular stream. Throws NotSupportedError on the emulated backend or without cuBLAS.
void* current_blas_handle();
}  // namespace cudakit::detail

namespace cudakit::ops {
// out[m,n] = a[m,k] @ b[k,n] on `device`, ordered on `s`. a/b may be row- or column-major.
void blas_gemm(int device, detail::StreamHandle s, const Tensor& a, const Tensor& b, Tensor& out,
               bool allow_tf32);
}  // namespace cudakit::ops
