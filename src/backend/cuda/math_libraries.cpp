#include "backend/cuda/math_libraries.hpp"

namespace cudakit::detail::cuda {
namespace {

// Both libraries answer libraryPropertyType queries without a handle or a context.
template <class GetProperty>
std::string property_version(GetProperty get) {
  int major = 0, minor = 0, patch = 0;
  if (!get || get(kMajorVersion, &major) != 0 || get(kMinorVersion, &minor) != 0 ||
      get(kPatchLevel, &patch) != 0) {
    return "";
  }
  return version_string(major, minor, patch);
}

}  // namespace

const Cublas& cublas() noexcept {
  static const Cublas* lib = [] {
    auto* c = new Cublas();  // leaked: handles outlive static destruction
    c->lib = load_library(
        {"cuBLAS", {"libcublas.so.13", "libcublas.so.12", "libcublas.so"},
         "install the CUDA cuBLAS runtime (libcublas) or add its directory to LD_LIBRARY_PATH",
         [](const LoadedLibrary& l) {
           return property_version(
               reinterpret_cast<int (*)(int, int*)>(l.symbol("cublasGetProperty")));
         }},
        {bind_symbol("cublasCreate_v2", c->api.cublasCreate_v2),
         bind_symbol("cublasSetStream_v2", c->api.cublasSetStream_v2),
         bind_symbol("cublasSetWorkspace_v2", c->api.cublasSetWorkspace_v2, false),
         bind_symbol("cublasGemmEx", c->api.cublasGemmEx),
         bind_symbol("cublasGemmStridedBatchedEx", c->api.cublasGemmStridedBatchedEx),
         bind_symbol("cublasGetProperty", c->api.cublasGetProperty, false)});
    return c;
  }();
  return *lib;
}

const Cusolver& cusolver() noexcept {
  static const Cusolver* lib = [] {
    auto* c = new Cusolver();
    c->lib = load_library(
        {"cuSOLVER", {"libcusolver.so.12", "libcusolver.so.11", "libcusolver.so"},
         "install the CUDA cuSOLVER runtime (libcusolver) or add its directory to "
         "LD_LIBRARY_PATH",
         [](const LoadedLibrary& l) {
           return property_version(
               reinterpret_cast<int (*)(int, int*)>(l.symbol("cusolverGetProperty")));
         }},
        {bind_symbol("cusolverDnCreate", c->api.cusolverDnCreate),
         bind_symbol("cusolverDnSetStream", c->api.cusolverDnSetStream),
         bind_symbol("cusolverGetProperty", c->api.cusolverGetProperty, false)});
    return c;
  }();
  return *lib;
}

}  // namespace cudakit::detail::cuda
