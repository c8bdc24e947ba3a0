// Tensor factories (empty, zeros, ones, full, arange, *_like, asarray, tensor) and the
// functional forms of the built-in ops. Python data (numbers, nested sequences) is parsed
// here with torch.tensor's rules: the shape must be rectangular, the dtype is inferred as
// bool, int64, float32 or complex64 from the widest kind present, ints must fit int64.
#include <pybind11/complex.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <complex>
#include <string>
#include <vector>

#include "args.hpp"
#include "convert.hpp"
#include "cudakit/error.hpp"
#include "cudakit/ops.hpp"
#include "fast_path.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

// ---- nested Python data -> host tensor ----
class DataParser {
 public:
  explicit DataParser(Arg a) : a_(a) {}

  Tensor parse(py::handle data, std::optional<DType> dtype) {
    walk(data, 0);
    if (rank_ < 0) rank_ = static_cast<int>(shape_.size());
    shape_.resize(static_cast<std::size_t>(rank_));
    // Stored exactly in the widest type of its kind, then cast once to the target dtype.
    const DType store = kind_ == Scalar::Kind::boolean  ? DType::bool_
                        : kind_ == Scalar::Kind::integer ? DType::int64
                        : kind_ == Scalar::Kind::floating ? DType::float64
                                                          : DType::complex128;
    Tensor h = empty(shape_, TensorOptions{store, Device::cpu()});
    for (std::size_t i = 0; i < values_.size(); ++i) {
      const Scalar& s = values_[i];
      switch (store) {
        case DType::bool_: h.data<bool>()[i] = s.i != 0; break;
        case DType::int64: h.data<std::int64_t>()[i] = s.i; break;
        case DType::float64: h.data<double>()[i] = s.d; break;
        default: h.data<std::complex<double>>()[i] = s.c; break;
      }
    }
    return h.to(dtype ? *dtype : default_for_kind());
  }

 private:
  DType default_for_kind() const {
    if (values_.empty()) return DType::float32;  // tensor([]) is float32, as torch
    switch (kind_) {
      case Scalar::Kind::boolean: return DType::bool_;
      case Scalar::Kind::integer: return DType::int64;
      case Scalar::Kind::floating: return DType::float32;
      default: return DType::complex64;
    }
  }

  static bool is_sequence(py::handle o) {
    return PyList_Check(o.ptr()) || PyTuple_Check(o.ptr()) ||
           (PySequence_Check(o.ptr()) && !PyUnicode_Check(o.ptr()) && !PyBytes_Check(o.ptr()) &&
            !PyByteArray_Check(o.ptr()) && !py::isinstance<Tensor>(o) && !is_numpy_array(o) && py::hasattr(o, "__len__"));
  }

  [[noreturn]] void fail(const std::string& what) { throw ValueError(where(a_) + ": " + what); }

  void walk(py::handle o, int dim) {
    // Arrays inside the data (tensors, NumPy arrays) contribute their values as lists.
    if (py::isinstance<Tensor>(o) || is_numpy_array(o)) {
      py::object as_list = o.attr("tolist")();
      if (!is_sequence(as_list)) return leaf(as_list, dim);
      return walk(as_list, dim);
    }
    if (!is_sequence(o)) return leaf(o, dim);
    if (rank_ >= 0 && dim >= rank_)
      fail("expected a number at dim " + std::to_string(dim) + ", got a sequence " + describe(o));
    py::sequence seq = py::reinterpret_borrow<py::sequence>(o);
    const auto n = static_cast<std::int64_t>(py::len(seq));
    if (static_cast<std::size_t>(dim) == shape_.size()) shape_.push_back(n);
    else if (shape_[static_cast<std::size_t>(dim)] != n)
      fail("expected sequence of length " + std::to_string(shape_[static_cast<std::size_t>(dim)]) + " at dim " +
           std::to_string(dim) + " (got " + std::to_string(n) + ")");
    if (n == 0 && rank_ < 0) rank_ = dim + 1;
    for (py::handle e : seq) walk(e, dim + 1);
  }

  void leaf(py::handle o, int dim) {
    if (rank_ < 0) rank_ = dim;
    else if (dim != rank_)
      fail("expected sequence of length " + std::to_string(shape_[static_cast<std::size_t>(dim)]) + " at dim " +
           std::to_string(dim) + " (got " + describe(o) + ")");
    auto s = as_scalar(o, a_);
    if (!s) throw ArgTypeError(where(a_) + " must be a number or a (nested) sequence of numbers, found " + describe(o));
    if (static_cast<int>(s->kind) > static_cast<int>(kind_)) kind_ = s->kind;
    values_.push_back(*s);
  }

  Arg a_;
  Shape shape_;
  int rank_ = -1;  // fixed by the first number (or empty sequence) found
  Scalar::Kind kind_ = Scalar::Kind::boolean;
  std::vector<Scalar> values_;
};

TensorOptions opts(const char* fn, py::handle dtype, py::handle device, py::handle pin, DType def) {
  TensorOptions o;
  o.dtype = dtype.is_none() ? def : dtype_arg(dtype, Arg{fn, "dtype"});
  o.device = device_arg(device, Arg{fn, "device"});
  o.pinned = to_bool(pin, Arg{fn, "pin_memory"});
  if (o.pinned && o.device.is_cuda())
    throw ValueError(std::string(fn) + "(): pin_memory=True requires device='cpu' (got " + o.device.str() + ")");
  return o;
}

Scalar real_scalar(py::handle v, Arg a) {
  Scalar s = scalar_arg(v, a);
  if (s.kind == Scalar::Kind::complex) throw_type(a, "a real number (int or float)", v);
  return s;
}

TensorOptions like_opts(const Tensor& t, py::handle dtype, py::handle device, const char* fn) {
  return TensorOptions{dtype.is_none() ? t.dtype() : dtype_arg(dtype, Arg{fn, "dtype"}),
                       device.is_none() ? t.device() : device_arg(device, Arg{fn, "device"}), false};
}

// ---- empty(): a vectorcall CPython function in front of the pybind11 one (fast_path.hpp) ----
// Pinned host buffers are allocated from Python in loops (torch's pin_memory pattern), and
// pybind11's dispatcher (py::args tuple, keyword matching, defaults) cost more than the pinned
// cache itself: 1.13 us per empty(n, dtype=..., device="cpu", pin_memory=True) + free on 2
// emulated cores, against a goal of 0.5x torch (issue 15.5). This METH_FASTCALL function
// handles the common form (sizes as ints, keywords among dtype/device/pin_memory, parsed with
// the same args.hpp functions) and hands everything else — a shape sequence, unknown keywords,
// any error — to the pybind11 function, so every argument form and error message is exactly
// the pybind11 one (an error is raised by redoing the call there; empty() has no side effect
// but its allocation, which is freed before the retry).
PyObject* g_empty_slow = nullptr;  // the pybind11 "empty": a leaked reference (never released
                                   // during interpreter teardown)
PyObject* g_kw_dtype = nullptr;
PyObject* g_kw_device = nullptr;
PyObject* g_kw_pin = nullptr;

PyObject* fast_empty(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* kwnames) {
  try {
    Shape shape;
    shape.reserve(static_cast<std::size_t>(nargs));
    for (Py_ssize_t i = 0; i < nargs; ++i) {
      if (!PyLong_CheckExact(args[i])) goto slow;
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(args[i], &overflow);
      if (overflow || v < 0) goto slow;
      shape.push_back(v);
    }
    if (nargs == 0) goto slow;
    {
      PyObject* dtype = Py_None;
      PyObject* device = Py_None;
      PyObject* pin = Py_False;
      const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
      for (Py_ssize_t k = 0; k < nkw; ++k) {
        PyObject* key = PyTuple_GET_ITEM(kwnames, k);
        PyObject* value = args[nargs + k];
        // Keyword names from a call site are interned: pointer equality is the usual match.
        if (key == g_kw_dtype) dtype = value;
        else if (key == g_kw_device) device = value;
        else if (key == g_kw_pin) pin = value;
        else goto slow;
      }
      Tensor t = empty(shape, opts("empty", dtype, device, pin, DType::float32));
      return py::cast(std::move(t)).release().ptr();
    }
  } catch (...) {
    // Parsing or allocation failed: the pybind11 path raises the translated error.
  }
slow:
  if (PyErr_Occurred()) PyErr_Clear();
  return PyObject_Vectorcall(g_empty_slow, args, static_cast<std::size_t>(nargs), kwnames);
}

PyMethodDef g_fast_empty_def = {"empty", reinterpret_cast<PyCFunction>(
                                             reinterpret_cast<void (*)()>(&fast_empty)),
                                 METH_FASTCALL | METH_KEYWORDS, nullptr};

void install_fast_empty(py::module_& m) {
  g_kw_dtype = PyUnicode_InternFromString("dtype");
  g_kw_device = PyUnicode_InternFromString("device");
  g_kw_pin = PyUnicode_InternFromString("pin_memory");
  g_empty_slow = fast_path::front_function(m, g_fast_empty_def);  // also m._empty_pybind11
}

void bind(py::module_& m) {
#define CK_FACTORY(name, FN)                                                                          \
  m.def(name, [](py::args s, py::handle dtype, py::handle device, py::handle pin) {                   \
    const Shape shape = shape_from_args(s, Arg{name, "size"});                                      \
    return FN(shape, opts(name, dtype, device, pin, DType::float32));                                 \
  }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("pin_memory") = false)
  CK_FACTORY("empty", empty);
  CK_FACTORY("zeros", zeros);
  CK_FACTORY("ones", ones);
#undef CK_FACTORY
  install_fast_empty(m);
  m.def("full", [](py::handle size, py::handle v, py::handle dtype, py::handle device, py::handle pin) {
          const Scalar sc = scalar_arg(v, Arg{"full", "fill_value"});
          const DType def = sc.kind == Scalar::Kind::floating ? DType::float32 : sc.default_dtype();
          const Shape shape = shape_arg(size, Arg{"full", "size"});
          return full(shape, sc, opts("full", dtype, device, pin, def));
        }, py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("pin_memory") = false);
  m.def("arange", [](py::handle a, py::handle b, py::handle step, py::handle dtype, py::handle device) {
          Scalar start(0LL), end, st(1LL);
          if (b.is_none()) {
            end = real_scalar(a, Arg{"arange", "end"});
          } else {
            start = real_scalar(a, Arg{"arange", "start"});
            end = real_scalar(b, Arg{"arange", "end"});
          }
          if (!step.is_none()) st = real_scalar(step, Arg{"arange", "step"});
          const bool fl = start.kind == Scalar::Kind::floating || end.kind == Scalar::Kind::floating ||
                          st.kind == Scalar::Kind::floating;
          return arange(start, end, st, opts("arange", dtype, device, py::bool_(false), fl ? DType::float32 : DType::int64));
        }, py::arg("start"), py::arg("end") = py::none(), py::arg("step") = py::none(), py::kw_only(),
        py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("empty_like", [](py::handle t, py::handle dtype, py::handle device) {
          const Tensor& x = tensor_arg(t, Arg{"empty_like", "input"});
          return empty(x.sizes(), like_opts(x, dtype, device, "empty_like"));
        }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("zeros_like", [](py::handle t, py::handle dtype, py::handle device) {
          const Tensor& x = tensor_arg(t, Arg{"zeros_like", "input"});
          return zeros(x.sizes(), like_opts(x, dtype, device, "zeros_like"));
        }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("ones_like", [](py::handle t, py::handle dtype, py::handle device) {
          const Tensor& x = tensor_arg(t, Arg{"ones_like", "input"});
          return ones(x.sizes(), like_opts(x, dtype, device, "ones_like"));
        }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("asarray", [](py::handle obj, py::handle dtype, py::handle device, py::handle copy) {
          const Arg a{"asarray", "obj"};
          std::optional<DType> dt = opt_dtype_arg(dtype, Arg{"asarray", "dtype"});
          std::optional<Device> dev;
          if (!device.is_none()) dev = device_arg(device, Arg{"asarray", "device"});
          const bool want_copy = !copy.is_none() && to_bool(copy, Arg{"asarray", "copy"});
          bool from_data = false;
          Tensor r = to_tensor(obj, dt, dev, a, &from_data);
          if (want_copy && !from_data && py::isinstance<Tensor>(obj) && r.storage() == obj.cast<const Tensor&>().storage())
            r = r.clone();
          return r;
        }, py::arg("obj"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("copy") = py::none());
  // torch.tensor: always a new tensor (data is copied), on the current cuda device unless
  // `device` says otherwise, like every cudakit factory.
  m.def("tensor", [](py::handle data, py::handle dtype, py::handle device) {
          std::optional<DType> dt = opt_dtype_arg(dtype, Arg{"tensor", "dtype"});
          Device dev = device_arg(device, Arg{"tensor", "device"});
          bool from_data = false;
          Tensor r = to_tensor(data, dt, dev, Arg{"tensor", "data"}, &from_data);
          if (!from_data) {
            // Tensors / arrays: a copy even when no conversion was needed.
            const bool shares_tensor = py::isinstance<Tensor>(data) && r.storage() == data.cast<const Tensor&>().storage();
            if (shares_tensor || (r.storage() && r.storage()->is_external())) r = r.clone();
          }
          return r;
        }, py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());

  m.def("matmul", [](py::handle a, py::handle b) {
    const Tensor& x = tensor_arg(a, Arg{"matmul", "input"});
    return matmul(x, tensor_arg(b, Arg{"matmul", "other"}));
  }, py::arg("input"), py::arg("other"));
  m.def("sum", [](py::handle a) { return sum(tensor_arg(a, Arg{"sum", "input"})); }, py::arg("input"));
  m.def("relu", [](py::handle a) { return relu(tensor_arg(a, Arg{"relu", "input"})); }, py::arg("input"));
  m.def("pow", [](py::handle a, py::handle b) {
    const Arg ia{"pow", "input"}, ea{"pow", "exponent"};
    if (py::isinstance<Tensor>(a)) {
      const Tensor& x = a.cast<const Tensor&>();
      if (py::isinstance<Tensor>(b)) return pow(x, b.cast<const Tensor&>());
      return pow(x, scalar_arg(b, ea));
    }
    return pow(scalar_arg(a, ia), tensor_arg(b, ea));
  }, py::arg("input"), py::arg("exponent"));
  m.def("matmul_allow_tf32", &matmul_allow_tf32, "Whether float32 matmul may use TF32 tensor cores (default False).");
  m.def("set_matmul_allow_tf32", [](py::handle allow) {
    set_matmul_allow_tf32(to_bool(allow, Arg{"set_matmul_allow_tf32", "allow"}));
  }, py::arg("allow"));
}

Registrar reg("factories", order::factories, bind);

}  // namespace

Tensor to_tensor(py::handle obj, std::optional<DType> dtype, std::optional<Device> device, Arg a,
                 bool* from_data) {
  Tensor t;
  bool data = false;
  if (py::isinstance<Tensor>(obj)) {
    t = obj.cast<Tensor>();
  } else if (is_numpy_array(obj)) {
    t = from_numpy(obj, a);
  } else if (py::hasattr(obj, "__dlpack__")) {
    t = from_dlpack_obj(obj);
  } else {
    t = DataParser(a).parse(obj, dtype);
    data = true;
  }
  if (from_data) *from_data = data;
  const Device target = device ? *device : (data ? Device::cuda(kCurrentDevice) : t.device());
  return t.to(target, dtype.value_or(t.dtype()));
}

}  // namespace cudakit::python
