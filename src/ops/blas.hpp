// Matrix products of device tensors, through the backend's GEMM (cuBLAS on cuda, CBLAS on
// emulated): this file only maps tensor layouts onto BLAS's column-major arguments.
#pragma once

#include "backend/types.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::ops {
// out[m,n] = a[m,k] @ b[k,n] on `device`, ordered on `s`. a/b may be row- or column-major
// (anything else is copied to contiguous first); out is contiguous. k > 0, m * n > 0.
void blas_gemm(int device, detail::StreamHandle s, const Tensor& a, const Tensor& b, Tensor& out,
               bool allow_tf32);
}  // namespace cudakit::ops
