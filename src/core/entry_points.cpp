// Public entry points (include/cudakit/device.hpp, python_stacks.hpp) for services whose
// implementations live in private modules. They exist so the Python bindings can be built
// from public headers only (python/CMakeLists.txt gives them no path to src/); each is a
// forwarder, so moving an implementation (e.g. cuBLAS behind the backend seam) changes one
// line here and nothing in the bindings.
#include "cudakit/device.hpp"
#include "cudakit/python_stacks.hpp"
#include "memory/history.hpp"
#include "ops/blas.hpp"

namespace cudakit::detail {
void* current_solver_handle();  // src/devices/solver_handle.cpp
}  // namespace cudakit::detail

namespace cudakit {

void* current_blas_handle() { return detail::current_blas_handle(); }
void* current_solver_handle() { return detail::current_solver_handle(); }

void set_python_stack_hooks(PyStackHook capture, PySymbolizeHook symbolize) {
  memory::set_python_stack_hook(capture, symbolize);
}

}  // namespace cudakit
