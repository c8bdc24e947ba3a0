// current_solver_handle(): a cuSOLVER dense handle per (thread, device), bound to the
// current stream. cuSOLVER is dlopen'ed on first use, never linked.
#include <dlfcn.h>

#include <array>
#include <mutex>
#include <string>

#include "backend/backend.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"

namespace cudakit::detail {
namespace {

using CreateFn = int (*)(void**);
using SetStreamFn = int (*)(void*, void*);

struct Solver {
  CreateFn create = nullptr;
  SetStreamFn set_stream = nullptr;
  std::string error;
};

const Solver& solver_library() {
  static const Solver lib = [] {
    Solver s;
    for (const char* name : {"libcusolver.so.12", "libcusolver.so.11", "libcusolver.so"}) {
      if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
        s.create = reinterpret_cast<CreateFn>(dlsym(h, "cusolverDnCreate"));
        s.set_stream = reinterpret_cast<SetStreamFn>(dlsym(h, "cusolverDnSetStream"));
        break;
      }
    }
    if (!s.create || !s.set_stream) {
      s.error = "cuSOLVER (libcusolver.so.12) could not be loaded; install the CUDA math libraries";
    }
    return s;
  }();
  return lib;
}

}  // namespace

void* current_solver_handle() {
  if (std::string(backend().name()) != "cuda") {
    throw NotSupportedError("current_solver_handle: cuSOLVER needs the cuda backend");
  }
  const Solver& lib = solver_library();
  if (!lib.create) throw NotSupportedError(lib.error);
  thread_local std::array<void*, kMaxDevices> handles{};  // leaked at thread exit, as torch's pool
  int dev = current_device();
  void*& h = handles[dev];
  if (!h) {
    if (int rc = lib.create(&h); rc != 0) {
      h = nullptr;
      throw Error("cusolverDnCreate failed with status " + std::to_string(rc));
    }
  }
  lib.set_stream(h, current_stream(dev).handle());
  return h;
}

}  // namespace cudakit::detail
