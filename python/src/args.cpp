#include "args.hpp"

#include <climits>
#include <complex>

#include "bound_types.hpp"

namespace cudakit::python {
namespace {

std::string type_name(py::handle v) {
  return py::str(py::type::handle_of(v).attr("__name__")).cast<std::string>();
}

// The module a value's type (or, for a class object, the class itself) comes from.
std::string module_of(py::handle v, bool of_class = false) {
  py::handle t = of_class ? v : py::type::handle_of(v);
  py::object m = py::getattr(t, "__module__", py::none());
  return m.is_none() ? std::string() : py::str(m).cast<std::string>();
}

bool from_numpy_module(const std::string& mod) { return mod == "numpy" || mod.rfind("numpy.", 0) == 0; }

const char* kDtypeList =
    "bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64, complex128";
const char* kDeviceForms = "an int, 'cuda', 'cuda:N', a cudakit.Device, a torch.device or None";
const char* kStreamForms = "a cudakit.Stream or an object with __cuda_stream__ / cuda_stream (torch) / ptr (CuPy)";

}  // namespace

std::string where(Arg a) { return std::string(a.fn) + "(): argument '" + a.name + "'"; }

std::string describe(py::handle v) {
  std::string r;
  try {
    r = py::repr(v).cast<std::string>();
  } catch (py::error_already_set&) {
    r = "<unprintable>";
  }
  if (r.size() > 60) r = r.substr(0, 57) + "...";
  return type_name(v) + " (" + r + ")";
}

void throw_type(Arg a, const std::string& expected, py::handle got) {
  throw ArgTypeError(where(a) + " must be " + expected + ", not " + describe(got));
}

void throw_value(Arg a, const std::string& problem) { throw ValueError(where(a) + " " + problem); }

void throw_call(const char* fn, const std::string& problem) {
  throw ArgTypeError(std::string(fn) + "() " + problem);
}

// ---- numbers ----
bool is_int(py::handle v) {
  if (PyBool_Check(v.ptr())) return false;
  if (PyLong_Check(v.ptr())) return true;
  if (PyFloat_Check(v.ptr())) return false;
  return PyIndex_Check(v.ptr()) != 0;
}

std::int64_t to_int64(py::handle v, Arg a) {
  if (!is_int(v)) throw_type(a, "an int", v);
  py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!idx) throw py::error_already_set();
  int overflow = 0;
  long long r = PyLong_AsLongLongAndOverflow(idx.ptr(), &overflow);
  if (overflow)
    throw_value(a, "is out of range: " + py::repr(idx).cast<std::string>() +
                       " does not fit in a 64-bit integer");
  if (r == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<std::int64_t>(r);
}

int to_int(py::handle v, Arg a) {
  std::int64_t r = to_int64(v, a);
  if (r < INT_MIN || r > INT_MAX)
    throw_value(a, "is out of range: " + std::to_string(r) + " does not fit in a 32-bit integer");
  return static_cast<int>(r);
}

std::uint64_t to_uint64(py::handle v, Arg a) {
  if (!is_int(v)) throw_type(a, "an int", v);
  py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!idx) throw py::error_already_set();
  if (PyObject_RichCompareBool(idx.ptr(), py::int_(0).ptr(), Py_LT) == 1)
    throw_value(a, "must be >= 0, got " + py::repr(idx).cast<std::string>());
  unsigned long long r = PyLong_AsUnsignedLongLong(idx.ptr());
  if (r == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw_value(a, "is out of range: " + py::repr(idx).cast<std::string>() + " is 2**64 or more");
  }
  return r;
}

std::size_t to_size(py::handle v, Arg a) { return static_cast<std::size_t>(to_uint64(v, a)); }
std::uintptr_t to_address(py::handle v, Arg a) { return static_cast<std::uintptr_t>(to_uint64(v, a)); }

double to_double(py::handle v, Arg a) {
  if (PyFloat_Check(v.ptr())) return PyFloat_AsDouble(v.ptr());
  const std::string tn = type_name(v);
  const bool numpy_real = from_numpy_module(module_of(v)) &&
                          (tn.rfind("float", 0) == 0 || tn.rfind("int", 0) == 0 || tn.rfind("uint", 0) == 0);
  if (is_int(v) || numpy_real) {
    PyObject* f = PyNumber_Float(v.ptr());  // OverflowError for ints beyond a double
    if (!f) {
      PyErr_Clear();
      throw_value(a, "is out of range for a float: " + describe(v));
    }
    const double r = PyFloat_AsDouble(f);
    Py_DECREF(f);
    return r;
  }
  throw_type(a, "a number (float or int)", v);
}

bool to_bool(py::handle v, Arg a) {
  if (PyBool_Check(v.ptr())) return v.ptr() == Py_True;
  if (from_numpy_module(module_of(v)) && type_name(v) == "bool") return PyObject_IsTrue(v.ptr()) == 1;
  if (from_numpy_module(module_of(v)) && type_name(v) == "bool_") return PyObject_IsTrue(v.ptr()) == 1;
  throw_type(a, "a bool", v);
}

std::string to_string(py::handle v, Arg a) {
  if (PyUnicode_Check(v.ptr())) return v.cast<std::string>();
  if (py::hasattr(v, "__fspath__")) {
    py::object p = py::module_::import("os").attr("fspath")(v);
    if (PyUnicode_Check(p.ptr())) return p.cast<std::string>();
  }
  throw_type(a, "a str", v);
}

// ---- devices ----
int cuda_index(py::handle v, Arg a, bool none_ok) {
  if (v.is_none()) {
    if (none_ok) return kCurrentDevice;
    throw_value(a, "must be a cuda device (" + std::string(kDeviceForms) + "), got None");
  }
  if (PyBool_Check(v.ptr())) throw_type(a, kDeviceForms, v);
  if (is_int(v) && !py::isinstance<Tensor>(v)) {
    std::int64_t i = to_int64(v, a);
    if (i == -1) return kCurrentDevice;
    if (i < -1 || i >= kMaxDevices) throw ValueError(where(a) + ": " + invalid_device_message(i));
    return static_cast<int>(i);
  }
  auto from_device = [&](const Device& d) -> int {
    if (d.is_cpu()) throw ValueError(where(a) + ": Expected a cuda device, but got: cpu");
    return d.index;
  };
  if (PyUnicode_Check(v.ptr())) {
    std::string s = v.cast<std::string>();
    return from_device(with_context(a, [&] { return Device::parse(s); }));
  }
  if (py::isinstance<Device>(v)) return from_device(v.cast<Device>());
  if (py::hasattr(v, "type") && py::hasattr(v, "index")) {
    std::string type = py::str(v.attr("type"));
    py::object idx = v.attr("index");
    if (type == "cuda") return idx.is_none() ? kCurrentDevice : cuda_index(idx, a, false);
    throw ValueError(where(a) + ": Expected a cuda device, but got: " + py::str(v).cast<std::string>());
  }
  throw_type(a, kDeviceForms, v);
}

Device device_arg(py::handle v, Arg a) {
  if (v.is_none()) return Device::cuda(kCurrentDevice);
  if (PyBool_Check(v.ptr())) throw_type(a, "a device (an int, 'cpu', 'cuda', 'cuda:N' or a device object)", v);
  if (is_int(v) && !py::isinstance<Tensor>(v)) {
    std::int64_t i = to_int64(v, a);
    if (i < 0 || i >= kMaxDevices) throw ValueError(where(a) + ": " + invalid_device_message(i));
    return with_context(a, [&] { return Device::cuda(static_cast<int>(i)); });
  }
  if (PyUnicode_Check(v.ptr())) {
    std::string s = v.cast<std::string>();
    return with_context(a, [&] { return Device::parse(s); });
  }
  if (py::isinstance<Device>(v)) return v.cast<Device>();
  if (py::hasattr(v, "type") && py::hasattr(v, "index")) {
    std::string type = py::str(v.attr("type"));
    py::object idx = v.attr("index");
    if (type == "cpu") return Device::cpu();
    if (type == "cuda") {
      int i = idx.is_none() ? kCurrentDevice : cuda_index(idx, a, false);
      return with_context(a, [&] { return Device::cuda(i); });
    }
    throw_value(a, "has unsupported device type '" + type + "' (expected 'cpu' or 'cuda')");
  }
  throw_type(a, "a device (an int, 'cpu', 'cuda', 'cuda:N' or a device object)", v);
}

// ---- streams ----
StreamRef stream_arg(py::handle v, Arg a, int device, bool allow_handle) {
  if (v.is_none()) return current_stream(device);
  if (py::isinstance<PyStream>(v)) return v.cast<PyStream&>().ref;
  auto own_device = [&](py::handle obj) {
    for (const char* attr : {"device_index", "device_id"}) {
      py::object d = py::getattr(obj, attr, py::none());
      if (is_int(d)) return to_int(d, a);
    }
    return device;
  };
  auto external = [&](py::handle handle, int dev) {
    std::uintptr_t h = to_address(handle, a);
    return with_context(a, [&] { return get_stream_from_external(h, dev); });
  };
  if (py::hasattr(v, "__cuda_stream__")) {
    py::object t = v.attr("__cuda_stream__")();
    if (!py::isinstance<py::tuple>(t) || py::len(t) != 2)
      throw_value(a, "has a __cuda_stream__() that returned " + describe(t) + ", not a (version, handle) tuple");
    return external(py::tuple(t)[1], own_device(v));
  }
  if (py::hasattr(v, "cuda_stream")) return external(v.attr("cuda_stream"), own_device(v));
  if (py::hasattr(v, "ptr") && !py::isinstance<Tensor>(v)) return external(v.attr("ptr"), own_device(v));
  if (allow_handle && is_int(v)) return external(v, device);
  throw_type(a, std::string(kStreamForms) + (allow_handle ? ", or a raw stream handle int" : ""), v);
}

// ---- dtypes ----
DType dtype_arg(py::handle v, Arg a) {
  if (py::isinstance<DType>(v)) return v.cast<DType>();
  auto unsupported = [&](const std::string& shown) -> DType {
    throw_value(a, "is an unsupported dtype " + shown + ": use one of cudakit." +
                       std::string(kDtypeList) + " (also as names, NumPy or torch dtypes)");
  };
  if (PyUnicode_Check(v.ptr())) {
    std::string s = v.cast<std::string>();
    if (auto t = dtype_from_name(s)) return *t;
    return unsupported("'" + s + "'");
  }
  const bool is_class = PyType_Check(v.ptr());
  if (is_class) {  // Python's number types map as torch maps them
    if (v.ptr() == reinterpret_cast<PyObject*>(&PyBool_Type)) return DType::bool_;
    if (v.ptr() == reinterpret_cast<PyObject*>(&PyLong_Type)) return DType::int64;
    if (v.ptr() == reinterpret_cast<PyObject*>(&PyFloat_Type)) return DType::float64;
    if (v.ptr() == reinterpret_cast<PyObject*>(&PyComplex_Type)) return DType::complex128;
  }
  const std::string mod = module_of(v, is_class);
  if (from_numpy_module(mod) || (from_numpy_module(module_of(v)) && type_name(v).rfind("dtype", 0) == 0)) {
    py::object npdt;
    try {
      npdt = py::module_::import("numpy").attr("dtype")(v);
    } catch (py::error_already_set&) {
      throw_type(a, "a dtype", v);
    }
    std::string name = py::str(npdt.attr("name"));
    if (auto t = dtype_from_name(name)) return *t;
    return unsupported("numpy " + py::repr(npdt).cast<std::string>());
  }
  if (!is_class && mod.rfind("torch", 0) == 0 && type_name(v) == "dtype") {
    std::string s = py::str(v);
    if (auto t = dtype_from_name(s)) return *t;
    return unsupported(s);
  }
  throw_type(a, "a dtype (cudakit.float32, 'float32', a NumPy or torch dtype)", v);
}

std::optional<DType> opt_dtype_arg(py::handle v, Arg a) {
  if (v.is_none()) return std::nullopt;
  return dtype_arg(v, a);
}

// ---- shapes ----
namespace {
std::int64_t shape_element(py::handle e, std::size_t pos, Arg a) {
  if (!is_int(e))
    throw ArgTypeError(where(a) + " must be a tuple of ints, but found element of type " + type_name(e) +
                       " at pos " + std::to_string(pos));
  return to_int64(e, a);
}
}  // namespace

Shape shape_arg(py::handle v, Arg a) {
  if (is_int(v) && !py::isinstance<Tensor>(v)) return {to_int64(v, a)};
  if (PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr()) || !PySequence_Check(v.ptr()) ||
      py::isinstance<Tensor>(v))
    throw_type(a, "a tuple of ints", v);
  Shape s;
  std::size_t pos = 0;
  for (py::handle e : py::reinterpret_borrow<py::sequence>(v)) s.push_back(shape_element(e, pos++, a));
  return s;
}

Shape shape_from_args(const py::args& args, Arg a) {
  if (args.size() == 1 && !is_int(args[0])) return shape_arg(args[0], a);
  Shape s;
  for (std::size_t i = 0; i < args.size(); ++i) s.push_back(shape_element(args[i], i, a));
  return s;
}

// ---- scalars and tensors ----
std::optional<Scalar> as_scalar(py::handle v, Arg a) {
  PyObject* o = v.ptr();
  if (PyBool_Check(o)) return Scalar(o == Py_True);
  if (py::isinstance<Tensor>(v)) return std::nullopt;
  if (PyLong_Check(o)) return Scalar(static_cast<long long>(to_int64(v, a)));
  if (PyFloat_Check(o)) return Scalar(PyFloat_AsDouble(o));
  if (PyComplex_Check(o)) return Scalar(std::complex<double>(PyComplex_RealAsDouble(o), PyComplex_ImagAsDouble(o)));
  // NumPy scalars (np.float32(1), np.int64(2), np.bool_(True)): convert through item().
  if (from_numpy_module(module_of(v)) && type_name(v) != "ndarray" && py::hasattr(v, "item") &&
      py::getattr(v, "ndim", py::int_(1)).cast<int>() == 0) {
    py::object item = v.attr("item")();
    if (PyBool_Check(item.ptr()) || PyLong_Check(item.ptr()) || PyFloat_Check(item.ptr()) || PyComplex_Check(item.ptr()))
      return as_scalar(item, a);
  }
  return std::nullopt;
}

Scalar scalar_arg(py::handle v, Arg a) {
  if (auto s = as_scalar(v, a)) return *s;
  throw_type(a, "a number (bool, int, float or complex)", v);
}

const Tensor& tensor_arg(py::handle v, Arg a) {
  if (!py::isinstance<Tensor>(v)) throw_type(a, "a cudakit.Tensor", v);
  return v.cast<const Tensor&>();
}

}  // namespace cudakit::python
