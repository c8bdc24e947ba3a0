// CUDA executor: launches the built-in kernels (src/kernels/*.cu) on a stream.
//
// Function handles come from the one handle cache of src/ops/kernels.hpp (a fixed slot per
// kernel), so a launch after the first builds no name string, takes no lock and allocates
// nothing.
#include <algorithm>
#include <string>

#include "backend/kernel_ops.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "ops/dispatch.hpp"
#include "ops/executor.hpp"
#include "ops/kernels.hpp"

namespace cudakit::ops {
namespace {
constexpr unsigned kBlock = 256;
constexpr int kTileVecs = 4;           // = kTileVecs of the one-tile-per-block kernels (ops.cu)
constexpr int kRngBlocksPerSm = 4;     // = __launch_bounds__ of ck_uniform_f32 (random.cu)
constexpr int kNormalBlocksPerSm = 4;  // = __launch_bounds__ of ck_normal_f32 (random.cu)

// Kernel slots in the ops module: one per (family, dtype[, src dtype]).
constexpr int kTypes = 12;
// kCastC stays last: it takes kTypes * kTypes slots (one per dtype pair).
enum Family : int { kBinary = 0, kUnary, kCast, kSumPartial, kSumFinal, kUnaryC, kFill, kCompare, kPow, kArange,
                    kBinaryC, kFillC, kCastC };
static_assert(kCastC * kTypes + kTypes * kTypes <= kKernelSlotsPerModule, "ops kernel slots");
// Slots in the random module.
enum RngSlot : int { kUniformF32 = 0, kNormalF32, kSampleAny };

template <class NameFn>
detail::FunctionHandle kernel(int device, KernelModule m, int slot, NameFn name) {
  return cached_kernel(device, m, slot, name);
}

// One-wave grid for kernels whose __launch_bounds__ guarantees `per_sm` resident blocks.
detail::Dim3 wave_grid(int device, std::int64_t items, int per_sm) {
  std::int64_t need = std::max<std::int64_t>(1, (items + kBlock - 1) / kBlock);
  return detail::Dim3{static_cast<unsigned>(std::min<std::int64_t>(need, std::int64_t{multiprocessor_count(device)} * per_sm)), 1, 1};
}

// `f` belongs to `device`'s context (its module was loaded there), and the driver launches a
// function only under its own context: make that device current for the launch. Found on two
// GPUs: a device-1 tensor op issued from a thread whose current device was 0 failed with
// CUDA_ERROR_INVALID_HANDLE. A no-op (a thread-local compare) when `device` is current.
void go(int device, detail::FunctionHandle f, detail::Dim3 grid, detail::StreamHandle s,
        void** params, detail::Dim3 block = detail::Dim3{kBlock, 1, 1}) {
  DeviceGuard on(device);
  detail::kernel_ops().launch_kernel(f, grid, block, 0, s, params);
}

template <class Args>
void launch(int device, detail::StreamHandle s, detail::FunctionHandle f, std::int64_t items, Args args) {
  void* params[] = {&args};
  go(device, f, grid_for(device, items, kBlock), s, params);
}

// Grid of the one-tile-per-block kernels (ops.cu): one block per kBlock x kTileVecs 16-byte
// vectors of `elem_bytes`-byte elements (the wider of input and output), at least one.
detail::Dim3 tile_grid(std::int64_t n, int elem_bytes) {
  const std::int64_t per_vec = 16 / elem_bytes;
  const std::int64_t per_tile = std::int64_t{kBlock} * kTileVecs;
  const std::int64_t tiles = (n / per_vec + per_tile - 1) / per_tile;
  return detail::Dim3{static_cast<unsigned>(std::clamp<std::int64_t>(tiles, 1, 0x7fffffff)), 1, 1};
}

int code_size(int code) {
  static constexpr int kSizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 8, 16};  // DTypeCode order
  return kSizes[code];
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }
bool is_real(int code) { return code != kComplex64 && code != kComplex128; }
}  // namespace

void cuda_binary(int device, detail::StreamHandle s, const BinaryArgs& a, int dtype) {
  if (a.contiguous && is_real(dtype) && aligned16(a.out) && aligned16(a.a) &&
      (a.scalar != kNoScalar || aligned16(a.b))) {
    auto f = kernel(device, KernelModule::ops, kBinaryC * kTypes + dtype,
                    [&] { return std::string("ck_binaryc_") + dtype_suffix(dtype); });
    BinaryArgs args = a;
    void* params[] = {&args};
    go(device, f, tile_grid(a.n, code_size(dtype)), s, params);
    return;
  }
  auto f = kernel(device, KernelModule::ops, kBinary * kTypes + dtype,
                  [&] { return std::string("ck_binary_") + dtype_suffix(dtype); });
  launch(device, s, f, a.n, a);
}

void cuda_compare(int device, detail::StreamHandle s, const BinaryArgs& a, int dtype) {
  auto f = kernel(device, KernelModule::ops, kCompare * kTypes + dtype,
                  [&] { return std::string("ck_compare_") + dtype_suffix(dtype); });
  launch(device, s, f, a.n, a);
}

void cuda_pow(int device, detail::StreamHandle s, const BinaryArgs& a, int dtype) {
  auto f = kernel(device, KernelModule::ops, kPow * kTypes + dtype,
                  [&] { return std::string("ck_pow_") + dtype_suffix(dtype); });
  launch(device, s, f, a.n, a);
}

void cuda_arange(int device, detail::StreamHandle s, const ArangeArgs& a, int dtype) {
  auto f = kernel(device, KernelModule::ops, kArange * kTypes + dtype,
                  [&] { return std::string("ck_arange_") + dtype_suffix(dtype); });
  launch(device, s, f, a.n, a);
}

void cuda_unary(int device, detail::StreamHandle s, const UnaryArgs& a, int dtype) {
  if (a.contiguous && is_real(dtype) && aligned16(a.out) && aligned16(a.a)) {
    auto f = kernel(device, KernelModule::ops, kUnaryC * kTypes + dtype,
                    [&] { return std::string("ck_unaryc_") + dtype_suffix(dtype); });
    void* out = a.out;
    const void* x = a.a;
    std::int64_t n = a.n;
    int op = a.op;
    void* params[] = {&out, &x, &n, &op};
    go(device, f, tile_grid(n, code_size(dtype)), s, params);
    return;
  }
  auto f = kernel(device, KernelModule::ops, kUnary * kTypes + dtype,
                  [&] { return std::string("ck_unary_") + dtype_suffix(dtype); });
  launch(device, s, f, a.n, a);
}

void cuda_cast(int device, detail::StreamHandle s, const CastArgs& a, int dst) {
  if (a.contiguous && is_real(dst) && is_real(a.src_code) && aligned16(a.out) && aligned16(a.a)) {
    auto f = kernel(device, KernelModule::ops, kCastC * kTypes + dst * kTypes + a.src_code, [&] {
      return std::string("ck_castc_") + dtype_suffix(dst) + "_" + dtype_suffix(a.src_code);
    });
    void* out = a.out;
    const void* x = a.a;
    std::int64_t n = a.n;
    void* params[] = {&out, &x, &n};
    go(device, f, tile_grid(n, std::max(code_size(dst), code_size(a.src_code))), s, params);
    return;
  }
  auto f = kernel(device, KernelModule::ops, kCast * kTypes + dst,
                  [&] { return std::string("ck_cast_") + dtype_suffix(dst); });
  launch(device, s, f, a.n, a);
}

void cuda_fill(int device, detail::StreamHandle s, const FillArgs& a, int esize) {
  int idx = esize == 1 ? 0 : esize == 2 ? 1 : esize == 4 ? 2 : esize == 8 ? 3 : 4;
  if (a.contiguous && aligned16(a.out)) {
    auto f = kernel(device, KernelModule::ops, kFillC * kTypes + idx,
                    [&] { return "ck_fillc_" + std::to_string(esize); });
    FillArgs args = a;
    void* params[] = {&args};
    go(device, f, tile_grid(a.n, esize), s, params);
    return;
  }
  auto f = kernel(device, KernelModule::ops, kFill * kTypes + idx,
                  [&] { return "ck_fill_" + std::to_string(esize); });
  launch(device, s, f, a.n, a);
}

void cuda_sum(int device, detail::StreamHandle s, const void* in, const OffsetCalc<1>& calc,
              std::int64_t n, int in_dtype, void* out, int out_dtype) {
  // Pass 1: each block reduces a grid-stride slice into partials[block] (accumulator type,
  // at most 16 bytes); pass 2: one block reduces the partials and converts to out's dtype.
  detail::Dim3 grid = grid_for(device, n, kBlock);
  Allocation partials = allocate_device(static_cast<std::size_t>(grid.x) * 16, device, StreamRef::from_handle(s, device));
  {
    auto f = kernel(device, KernelModule::ops, kSumPartial * kTypes + in_dtype,
                    [&] { return std::string("ck_sum_partial_") + dtype_suffix(in_dtype); });
    const void* in_p = in;
    OffsetCalc<1> c = calc;
    std::int64_t nn = n;
    void* part = partials.get();
    void* params[] = {&in_p, &c, &nn, &part};
    go(device, f, grid, s, params);
  }
  {
    auto f = kernel(device, KernelModule::ops, kSumFinal * kTypes + in_dtype,
                    [&] { return std::string("ck_sum_final_") + dtype_suffix(in_dtype); });
    const void* part = partials.get();
    int count = static_cast<int>(grid.x);
    void* o = out;
    void* params[] = {&part, &count, &o};
    go(device, f, detail::Dim3{1, 1, 1}, s, params);
  }
  (void)out_dtype;
  // `partials` is returned to the caching allocator ordered on `s` (allocated there).
}

void cuda_sample(int device, detail::StreamHandle s, const rng::SampleArgs& a) {
  const int pb = rng::per_block(a.dtype, a.dist, a.range);
  const std::int64_t blocks = (a.n + pb - 1) / pb;
  rng::SampleArgs args = a;
  void* params[] = {&args};
  if (a.dtype == kFloat32 && a.dist != rng::kRandint && aligned16(a.out)) {
    // Fast path: one Philox block -> one 16-byte store per thread, one-wave grid.
    const bool uni = a.dist == rng::kUniform;
    auto f = kernel(device, KernelModule::random, uni ? kUniformF32 : kNormalF32,
                    [&] { return std::string(uni ? "ck_uniform_f32" : "ck_normal_f32"); });
    go(device, f, wave_grid(device, blocks, uni ? kRngBlocksPerSm : kNormalBlocksPerSm), s, params);
    return;
  }
  auto f = kernel(device, KernelModule::random, kSampleAny, [] { return std::string("ck_sample"); });
  go(device, f, grid_for(device, blocks, kBlock), s, params);
}

}  // namespace cudakit::ops
