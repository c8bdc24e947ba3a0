// cudakit.dtype and cudakit.Tensor: metadata, views, copies, conversions to Python values,
// operators (torch semantics: elementwise comparisons return bool tensors, ** is pow, the
// hash is the object's identity). Factories are in bind_factories.cpp, NumPy/DLPack methods
// in bind_interop.cpp.
#include <pybind11/complex.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "args.hpp"
#include "convert.hpp"
#include "cudakit/error.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/random.hpp"
#include "cudakit/stream.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

// ---- indexing ----
std::optional<std::int64_t> opt_index(py::handle o, Arg a) {
  if (o.is_none()) return std::nullopt;
  return to_int64(o, a);
}

Tensor index(const Tensor& self, py::handle key) {
  const Arg a{"Tensor.__getitem__", "index"};
  py::tuple items = py::isinstance<py::tuple>(key) ? key.cast<py::tuple>() : py::make_tuple(key);
  std::int64_t consumed = 0;
  for (auto it : items)
    if (!it.is_none() && it.ptr() != Py_Ellipsis) ++consumed;
  if (consumed > self.dim())
    throw py::index_error("too many indices for tensor of dimension " + std::to_string(self.dim()));
  Tensor t = self;
  std::int64_t d = 0;
  for (auto it : items) {
    if (it.is_none()) {
      t = t.unsqueeze(d++);
    } else if (it.ptr() == Py_Ellipsis) {
      d += self.dim() - consumed;
      consumed = self.dim();
    } else if (py::isinstance<py::slice>(it)) {
      auto sl = it.cast<py::slice>();
      auto step = opt_index(sl.attr("step"), a);
      t = t.slice(d++, opt_index(sl.attr("start"), a), opt_index(sl.attr("stop"), a), step.value_or(1));
    } else if (is_int(it) && !py::isinstance<Tensor>(it)) {
      std::int64_t i = to_int64(it, a);
      std::int64_t n = t.size(d);
      if (i < -n || i >= n)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " +
                              std::to_string(d) + " with size " + std::to_string(n));
      t = t.select(d, i);
    } else {
      throw ArgTypeError("Tensor indices must be integers, slices, None or Ellipsis (advanced indexing "
                         "is not supported), not " + describe(it));
    }
  }
  return t;
}

// The other operand of copy_ / __setitem__: any array-like, placed on `self`'s device.
Tensor other_tensor(const Tensor& self, py::handle o, Arg a) {
  if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
  return to_tensor(o, std::nullopt, self.device(), a);
}

// A binary operator: scalars and tensors; anything else is NotImplemented, so Python tries
// the reflected operator and finally raises its TypeError ("unsupported operand type(s)").
template <class TT, class TS>
py::object binop(const Tensor& a, py::handle b, const char* fn, TT tensor_fn, TS scalar_fn) {
  if (py::isinstance<Tensor>(b)) return py::cast(tensor_fn(a, b.cast<const Tensor&>()));
  if (auto s = as_scalar(b, Arg{fn, "other"})) return py::cast(scalar_fn(a, *s));
  return py::reinterpret_borrow<py::object>(Py_NotImplemented);
}

// The same for named methods (t.add(x)): a wrong operand is an argument error.
template <class TT, class TS>
Tensor method_op(const Tensor& a, py::handle b, const char* fn, TT tensor_fn, TS scalar_fn) {
  if (py::isinstance<Tensor>(b)) return tensor_fn(a, b.cast<const Tensor&>());
  if (auto s = as_scalar(b, Arg{fn, "other"})) return scalar_fn(a, *s);
  throw_type(Arg{fn, "other"}, "a Tensor or a number", b);
}

// Calls that may wait for the device (copies to or from host memory, item()) run without the
// GIL, as torch's bindings do: other Python threads keep running, and a stream task that
// needs the interpreter cannot deadlock against the waiting thread. Only C++ values are
// touched inside; Python objects are converted before and after.
template <class F>
auto nogil(F&& f) -> decltype(f()) {
  py::gil_scoped_release release;
  return f();
}

Scalar item_nogil(const Tensor& t) {
  return nogil([&] { return t.item(); });
}

py::object scalar_to_py(const Scalar& s) {
  switch (s.kind) {
    case Scalar::Kind::boolean: return py::bool_(s.i != 0);
    case Scalar::Kind::integer: return py::int_(s.i);
    case Scalar::Kind::floating: return py::float_(s.d);
    default: return py::cast(s.c);
  }
}

// float(t) / int(t) / complex(t): one element of any shape, as torch.
Scalar one_element(const Tensor& t) {
  if (t.numel() != 1) throw ValueError("only one element tensors can be converted to Python scalars (this one has " +
                                       std::to_string(t.numel()) + " elements)");
  return item_nogil(t);
}

std::string tensor_repr(const Tensor& t) {
  std::string body;
  if (t.numel() <= 1000) {
    Tensor h = nogil([&] { return t.dtype() == DType::bfloat16 ? t.to(Device::cpu(), DType::float32) : t.to(Device::cpu()); });
    body = py::str(to_numpy(h).attr("tolist")());
  } else {
    body = "...";
  }
  std::string r = "tensor(" + body;
  if (t.is_cuda()) r += ", device='" + t.device().str() + "'";
  if (!(t.dtype() == DType::float32 || t.dtype() == DType::int64 || t.dtype() == DType::bool_) || t.numel() > 1000)
    r += std::string(", dtype=cudakit.") + dtype_name(t.dtype());
  if (t.numel() > 1000) r += ", shape=" + shape_str(t.sizes());
  return r + ")";
}

Generator* generator_arg(py::handle g, Arg a) {
  if (g.is_none()) return nullptr;
  if (!py::isinstance<Generator>(g)) throw_type(a, "a cudakit.Generator or None", g);
  return g.cast<Generator*>();
}

std::int64_t dim_arg(py::handle d, const char* fn) { return to_int64(d, Arg{fn, "dim"}); }

// Tensor.to(*args, dtype=, device=): positional arguments may be a tensor (its dtype and
// device), a dtype or a device, in any order, as torch.
std::pair<std::optional<DType>, std::optional<Device>> to_args(const py::args& args, py::handle dtype, py::handle device) {
  const Arg da{"Tensor.to", "dtype"}, va{"Tensor.to", "device"};
  std::optional<DType> dt = opt_dtype_arg(dtype, da);
  std::optional<Device> dev;
  if (!device.is_none()) dev = device_arg(device, va);
  for (auto a : args) {
    if (py::isinstance<Tensor>(a)) {
      dt = a.cast<const Tensor&>().dtype();
      dev = a.cast<const Tensor&>().device();
      continue;
    }
    const bool device_like = py::isinstance<Device>(a) || is_int(a) ||
                             (PyUnicode_Check(a.ptr()) && !dtype_from_name(a.cast<std::string>())) ||
                             (py::hasattr(a, "type") && py::hasattr(a, "index"));
    if (device_like) dev = device_arg(a, va);
    else dt = dtype_arg(a, da);
  }
  return {dt, dev};
}

void bind(py::module_& m) {
  // ---- dtype ----
  py::class_<DType>(m, "dtype", "A tensor element type (cudakit.float32, ...), named as torch's.")
      .def_property_readonly("itemsize", [](DType t) { return element_size(t); })
      .def_property_readonly("is_floating_point", [](DType t) { return is_floating_point(t); })
      .def_property_readonly("is_complex", [](DType t) { return is_complex(t); })
      .def_property_readonly("is_signed", [](DType t) { return !(t == DType::bool_ || t == DType::uint8); })
      .def_property_readonly("name", [](DType t) { return std::string(dtype_name(t)); })
      .def("__repr__", [](DType t) { return std::string("cudakit.") + dtype_name(t); })
      .def("__str__", [](DType t) { return std::string("cudakit.") + dtype_name(t); })
      .def("__eq__", [](DType a, py::handle b) {
        try {
          return a == dtype_arg(b, Arg{"dtype.__eq__", "other"});
        } catch (const std::exception&) {
          return false;  // not a dtype: unequal, as == must not raise
        }
      })
      .def("__hash__", [](DType t) { return static_cast<int>(t); })
      .def("__reduce__", [](DType t) {
        return py::make_tuple(py::module_::import("cudakit").attr("_dtype_from_name"), py::make_tuple(dtype_name(t)));
      });
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    m.attr(dtype_name(t)) = py::cast(t);
  }
  m.attr("bool") = py::cast(DType::bool_);
  m.attr("half") = py::cast(DType::float16);
  m.attr("float") = py::cast(DType::float32);
  m.attr("double") = py::cast(DType::float64);
  m.attr("long") = py::cast(DType::int64);
  m.attr("int") = py::cast(DType::int32);
  m.attr("short") = py::cast(DType::int16);
  m.attr("cfloat") = py::cast(DType::complex64);
  m.attr("cdouble") = py::cast(DType::complex128);
  m.def("_dtype_from_name", [](py::handle n) { return dtype_arg(n, Arg{"_dtype_from_name", "name"}); });
  m.def("promote_types", [](py::handle a, py::handle b) {
    const DType t1 = dtype_arg(a, Arg{"promote_types", "type1"});
    return promote_types(t1, dtype_arg(b, Arg{"promote_types", "type2"}));
  }, py::arg("type1"), py::arg("type2"));
  m.def("result_type", [](py::handle a, py::handle b) {
    const Tensor& t = tensor_arg(a, Arg{"result_type", "tensor1"});
    if (py::isinstance<Tensor>(b)) return result_type(t, b.cast<const Tensor&>());
    return result_type(t, scalar_arg(b, Arg{"result_type", "tensor2"}));
  }, py::arg("tensor1"), py::arg("tensor2"));

  // ---- Tensor ----
  py::class_<Tensor> cls(m, "Tensor", R"doc(
A strided array in cudakit memory (device, pinned or pageable host). Views share storage;
operators + - * / ** @, unary -, and comparisons == != < <= > >= (bool tensors) run on the
current stream of the tensor's device. Interoperates through DLPack (__dlpack__,
from_dlpack), __cuda_array_interface__ and NumPy. Hashable by identity, as torch.Tensor.)doc");
  cls.def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.sizes())); })
      .def("size", [](const Tensor& t, py::handle d) -> py::object {
        if (d.is_none()) return py::tuple(py::cast(t.sizes()));
        return py::cast(t.size(dim_arg(d, "Tensor.size")));
      }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& t, py::handle d) -> py::object {
        if (d.is_none()) return py::tuple(py::cast(t.strides()));
        return py::cast(t.stride(dim_arg(d, "Tensor.stride")));
      }, py::arg("dim") = py::none())
      .def("storage_offset", &Tensor::storage_offset)
      .def("dim", &Tensor::dim)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return t.size(0);
      })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("is_cuda", &Tensor::is_cuda)
      .def("get_device", [](const Tensor& t) { return t.is_cuda() ? t.device().index : -1; })
      .def("is_pinned", &Tensor::is_pinned)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()); })
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("itemsize", &Tensor::element_size)
      .def("element_size", &Tensor::element_size)
      // views
      .def("view", [](const Tensor& t, py::args a) { return t.view(shape_from_args(a, Arg{"Tensor.view", "size"})); })
      .def("reshape", [](const Tensor& t, py::args a) { return t.reshape(shape_from_args(a, Arg{"Tensor.reshape", "shape"})); })
      .def("t", &Tensor::t)
      .def_property_readonly("T", [](const Tensor& t) {
        std::vector<std::int64_t> dims;
        for (std::int64_t i = t.dim() - 1; i >= 0; --i) dims.push_back(i);
        return t.permute(dims);
      })
      .def("transpose", [](const Tensor& t, py::handle d0, py::handle d1) {
        const std::int64_t a0 = to_int64(d0, Arg{"Tensor.transpose", "dim0"});
        return t.transpose(a0, to_int64(d1, Arg{"Tensor.transpose", "dim1"}));
      }, py::arg("dim0"), py::arg("dim1"))
      .def("permute", [](const Tensor& t, py::args a) { return t.permute(shape_from_args(a, Arg{"Tensor.permute", "dims"})); })
      .def("unsqueeze", [](const Tensor& t, py::handle d) { return t.unsqueeze(dim_arg(d, "Tensor.unsqueeze")); },
           py::arg("dim"))
      .def("squeeze", [](const Tensor& t, py::handle d) {
        if (!d.is_none()) return t.squeeze(dim_arg(d, "Tensor.squeeze"));
        Tensor r = t;
        for (std::int64_t i = t.dim() - 1; i >= 0; --i) r = r.squeeze(i);
        return r;
      }, py::arg("dim") = py::none())
      .def("expand", [](const Tensor& t, py::args a) { return t.expand(shape_from_args(a, Arg{"Tensor.expand", "size"})); })
      .def("flatten", &Tensor::flatten)
      .def("__getitem__", &index)
      .def("__setitem__", [](Tensor& t, py::handle key, py::handle value) {
        Tensor v = index(t, key);
        if (auto s = as_scalar(value, Arg{"Tensor.__setitem__", "value"})) v.fill_(*s);
        else {
          Tensor src = other_tensor(t, value, Arg{"Tensor.__setitem__", "value"});
          nogil([&]() -> Tensor& { return v.copy_(src); });
        }
      })
      // copies
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("copy_", [](Tensor& t, py::handle src, py::handle nb) -> Tensor& {
        Tensor s = other_tensor(t, src, Arg{"Tensor.copy_", "src"});
        const bool non_blocking = to_bool(nb, Arg{"Tensor.copy_", "non_blocking"});
        return nogil([&]() -> Tensor& { return t.copy_(s, non_blocking); });
      }, py::arg("src"), py::arg("non_blocking") = false, py::return_value_policy::reference_internal)
      .def("to", [](const Tensor& t, py::args args, py::handle dtype, py::handle device, py::handle nb, py::handle copy) {
        auto [dt, dev] = to_args(args, dtype, device);
        const bool non_blocking = to_bool(nb, Arg{"Tensor.to", "non_blocking"});
        const bool want_copy = to_bool(copy, Arg{"Tensor.to", "copy"});
        return nogil([&] {
          Tensor r = t.to(dev.value_or(t.device()), dt.value_or(t.dtype()), non_blocking);
          if (want_copy && r.storage() == t.storage()) r = r.clone();
          return r;
        });
      }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
         py::arg("non_blocking") = false, py::arg("copy") = false)
      .def("cpu", [](const Tensor& t) { return nogil([&] { return t.to(Device::cpu()); }); })
      .def("cuda", [](const Tensor& t, py::handle device, py::handle nb) {
        const Device d = Device::cuda(cuda_index(device, Arg{"Tensor.cuda", "device"}));
        const bool non_blocking = to_bool(nb, Arg{"Tensor.cuda", "non_blocking"});
        return nogil([&] { return t.to(d, non_blocking); });
      }, py::arg("device") = py::none(), py::arg("non_blocking") = false)
      .def("pin_memory", [](const Tensor& t) { return nogil([&] { return t.pin_memory(); }); })
      .def("record_stream", [](const Tensor& t, py::handle s) {
        const Arg a{"Tensor.record_stream", "stream"};
        if (s.is_none()) throw_type(a, "a cudakit.Stream", s);
        t.record_stream(stream_arg(s, a, t.is_cuda() ? t.device().index : kCurrentDevice));
      }, py::arg("stream"))
      .def("tolist", [](const Tensor& t) {
        Tensor h = nogil([&] { return t.dtype() == DType::bfloat16 ? t.to(Device::cpu(), DType::float32) : t.to(Device::cpu()); });
        return to_numpy(h).attr("tolist")();
      })
      // Python values of one-element tensors (any shape, as torch)
      .def("item", [](const Tensor& t) { return scalar_to_py(item_nogil(t)); })
      .def("__bool__", [](const Tensor& t) {
        if (t.numel() != 1)
          throw ValueError(t.numel() == 0 ? "Boolean value of Tensor with no values is ambiguous"
                                          : "Boolean value of Tensor with more than one value is ambiguous");
        return item_nogil(t).c != std::complex<double>(0);
      })
      .def("__float__", [](const Tensor& t) {
        Scalar s = one_element(t);
        if (s.kind == Scalar::Kind::complex) throw py::type_error("can't convert a complex tensor to float; use .real or abs()");
        return s.d;
      })
      .def("__int__", [](const Tensor& t) -> py::object {
        Scalar s = one_element(t);
        if (s.kind == Scalar::Kind::complex) throw py::type_error("can't convert a complex tensor to int");
        if (s.kind == Scalar::Kind::floating) {  // Python's int(float): truncates, raises for nan/inf
          PyObject* r = PyNumber_Long(py::float_(s.d).ptr());
          if (!r) throw py::error_already_set();
          return py::reinterpret_steal<py::object>(r);
        }
        return py::int_(s.i);
      })
      .def("__index__", [](const Tensor& t) {
        if (!is_integral(t.dtype(), true) || t.numel() != 1)
          throw py::type_error("only integer tensors of a single element can be converted to an index");
        return item_nogil(t).i;
      })
      .def("__complex__", [](const Tensor& t) { return one_element(t).c; })
      // fills and sampling
      .def("fill_", [](Tensor& t, py::handle v) -> Tensor& {
        const Arg a{"Tensor.fill_", "value"};
        if (auto s = as_scalar(v, a)) return t.fill_(*s);
        if (!py::isinstance<Tensor>(v)) throw_type(a, "a number or a one-element Tensor", v);
        const Scalar s = item_nogil(v.cast<const Tensor&>());
        return t.fill_(s);
      }, py::return_value_policy::reference_internal)
      .def("zero_", &Tensor::zero_, py::return_value_policy::reference_internal)
      .def("uniform_", [](Tensor& t, py::handle from, py::handle to, py::handle gen) -> Tensor& {
        const double lo = to_double(from, Arg{"Tensor.uniform_", "from"});
        const double hi = to_double(to, Arg{"Tensor.uniform_", "to"});
        return t.uniform_(lo, hi, generator_arg(gen, Arg{"Tensor.uniform_", "generator"}));
      }, py::arg("from_") = 0.0, py::arg("to") = 1.0, py::kw_only(), py::arg("generator") = py::none(),
         py::return_value_policy::reference_internal)
      .def("normal_", [](Tensor& t, py::handle mean, py::handle std, py::handle gen) -> Tensor& {
        const double m = to_double(mean, Arg{"Tensor.normal_", "mean"});
        const double sd = to_double(std, Arg{"Tensor.normal_", "std"});
        return t.normal_(m, sd, generator_arg(gen, Arg{"Tensor.normal_", "generator"}));
      }, py::arg("mean") = 0.0, py::arg("std") = 1.0, py::kw_only(), py::arg("generator") = py::none(),
         py::return_value_policy::reference_internal)
      // ops
      .def("sum", [](const Tensor& t) { return sum(t); })
      .def("relu", [](const Tensor& t) { return relu(t); })
      .def("neg", [](const Tensor& t) { return neg(t); })
      .def("matmul", [](const Tensor& a, py::handle b) { return matmul(a, tensor_arg(b, Arg{"Tensor.matmul", "other"})); },
           py::arg("other"))
      .def("__matmul__", [](const Tensor& a, py::handle b) -> py::object {
        if (!py::isinstance<Tensor>(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        return py::cast(matmul(a, b.cast<const Tensor&>()));
      })
      .def("__neg__", [](const Tensor& a) { return neg(a); });

#define CK_BINARY(pyname, fn_name, TENSOR_EXPR, SCALAR_EXPR)                                          \
  cls.def(pyname, [](const Tensor& a, py::handle b) {                                                 \
    return binop(a, b, fn_name, [](const Tensor& x, const Tensor& y) { return TENSOR_EXPR; },         \
                 [](const Tensor& x, const Scalar& s) { return SCALAR_EXPR; });                       \
  })
  CK_BINARY("__add__", "Tensor.__add__", add(x, y), add(x, s));
  CK_BINARY("__radd__", "Tensor.__radd__", add(y, x), add(x, s));
  CK_BINARY("__sub__", "Tensor.__sub__", sub(x, y), sub(x, s));
  CK_BINARY("__rsub__", "Tensor.__rsub__", sub(y, x), rsub(x, s));
  CK_BINARY("__mul__", "Tensor.__mul__", mul(x, y), mul(x, s));
  CK_BINARY("__rmul__", "Tensor.__rmul__", mul(y, x), mul(x, s));
  CK_BINARY("__truediv__", "Tensor.__truediv__", div(x, y), div(x, s));
  CK_BINARY("__rtruediv__", "Tensor.__rtruediv__", div(y, x), rdiv(x, s));
  CK_BINARY("__pow__", "Tensor.__pow__", pow(x, y), pow(x, s));
  CK_BINARY("__rpow__", "Tensor.__rpow__", pow(y, x), pow(s, x));
  // Comparisons: bool tensors (3 < t runs t.__gt__(3), Python's reflection).
  CK_BINARY("__eq__", "Tensor.__eq__", eq(x, y), eq(x, s));
  CK_BINARY("__ne__", "Tensor.__ne__", ne(x, y), ne(x, s));
  CK_BINARY("__lt__", "Tensor.__lt__", lt(x, y), lt(x, s));
  CK_BINARY("__le__", "Tensor.__le__", le(x, y), le(x, s));
  CK_BINARY("__gt__", "Tensor.__gt__", gt(x, y), gt(x, s));
  CK_BINARY("__ge__", "Tensor.__ge__", ge(x, y), ge(x, s));
#undef CK_BINARY
  // Defining __eq__ made pybind11 set __hash__ to None; torch hashes a tensor by identity
  // (hash(t) == id(t)).
  cls.def("__hash__", [](py::handle self) { return reinterpret_cast<std::intptr_t>(self.ptr()); });

#define CK_METHOD(pyname, fn_name, TENSOR_EXPR, SCALAR_EXPR)                                          \
  cls.def(pyname, [](const Tensor& a, py::handle b) {                                                 \
    return method_op(a, b, fn_name, [](const Tensor& x, const Tensor& y) { return TENSOR_EXPR; },     \
                     [](const Tensor& x, const Scalar& s) { return SCALAR_EXPR; });                   \
  }, py::arg("other"))
  CK_METHOD("add", "Tensor.add", add(x, y), add(x, s));
  CK_METHOD("sub", "Tensor.sub", sub(x, y), sub(x, s));
  CK_METHOD("mul", "Tensor.mul", mul(x, y), mul(x, s));
  CK_METHOD("div", "Tensor.div", div(x, y), div(x, s));
  CK_METHOD("pow", "Tensor.pow", pow(x, y), pow(x, s));
  CK_METHOD("eq", "Tensor.eq", eq(x, y), eq(x, s));
  CK_METHOD("ne", "Tensor.ne", ne(x, y), ne(x, s));
  CK_METHOD("lt", "Tensor.lt", lt(x, y), lt(x, s));
  CK_METHOD("le", "Tensor.le", le(x, y), le(x, s));
  CK_METHOD("gt", "Tensor.gt", gt(x, y), gt(x, s));
  CK_METHOD("ge", "Tensor.ge", ge(x, y), ge(x, s));
#undef CK_METHOD

  // In-place arithmetic: the operand becomes a tensor on self's device (scalars included).
#define CK_INPLACE(pyname, fn_name, FN)                                                               \
  cls.def(pyname, [](Tensor& a, py::handle b) -> Tensor& {                                            \
    return FN(a, other_tensor(a, b, Arg{fn_name, "other"}));                                         \
  }, py::return_value_policy::reference_internal)
  CK_INPLACE("__iadd__", "Tensor.__iadd__", add_);
  CK_INPLACE("__isub__", "Tensor.__isub__", sub_);
  CK_INPLACE("__imul__", "Tensor.__imul__", mul_);
  CK_INPLACE("__itruediv__", "Tensor.__itruediv__", div_);
  CK_INPLACE("add_", "Tensor.add_", add_);
  CK_INPLACE("sub_", "Tensor.sub_", sub_);
  CK_INPLACE("mul_", "Tensor.mul_", mul_);
  CK_INPLACE("div_", "Tensor.div_", div_);
#undef CK_INPLACE
  cls.def("__repr__", &tensor_repr);
}

Registrar reg("tensor", order::tensor, bind);

}  // namespace
}  // namespace cudakit::python
