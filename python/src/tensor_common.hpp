// Argument parsing shared by the tensor and random bindings.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::python {
namespace py = pybind11;

DType parse_dtype(py::handle obj);
// None -> current cuda device; int; "cpu"/"cuda"/"cuda:N"; objects with .type/.index.
Device parse_device(py::handle obj);
std::optional<Scalar> as_scalar(py::handle obj);
Shape parse_shape(py::args args);  // f(2, 3) or f((2, 3))
StreamRef stream_from_object(py::handle stream, int device);

}  // namespace cudakit::python
