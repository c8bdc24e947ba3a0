#include "ops/blas.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"

namespace cudakit {
namespace {
// Values of cuBLAS / CUDA library enums (library_types.h, cublas_api.h).
constexpr int kR32F = 0, kR64F = 1, kR16F = 2, kR16BF = 14;
constexpr int kCompute32F = 68, kCompute32FTF32 = 77, kCompute64F = 70;
constexpr int kOpN = 0, kOpT = 1, kGemmDefault = -1;

using CreateFn = int (*)(void**);
using SetStreamFn = int (*)(void*, void*);
using GemmExFn = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int,
                         const void*, int, int, const void*, void*, int, int, int, int);
struct Cublas {
  CreateFn create = nullptr;
  SetStreamFn set_stream = nullptr;
  GemmExFn gemm_ex = nullptr;
  std::string error;
};

const Cublas& cublas() {
  static const Cublas lib = [] {
    Cublas c;
    void* h = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so"}) {
      if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!h) {
      c.error = std::string("cannot load cuBLAS (libcublas.so.13): ") + dlerror() +
                "; install the CUDA 13 cuBLAS runtime or add it to LD_LIBRARY_PATH";
      return c;
    }
    c.create = reinterpret_cast<CreateFn>(dlsym(h, "cublasCreate_v2"));
    c.set_stream = reinterpret_cast<SetStreamFn>(dlsym(h, "cublasSetStream_v2"));
    c.gemm_ex = reinterpret_cast<GemmExFn>(dlsym(h, "cublasGemmEx"));
    if (!c.create || !c.set_stream || !c.gemm_ex) c.error = "cuBLAS is missing cublasCreate_v2/cublasSetStream_v2/cublasGemmEx";
    return c;
  }();
  return lib;
}

void check(int status, const char* what) {
  if (status != 0) throw Error(std::string(what) + " failed with cublasStatus_t " + std::to_string(status));
}

void* handle_for(int device) {
  if (std::string(detail::backend().name()) != "cuda")
    throw NotSupportedError("cuBLAS handles exist only on the cuda backend (current backend: " +
                            std::string(detail::backend().name()) + ")");
  const Cublas& c = cublas();
  if (!c.error.empty()) throw NotSupportedError(c.error);
  thread_local std::unordered_map<int, void*> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  DeviceGuard guard(device);
  void* h = nullptr;
  check(c.create(&h), "cublasCreate");
  handles.emplace(device, h);
  return h;
}
}  // namespace

void* detail::current_blas_handle() { return handle_for(current_device()); }

void ops::blas_gemm(int device, detail::StreamHandle s, const Tensor& a0, const Tensor& b0,
                    Tensor& out, bool allow_tf32) {
  // Column-major view of the row-major problem: out^T[n,m] = b^T[n,k] @ a^T[k,m].
  auto layout = [](const Tensor& t, int& op, int& ld) -> Tensor {
    if (t.stride(1) == 1 && t.stride(0) >= std::max<std::int64_t>(1, t.size(1))) {
      op = kOpN; ld = static_cast<int>(t.stride(0)); return t;
    }
    if (t.stride(0) == 1 && t.stride(1) >= std::max<std::int64_t>(1, t.size(0))) {
      op = kOpT; ld = static_cast<int>(t.stride(1)); return t;
    }
    Tensor c = t.contiguous();
    op = kOpN; ld = static_cast<int>(std::max<std::int64_t>(1, c.size(1)));
    return c;
  };
  int opa, opb, lda, ldb;
  Tensor a = layout(a0, opa, lda), b = layout(b0, opb, ldb);
  int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1)), n = static_cast<int>(b.size(1));
  int dt, ct;
  float alpha_f = 1.f, beta_f = 0.f;
  double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = &alpha_f;
  const void* beta = &beta_f;
  switch (out.dtype()) {
    case DType::float32: dt = kR32F; ct = allow_tf32 ? kCompute32FTF32 : kCompute32F; break;
    case DType::float16: dt = kR16F; ct = kCompute32F; break;
    case DType::bfloat16: dt = kR16BF; ct = kCompute32F; break;
    case DType::float64: dt = kR64F; ct = kCompute64F; alpha = &alpha_d; beta = &beta_d; break;
    default: throw ValueError("matmul: unsupported dtype on the GPU");
  }
  void* h = handle_for(device);
  const Cublas& c = cublas();
  check(c.set_stream(h, s), "cublasSetStream");
  check(c.gemm_ex(h, opb, opa, n, m, k, alpha, b.data_ptr(), dt, ldb, a.data_ptr(), dt, lda, beta,
                  out.data_ptr(), dt, n, ct, kGemmDefault),
        "cublasGemmEx");
}

}  // namespace cudakit
