// The one Python stack capture of the bindings: memory history (bind_memory.cpp, through
// cudakit/python_stacks.hpp) and the stream sanitizer (bind_sanitizer.cpp) both record the
// interpreter's stack with it and name its frames with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cudakit/python_stacks.hpp"

namespace cudakit::python {

// Writes the calling thread's Python stack, innermost first, at most min(max, 64) frames, as
// raw (code object, instruction offset) pairs into out and returns how many. The caller holds
// the GIL. Every code object handed out is kept alive for the life of the process (one
// reference, taken the first time), so a recorded frame never dangles nor names another
// function later. *key: PyStackHook's key (cudakit/python_stacks.hpp), set where the
// interpreter's frame records are walked (3.11, 3.12), else left as is.
int capture_python_frames(PyFrameRef* out, int max, std::uint64_t* key);
// The history's capture hook (PyStackHook, cudakit/python_stacks.hpp): the same, from any
// thread. One that does not hold the GIL takes it for the walk, if it has a thread state.
int capture_python_stack(PyFrameRef* out, int max, std::uint64_t* key);
// Appends the stack to `out` (the stream sanitizer's form).
void capture_python_frames(std::vector<PyFrameRef>& out);

// File, line and function name of a captured frame. The caller holds the GIL.
void python_frame_location(const PyFrameRef& frame, std::string& file, int& line,
                           std::string& name);

}  // namespace cudakit::python
