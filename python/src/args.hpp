// The argument layer of the bindings: every value a user passes to cudakit._C is converted
// here — devices, streams, dtypes, shapes, scalars, ints, flags — so each bad input gets the
// same kind of error, naming the function, the argument, the bad value and what is accepted
// (torch's style: "zeros(): argument 'dtype' must be ..."), never a pybind11 signature dump,
// a C++ type name or a numpy-internal name.
//
// Rule for bind_*.cpp: a public function or method takes py::handle / py::object for every
// argument a user supplies and converts it with these helpers; pybind11's own casters would
// answer a wrong type or an out-of-range int with a dump of the C++ signature. Private
// entry points (_C._xxx, called only by cudakit's Python modules with values they checked)
// may take typed parameters.
//
// Errors: a value of the wrong type is an ArgTypeError, raised in Python as
// cudakit.ArgumentTypeError — a TypeError (torch's class for it) that is also a ValueError
// (cudakit's class for bad input); a value of the right type that is out of range or
// meaningless is a ValueError. Both leave all state as it was.
//
// Thread-safety: the helpers hold the GIL's caller contract (they touch Python objects) and
// keep no state of their own.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>

#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::python {
namespace py = pybind11;

// Where a value came from, for messages: Arg{"zeros", "dtype"} -> "zeros(): argument 'dtype'".
struct Arg {
  const char* fn;
  const char* name;
};

// A value of the wrong type (see the header comment for its Python class).
class ArgTypeError : public ValueError {
 public:
  using ValueError::ValueError;
};

// "zeros(): argument 'dtype'"
std::string where(Arg a);
// "int (5)", "str ('cuda:x')", "list ([1, 2])": the type and a short repr of a value.
std::string describe(py::handle value);
[[noreturn]] void throw_type(Arg a, const std::string& expected, py::handle got);
[[noreturn]] void throw_value(Arg a, const std::string& problem);  // where(a) + " " + problem
// A call of the wrong shape to a hand-written CPython function (bind_nvtx.cpp, fast_path.hpp
// users), in CPython's own words so it reads like any Python function's:
// throw_call("mark", "takes 1 positional argument (msg) but 2 were given"). An ArgTypeError.
[[noreturn]] void throw_call(const char* fn, const std::string& problem);

// Runs a C++ parse (Device::parse, nvtx::Color::parse, ...) and prefixes its ValueError with
// the argument it came from: "set_device(): argument 'device': Invalid device string ...".
template <class F>
auto with_context(Arg a, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ArgTypeError&) {
    throw;
  } catch (const ValueError& e) {
    throw ValueError(where(a) + ": " + e.what());
  }
}

// ---- numbers and flags ----
// An int for Python: int or any object with __index__ (numpy integers), never bool or float.
bool is_int(py::handle value);
std::int64_t to_int64(py::handle value, Arg a);  // ValueError outside [-2**63, 2**63)
int to_int(py::handle value, Arg a);             // ValueError outside the C int range
std::uint64_t to_uint64(py::handle value, Arg a);  // ValueError outside [0, 2**64)
std::size_t to_size(py::handle value, Arg a);    // a byte count: >= 0
std::uintptr_t to_address(py::handle value, Arg a);  // a pointer / handle value
double to_double(py::handle value, Arg a);       // int or float (and numpy scalars)
bool to_bool(py::handle value, Arg a);           // bool or numpy.bool_
std::string to_string(py::handle value, Arg a);  // str (or os.PathLike for paths)

// ---- devices ----
// A cuda device index: None / 'cuda' / -1 -> kCurrentDevice (unless !none_ok), int >= 0,
// 'cuda:N', cudakit.Device, torch.device-like (.type/.index). 'cpu' is a ValueError. The
// index is not range-checked here: the C++ call resolves it ("Invalid device index").
int cuda_index(py::handle value, Arg a, bool none_ok = true);
// Device of a tensor: cpu or cuda (resolved). None -> the current cuda device.
Device device_arg(py::handle value, Arg a);

// ---- streams ----
// A stream: cudakit.Stream, anything with __cuda_stream__ (the CUDA stream protocol) or
// cuda_stream (torch) or ptr (CuPy); a raw handle int when allow_handle. None -> the current
// stream of `device`. Foreign objects and raw handles belong to their own device attribute
// (device_index / device_id) when they have one, else to `device` (kCurrentDevice: asked of
// the driver).
StreamRef stream_arg(py::handle value, Arg a, int device = kCurrentDevice, bool allow_handle = false);

// ---- dtypes ----
// cudakit.dtype, a name ('float32', 'torch.float32', 'half', ...), a NumPy dtype or scalar
// type, a torch dtype, or Python's bool/int/float/complex (torch's mapping).
DType dtype_arg(py::handle value, Arg a);
std::optional<DType> opt_dtype_arg(py::handle value, Arg a);  // None -> nullopt

// ---- shapes ----
// f(2, 3), f((2, 3)), f([2, 3]) or f() (0-d). Elements are ints; sizes are validated by the
// C++ call (negative sizes, overflow: ValueError there, with the whole shape).
Shape shape_from_args(const py::args& args, Arg a);
Shape shape_arg(py::handle value, Arg a);  // an int or a sequence of ints

// ---- scalars and tensors ----
// A Python or NumPy number as a Scalar (bool, int64, double, complex); nullopt for anything
// else. Ints beyond int64 are a ValueError naming `a`.
std::optional<Scalar> as_scalar(py::handle value, Arg a);
Scalar scalar_arg(py::handle value, Arg a);  // ArgTypeError if not a number
const Tensor& tensor_arg(py::handle value, Arg a);

}  // namespace cudakit::python
