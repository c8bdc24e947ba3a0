#include "ops/blas.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "backend/graph_ops.hpp"
#include "backend/math_ops.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
#include "tensor/size_math.hpp"
#include "tunable/dispatch.hpp"

namespace cudakit {
namespace {

// cuBLAS's workspace size, torch's rule: CUBLAS_WORKSPACE_CONFIG (":SIZE_KiB:COUNT" pairs,
// summed), else 32 MiB on compute capability 9.0 and 8 MiB + 128 KiB (":4096:2:16:8")
// elsewhere. A malformed variable is torch's default too (torch warns and does the same).
std::size_t workspace_size(int device) {
  if (const char* env = std::getenv("CUBLAS_WORKSPACE_CONFIG"); env && *env) {
    std::size_t total = 0;
    const std::string v = env;
    std::size_t at = 0;
    bool ok = true;
    while (ok && at < v.size()) {
      if (v[at] != ':') { ok = false; break; }
      char* end = nullptr;
      const unsigned long long kib = std::strtoull(v.c_str() + at + 1, &end, 10);
      if (end == v.c_str() + at + 1 || *end != ':') { ok = false; break; }
      const char* count_at = end + 1;
      const unsigned long long count = std::strtoull(count_at, &end, 10);
      if (end == count_at) { ok = false; break; }
      total += static_cast<std::size_t>(kib * 1024 * count);
      at = static_cast<std::size_t>(end - v.c_str());
    }
    if (ok) return total;
  }
  const DeviceProperties& p = get_device_properties(device);
  return p.major == 9 && p.minor == 0 ? std::size_t{4096} * 8 * 1024
                                      : std::size_t{4096} * 1024 * 2 + std::size_t{16} * 1024 * 8;
}

// The workspace of one product. Eager products share one workspace per (device, stream), from
// the caching allocator and kept for the life of the process (torch's map of (handle, stream)
// to workspace): keyed by the stream handle, so a handle reused by a later stream reuses it and
// destroyed streams do not accumulate workspaces.
//
// A product on a capturing stream never uses that cached workspace, and never leaves its own
// in the cache: it allocates one inside the capture (from the graph's private pool, like the
// graph's other memory) and frees it once the product is enqueued, back into that pool, where
// the graph's replays keep using it (the caching allocator hands the block out again only on
// this stream, in its order, and only to allocations routed to the same pool). What this
// replaced (issue 24) was torch's one map for both: the first product on a stream, eager or
// captured, made the stream's workspace, so
//   * a capture on a stream that had run a product before (torch's warm-up-on-the-side-stream
//     pattern; any cudakit.Stream(), whose pool of 32 is shared round robin with earlier work)
//     took nothing from its pool: its graph wrote into a workspace in the general pool, shared
//     with eager products on that stream and with every other graph captured on it, while
//     replays run on whatever stream is current (a data race on the GPU);
//   * a workspace made inside a capture stayed cached, in that graph's private pool, for the
//     eager products on the stream and for later captures, and kept the dead graph's pool
//     reserved for the life of the process.
// Whether the workspace came from the pool or not then depended on which test ran before.
// A capture pays one caching-allocator allocate/free per product (host time at capture only).
struct Workspace {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  Allocation owned;  // set for a product on a capturing stream: freed after the enqueue
};

bool capturing(int device, detail::StreamHandle s) {
  // No capture in the process (cudakit's count, core/capture_gate.hpp): no driver query on the
  // eager path. The legacy default stream never captures, and asking the driver about it while
  // another stream captures globally can be an implicit-synchronisation error.
  if (detail::live_captures() == 0) return false;
  if (StreamRef::from_handle(s, device).is_default()) return false;
  return detail::graph_ops().stream_capture_status(s, nullptr) != detail::CaptureStatus::none;
}

Workspace workspace(int device, detail::StreamHandle s) {
  if (capturing(device, s)) {
    Workspace w;
    if (const std::size_t bytes = workspace_size(device)) {
      w.owned = allocate_device(bytes, device, StreamRef::from_handle(s, device));
      w.ptr = w.owned.get();
      w.bytes = w.owned.size();
    }
    return w;
  }
  static std::mutex mu;
  static auto* spaces = new std::map<std::pair<int, detail::StreamHandle>, Allocation>();  // leaked: used until exit
  std::lock_guard lock(mu);
  Allocation& a = (*spaces)[{device, s}];
  if (!a) {  // the size is worked out once per stream, not per product
    const std::size_t bytes = workspace_size(device);
    if (bytes == 0) return {};
    a = allocate_device(bytes, device, StreamRef::from_handle(s, device));
  }
  return {a.get(), a.size(), Allocation()};
}

}  // namespace

namespace {

// `t` broadcast to batch + its matrix dims; `t` itself when it has those dims already (a plain
// product's operands: no new view on matmul's common path).
Tensor broadcast_to_batch(const Tensor& t, const Shape& batch) {
  if (static_cast<std::size_t>(t.dim()) == batch.size() + 2 &&
      std::equal(batch.begin(), batch.end(), t.sizes().begin())) {
    return t;
  }
  Shape full = batch;
  full.push_back(t.size(-2));
  full.push_back(t.size(-1));
  return t.expand(full);
}

// The single stride of `expanded`'s batch dims (the view of its batch dims as one dim), or
// nullopt when they do not flatten to one.
std::optional<std::int64_t> single_batch_stride(const Tensor& expanded, std::size_t batch_dims) {
  if (batch_dims == 0) return 0;
  const Shape sizes(expanded.sizes().begin(), expanded.sizes().begin() + static_cast<std::ptrdiff_t>(batch_dims));
  const Shape strides(expanded.strides().begin(), expanded.strides().begin() + static_cast<std::ptrdiff_t>(batch_dims));
  std::optional<Shape> flat = compute_view_strides(sizes, strides, Shape{detail::checked_numel(sizes, "matmul")});
  if (!flat) return std::nullopt;
  return (*flat)[0];
}

// Row- or column-major with a leading dimension BLAS takes (at least the stored rows, below
// 2^31), or nullopt. The stride of a dim of size 1 is never used, so it counts as whatever
// the layout needs (views such as x[None] or expand() leave arbitrary ones there): such
// matrices need no copy, their leading dimension does not depend on that stride (nor their
// TunableOp signature), and a contiguous matrix always has a layout.
std::optional<std::pair<bool, int>> blas_layout(const Tensor& t) {
  const std::int64_t rows = t.size(-2), cols = t.size(-1), s0 = t.stride(-2), s1 = t.stride(-1);
  const std::int64_t row_ld = rows == 1 ? std::max<std::int64_t>(1, cols) : s0;
  if ((cols == 1 || s1 == 1) && row_ld >= std::max<std::int64_t>(1, cols) && row_ld <= INT_MAX) {
    return std::pair{false, static_cast<int>(row_ld)};
  }
  const std::int64_t col_ld = cols == 1 ? std::max<std::int64_t>(1, rows) : s1;
  if ((rows == 1 || s0 == 1) && col_ld >= std::max<std::int64_t>(1, rows) && col_ld <= INT_MAX) {
    return std::pair{true, static_cast<int>(col_ld)};
  }
  return std::nullopt;
}

std::optional<ops::BlasOperand> try_operand(const Tensor& t, const Shape& batch) {
  Tensor e = broadcast_to_batch(t, batch);
  std::optional<std::int64_t> stride = single_batch_stride(e, batch.size());
  if (!stride) return std::nullopt;
  std::optional<std::pair<bool, int>> layout = blas_layout(e);
  if (!layout) return std::nullopt;
  return ops::BlasOperand{ops::BatchView{std::move(e), *stride}, layout->first, layout->second};
}

}  // namespace

ops::BatchView ops::batch_view(const Tensor& t, const Shape& batch) {
  Tensor e = broadcast_to_batch(t, batch);
  if (std::optional<std::int64_t> stride = single_batch_stride(e, batch.size())) {
    return BatchView{std::move(e), *stride};
  }
  Tensor dense = e.contiguous();  // the broadcast materialised: matrices back to back
  const std::int64_t stride = dense.size(-2) * dense.size(-1);
  return BatchView{std::move(dense), stride};
}

ops::BlasOperand ops::blas_operand(const Tensor& t, const Shape& batch) {
  if (std::optional<BlasOperand> as_is = try_operand(t, batch)) return *as_is;
  // The matrices are neither row- nor column-major (or their batch does not flatten): the
  // operand itself made contiguous first, which keeps a broadcast (stride 0) batch and copies
  // only the operand's own matrices.
  if (!t.is_contiguous()) {
    if (std::optional<BlasOperand> dense = try_operand(t.contiguous(), batch)) return *dense;
  }
  // A broadcast that mixes broadcast and real batch dims ((2, 1) against (1, 5)): one copy
  // per product, contiguous, which always flattens.
  std::optional<BlasOperand> full = try_operand(broadcast_to_batch(t, batch).contiguous(), batch);
  if (!full) throw Error("matmul: internal error: a contiguous operand has no BLAS layout");
  return *full;
}

void ops::blas_gemm(int device, detail::StreamHandle s, const BlasOperand& a, const BlasOperand& b,
                    Tensor& out, std::int64_t batch, bool allow_tf32) {
  // BLAS is column-major: compute out^T[n,m] = b^T[n,k] @ a^T[k,m] for each product, where a
  // row-major operand is its own transpose in column-major terms.
  detail::GemmArgs g;
  switch (out.dtype()) {
    case DType::float32: g.type = detail::GemmType::float32; break;
    case DType::float16: g.type = detail::GemmType::float16; break;
    case DType::bfloat16: g.type = detail::GemmType::bfloat16; break;
    case DType::float64: g.type = detail::GemmType::float64; break;
    default:
      throw ValueError(std::string("matmul supports float16, bfloat16, float32 and float64, not ") +
                       dtype_name(out.dtype()));
  }
  // Swapped roles: BLAS's A is our b, BLAS's B is our a.
  g.transpose_a = b.col_major;
  g.transpose_b = a.col_major;
  g.lda = b.ld;
  g.ldb = a.ld;
  g.m = static_cast<int>(b.v.t.size(-1));
  g.n = static_cast<int>(a.v.t.size(-2));
  g.k = static_cast<int>(a.v.t.size(-1));
  g.ldc = g.m;
  g.allow_tf32 = allow_tf32;
  const std::int64_t stride_c = static_cast<std::int64_t>(g.m) * g.n;
  // The operands (including contiguous copies made above) live until the product ran.
  const auto keep = std::make_shared<const std::array<std::shared_ptr<Storage>, 3>>(
      std::array<std::shared_ptr<Storage>, 3>{a.v.t.storage(), b.v.t.storage(), out.storage()});
  Workspace ws = workspace(device, s);
  const std::size_t elem = out.element_size();
  // cuBLAS counts a batch in an int: a larger one runs as several strided batches (the same
  // workspace, in stream order).
  for (std::int64_t first = 0; first < batch; first += INT_MAX) {
    const std::int64_t count = std::min<std::int64_t>(INT_MAX, batch - first);
    detail::GemmArgs part = g;
    part.batch = static_cast<int>(count);
    if (count > 1) {
      part.stride_a = b.v.stride;
      part.stride_b = a.v.stride;
      part.stride_c = stride_c;
    }
    part.a = static_cast<const unsigned char*>(b.v.t.data_ptr()) + first * b.v.stride * static_cast<std::int64_t>(elem);
    part.b = static_cast<const unsigned char*>(a.v.t.data_ptr()) + first * a.v.stride * static_cast<std::int64_t>(elem);
    part.c = static_cast<unsigned char*>(out.data_ptr()) + first * stride_c * static_cast<std::int64_t>(elem);
    part.keep_alive = keep;
    part.workspace = ws.ptr;
    part.workspace_bytes = ws.bytes;
    // TunableOp hook: the backend's GEMM, or the tuned solution when TunableOp is enabled
    // (src/tunable/dispatch.hpp; one relaxed atomic load when it is not). A capture's
    // workspace (ws.owned) is freed when this returns: the products are enqueued, and reuse is
    // ordered on s.
    tunable::detail::gemm(device, s, std::move(part));
  }
}

}  // namespace cudakit
