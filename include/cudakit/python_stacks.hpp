// Hooks through which an embedding interpreter — cudakit's Python bindings — gives the
// allocator's history (memory.hpp: record_memory_history with stacks="python"/"all") the
// interpreter's stack at each allocation. cudakit itself knows nothing about Python: it
// stores the raw frames the capture hook returns and asks the symbolize hook for file, line
// and name only when a snapshot is taken.
//
// Contract: `capture` runs on the allocating thread with no allocator lock held (it may run
// the garbage collector, which may free memory into the allocator); it appends the current
// stack innermost first, or nothing. `symbolize` runs at snapshot time, outside allocator
// locks. A frame's `code` must stay valid for the life of the process (the bindings keep
// every code object they hand out alive).
//
// Thread-safety: set_python_stack_hooks may be called from any thread; installing hooks is
// expected once, before recording starts.
#pragma once

#include "cudakit/export.hpp"

#include <string>
#include <vector>

namespace CUDAKIT_API cudakit {

// One raw interpreter frame: a code object and the offset of its current instruction.
struct PyFrameRef {
  const void* code = nullptr;
  int lasti = -1;
  bool operator==(const PyFrameRef&) const = default;
};

using PyStackHook = void (*)(std::vector<PyFrameRef>& out);
using PySymbolizeHook = void (*)(const PyFrameRef& frame, std::string& file, int& line,
                                 std::string& name);

void set_python_stack_hooks(PyStackHook capture, PySymbolizeHook symbolize);

}  // namespace cudakit
