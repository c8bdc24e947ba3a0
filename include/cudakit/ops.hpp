// Built-in operations on cudakit::Tensor: few, correct and fast. Device tensors run on the
// current stream of their device (CUDA kernels on the cuda backend, host tasks on the
// emulated backend); host tensors run synchronously on the calling thread.
//
// Scalar operands (the `const Scalar&` overloads) are kernel arguments, as in torch: the
// number is converted to the op's compute type (float for float16/bfloat16) and passed by
// value to the kernel, with no allocation, no copy and no synchronisation, so these ops can
// be captured in a CUDA graph. A number that does not fit the compute type is a
// cudakit::Error, as torch ("value cannot be converted to type uint8_t without overflow";
// negative integers wrap for unsigned types down to -max).
//
// Type promotion follows torch (result_type): dimensioned tensors outrank 0-d tensors,
// which outrank Python-style scalars, except when a lower-ranked operand is of a higher
// category (bool < integer < floating < complex). Division is true division (integers
// promote to float32). Operands must be on the same device (ValueError otherwise).
//
// Thread-safety: all functions are thread-safe; they order work on the calling thread's
// current stream.
#pragma once

#include "cudakit/export.hpp"
#include "cudakit/tensor.hpp"

namespace CUDAKIT_API cudakit {

// torch.result_type for two operands.
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor rdiv(const Tensor& a, const Scalar& b);  // b / a
// Elementwise comparisons (torch.eq/ne/lt/le/gt/ge): bool tensors of the broadcast shape.
// Operands are compared in their promoted dtype (result_type), so an int tensor against 2.5
// compares as float. Only eq/ne accept complex operands (ValueError otherwise, as torch).
// An integer number outside an integer tensor's range compares exactly, in int64 (u8 < 256 is
// all true; torch wraps the number to the tensor's dtype there and raises nothing either).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
// torch.pow in the promoted dtype. Integers: exact with wrap-around; a negative integer
// scalar exponent on an integer tensor is a ValueError (torch's "Integers to negative
// integer powers are not allowed"); negative elements of an integer exponent tensor give
// torch's results (1 for base 1, +-1 for base -1, else 0). Two bool operands: ValueError.
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor pow(const Scalar& base, const Tensor& exponent);
Tensor neg(const Tensor& a);
Tensor relu(const Tensor& a);
// In-place forms: the result is cast to a's dtype (ValueError if promotion would need a
// wider category, as torch: e.g. int tensor += float).
Tensor& add_(Tensor& a, const Tensor& b);
Tensor& sub_(Tensor& a, const Tensor& b);
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& div_(Tensor& a, const Tensor& b);
Tensor& add_(Tensor& a, const Scalar& b);
Tensor& sub_(Tensor& a, const Scalar& b);
Tensor& mul_(Tensor& a, const Scalar& b);
Tensor& div_(Tensor& a, const Scalar& b);

// Sum of all elements as a 0-d tensor (integers and bool sum to int64), or over `dim`.
Tensor sum(const Tensor& a);

// torch.matmul (float16, bfloat16, float32, float64; both operands of one dtype): a 1-D first
// operand is a row and a 1-D second one a column, the added dim removed from the result again
// (1-D @ 1-D is a 0-d dot product); dims before the last two are batch dims and broadcast
// ((2, 1, 3, 4) @ (5, 4, 6) is (2, 5, 3, 6)). The result is contiguous. Device tensors run one
// backend GEMM (cuBLAS on cuda, CBLAS on emulated; through TunableOp when enabled): a plain
// one for 1-D / 2-D operands and for an N-D operand against a matrix whose batch folds into
// its rows (as torch folds it), else one strided batched GEMM, with a broadcast operand read
// in place (batch stride 0) and only batches that no single stride describes copied first.
// Host tensors run a reference loop (double accumulation). ValueError, worded as
// torch's, for inner sizes that differ, batch dims that do not broadcast, 0-d operands and
// other dtypes.
Tensor matmul(const Tensor& a, const Tensor& b);

// torch.backends.cuda.matmul.allow_tf32: lets float32 GEMMs use TF32 tensor cores.
// Default false (torch's default). Process-wide, thread-safe.
void set_matmul_allow_tf32(bool allow) noexcept;
bool matmul_allow_tf32() noexcept;

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);

}  // namespace cudakit
