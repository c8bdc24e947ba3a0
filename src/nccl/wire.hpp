// How tensors become the seam's collective arguments (backend/collectives.hpp): the NCCL data
// type and count of a dtype, the operator adjustments NCCL needs, and keeping buffers alive
// while a stream uses them. Shared by src/nccl and src/comm.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/collectives.hpp"
#include "cudakit/nccl.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::detail {

struct WireType {
  CommDataType type = CommDataType::uint8;
  std::size_t count = 0;  // elements of `type`
  nccl::ReduceOp op = nccl::ReduceOp::sum;
};

// The NCCL type, count and operator for `numel` elements of `dtype`. Data movement
// (reduces=false) takes any dtype (as bytes where NCCL has no type). Reductions: bool becomes
// uint8 with sum/avg->max (logical or) and prod->min (logical and); complex becomes pairs of
// reals for sum and avg; int16, and complex with prod/max/min, and avg on integers or bool,
// are ValueErrors naming `fn`, the dtype and the operator.
WireType wire_type(DType dtype, std::int64_t numel, nccl::ReduceOp op, bool reduces, const char* fn);

// Owner of the tensors' storage, for CommArgs::keep_alive.
std::shared_ptr<const void> keep_alive(std::vector<Tensor> tensors);

// Marks `t`'s memory as used by `s` when `s` is not the stream it was allocated on, so the
// caching allocator does not hand it out again before `s` is done (torch's record_stream).
void note_stream_use(const Tensor& t, StreamRef s);

// ValueError "fn: what" unless op is one of the five operators.
void check_op(nccl::ReduceOp op, const char* fn);

}  // namespace cudakit::detail
