// C++ types bound as Python classes that more than one binding file needs (the argument
// layer recognises streams and events; bind_streams.cpp defines their classes).
#pragma once

#include "cudakit/stream.hpp"

namespace cudakit::python {

// Python-visible stream: a StreamRef value (pool, default or external stream; cudakit never
// destroys these, as torch never destroys pool streams).
struct PyStream {
  StreamRef ref;
};

// Distinct C++ type so pybind11 can register the Python subclass ExternalStream.
struct PyExternalStream : PyStream {};

struct PyEvent {
  Event event;
};

}  // namespace cudakit::python
