// Conversions between cudakit.Tensor and other Python array objects, shared by the binding
// files: NumPy and DLPack live in bind_interop.cpp, nested Python data (torch.tensor's
// parsing) in bind_factories.cpp.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <functional>
#include <optional>

#include "args.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::python {

// A NumPy array viewing a host tensor (zero-copy; keeps the tensor alive). TypeError for
// device tensors and bfloat16 (NumPy has no such type).
py::array to_numpy(const Tensor& t);
bool is_numpy_array(py::handle obj);
// A host tensor viewing a NumPy array (zero-copy when its dtype, byte order and alignment
// allow, else a converted copy); ArgTypeError for dtypes cudakit lacks (str, object, ...).
Tensor from_numpy(py::handle array, Arg a);
// torch.from_dlpack: a DLPack capsule or any object with __dlpack__ (zero-copy).
Tensor from_dlpack_obj(py::handle obj);
// A device tensor viewing an object's __cuda_array_interface__ (v0-v3; zero-copy; keeps the
// object alive). Its `stream`, when given, is waited for on the current stream, as the
// protocol asks of consumers. ArgTypeError / ValueError naming `a` for what cannot be viewed.
Tensor from_cuda_array_interface(py::handle obj, Arg a);

// Anything array-like as a tensor: a Tensor (as is), a DLPack producer or NumPy array
// (zero-copy, where it lives), or numbers / nested sequences of numbers (a new tensor with
// torch's inferred dtype: bool, int64, float32, complex64, on the current cuda device unless
// `device` says otherwise). `dtype` / `device` convert. `from_data` tells whether the result
// was built from Python data (then it owns fresh memory).
Tensor to_tensor(py::handle obj, std::optional<DType> dtype, std::optional<Device> device, Arg a,
                 bool* from_data = nullptr);

// Runs `fn` (which drops Python references) now when this thread holds the GIL, else from
// the interpreter's pending calls: a tensor's storage may die on a stream worker thread.
void release_foreign(std::function<void()> fn);

}  // namespace cudakit::python
