// Driver seam, kernels topic: device modules and kernel launches (cuda), and the runtime-
// compiled modules of the jiterator (every backend).
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/types.hpp"

namespace cudakit::detail {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct KernelOps {
  // ---- kernels (cuda only: the emulated backend throws NotSupportedError naming the call) --
  // Loads a fatbin/cubin/PTX image into `device`'s primary context.
  virtual ModuleHandle module_load_data(int device, const void* image) = 0;
  virtual void module_unload(ModuleHandle m) = 0;
  virtual FunctionHandle module_get_function(ModuleHandle m, const char* name) = 0;
  virtual void launch_kernel(FunctionHandle f, Dim3 grid, Dim3 block, unsigned shared_bytes,
                             StreamHandle s, void** args) = 0;

  // ---- runtime-compiled modules (the jiterator; every backend) ----
  // The source is one self-contained C++17 translation unit. The cuda backend compiles it
  // with NVRTC for `device`'s exact architecture (CUBIN; PTX when the device is newer than
  // NVRTC) and its kernels are __global__ functions taking one parameter block by value. The
  // emulated backend compiles it with the host C++ compiler into a shared object whose
  // functions are `extern "C" void f(const void* params)`, run as host tasks. The source
  // tells the two apart by `__CUDACC_RTC__`.
  //
  // What identifies the compiler's output besides the source (compiler and its version,
  // target architecture, flags, driver): the key of cached images. Cheap after the first
  // call: it does not load the compiler when `state_dir` (a private, writable directory; ""
  // for none) remembers how the compiler that would be loaded was identified before.
  // NotSupportedError naming what is missing when there is no compiler.
  virtual std::string runtime_compiler_id(int device, const std::string& state_dir) = 0;
  struct RuntimeCompileResult {
    bool ok = false;
    std::vector<char> image;  // loadable by load_runtime_module (for the same compiler id)
    std::string log;          // the compiler's diagnostics (the reason when !ok)
  };
  // Compiles `source`; `program` names it in diagnostics. A compile error is a result
  // (ok false), not an exception: callers add context from the source. Throws only when the
  // compiler cannot run at all.
  virtual RuntimeCompileResult compile_runtime_module(int device, const std::string& source,
                                                      const std::string& program) = 0;
  // Loads an image from compile_runtime_module into `device`. module_get_function resolves
  // its functions; modules stay loaded until exit (module_unload is allowed, but no kernel
  // of the module may still be pending).
  virtual ModuleHandle load_runtime_module(int device, const void* image, std::size_t size) = 0;
  // Launches a runtime-module function on `s` with its parameter block (`bytes` bytes, copied
  // before this returns). `keep_alive` is released once the launch no longer needs the
  // operands' memory (host tasks run later; the cuda backend drops it at once, as for gemm).
  // The host task of the emulated backend processes the whole launch; grid/block are for
  // the device.
  virtual void launch_runtime_kernel(FunctionHandle f, Dim3 grid, Dim3 block, StreamHandle s,
                                     const void* params, std::size_t bytes,
                                     std::shared_ptr<const void> keep_alive) = 0;

 protected:
  ~KernelOps() = default;
};

// The process's backend (backend() in backend.hpp) as its KernelOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
KernelOps& kernel_ops();

}  // namespace cudakit::detail
