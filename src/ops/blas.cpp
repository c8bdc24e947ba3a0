#include "ops/blas.hpp"

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backend/graph_ops.hpp"
#include "backend/math_ops.hpp"
#include "core/capture_gate.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
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

void ops::blas_gemm(int device, detail::StreamHandle s, const Tensor& a0, const Tensor& b0,
                    Tensor& out, bool allow_tf32) {
  // BLAS is column-major: compute out^T[n,m] = b^T[n,k] @ a^T[k,m], where a row-major
  // (stride(1) == 1) operand is its own transpose in column-major terms.
  auto layout = [](const Tensor& t, bool& transpose, int& ld) -> Tensor {
    if (t.stride(1) == 1 && t.stride(0) >= std::max<std::int64_t>(1, t.size(1))) {
      transpose = false; ld = static_cast<int>(t.stride(0)); return t;
    }
    if (t.stride(0) == 1 && t.stride(1) >= std::max<std::int64_t>(1, t.size(0))) {
      transpose = true; ld = static_cast<int>(t.stride(1)); return t;
    }
    Tensor c = t.contiguous();
    transpose = false; ld = static_cast<int>(std::max<std::int64_t>(1, c.size(1)));
    return c;
  };
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
  bool ta = false, tb = false;
  Tensor a = layout(a0, ta, g.ldb), b = layout(b0, tb, g.lda);
  // Swapped roles: BLAS's A is our b, BLAS's B is our a.
  g.transpose_a = tb;
  g.transpose_b = ta;
  g.m = static_cast<int>(b.size(1));
  g.n = static_cast<int>(a.size(0));
  g.k = static_cast<int>(a.size(1));
  g.a = b.data_ptr();
  g.b = a.data_ptr();
  g.c = out.data_ptr();
  g.ldc = g.m;
  g.allow_tf32 = allow_tf32;
  // The operands (including contiguous copies made above) live until the product ran.
  g.keep_alive = std::make_shared<const std::array<std::shared_ptr<Storage>, 3>>(
      std::array<std::shared_ptr<Storage>, 3>{a.storage(), b.storage(), out.storage()});
  Workspace ws = workspace(device, s);
  g.workspace = ws.ptr;
  g.workspace_bytes = ws.bytes;
  // TunableOp hook: the backend's GEMM, or the tuned solution when TunableOp is enabled
  // (src/tunable/dispatch.hpp; one relaxed atomic load when it is not). A capture's workspace
  // (ws.owned) is freed when this returns: the product is enqueued, and reuse is ordered on s.
  tunable::detail::gemm(device, s, std::move(g));
}

}  // namespace cudakit
