#include "backend/cuda/cu_check.hpp"

#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {

void throw_cu(CUresult rc, const char* what) {
  const EntryPoints& t = driver().api;
  const char* name = nullptr;
  const char* text = nullptr;
  if (t.cuGetErrorName) t.cuGetErrorName(rc, &name);
  if (t.cuGetErrorString) t.cuGetErrorString(rc, &text);
  std::string code_name = name ? name : error_code_name(static_cast<int>(rc));
  std::string msg = std::string(what) + ": " + code_name;
  if (text) msg += std::string(": ") + text;
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemoryError(msg, -1, 0);
  throw AcceleratorError(static_cast<int>(rc), code_name, msg);
}

void throw_unavailable(const DriverState& s, const char* what) {
  throw AcceleratorError(s.error_code, s.error_name,
                         std::string(what) + ": the CUDA backend is unavailable: " + s.reason +
                             ". Use CUDAKIT_BACKEND=emulated to run without a GPU.");
}

void throw_missing(const char* entry_point) {
  const DriverState& s = driver();
  throw NotSupportedError(std::string(entry_point) + " is not provided by the installed NVIDIA "
                          "driver (CUDA " + std::to_string(s.driver_version / 1000) + "." +
                          std::to_string(s.driver_version % 1000 / 10) +
                          "): update the driver to use this feature");
}

}  // namespace cudakit::detail::cuda
