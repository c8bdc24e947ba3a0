// CudaBackend: modules (fatbin / cubin / PTX images) and kernel launches.
#include "backend/cuda/cuda_backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {

ModuleHandle CudaBackend::module_load_data(int device, const void* image) {
  if (!image) throw ValueError("module_load_data: image is null (pass a fatbin, cubin or PTX)");
  ContextScope scope(*this, device, "module_load_data");
  CUmodule m = nullptr;
  check(api("module_load_data").cuModuleLoadData(&m, image), "cuModuleLoadData");
  return m;
}

void CudaBackend::module_unload(ModuleHandle m) {
  if (!m || is_shutting_down()) return;
  CUresult rc = api("module_unload").cuModuleUnload(static_cast<CUmodule>(m));
  if (rc != CUDA_ERROR_DEINITIALIZED) check(rc, "cuModuleUnload");
}

FunctionHandle CudaBackend::module_get_function(ModuleHandle m, const char* name) {
  if (!name) throw ValueError("module_get_function: kernel name is null");
  CUfunction f = nullptr;
  CUresult rc = api("module_get_function").cuModuleGetFunction(&f, static_cast<CUmodule>(m), name);
  if (rc != CUDA_SUCCESS) {
    std::string what = std::string("cuModuleGetFunction('") + name + "')";
    if (rc == CUDA_ERROR_NOT_FOUND) what += " (is the kernel declared extern \"C\"?)";
    throw_cu(rc, what.c_str());
  }
  return f;
}

void CudaBackend::launch_kernel(FunctionHandle f, Dim3 grid, Dim3 block, unsigned shared_bytes,
                                StreamHandle s, void** args) {
  ensure_context(s, "launch_kernel");
  check(api("launch_kernel")
            .cuLaunchKernel(static_cast<CUfunction>(f), grid.x, grid.y, grid.z, block.x,
                            block.y, block.z, shared_bytes, static_cast<CUstream>(s), args,
                            nullptr),
        "cuLaunchKernel");
}

}  // namespace cudakit::detail::cuda
