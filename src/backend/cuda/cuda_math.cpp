// CudaBackend: capabilities, the optional-library report, and the math libraries (cuBLAS
// GEMM: cublasGemmEx, cublasGemmStridedBatchedEx for batches; cuBLAS / cuSOLVER handles). cuBLASLt (the GEMM tuner's candidates) is in
// cuda_gemm_tuning.cpp.
//
// Handles are per (thread, device), created on first use in the device's primary context and
// never destroyed: destroying them at thread or process exit would call into the driver
// during teardown (backend.hpp), and torch keeps its handle pools alive the same way.
#include <unordered_map>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cupti.hpp"
#include "backend/cuda/cublaslt.hpp"
#include "backend/cuda/cufile_api.hpp"
#include "backend/cuda/math_libraries.hpp"
#include "backend/cuda/nccl_api.hpp"
#include "backend/cuda/nvml_api.hpp"
#include "backend/cuda/nvrtc.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

void check_status(int status, const char* library, const char* call) {
  if (status != 0) {
    throw Error(std::string(call) + " failed with " + library + " status " +
                std::to_string(status));
  }
}

const CublasApi& cublas_api(const char* what) {
  const Cublas& c = cublas();
  if (!c.lib.available()) throw_library_unavailable(c.lib, what);
  return c.api;
}

}  // namespace

BackendCapabilities CudaBackend::capabilities() const noexcept {
  BackendCapabilities c;
  c.host_addressable_device_memory = false;
  c.runs_kernels = true;
  c.vendor_math_handles = true;
  c.cross_process_ipc = true;
  c.hardware_telemetry = true;
  return c;
}

std::vector<LibraryInfo> CudaBackend::optional_libraries() noexcept {
  std::vector<LibraryInfo> out;
  try {
    out.push_back(driver().lib.info());
    out.push_back(nvml::nvml().lib.info());
    out.push_back(cublas().lib.info());
    out.push_back(cusolver().lib.info());
    out.push_back(cupti().lib.info());  // loads CUPTI: a report is an explicit request
    out.push_back(nvrtc().lib.info());
    out.push_back(cublaslt().lib.info());
    out.push_back(nccl().lib.info());
    out.push_back(cufile().lib.info());
  } catch (...) {  // allocation failure while copying strings: report what we have
  }
  return out;
}

namespace {
// A handle that cannot be created is rarely the caller's bug: say what the statuses mean.
void check_handle_status(int status, const char* library, const char* call) {
  if (status == 0) return;
  throw Error(std::string(call) + " failed with " + library + " status " +
              std::to_string(status) +
              " while creating this thread's handle (the library could not initialise: "
              "out of device memory, or the device's context is unusable)");
}
}  // namespace

// cublasCreate / cusolverDnCreate allocate device memory with cudaMalloc, a "potentially
// unsafe" call that a global-mode capture forbids (it fails with NOT_INITIALIZED and
// invalidates the capture: torch's issue 99397, where a warm-up before capturing is the
// answer). The memory is the handle's own state, not graph memory, so creating it in relaxed
// mode is safe: a thread's first product may then be inside a capture.
void* CudaBackend::blas_handle(int device) {
  const CublasApi& c = cublas_api("current_blas_handle");
  thread_local std::unordered_map<int, void*> handles;
  if (auto it = handles.find(device); it != handles.end()) return it->second;
  ContextScope scope(*this, device, "current_blas_handle");  // handles bind to the current device
  void* h = nullptr;
  {
    ThreadCaptureModeGuard relaxed(*this, CaptureMode::relaxed);
    check_handle_status(c.cublasCreate_v2(&h), "cuBLAS", "cublasCreate");
  }
  handles.emplace(device, h);
  return h;
}

void* CudaBackend::solver_handle(int device, StreamHandle s) {
  const Cusolver& lib = cusolver();
  if (!lib.lib.available()) throw_library_unavailable(lib.lib, "current_solver_handle");
  thread_local std::unordered_map<int, void*> handles;
  void*& h = handles[device];
  if (!h) {
    ContextScope scope(*this, device, "current_solver_handle");
    ThreadCaptureModeGuard relaxed(*this, CaptureMode::relaxed);  // as cublasCreate above
    if (int rc = lib.api.cusolverDnCreate(&h); rc != 0) {
      h = nullptr;
      check_handle_status(rc, "cuSOLVER", "cusolverDnCreate");
    }
  }
  check_status(lib.api.cusolverDnSetStream(h, s), "cuSOLVER", "cusolverDnSetStream");
  return h;
}

void CudaBackend::gemm(int device, StreamHandle s, GemmArgs g) {
  g.keep_alive.reset();  // the caching allocator orders reuse of the operands on `s`
  int type = kCudaR32F, compute = kCublasCompute32F;
  float alpha_f = static_cast<float>(g.alpha), beta_f = static_cast<float>(g.beta);
  double alpha_d = g.alpha, beta_d = g.beta;
  const void* alpha = &alpha_f;
  const void* beta = &beta_f;
  switch (g.type) {
    case GemmType::float32:
      compute = g.allow_tf32 ? kCublasCompute32FFastTF32 : kCublasCompute32F;
      break;
    case GemmType::float16: type = kCudaR16F; break;
    case GemmType::bfloat16: type = kCudaR16BF; break;
    case GemmType::float64:
      type = kCudaR64F;
      compute = kCublasCompute64F;
      alpha = &alpha_d;
      beta = &beta_d;
      break;
  }
  const CublasApi& c = cublas_api("matmul");
  void* h = blas_handle(device);
  ContextScope scope(*this, device, "matmul");
  check_status(c.cublasSetStream_v2(h, s), "cuBLAS", "cublasSetStream");
  // After cublasSetStream, which resets the handle to cuBLAS's own workspace. Ours comes from
  // the caching allocator (GemmArgs::workspace), so cuBLAS never allocates from the driver:
  // not outside the pool's statistics, not inside a graph capture.
  if (g.workspace != nullptr && c.cublasSetWorkspace_v2 != nullptr) {
    check_status(c.cublasSetWorkspace_v2(h, g.workspace, g.workspace_bytes), "cuBLAS",
                 "cublasSetWorkspace");
  }
  const int ta = g.transpose_a ? kCublasOpT : kCublasOpN, tb = g.transpose_b ? kCublasOpT : kCublasOpN;
  if (g.batch == 1) {
    check_status(c.cublasGemmEx(h, ta, tb, g.m, g.n, g.k, alpha, g.a, type, g.lda, g.b, type,
                                g.ldb, beta, g.c, type, g.ldc, compute, kCublasGemmDefault),
                 "cuBLAS", "cublasGemmEx");
    return;
  }
  // A strided batch: one call, the same types and compute type (TF32 rule included) as above,
  // so each product of a batch gives what the plain GEMM gives for it.
  if (g.batch == 0) return;  // nothing to compute (not left to cuBLAS's quick-return rules)
  check_status(c.cublasGemmStridedBatchedEx(h, ta, tb, g.m, g.n, g.k, alpha, g.a, type, g.lda,
                                            g.stride_a, g.b, type, g.ldb, g.stride_b, beta, g.c,
                                            type, g.ldc, g.stride_c, g.batch, compute,
                                            kCublasGemmDefault),
               "cuBLAS", "cublasGemmStridedBatchedEx");
}

}  // namespace cudakit::detail::cuda
