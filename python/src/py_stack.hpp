// The one Python stack capture of the bindings: memory history (bind_memory.cpp, through
// cudakit/python_stacks.hpp) and the stream sanitizer (bind_sanitizer.cpp) both record the
// interpreter's stack with it and name its frames with it.
#pragma once

#include <string>
#include <vector>

#include "cudakit/python_stacks.hpp"

namespace cudakit::python {

// Appends the calling thread's Python stack, innermost first, at most 64 frames, as raw
// (code object, instruction offset) pairs. The caller holds the GIL. Every code object
// handed out is kept alive for the life of the process (one reference, taken the first
// time), so a recorded frame never dangles nor names another function later.
void capture_python_frames(std::vector<PyFrameRef>& out);

// File, line and function name of a captured frame. The caller holds the GIL.
void python_frame_location(const PyFrameRef& frame, std::string& file, int& line,
                           std::string& name);

}  // namespace cudakit::python
