// The two executors behind every built-in op. An op prepares one argument block
// (kernels/elementwise.hpp) and hands it to:
//   * the CPU implementation (cpu_kernels.cpp): run inline for host tensors, or enqueued as
//     a host task on the current stream for emulated device tensors (the emulated device's
//     memory is host memory), keeping host and foreign operands alive until it ran (cudakit's
//     own device blocks are stream-ordered by the allocator, as on CUDA);
//   * the CUDA launcher (cuda_kernels.cpp): a kernel from the embedded fatbin on the current
//     stream of the tensor's device.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "backend/types.hpp"
#include "cudakit/tensor.hpp"
#include "instrument/observers.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/philox.hpp"

namespace cudakit::ops {

// host: a CPU tensor, run inline. emulated: a device tensor on a backend without kernels
// (capabilities().runs_kernels false), run as a host task. cuda: a device kernel.
enum class Exec { host, emulated, cuda };
Exec exec_for(const Device& d);
detail::StreamHandle stream_for(const Device& d);  // current stream of a device tensor
inline int code(DType t) { return static_cast<int>(t); }

// Runs `fn` for device `d`: inline (host), or as a host task on d's current stream that
// keeps the host and foreign storages of `keep` alive until it has run. On the emulated device the task stands for a kernel
// named `kernel` (a string literal): graph capture records it as a kernel node.
void run_cpu(const Device& d, std::vector<std::shared_ptr<Storage>> keep, std::function<void()> fn,
             const char* kernel = "ck_host_op");

// The stream sanitizer's view of an op (src/instrument/observers.hpp): before an op enqueues
// its work on the current stream of device `d`, it names what it reads and writes (argument
// names as torch's schemas; nullptr: the op's result). With nothing observing, this is one
// load; host tensors are ignored. Throws CUDASanitizerErrors in raise mode, before anything
// is enqueued.
inline void sanitize(const char* kernel, const Device& d,
                     std::initializer_list<instrument::Operand> reads,
                     std::initializer_list<instrument::Operand> writes) {
  if (const auto* o = instrument::stream_observer()) [[unlikely]] {  // sanitizer
    if (!d.is_cpu()) o->op(kernel, stream_for(d), d.index, reads, writes);
  }
}

// Collapses (sizes, strides of N operands) into at most 8 dims, innermost first. Throws
// NotSupportedError if more than 8 non-mergeable dims remain.
template <int N>
OffsetCalc<N> make_calc(const Shape& sizes, const std::array<const Shape*, N>& strides);

// Both operands defined and on one device, else a ValueError naming `op` and the devices
// (shared by the op files: ops.cpp, matmul.cpp).
void check_same_device(const Tensor& a, const Tensor& b, const char* op);

// ---- CPU implementations (plain functions on host pointers) ----
void cpu_binary(const BinaryArgs& a, int dtype);
// Comparisons (a.op: CompareOp, bool output) and pow (a.op unused), src/kernels/compare_pow.hpp.
void cpu_compare(const BinaryArgs& a, int dtype);
void cpu_pow(const BinaryArgs& a, int dtype);
void cpu_unary(const UnaryArgs& a, int dtype);
void cpu_cast(const CastArgs& a, int dst_dtype);
void cpu_fill(const FillArgs& a, int elem_size);
void cpu_arange(const ArangeArgs& a, int dtype);
// Sums n elements (offsets from calc) of dtype `in_dtype` into *out of `out_dtype`.
void cpu_sum(const void* in, const OffsetCalc<1>& calc, std::int64_t n, int in_dtype,
             void* out, int out_dtype);
// C_i[m,n] = A_i[m,k] @ B_i[k,n] for i in [0, batch), with element strides (row, col) for
// each matrix and (batch_a, batch_b) between consecutive A / B matrices (0: one broadcast
// matrix); C is contiguous ([batch, m, n]).
void cpu_matmul(const void* A, std::int64_t sa0, std::int64_t sa1, const void* B,
                std::int64_t sb0, std::int64_t sb1, void* C, std::int64_t m, std::int64_t n,
                std::int64_t k, int dtype, std::int64_t batch = 1, std::int64_t batch_a = 0,
                std::int64_t batch_b = 0);
void cpu_sample(const rng::SampleArgs& a);

// ---- CUDA launchers (NotSupportedError when built without kernels) ----
void cuda_binary(int device, detail::StreamHandle s, const BinaryArgs& a, int dtype);
void cuda_compare(int device, detail::StreamHandle s, const BinaryArgs& a, int dtype);
void cuda_pow(int device, detail::StreamHandle s, const BinaryArgs& a, int dtype);
void cuda_unary(int device, detail::StreamHandle s, const UnaryArgs& a, int dtype);
void cuda_cast(int device, detail::StreamHandle s, const CastArgs& a, int dst_dtype);
void cuda_fill(int device, detail::StreamHandle s, const FillArgs& a, int elem_size);
void cuda_arange(int device, detail::StreamHandle s, const ArangeArgs& a, int dtype);
void cuda_sum(int device, detail::StreamHandle s, const void* in, const OffsetCalc<1>& calc,
              std::int64_t n, int in_dtype, void* out, int out_dtype);
void cuda_sample(int device, detail::StreamHandle s, const rng::SampleArgs& a);

// Converts a Scalar to the bytes of one element of `t` (fill_, full). `op` names the caller
// in the error: a value that overflows `t` is a cudakit::Error (RuntimeError, torch's
// "value cannot be converted to type uint8_t without overflow").
void scalar_to_bytes(const Scalar& v, DType t, unsigned char out[16], const char* op);
// The scalar operand of an op computing in dtype `t`, in t's compute type (float for
// float16/bfloat16), with the same overflow check against the compute type.
void scalar_operand(const Scalar& v, DType t, ScalarValue& out, const char* op);

}  // namespace cudakit::ops
