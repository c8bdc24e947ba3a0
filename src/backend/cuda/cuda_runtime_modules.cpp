// CudaBackend: runtime-compiled modules (the jiterator). NVRTC compiles for the device's
// exact architecture (nvrtc.hpp); images load with cuModuleLoadData; kernels take their one
// parameter block by value, so cuLaunchKernel copies it at the call.
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/nvrtc.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {
int arch_of(CudaBackend& b, int device) {
  const DeviceInfo info = b.device_info(device);
  return info.major * 10 + info.minor;
}
}  // namespace

std::string CudaBackend::runtime_compiler_id(int device, const std::string& state_dir) {
  const int arch = arch_of(*this, device);
  const NvrtcIdentity id = nvrtc_identity(state_dir);
  const NvrtcTarget t = nvrtc_target(id.archs, arch);
  return "nvrtc " + id.version + " " + id.file + " target=" + (t.cubin ? "sm_" : "compute_") +
         std::to_string(t.arch) + " device=sm_" + std::to_string(arch) +
         " driver=" + std::to_string(driver_version());
}

Backend::RuntimeCompileResult CudaBackend::compile_runtime_module(int device,
                                                                  const std::string& source,
                                                                  const std::string& program) {
  const Nvrtc& n = nvrtc();
  if (!n.lib.available()) throw_library_unavailable(n.lib, "jiterator (NVRTC)");
  const NvrtcTarget t = nvrtc_target(n.archs, arch_of(*this, device));
  NvrtcOutput out = nvrtc_compile(source, program, t);
  RuntimeCompileResult r;
  r.ok = out.ok;
  r.image = std::move(out.image);
  r.log = std::move(out.log);
  return r;
}

ModuleHandle CudaBackend::load_runtime_module(int device, const void* image, std::size_t size) {
  if (!image || size == 0) throw ValueError("load_runtime_module: empty image");
  return module_load_data(device, image);
}

void CudaBackend::launch_runtime_kernel(FunctionHandle f, Dim3 grid, Dim3 block, StreamHandle s,
                                        const void* params, std::size_t,
                                        std::shared_ptr<const void>) {
  void* args[] = {const_cast<void*>(params)};
  launch_kernel(f, grid, block, 0, s, args);
}

}  // namespace cudakit::detail::cuda
