#include "ops/blas.hpp"

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "cudakit/allocation.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
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

// One workspace per (device, stream handle), from the caching allocator, kept for the life
// of the process (torch's map of (handle, stream) to workspace). The first product on a
// capturing stream allocates it inside the capture, so it comes from the graph's private pool
// like the graph's other memory (torch's semantic) and not from the driver behind the pool's
// back. Keyed by the handle, as torch: a handle reused by a later stream reuses the
// workspace, so destroyed streams do not accumulate workspaces.
std::pair<void*, std::size_t> workspace(int device, detail::StreamHandle s) {
  static std::mutex mu;
  static auto* spaces = new std::map<std::pair<int, detail::StreamHandle>, Allocation>();  // leaked: used until exit
  std::lock_guard lock(mu);
  Allocation& a = (*spaces)[{device, s}];
  if (!a) {  // the size is worked out once per stream, not per product
    const std::size_t bytes = workspace_size(device);
    if (bytes == 0) return {nullptr, 0};
    a = allocate_device(bytes, device, StreamRef::from_handle(s, device));
  }
  return {a.get(), a.size()};
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
  std::tie(g.workspace, g.workspace_bytes) = workspace(device, s);
  // TunableOp hook: the backend's GEMM, or the tuned solution when TunableOp is enabled
  // (src/tunable/dispatch.hpp; one relaxed atomic load when it is not).
  tunable::detail::gemm(device, s, std::move(g));
}

}  // namespace cudakit
