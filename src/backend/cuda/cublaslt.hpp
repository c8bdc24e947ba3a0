// cuBLASLt, loaded at run time through the shared loader (library_loader.hpp), never linked:
// the GEMM tuner's candidates (TunableOp, src/tunable) are cuBLASLt algorithms.
//
// Prototypes are declared here from the library's documented C ABI (cublasLt.h,
// library_types.h), so building needs no cuBLASLt header. C enums are passed as int; the
// semi-opaque algorithm and heuristic-result structs are mirrored with the header's layout
// (tests/cpp/test_tunable_cuda.cpp checks every value and size against cublasLt.h when the
// toolkit is installed).
//
// Thread-safety: cublaslt() loads once (function-local static) and returns an immutable table.
// cuBLASLt handles carry no stream or workspace state, so one handle per device is shared by
// every thread (cuda_gemm_tuning.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/library_loader.hpp"

namespace cudakit::detail::cuda {

// cublasLtMatmulAlgo_t: 64 opaque bytes that cublasLtMatmulAlgoInit / the heuristic fill.
struct LtAlgo {
  std::uint64_t data[8];
};
// cublasLtMatmulHeuristicResult_t.
struct LtHeuristicResult {
  LtAlgo algo;
  std::size_t workspace_size;
  int state;  // cublasStatus_t: 0 when the other fields are valid
  float waves_count;
  int reserved[4];
};
static_assert(sizeof(LtAlgo) == 64 && sizeof(LtHeuristicResult) == 96);

// cublasLtMatmulDescAttributes_t
inline constexpr int kLtDescTransA = 3, kLtDescTransB = 4;
// cublasLtMatrixLayoutAttribute_t (value types: int32, int64 elements)
inline constexpr int kLtLayoutBatchCount = 5, kLtLayoutStridedBatchOffset = 6;
// cublasLtMatmulPreferenceAttributes_t
inline constexpr int kLtPrefMaxWorkspaceBytes = 1, kLtPrefMinAlignA = 5, kLtPrefMinAlignB = 6,
                     kLtPrefMinAlignC = 7, kLtPrefMinAlignD = 8;
// cublasLtMatmulAlgoConfigAttributes_t (value types: int32, uint32 x5, uint16 x2)
inline constexpr int kLtConfigId = 0, kLtConfigTile = 1, kLtConfigSplitK = 2,
                     kLtConfigReduction = 3, kLtConfigSwizzle = 4, kLtConfigCustom = 5,
                     kLtConfigStages = 6, kLtConfigInnerShape = 7, kLtConfigClusterShape = 8;
// cublasLtMatmulAlgoCapAttributes_t
inline constexpr int kLtCapSplitKSupport = 0, kLtCapReductionMask = 1, kLtCapMinAlignA = 16,
                     kLtCapMinAlignB = 17, kLtCapMinAlignC = 18, kLtCapMinAlignD = 19;
// cublasLtReductionScheme_t
inline constexpr unsigned kLtReductionNone = 0, kLtReductionInplace = 1,
                          kLtReductionComputeType = 2, kLtReductionOutputType = 4;

struct CublasLtApi {
  int (*cublasLtCreate)(void** handle) = nullptr;
  std::size_t (*cublasLtGetVersion)() = nullptr;
  int (*cublasLtMatmulDescCreate)(void** desc, int compute_type, int scale_type) = nullptr;
  int (*cublasLtMatmulDescDestroy)(void* desc) = nullptr;
  int (*cublasLtMatmulDescSetAttribute)(void* desc, int attr, const void* buf,
                                        std::size_t size) = nullptr;
  int (*cublasLtMatrixLayoutCreate)(void** layout, int type, std::uint64_t rows,
                                    std::uint64_t cols, std::int64_t ld) = nullptr;
  int (*cublasLtMatrixLayoutDestroy)(void* layout) = nullptr;
  int (*cublasLtMatrixLayoutSetAttribute)(void* layout, int attr, const void* buf,
                                          std::size_t size) = nullptr;
  int (*cublasLtMatmulPreferenceCreate)(void** pref) = nullptr;
  int (*cublasLtMatmulPreferenceDestroy)(void* pref) = nullptr;
  int (*cublasLtMatmulPreferenceSetAttribute)(void* pref, int attr, const void* buf,
                                              std::size_t size) = nullptr;
  int (*cublasLtMatmulAlgoGetHeuristic)(void* handle, void* desc, void* a, void* b, void* c,
                                        void* d, void* pref, int requested,
                                        LtHeuristicResult* results, int* returned) = nullptr;
  int (*cublasLtMatmulAlgoInit)(void* handle, int compute_type, int scale_type, int a_type,
                                int b_type, int c_type, int d_type, int algo_id,
                                LtAlgo* algo) = nullptr;
  int (*cublasLtMatmulAlgoCheck)(void* handle, void* desc, void* a, void* b, void* c, void* d,
                                 const LtAlgo* algo, LtHeuristicResult* result) = nullptr;
  int (*cublasLtMatmulAlgoConfigSetAttribute)(LtAlgo* algo, int attr, const void* buf,
                                              std::size_t size) = nullptr;
  int (*cublasLtMatmulAlgoConfigGetAttribute)(const LtAlgo* algo, int attr, void* buf,
                                              std::size_t size, std::size_t* written) = nullptr;
  int (*cublasLtMatmulAlgoCapGetAttribute)(const LtAlgo* algo, int attr, void* buf,
                                           std::size_t size, std::size_t* written) = nullptr;
  int (*cublasLtMatmul)(void* handle, void* desc, const void* alpha, const void* a, void* a_desc,
                        const void* b, void* b_desc, const void* beta, const void* c,
                        void* c_desc, void* d, void* d_desc, const LtAlgo* algo,
                        void* workspace, std::size_t workspace_size, void* stream) = nullptr;
};

struct CublasLt {
  CublasLtApi api;
  LoadedLibrary lib;
};

// Loaded on first call; never throws (inspect lib.available()).
const CublasLt& cublaslt() noexcept;

}  // namespace cudakit::detail::cuda
