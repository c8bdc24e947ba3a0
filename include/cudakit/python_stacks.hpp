// Hooks through which an embedding interpreter — cudakit's Python bindings — gives the
// allocator's history (memory.hpp: record_memory_history with stacks="python"/"all") the
// interpreter's stack at each allocation. cudakit itself knows nothing about Python: it
// stores the raw frames the capture hook returns and asks the symbolize hook for file, line
// and name only when a snapshot is taken.
//
// Contract: `capture` runs on the allocating thread with no allocator lock held (it may run
// the garbage collector, which may free memory into the allocator); it writes the current
// stack innermost first (PyStackHook below), or nothing. `symbolize` runs at snapshot time, outside allocator
// locks. A frame's `code` must stay valid for the life of the process (the bindings keep
// every code object they hand out alive).
//
// The same interpreter also installs the allocator's wait hooks and warning handler (below).
//
// Thread-safety: every setter may be called from any thread; installing hooks is expected
// once, at import, before recording starts.
#pragma once

#include "cudakit/export.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace CUDAKIT_API cudakit {

// One raw interpreter frame: a code object and the offset of its current instruction.
struct PyFrameRef {
  const void* code = nullptr;
  int lasti = -1;
  // Not defaulted: memory.hpp includes this header, and .cu files compile it as C++17.
  bool operator==(const PyFrameRef& o) const noexcept { return code == o.code && lasti == o.lasti; }
  bool operator!=(const PyFrameRef& o) const noexcept { return !(*this == o); }
};

// The most Python frames a stack keeps (the innermost ones).
inline constexpr int kMaxPythonFrames = 64;

// Writes the current stack, innermost first, into out[0..max) and returns how many frames it
// wrote (0: none). *key may name the stack's content: two captures given the same nonzero key
// hold the same frames, so the history compares keys instead of frames (the hook sets 0, or
// leaves it, when it has no key). A buffer instead of a vector, and the key, because the hook
// runs twice per recorded alloc/free pair (issue 31: the vector, swapped in and out of a
// thread_local, and the frame-by-frame comparison cost ~150 of the ~490 instructions per
// captured 5-frame stack).
using PyStackHook = int (*)(PyFrameRef* out, int max, std::uint64_t* key);
using PySymbolizeHook = void (*)(const PyFrameRef& frame, std::string& file, int& line,
                                 std::string& name);

void set_python_stack_hooks(PyStackHook capture, PySymbolizeHook symbolize);

// Around every wait of the allocator (for a stream, an event or the device), which happens
// with no allocator lock held: `release` gives up the interpreter lock if the calling thread
// holds it and returns a token (nullptr if it held nothing), `reacquire(token)` takes it back.
// What the allocator waits for may itself need the interpreter lock (a finaliser, a stream
// task dropping an interpreter-owned buffer), so without these hooks such a wait deadlocks.
void set_allocator_wait_hooks(void* (*release)(), void (*reacquire)(void* token));

// Where allocator warnings go (inert CUDAKIT_ALLOC_CONF keys, ...): stderr by default. Called
// outside every allocator lock, on the thread that triggered the warning.
void set_allocator_warning_handler(std::function<void(const std::string& message)> handler);

}  // namespace cudakit
