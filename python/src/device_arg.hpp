// Parsing of torch-style device arguments, shared by every binding file:
// None (current device), int, "cuda", "cuda:N", objects with .type/.index (torch.device,
// cudakit.Device), and cudakit.Stream-like objects are not accepted here.
#pragma once

#include <pybind11/pybind11.h>

namespace cudakit::python {
namespace py = pybind11;

// Returns a device index; None → kCurrentDevice (-1) when optional, else an error.
// "cuda" without an index → kCurrentDevice. CPU devices → ValueError.
int device_index(py::handle obj, bool optional = true);

}  // namespace cudakit::python
