// Public entry points (include/cudakit/python_stacks.hpp) for services whose implementations
// live in private modules. They exist so the Python bindings can be built
// from public headers only (python/CMakeLists.txt gives them no path to src/); each is a
// forwarder, so moving an implementation (e.g. cuBLAS behind the backend seam) changes one
// line here and nothing in the bindings.
#include "cudakit/python_stacks.hpp"
#include "memory/config.hpp"
#include "memory/history.hpp"
#include "memory/locks.hpp"

namespace cudakit {

void set_python_stack_hooks(PyStackHook capture, PySymbolizeHook symbolize) {
  memory::set_python_stack_hook(capture, symbolize);
}

void set_allocator_wait_hooks(void* (*release)(), void (*reacquire)(void* token)) {
  memory::set_wait_hooks({release, reacquire});
}

void set_allocator_warning_handler(std::function<void(const std::string& message)> handler) {
  memory::set_warning_handler(std::move(handler));
}

}  // namespace cudakit
