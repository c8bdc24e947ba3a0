// The one map from C++ exceptions to Python exceptions (defined in module.cpp), shared by
// every binding: pybind11 functions reach it through the translator module.cpp registers;
// hand-written CPython functions (fast_path.hpp, bind_nvtx.cpp) call set_python_error.
//
//   cudakit::python::ArgTypeError       -> cudakit.ArgumentTypeError (TypeError + ValueError)
//   sanitizer::CUDASanitizerErrors      -> cudakit.sanitizer.CUDASanitizerErrors
//   nccl::NcclError                     -> cudakit.nccl.NcclError (RuntimeError)
//   OutOfMemoryError                    -> cudakit.OutOfMemoryError (RuntimeError)
//   AcceleratorError                    -> cudakit.AcceleratorError (RuntimeError)
//   IoError                             -> OSError(errno, message, path) (FileNotFoundError, ...)
//   KeyError                            -> cudakit.KeyNotFoundError (KeyError + ValueError)
//   ValueError                          -> ValueError
//   NotSupportedError                   -> NotImplementedError
//   Error                               -> RuntimeError
//   anything else                       -> pybind11's own mapping (std::bad_alloc ->
//                                          MemoryError, py::error_already_set restored, ...)
#pragma once

#include <pybind11/pybind11.h>

#include <exception>

#include "cudakit/sanitizer.hpp"

namespace cudakit::python {

// Sets the Python error for `e` exactly as a pybind11 function raising it would; returns
// nullptr (CPython's "an exception is set"), so a CPython function ends with
//   catch (...) { return set_python_error(std::current_exception()); }
PyObject* set_python_error(std::exception_ptr e) noexcept;

// The CUDASanitizerErrors entry of the table: builds the Python exception from plain dicts
// (bind_sanitizer.cpp owns the conversion of accesses and stacks).
void set_sanitizer_error(const sanitizer::CUDASanitizerErrors& e);

}  // namespace cudakit::python
