#include "backend/cuda/cublaslt.hpp"

namespace cudakit::detail::cuda {

const CublasLt& cublaslt() noexcept {
  static const CublasLt* lib = [] {
    auto* c = new CublasLt();  // leaked: function pointers outlive static destruction
    CublasLtApi& a = c->api;
    c->lib = load_library(
        {"cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
         "install the CUDA cuBLAS runtime (libcublasLt) or add its directory to LD_LIBRARY_PATH",
         [](const LoadedLibrary& l) -> std::string {
           // cublasLtGetVersion: major * 10000 + minor * 100 + patch (CUBLAS_VERSION).
           auto get = reinterpret_cast<std::size_t (*)()>(l.symbol("cublasLtGetVersion"));
           if (!get) return "";
           const std::size_t v = get();
           return version_string(static_cast<int>(v / 10000), static_cast<int>(v / 100 % 100),
                                 static_cast<int>(v % 100));
         }},
        {bind_symbol("cublasLtCreate", a.cublasLtCreate),
         bind_symbol("cublasLtGetVersion", a.cublasLtGetVersion),
         bind_symbol("cublasLtMatmulDescCreate", a.cublasLtMatmulDescCreate),
         bind_symbol("cublasLtMatmulDescDestroy", a.cublasLtMatmulDescDestroy),
         bind_symbol("cublasLtMatmulDescSetAttribute", a.cublasLtMatmulDescSetAttribute),
         bind_symbol("cublasLtMatrixLayoutCreate", a.cublasLtMatrixLayoutCreate),
         bind_symbol("cublasLtMatrixLayoutDestroy", a.cublasLtMatrixLayoutDestroy),
         bind_symbol("cublasLtMatrixLayoutSetAttribute", a.cublasLtMatrixLayoutSetAttribute),
         bind_symbol("cublasLtMatmulPreferenceCreate", a.cublasLtMatmulPreferenceCreate),
         bind_symbol("cublasLtMatmulPreferenceDestroy", a.cublasLtMatmulPreferenceDestroy),
         bind_symbol("cublasLtMatmulPreferenceSetAttribute",
                     a.cublasLtMatmulPreferenceSetAttribute),
         bind_symbol("cublasLtMatmulAlgoGetHeuristic", a.cublasLtMatmulAlgoGetHeuristic),
         bind_symbol("cublasLtMatmulAlgoInit", a.cublasLtMatmulAlgoInit),
         bind_symbol("cublasLtMatmulAlgoCheck", a.cublasLtMatmulAlgoCheck),
         bind_symbol("cublasLtMatmulAlgoConfigSetAttribute",
                     a.cublasLtMatmulAlgoConfigSetAttribute),
         bind_symbol("cublasLtMatmulAlgoConfigGetAttribute",
                     a.cublasLtMatmulAlgoConfigGetAttribute),
         bind_symbol("cublasLtMatmulAlgoCapGetAttribute", a.cublasLtMatmulAlgoCapGetAttribute),
         bind_symbol("cublasLtMatmul", a.cublasLtMatmul)});
    return c;
  }();
  return *lib;
}

}  // namespace cudakit::detail::cuda
