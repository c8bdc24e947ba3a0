// Public entry points (include/cudakit/python_stacks.hpp) for services whose implementations
// live in private modules. They exist so the Python bindings can be built
// from public headers only (python/CMakeLists.txt gives them no path to src/); each is a
// forwarder, so moving an implementation (e.g. cuBLAS behind the backend seam) changes one
// line here and nothing in the bindings.
#include "cudakit/python_stacks.hpp"
#include "memory/history.hpp"

namespace cudakit {

void set_python_stack_hooks(PyStackHook capture, PySymbolizeHook symbolize) {
  memory::set_python_stack_hook(capture, symbolize);
}

}  // namespace cudakit
