#include "nccl/wire.hpp"

#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail {

void check_op(nccl::ReduceOp op, const char* fn) {
  const int v = static_cast<int>(op);
  if (v < 0 || v > 4) {
    throw ValueError(std::string(fn) + ": unknown reduction operator " + std::to_string(v) +
                     " (accepted: SUM=0, PROD=1, MAX=2, MIN=3, AVG=4)");
  }
}

WireType wire_type(DType dtype, std::int64_t numel, nccl::ReduceOp op, bool reduces, const char* fn) {
  using nccl::ReduceOp;
  WireType w;
  w.count = static_cast<std::size_t>(numel);
  w.op = op;
  auto refuse = [&](const std::string& why) {
    throw ValueError(std::string(fn) + ": cannot reduce " + dtype_name(dtype) + " tensors with " +
                     nccl::reduce_op_name(op) + ": " + why);
  };
  if (reduces) check_op(op, fn);
  switch (dtype) {
    case DType::uint8: w.type = CommDataType::uint8; break;
    case DType::int8: w.type = CommDataType::int8; break;
    case DType::int32: w.type = CommDataType::int32; break;
    case DType::int64: w.type = CommDataType::int64; break;
    case DType::float16: w.type = CommDataType::float16; break;
    case DType::bfloat16: w.type = CommDataType::bfloat16; break;
    case DType::float32: w.type = CommDataType::float32; break;
    case DType::float64: w.type = CommDataType::float64; break;
    case DType::bool_:
      w.type = CommDataType::uint8;
      if (reduces) {
        if (op == ReduceOp::avg) refuse("an average of booleans is not a boolean");
        if (op == ReduceOp::sum) w.op = ReduceOp::max;   // logical or
        if (op == ReduceOp::prod) w.op = ReduceOp::min;  // logical and
      }
      break;
    case DType::int16:
      if (reduces) refuse("NCCL has no 16-bit integer type; convert to int32 first");
      w.type = CommDataType::uint8;
      w.count *= 2;
      break;
    case DType::complex64:
    case DType::complex128:
      if (reduces && op != ReduceOp::sum && op != ReduceOp::avg) {
        refuse("only sum and avg are defined elementwise on complex numbers");
      }
      w.type = dtype == DType::complex64 ? CommDataType::float32 : CommDataType::float64;
      w.count *= 2;
      break;
  }
  if (reduces && op == ReduceOp::avg && is_integral(dtype, false)) {
    // NCCL accepts it (truncating division); torch users expect a float mean. Refuse loudly.
    refuse("the average of integers is not an integer; convert to a floating-point dtype");
  }
  return w;
}

std::shared_ptr<const void> keep_alive(std::vector<Tensor> tensors) {
  auto owners = std::make_shared<std::vector<std::shared_ptr<Storage>>>();
  owners->reserve(tensors.size());
  for (const Tensor& t : tensors) {
    if (t.defined()) owners->push_back(t.storage());
  }
  return owners;
}

void note_stream_use(const Tensor& t, StreamRef s) {
  if (!t.defined() || !t.is_cuda() || !t.data_ptr()) return;
  const auto& st = t.storage();
  if (!st || st->is_external()) return;  // the owning framework manages it
  if (auto alloc = st->stream(); alloc && !(*alloc == s)) record_stream(st->data(), s);
}

}  // namespace cudakit::detail
