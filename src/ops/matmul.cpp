// matmul: torch.matmul's shape rules (1-D operands, batch dims and their broadcasting), then
// one GEMM call through ops::blas_gemm (device tensors) or the reference loop (host tensors).
//
// Shapes, as torch.matmul:
//   * a 1-D first operand is a row (1, k), a 1-D second one a column (k, 1); the added dim is
//     removed from the result again (1-D @ 1-D is a 0-d dot product);
//   * dims before the last two are batch dims and broadcast against each other:
//     (2, 1, 3, 4) @ (5, 4, 6) is (2, 5, 3, 6);
//   * mismatched inner sizes and batch dims that do not broadcast are a ValueError worded as
//     torch's errors are.
// How it runs:
//   * an N-D first operand against a 1-D / 2-D second one whose batch dims fold into its rows
//     without a copy is one plain GEMM over (batch * m, k), as torch folds it: the same cuBLAS
//     call torch makes and the same TunableOp signature (GemmTunableOp);
//   * otherwise one strided batched GEMM (GemmStridedBatchedTunableOp) when each operand's
//     broadcast batch is one stride: contiguous batch dims, or stride 0 for an operand broadcast
//     over the whole batch; an operand whose broadcast needs more (it mixes broadcast and real
//     batch dims) is materialised first (ops::blas_operand);
//   * the output is always contiguous.
// Graph capture and cuBLAS workspaces are ops::blas_gemm's business (blas.cpp), unchanged by
// batching: the whole batch is one product there.
#include <climits>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "cudakit/error.hpp"
#include "cudakit/ops.hpp"
#include "ops/blas.hpp"
#include "ops/executor.hpp"
#include "tensor/size_math.hpp"

namespace cudakit {
using namespace ops;

namespace {

Shape leading(const Tensor& t) {  // the batch dims: all but the last two
  return Shape(t.sizes().begin(), t.sizes().end() - 2);
}

// The broadcast batch shape, or torch's error for dims that do not broadcast (its wording,
// the dims counted from the left of the broadcast shape).
Shape broadcast_batch(const Shape& a, const Shape& b, const Tensor& a0, const Tensor& b0) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) {
      throw ValueError("matmul: shapes " + shape_str(a0.sizes()) + " and " + shape_str(b0.sizes()) +
                       " cannot be multiplied: the size of tensor a (" + std::to_string(x) +
                       ") must match the size of tensor b (" + std::to_string(y) +
                       ") at non-singleton dimension " + std::to_string(i) +
                       " of the batch dimensions (sizes must match or one of them must be 1)");
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

void check_blas_dim(std::int64_t v, const char* what, const Tensor& a0, const Tensor& b0) {
  if (v > INT_MAX) {
    throw ValueError("matmul: shapes " + shape_str(a0.sizes()) + " and " + shape_str(b0.sizes()) +
                     ": " + what + " = " + std::to_string(v) +
                     " is 2^31 or more, which BLAS cannot take in one product");
  }
}

// out = a @ b where a is [batch..., m, k] and b is [batch..., k, n] after broadcasting to
// `batch` (either may have fewer batch dims); out is [batch..., m, n], contiguous.
void run_product(const Tensor& a, const Tensor& b, const Shape& batch, Tensor& out,
                 const Tensor& a0, const Tensor& b0) {
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const std::int64_t count = detail::checked_numel(batch, "matmul");
  if (count == 0 || m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: zeros, as torch
    out.zero_();
    return;
  }
  const Device d = a.device();
  if (!d.is_cpu()) {  // the backend's GEMM (cuBLAS / CBLAS), stream-ordered
    check_blas_dim(m, "m", a0, b0);
    check_blas_dim(n, "n", a0, b0);
    check_blas_dim(k, "k", a0, b0);
    const BlasOperand pa = blas_operand(a, batch), pb = blas_operand(b, batch);
    sanitize("matmul", d, {{&pa.v.t, "self"}, {&pb.v.t, "other"}}, {{&out, nullptr}});
    blas_gemm(d.index, stream_for(d), pa, pb, out, count, matmul_allow_tf32());
    return;
  }
  // Host tensors: the reference loop reads any matrix strides, so only the batch is
  // flattened (a copy only for a broadcast that mixes broadcast and real batch dims).
  const BatchView va = batch_view(a, batch), vb = batch_view(b, batch);
  const void* A = va.t.data_ptr();
  const void* B = vb.t.data_ptr();
  void* C = out.data_ptr();
  const auto sa0 = va.t.stride(-2), sa1 = va.t.stride(-1), sb0 = vb.t.stride(-2), sb1 = vb.t.stride(-1);
  const auto ba = va.stride, bb = vb.stride;
  const int t = code(out.dtype());
  run_cpu(d, {out.storage(), va.t.storage(), vb.t.storage()},
          [=] { cpu_matmul(A, sa0, sa1, B, sb0, sb1, C, m, n, k, t, count, ba, bb); }, "ck_matmul");
}

}  // namespace

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  check_same_device(a0, b0, "matmul");
  if (a0.dim() == 0 || b0.dim() == 0)
    throw ValueError("matmul: both arguments need at least 1 dimension, but they are " +
                     std::to_string(a0.dim()) + "-D and " + std::to_string(b0.dim()) + "-D");
  if (a0.dtype() != b0.dtype())
    throw ValueError(std::string("matmul: expected both operands to have the same dtype, got ") +
                     dtype_name(a0.dtype()) + " and " + dtype_name(b0.dtype()));
  const DType t = a0.dtype();
  if (!is_floating_point(t))
    throw ValueError(std::string("matmul supports float16, bfloat16, float32 and float64, not ") + dtype_name(t));
  const bool a_vec = a0.dim() == 1, b_vec = b0.dim() == 1;
  const Tensor a = a_vec ? a0.unsqueeze(0) : a0;   // a row: (1, k)
  const Tensor b = b_vec ? b0.unsqueeze(1) : b0;   // a column: (k, 1)
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (k != b.size(-2))
    throw ValueError("matmul: shapes " + shape_str(a0.sizes()) + " and " + shape_str(b0.sizes()) +
                     " cannot be multiplied (" + std::to_string(k) + " != " + std::to_string(b.size(-2)) + ")");
  const Shape batch = broadcast_batch(leading(a), leading(b), a0, b0);
  // The result's shape: the batch, then m unless a was 1-D, then n unless b was 1-D.
  Shape result = batch;
  if (!a_vec) result.push_back(m);
  if (!b_vec) result.push_back(n);
  const TensorOptions opts{t, a0.device(), false};

  // torch's fold: a's batch dims merge into its rows without a copy, and b has none (unless
  // the merged rows would exceed what one BLAS product takes: then a batch of products).
  if (a.dim() > 2 && b.dim() == 2) {
    const Shape rows{detail::checked_numel(leading(a), "matmul") * m, k};
    if (rows[0] <= INT_MAX && compute_view_strides(a.sizes(), a.strides(), rows)) {
      const Tensor folded = a.view(rows);
      Tensor out = empty({rows[0], n}, opts);
      run_product(folded, b, Shape{}, out, a0, b0);
      return out.view(result);
    }
  }
  Shape full = batch;
  full.push_back(m);
  full.push_back(n);
  Tensor out = empty(full, opts);
  run_product(a, b, batch, out, a0, b0);
  return out.view(result);
}

}  // namespace cudakit
