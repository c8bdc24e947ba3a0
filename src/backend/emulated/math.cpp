// Emulated backend: GEMM on the host through CBLAS (OpenBLAS on Debian), the optional-library
// report, and the vendor handles it does not have.
//
// GEMM runs as a host task on the stream, like every emulated device op, and keeps its
// operands alive (GemmArgs::keep_alive) until it ran. A strided batch is a loop of plain GEMMs
// in that one task (gemm_host.hpp, batch_item). float32 / float64 go straight to
// cblas_sgemm / cblas_dgemm on the operands in place; float16 / bfloat16 are widened to
// float32, multiplied with float32 accumulation (as cuBLAS does for these types) and rounded
// back. allow_tf32 rounds float32 inputs to TF32 (10-bit mantissa, round to nearest, ties
// away from zero, as the tensor cores' cvt.rna) first, so results carry the precision they
// would have on an sm_80+ GPU; the product itself stays float32.
//
// CBLAS is opened at the first GEMM (library_loader), not linked: linked, OpenBLAS loaded
// with libcudakit and started its thread pool in every process, also on the cuda backend that
// never calls it (15 idle threads on the H200 host, ~2 ms of import). Only the two functions
// below are used; their C ABI (and the enum values) are fixed by the CBLAS interface, so no
// header or link-time dependency remains.
//
// Measured (2 busy cores, OpenBLAS 0.3.21, one thread, see cblas()): 1024^2 float32 matmul
// ~0.03 s, against 4.6 s for the hand-written triple loop. Without a loadable CBLAS the plain loop is the fallback
// (optional_libraries() says why).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/emulated/state.hpp"
#include "backend/emulated/gemm_host.hpp"
#include "backend/library_loader.hpp"
#include "cudakit/error.hpp"
#include "kernels/numeric.hpp"

namespace cudakit::detail::emulated {
namespace {

using ops::BFloat16;
using ops::Half;

// The CBLAS C interface (cblas.h): CBLAS_ORDER / CBLAS_TRANSPOSE values and the two GEMMs.
enum : int { kCblasColMajor = 102, kCblasNoTrans = 111, kCblasTrans = 112 };
using SgemmFn = void(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda,
                     const float* b, int ldb, float beta, float* c, int ldc);
using DgemmFn = void(int order, int ta, int tb, int m, int n, int k, double alpha, const double* a, int lda,
                     const double* b, int ldb, double beta, double* c, int ldc);

struct Cblas {
  LoadedLibrary lib;
  SgemmFn* sgemm = nullptr;
  DgemmFn* dgemm = nullptr;
};

// Loaded once, on first use (GEMM or the library report); never unloaded.
//
// Single-threaded unless the user asked otherwise: OpenBLAS (pthread build, 0.3.21) starts
// one worker per core in its load-time constructor and joins them in its exit-time
// destructor, and that join sometimes never returned (2 of 10 runs of the README snippet
// hung at exit, the worker asleep on its condition variable; never with no worker). The
// emulated backend is a CI and development tool, so its GEMM trades the pool (~2x on 2
// cores) for an exit that always returns. OpenBLAS reads OPENBLAS_NUM_THREADS only in that
// constructor, so the variable is set around the dlopen and removed again (children and
// later loads are unaffected); an explicit OPENBLAS_NUM_THREADS is left alone.
const Cblas& cblas() noexcept {
  static const Cblas* lib = [] {
    auto* c = new Cblas();  // leaked: OpenBLAS threads may outlive static destruction
    const bool cap_threads = std::getenv("OPENBLAS_NUM_THREADS") == nullptr;
    if (cap_threads) setenv("OPENBLAS_NUM_THREADS", "1", 0);
    c->lib = load_library(
        {"CBLAS", {"libopenblas.so.0", "libopenblas.so", "libcblas.so.3", "libblas.so.3"},
         "install OpenBLAS (Debian: libopenblas0) for a fast emulated matmul; a plain loop is "
         "used meanwhile",
         [](const LoadedLibrary& l) -> std::string {
           using Config = const char*();
           if (auto* config = reinterpret_cast<Config*>(l.symbol("openblas_get_config"))) {
             if (const char* text = config()) return text;
           }
           return "";
         }},
        {bind_symbol("cblas_sgemm", c->sgemm), bind_symbol("cblas_dgemm", c->dgemm)});
    if (cap_threads) unsetenv("OPENBLAS_NUM_THREADS");
    return c;
  }();
  return *lib;
}

// C[m x n] (column-major, ldc) = alpha op(A) op(B) + beta C for T in {float, double}.
template <class T>
void gemm_typed(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
                int ldb, T beta, T* c, int ldc) {
  if (const Cblas& blas = cblas(); blas.lib.available()) {
    const int opa = ta ? kCblasTrans : kCblasNoTrans, opb = tb ? kCblasTrans : kCblasNoTrans;
    if constexpr (std::is_same_v<T, float>) {
      blas.sgemm(kCblasColMajor, opa, opb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else {
      blas.dgemm(kCblasColMajor, opa, opb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
    return;
  }
  auto at = [&](int i, int p) { return ta ? a[static_cast<std::size_t>(i) * lda + p]
                                          : a[static_cast<std::size_t>(p) * lda + i]; };
  auto bt = [&](int p, int j) { return tb ? b[static_cast<std::size_t>(p) * ldb + j]
                                          : b[static_cast<std::size_t>(j) * ldb + p]; };
  std::vector<T> acc(static_cast<std::size_t>(m));
  for (int j = 0; j < n; ++j) {
    T* col = c + static_cast<std::size_t>(j) * ldc;
    std::fill(acc.begin(), acc.end(), T(0));
    for (int p = 0; p < k; ++p) {
      const T bv = bt(p, j);
      for (int i = 0; i < m; ++i) acc[static_cast<std::size_t>(i)] += at(i, p) * bv;
    }
    // BLAS: beta == 0 never reads C (it may hold NaN).
    for (int i = 0; i < m; ++i)
      col[i] = alpha * acc[static_cast<std::size_t>(i)] + (beta == T(0) ? T(0) : beta * col[i]);
  }
}

// C = beta * C for an empty product (k == 0); beta == 0 writes zeros without reading C.
void scale_c(const GemmArgs& g) {
  for (int j = 0; j < g.n; ++j) {
    const std::size_t col = static_cast<std::size_t>(j) * g.ldc;
    for (int i = 0; i < g.m; ++i) {
      const std::size_t at = col + static_cast<std::size_t>(i);
      switch (g.type) {
        case GemmType::float64: {
          double& v = static_cast<double*>(g.c)[at];
          v = g.beta == 0 ? 0.0 : g.beta * v;
          break;
        }
        case GemmType::float32: {
          float& v = static_cast<float*>(g.c)[at];
          v = g.beta == 0 ? 0.f : static_cast<float>(g.beta * v);
          break;
        }
        case GemmType::float16: {
          Half& v = static_cast<Half*>(g.c)[at];
          v = Half::from_float(g.beta == 0 ? 0.f : static_cast<float>(g.beta * v.to_float()));
          break;
        }
        case GemmType::bfloat16: {
          BFloat16& v = static_cast<BFloat16*>(g.c)[at];
          v = BFloat16::from_float(g.beta == 0 ? 0.f
                                               : static_cast<float>(g.beta * v.to_float()));
          break;
        }
      }
    }
  }
}

}  // namespace

namespace {

void run_one(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {  // an empty sum: C = beta C (BLAS)
    scale_c(g);
    return;
  }
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  if (g.type == GemmType::float64) {
    gemm_typed<double>(g.transpose_a, g.transpose_b, g.m, g.n, g.k, g.alpha,
                       static_cast<const double*>(g.a), g.lda, static_cast<const double*>(g.b),
                       g.ldb, g.beta, static_cast<double*>(g.c), g.ldc);
    return;
  }
  if (g.type == GemmType::float32 && !g.allow_tf32) {
    gemm_typed<float>(g.transpose_a, g.transpose_b, g.m, g.n, g.k, alpha,
                      static_cast<const float*>(g.a), g.lda, static_cast<const float*>(g.b),
                      g.ldb, beta, static_cast<float*>(g.c), g.ldc);
    return;
  }
  // Widened / TF32-rounded copies; their leading dimension is the stored row count.
  const Stored sa = stored_a(g), sb = stored_b(g);
  std::vector<float> a = widen_any(g, sa), b = widen_any(g, sb);
  const int lda = std::max(1, sa.rows), ldb = std::max(1, sb.rows);
  if (g.type == GemmType::float32) {
    gemm_typed<float>(g.transpose_a, g.transpose_b, g.m, g.n, g.k, alpha, a.data(), lda,
                      b.data(), ldb, beta, static_cast<float*>(g.c), g.ldc);
    return;
  }
  // float16 / bfloat16: float32 accumulation and scaling (cuBLAS's compute type), rounded once.
  std::vector<float> c(static_cast<std::size_t>(g.m) * g.n);
  gemm_typed<float>(g.transpose_a, g.transpose_b, g.m, g.n, g.k, alpha, a.data(), lda, b.data(),
                    ldb, 0.f, c.data(), g.m);
  for (int j = 0; j < g.n; ++j)
    for (int i = 0; i < g.m; ++i) {
      float v = c[static_cast<std::size_t>(j) * g.m + i];
      const std::size_t at = static_cast<std::size_t>(j) * g.ldc + i;
      if (g.type == GemmType::float16) {
        Half& out = static_cast<Half*>(g.c)[at];
        if (beta != 0.f) v += beta * out.to_float();
        out = Half::from_float(v);
      } else {
        BFloat16& out = static_cast<BFloat16*>(g.c)[at];
        if (beta != 0.f) v += beta * out.to_float();
        out = BFloat16::from_float(v);
      }
    }
}

}  // namespace

void run_gemm(const GemmArgs& g) {
  if (g.batch == 1) {
    run_one(g);
    return;
  }
  for (int i = 0; i < g.batch; ++i) run_one(batch_item(g, i));
}

namespace {

[[noreturn]] void no_vendor_library(const char* call, const char* library) {
  throw NotSupportedError(std::string(call) + ": " + library +
                          " handles exist only on the cuda backend (the emulated backend has "
                          "no " + library + "; matmul runs through its CBLAS instead)");
}

}  // namespace

void EmulatedBackend::gemm(int device, StreamHandle s, GemmArgs g) {
  dev(device);
  // What BLAS itself would reject (cuBLAS answers CUBLAS_STATUS_INVALID_VALUE).
  if (g.m < 0 || g.n < 0 || g.k < 0) fail(errc::invalid_value, "gemm: negative dimension");
  if (g.batch < 0) fail(errc::invalid_value, "gemm: negative batch count");
  const Stored sa = stored_a(g), sb = stored_b(g);
  if (g.lda < std::max(1, sa.rows) || g.ldb < std::max(1, sb.rows) || g.ldc < std::max(1, g.m)) {
    fail(errc::invalid_value, "gemm: a leading dimension is smaller than its matrix's rows");
  }
  if (g.batch > 0 && g.m > 0 && g.n > 0 && (!g.c || (g.k > 0 && (!g.a || !g.b)))) {
    fail(errc::invalid_value, "gemm: null operand pointer");
  }
  // A kernel node when captured, as cuBLAS's GEMM kernel is on cuda (graph data, annotations).
  launch_host_kernel(s, "ck_gemm", [g = std::move(g)] { run_gemm(g); });
}

void* EmulatedBackend::blas_handle(int device) {
  dev(device);
  no_vendor_library("current_blas_handle", "cuBLAS");
}

void* EmulatedBackend::solver_handle(int device, StreamHandle) {
  dev(device);
  no_vendor_library("current_solver_handle", "cuSOLVER");
}

std::vector<LibraryInfo> EmulatedBackend::optional_libraries() noexcept {
  std::vector<LibraryInfo> out;
  try {
    out.push_back(cblas().lib.info());  // loads CBLAS: a report is an explicit request
  } catch (...) {  // allocation failure while copying strings: report what we have
  }
  return out;
}

}  // namespace cudakit::detail::emulated
