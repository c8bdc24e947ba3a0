// CUDA executor: launches the built-in kernels (src/kernels/*.cu) on a stream.
#include <string>

#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "ops/dispatch.hpp"
#include "ops/executor.hpp"
#include "ops/kernels.hpp"

namespace cudakit::ops {
namespace {
constexpr unsigned kBlock = 256;

template <class Args>
void launch(int device, detail::StreamHandle s, KernelModule m, const std::string& name,
            std::int64_t items, Args args) {
  detail::FunctionHandle f = get_kernel(device, m, name.c_str());
  void* params[] = {&args};
  detail::backend().launch_kernel(f, grid_for(device, items, kBlock), detail::Dim3{kBlock, 1, 1}, 0, s, params);
}
}  // namespace

void cuda_binary(int device, detail::StreamHandle s, const BinaryArgs& a, int dtype) {
  launch(device, s, KernelModule::ops, std::string("ck_binary_") + dtype_suffix(dtype), a.n, a);
}
void cuda_unary(int device, detail::StreamHandle s, const UnaryArgs& a, int dtype) {
  launch(device, s, KernelModule::ops, std::string("ck_unary_") + dtype_suffix(dtype), a.n, a);
}
void cuda_cast(int device, detail::StreamHandle s, const CastArgs& a, int dst) {
  launch(device, s, KernelModule::ops, std::string("ck_cast_") + dtype_suffix(dst), a.n, a);
}
void cuda_fill(int device, detail::StreamHandle s, const FillArgs& a, int esize) {
  launch(device, s, KernelModule::ops, "ck_fill_" + std::to_string(esize), a.n, a);
}

void cuda_sum(int device, detail::StreamHandle s, const void* in, const OffsetCalc<1>& calc,
              std::int64_t n, int in_dtype, void* out, int out_dtype) {
  // Pass 1: each block reduces a grid-stride slice into partials[block] (accumulator type,
  // at most 16 bytes); pass 2: one block reduces the partials and converts to out's dtype.
  detail::Dim3 grid = grid_for(device, n, kBlock);
  Allocation partials = allocate_device(static_cast<std::size_t>(grid.x) * 16, device, StreamRef::from_handle(s, device));
  std::string sfx = dtype_suffix(in_dtype);
  {
    detail::FunctionHandle f = get_kernel(device, KernelModule::ops, ("ck_sum_partial_" + sfx).c_str());
    const void* in_p = in;
    OffsetCalc<1> c = calc;
    std::int64_t nn = n;
    void* part = partials.get();
    void* params[] = {&in_p, &c, &nn, &part};
    detail::backend().launch_kernel(f, grid, detail::Dim3{kBlock, 1, 1}, 0, s, params);
  }
  {
    detail::FunctionHandle f = get_kernel(device, KernelModule::ops, ("ck_sum_final_" + sfx).c_str());
    const void* part = partials.get();
    int count = static_cast<int>(grid.x);
    void* o = out;
    void* params[] = {&part, &count, &o};
    detail::backend().launch_kernel(f, detail::Dim3{1, 1, 1}, detail::Dim3{kBlock, 1, 1}, 0, s, params);
  }
  (void)out_dtype;
  // `partials` is returned to the caching allocator ordered on `s` (allocated there).
}

void cuda_sample(int device, detail::StreamHandle s, const rng::SampleArgs& a) {
  std::int64_t blocks = (a.n + rng::per_block(a.dtype, a.dist, a.range) - 1) / rng::per_block(a.dtype, a.dist, a.range);
  launch(device, s, KernelModule::random, "ck_sample", blocks, a);
}

}  // namespace cudakit::ops
