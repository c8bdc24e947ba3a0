// Matrix products of device tensors, through the backend's GEMM (cuBLAS on cuda, CBLAS on
// emulated): this file only maps tensor layouts onto BLAS's column-major arguments, one
// product or a strided batch of them (matmul.cpp decides shapes and broadcasting).
#pragma once

#include <cstdint>

#include "backend/types.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::ops {

// `t`'s matrices (its last two dims) broadcast to the batch shape `batch`, as one tensor whose
// matrix i starts `stride` elements after matrix 0 (data_ptr()). `t` is used as it is when its
// broadcast batch dims flatten to one stride: contiguous batch dims, or a stride of 0 where
// the whole batch is one broadcast matrix; otherwise the broadcast is materialised
// (expand + contiguous). `t` has at least 2 dims and broadcasts to batch + its last two.
struct BatchView {
  Tensor t;               // shape batch + [rows, cols]
  std::int64_t stride = 0;  // elements from one matrix to the next
};
BatchView batch_view(const Tensor& t, const Shape& batch);

// A BatchView BLAS can read: its matrices are row-major (stride(-1) == 1) or column-major
// (stride(-2) == 1) with a leading dimension BLAS accepts; anything else is copied first (the
// operand made contiguous, keeping a stride-0 broadcast when it can).
struct BlasOperand {
  BatchView v;
  bool col_major = false;  // stride(-2) == 1: BLAS sees the row-major transpose
  int ld = 1;
};
BlasOperand blas_operand(const Tensor& t, const Shape& batch);

// out[i] = a[i] @ b[i] for the `batch` products of the views (a: m x k, b: k x n matrices) on
// `device`, ordered on `s`. out is contiguous, [batch..., m, n] (batch * m * n elements).
// k > 0, m * n > 0, batch > 0; m, n, k below 2^31 (the caller checks). One backend GEMM call
// (a strided batched one for batch > 1; several when batch exceeds 2^31 - 1).
void blas_gemm(int device, detail::StreamHandle s, const BlasOperand& a, const BlasOperand& b,
               Tensor& out, std::int64_t batch, bool allow_tf32);

}  // namespace cudakit::ops
