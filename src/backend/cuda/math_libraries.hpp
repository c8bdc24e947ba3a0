// cuBLAS and cuSOLVER, loaded at run time through the shared loader (library_loader.hpp),
// never linked: a process that never multiplies matrices never maps ~700 MB of libraries.
//
// Prototypes are declared here from the libraries' documented C ABI (cublas_api.h,
// cusolverDn.h, library_types.h), so building needs no math-library headers. Enum parameters
// (cublasOperation_t, cudaDataType, cublasComputeType_t, cublasGemmAlgo_t,
// libraryPropertyType) are C enums, passed as int. On a GPU the entry points run in the
// matmul and TunableOp tests (tests/python/test_matmul.py, test_tunable.py,
// tests/cpp/test_tunable_cuda.cpp: cublasGemmEx, cublasGemmStridedBatchedEx, workspaces) and
// the handle tests (tests/cpp/test_backend_seam.cpp, tests/python/test_info.py: the cuBLAS
// and cuSOLVER handles, their per-thread rule).
//
// Thread-safety: cublas() / cusolver() load once (function-local statics) and return an
// immutable table. Handles are per (thread, device) and owned by the cuda backend.
#pragma once

#include <cstddef>

#include "backend/library_loader.hpp"

namespace cudakit::detail::cuda {

// Values of the C enums used below (library_types.h, cublas_api.h).
inline constexpr int kCudaR32F = 0, kCudaR64F = 1, kCudaR16F = 2, kCudaR16BF = 14;
inline constexpr int kCublasCompute32F = 68, kCublasCompute32FFastTF32 = 77,
                     kCublasCompute64F = 70;
inline constexpr int kCublasOpN = 0, kCublasOpT = 1, kCublasGemmDefault = -1;
inline constexpr int kMajorVersion = 0, kMinorVersion = 1, kPatchLevel = 2;  // libraryPropertyType

struct CublasApi {
  int (*cublasCreate_v2)(void** handle) = nullptr;
  int (*cublasSetStream_v2)(void* handle, void* stream) = nullptr;
  int (*cublasSetWorkspace_v2)(void* handle, void* workspace, std::size_t bytes) = nullptr;  // 11.0+
  int (*cublasGemmEx)(void* handle, int transa, int transb, int m, int n, int k,
                      const void* alpha, const void* A, int Atype, int lda, const void* B,
                      int Btype, int ldb, const void* beta, void* C, int Ctype, int ldc,
                      int computeType, int algo) = nullptr;
  // Strides in elements, between consecutive matrices of a batch (CUDA 9.1+).
  int (*cublasGemmStridedBatchedEx)(void* handle, int transa, int transb, int m, int n, int k,
                                    const void* alpha, const void* A, int Atype, int lda,
                                    long long strideA, const void* B, int Btype, int ldb,
                                    long long strideB, const void* beta, void* C, int Ctype,
                                    int ldc, long long strideC, int batchCount, int computeType,
                                    int algo) = nullptr;
  int (*cublasGetProperty)(int type, int* value) = nullptr;
};

struct CusolverApi {
  int (*cusolverDnCreate)(void** handle) = nullptr;
  int (*cusolverDnSetStream)(void* handle, void* stream) = nullptr;
  int (*cusolverGetProperty)(int type, int* value) = nullptr;
};

struct Cublas {
  CublasApi api;
  LoadedLibrary lib;
};
struct Cusolver {
  CusolverApi api;
  LoadedLibrary lib;
};

// Loaded on first call; never throws (inspect lib.available()).
const Cublas& cublas() noexcept;
const Cusolver& cusolver() noexcept;

}  // namespace cudakit::detail::cuda
