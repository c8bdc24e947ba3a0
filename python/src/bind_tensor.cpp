// cudakit.Tensor, dtypes, factories, operators, numpy conversion and DLPack / CUDA array
// interface interop.
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "cudakit/dlpack.hpp"
#include "cudakit/error.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/random.hpp"
#include "cudakit/stream.hpp"
#include "registry.hpp"
#include "tensor/extent.hpp"
#include "tensor_common.hpp"

namespace cudakit::python {
namespace dl = cudakit::dlpack;

// ---- argument parsing (shared with bind_random.cpp through tensor_common.hpp) ----
DType parse_dtype(py::handle obj) {
  if (py::isinstance<DType>(obj)) return obj.cast<DType>();
  std::string name;
  if (py::isinstance<py::str>(obj)) {
    name = obj.cast<std::string>();
  } else if (py::hasattr(obj, "__module__") && py::str(obj.attr("__class__").attr("__name__")).cast<std::string>() == "dtype" &&
             py::str(obj).cast<std::string>().rfind("torch.", 0) == 0) {
    name = py::str(obj);  // torch.float32
  } else {
    try {  // numpy dtypes and scalar types (np.float32, np.dtype('f4'))
      name = py::module_::import("numpy").attr("dtype")(obj).attr("name").cast<std::string>();
    } catch (py::error_already_set&) {
      name = py::str(obj);
    }
  }
  if (auto t = dtype_from_name(name)) return *t;
  throw ValueError("unsupported dtype '" + name + "': use one of cudakit.bool, uint8, int8, int16, int32, "
                   "int64, float16, bfloat16, float32, float64, complex64, complex128");
}

Device parse_device(py::handle obj) {
  if (obj.is_none()) return Device::cuda(kCurrentDevice);
  if (py::isinstance<py::bool_>(obj)) throw ValueError("device must be an int, a string or a device object, not bool");
  if (py::isinstance<py::int_>(obj)) {
    int i = obj.cast<int>();
    if (i < 0) throw ValueError("device index must be >= 0, got " + std::to_string(i));
    return Device::cuda(i);
  }
  if (py::isinstance<py::str>(obj)) return Device::parse(obj.cast<std::string>());
  if (py::hasattr(obj, "type") && py::hasattr(obj, "index")) {
    std::string type = py::str(obj.attr("type"));
    py::object idx = obj.attr("index");
    if (type == "cpu") return Device::cpu();
    if (type == "cuda") return Device::cuda(idx.is_none() ? kCurrentDevice : idx.cast<int>());
    throw ValueError("unsupported device type '" + type + "' (expected 'cpu' or 'cuda')");
  }
  throw ValueError("cannot interpret " + py::repr(obj).cast<std::string>() +
                   " as a device: pass an int, 'cpu', 'cuda', 'cuda:N' or a device object");
}

std::optional<Scalar> as_scalar(py::handle o) {
  if (py::isinstance<py::bool_>(o)) return Scalar(o.cast<bool>());
  if (py::isinstance<py::int_>(o)) return Scalar(static_cast<long long>(o.cast<long long>()));
  if (py::isinstance<py::float_>(o)) return Scalar(o.cast<double>());
  if (PyComplex_Check(o.ptr())) return Scalar(o.cast<std::complex<double>>());
  // numpy scalars
  if (py::hasattr(o, "dtype") && py::hasattr(o, "item") && !py::isinstance<Tensor>(o) &&
      py::getattr(o, "ndim", py::int_(1)).cast<int>() == 0)
    return as_scalar(o.attr("item")());
  return std::nullopt;
}

Shape parse_shape(py::args args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return args[0].cast<Shape>();
  Shape s;
  for (auto a : args) s.push_back(a.cast<std::int64_t>());
  return s;
}

StreamRef stream_from_object(py::handle s, int device) {
  auto h = reinterpret_cast<NativeStream>(s.attr("cuda_stream").cast<std::uintptr_t>());
  int dev = py::hasattr(s, "device_index") ? s.attr("device_index").cast<int>() : device;
  return StreamRef::from_handle(h, dev);
}

namespace {

// ---- device object returned by Tensor.device ----
struct TensorDevice {
  Device d;
};

py::object numpy_dtype(DType t) {
  auto np = py::module_::import("numpy");
  if (t == DType::bfloat16)
    throw py::type_error("numpy has no bfloat16: convert first with .to(cudakit.float32)");
  return np.attr("dtype")(t == DType::bool_ ? "bool" : dtype_name(t));
}

py::array to_numpy(const Tensor& t) {
  if (t.is_cuda())
    throw py::type_error("can't convert " + t.device().str() +
                         " device tensor to numpy: copy it to host memory first with .cpu()");
  Shape bstrides;
  for (auto s : t.strides()) bstrides.push_back(s * static_cast<std::int64_t>(t.element_size()));
  auto* keep = new Tensor(t);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(numpy_dtype(t.dtype()), t.sizes(), bstrides, t.data_ptr(), owner);
}

// Deleters of foreign DLPack tensors may need the GIL; storage can die on a stream worker
// thread, so defer them to the interpreter via Py_AddPendingCall when we don't hold it.
void release_foreign(std::function<void()> fn) {
  if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than crash
  if (PyGILState_Check()) {
    fn();
    return;
  }
  auto* heap = new std::function<void()>(std::move(fn));
  int rc = Py_AddPendingCall(
      [](void* p) -> int {
        auto* f = static_cast<std::function<void()>*>(p);
        (*f)();
        delete f;
        return 0;
      },
      heap);
  if (rc != 0) delete heap;  // queue full: leak the foreign buffer rather than risk a crash
}

constexpr const char* kCapsule = "dltensor";
constexpr const char* kCapsuleVersioned = "dltensor_versioned";
constexpr const char* kUsedCapsule = "used_dltensor";
constexpr const char* kUsedCapsuleVersioned = "used_dltensor_versioned";

Tensor consume_capsule(py::handle cap) {
  PyObject* c = cap.ptr();
  if (!PyCapsule_CheckExact(c)) throw ValueError("from_dlpack: expected a DLPack capsule or an object with __dlpack__");
  const char* name = PyCapsule_GetName(c);
  std::string n = name ? name : "";
  if (n == kUsedCapsule || n == kUsedCapsuleVersioned)
    throw ValueError("from_dlpack: this DLPack capsule was already consumed (a capsule can be imported only once; "
                     "call __dlpack__() again for a new one)");
  if (n == kCapsuleVersioned) {
    auto* m = static_cast<dl::DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, kCapsuleVersioned));
    if (!m) throw py::error_already_set();
    PyCapsule_SetName(c, kUsedCapsuleVersioned);
    return dl::from_dlpack(m, release_foreign);
  }
  if (n == kCapsule) {
    auto* m = static_cast<dl::DLManagedTensor*>(PyCapsule_GetPointer(c, kCapsule));
    if (!m) throw py::error_already_set();
    PyCapsule_SetName(c, kUsedCapsule);
    return dl::from_dlpack(m, release_foreign);
  }
  throw ValueError("from_dlpack: invalid capsule name '" + n + "' (expected 'dltensor' or 'dltensor_versioned')");
}

// Handle a producer receives for `stream=`: 1 for the legacy default stream (DLPack spec).
std::intptr_t consumer_stream_arg(int device) {
  StreamRef s = current_stream(device);
  return s.is_default() ? 1 : reinterpret_cast<std::intptr_t>(s.handle());
}

Tensor from_dlpack_obj(py::handle obj) {
  if (PyCapsule_CheckExact(obj.ptr())) return consume_capsule(obj);
  if (!py::hasattr(obj, "__dlpack__"))
    throw ValueError("from_dlpack: object of type " + py::str(obj.get_type().attr("__name__")).cast<std::string>() +
                     " supports neither __dlpack__ nor is a DLPack capsule");
  py::object stream = py::none();
  if (py::hasattr(obj, "__dlpack_device__")) {
    auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
    if (dev.first == dl::kDLCUDA || dev.first == dl::kDLCUDAManaged) stream = py::int_(consumer_stream_arg(dev.second));
  }
  py::object cap;
  try {
    cap = obj.attr("__dlpack__")(py::arg("stream") = stream, py::arg("max_version") = py::make_tuple(1, 0));
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    cap = stream.is_none() ? obj.attr("__dlpack__")() : obj.attr("__dlpack__")(py::arg("stream") = stream);
  }
  return consume_capsule(cap);
}

py::capsule make_capsule(const Tensor& t, bool versioned, std::uint64_t flags) {
  if (versioned) {
    auto* m = dl::to_dlpack_versioned(t, flags);
    return py::capsule(m, kCapsuleVersioned, [](PyObject* c) {
      if (PyCapsule_IsValid(c, kCapsuleVersioned)) {  // never consumed: we still own it
        auto* m = static_cast<dl::DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, kCapsuleVersioned));
        if (m && m->deleter) m->deleter(m);
      } else {
        PyErr_Clear();
      }
    });
  }
  auto* m = dl::to_dlpack(t);
  return py::capsule(m, kCapsule, [](PyObject* c) {
    if (PyCapsule_IsValid(c, kCapsule)) {
      auto* m = static_cast<dl::DLManagedTensor*>(PyCapsule_GetPointer(c, kCapsule));
      if (m && m->deleter) m->deleter(m);
    } else {
      PyErr_Clear();
    }
  });
}

py::object dlpack(const Tensor& self, py::object stream, py::object max_version, py::object dl_device, py::object copy) {
  Tensor t = self;
  bool copied = false;
  if (!dl_device.is_none()) {
    auto want = dl_device.cast<std::pair<int, int>>();
    auto have = dl::device_of(t);
    if (want.first != have.device_type || want.second != have.device_id) {
      if (!copy.is_none() && !copy.cast<bool>())
        throw py::buffer_error("__dlpack__: dl_device differs from the tensor's device and copy=False");
      if (want.first == dl::kDLCPU) t = t.to(Device::cpu());
      else if (want.first == dl::kDLCUDA) t = t.to(Device::cuda(want.second));
      else throw py::buffer_error("__dlpack__: cannot export to device type " + std::to_string(want.first));
      copied = true;
    }
  }
  if (!copied && !copy.is_none() && copy.cast<bool>()) {
    t = t.clone();
    copied = true;
  }
  if (t.is_cuda()) {
    // Stream semantics (DLPack spec, CUDA): None/1 = legacy default, 2 = per-thread
    // default, -1 = no synchronization, 0 is disallowed, else a stream handle.
    std::intptr_t s = stream.is_none() ? 1 : stream.cast<std::intptr_t>();
    if (s == 0) throw ValueError("__dlpack__: stream=0 is ambiguous and disallowed; use 1 for the legacy default stream");
    if (s != -1) {
      int dev = t.device().index;
      StreamRef producer = current_stream(dev);
      StreamRef consumer = (s == 1 || s == 2) ? StreamRef::default_for(dev)
                                              : StreamRef::from_handle(reinterpret_cast<NativeStream>(s), dev);
      if (!(producer == consumer)) consumer.wait(producer);
    }
  } else if (!stream.is_none() && !t.is_pinned()) {
    // Host tensors: the spec says stream must be None for kDLCPU.
    if (stream.cast<std::intptr_t>() != -1)
      throw py::buffer_error("__dlpack__: stream must be None for host (kDLCPU) tensors");
  }
  bool versioned = false;
  if (!max_version.is_none()) {
    auto mv = max_version.cast<std::pair<int, int>>();
    versioned = mv.first >= 1;
  }
  return make_capsule(t, versioned, copied ? dl::DLPACK_FLAG_BITMASK_IS_COPIED : 0);
}

py::dict cuda_array_interface(const Tensor& t) {
  if (!t.is_cuda())
    throw py::attribute_error("__cuda_array_interface__ is only defined for device tensors (this one is on " +
                              t.device().str() + ")");
  if (t.dtype() == DType::bfloat16) throw py::attribute_error("__cuda_array_interface__ has no typestr for bfloat16");
  py::dict d;
  d["shape"] = py::tuple(py::cast(t.sizes()));
  d["typestr"] = numpy_dtype(t.dtype()).attr("str");
  d["data"] = py::make_tuple(reinterpret_cast<std::uintptr_t>(t.data_ptr()), false);
  d["version"] = 3;
  if (t.is_contiguous()) {
    d["strides"] = py::none();
  } else {
    py::list st;
    for (auto s : t.strides()) st.append(s * static_cast<std::int64_t>(t.element_size()));
    d["strides"] = py::tuple(st);
  }
  StreamRef s = current_stream(t.device().index);
  d["stream"] = s.is_default() ? py::int_(1) : py::int_(reinterpret_cast<std::uintptr_t>(s.handle()));
  return d;
}

// Host tensor from numpy (zero-copy when possible).
Tensor from_numpy(py::handle arr) {
  auto np = py::module_::import("numpy");
  py::object a = np.attr("asarray")(arr);
  std::string kind = py::str(a.attr("dtype").attr("name"));
  auto dt = dtype_from_name(kind);
  if (!dt) throw ValueError("cannot convert numpy dtype " + kind + " to a cudakit dtype");
  py::buffer_info info = a.cast<py::array>().request();
  Shape sizes(info.shape.begin(), info.shape.end());
  Shape strides;
  std::int64_t es = static_cast<std::int64_t>(element_size(*dt));
  for (auto s : info.strides) {
    if (s % es) {  // unaligned strides: make a contiguous numpy copy
      return from_numpy(np.attr("ascontiguousarray")(a));
    }
    strides.push_back(s / es);
  }
  // Keep the numpy array alive with the storage (released with the GIL, see release_foreign).
  auto* ref = new py::object(a);
  auto release = [ref] { release_foreign([ref] { delete ref; }); };
  const detail::StridedExtent ext = detail::strided_extent(sizes, strides);
  auto st = Storage::external(static_cast<char*>(info.ptr) + ext.lo * es, ext.nbytes(es),
                              Device::cpu(), false, release);
  return Tensor(st, *dt, sizes, strides, -ext.lo);
}

Tensor to_tensor_like(py::handle obj, std::optional<DType> dtype, std::optional<Device> device) {
  Tensor t;
  bool from_sequence = false;
  if (py::isinstance<Tensor>(obj)) {
    t = obj.cast<Tensor>();
  } else if (py::hasattr(obj, "__dlpack__") && !py::isinstance(obj, py::module_::import("numpy").attr("ndarray"))) {
    t = from_dlpack_obj(obj);
  } else if (py::isinstance(obj, py::module_::import("numpy").attr("ndarray"))) {
    t = from_numpy(obj);
  } else {
    // Python scalars / nested sequences: numpy parses, torch's default dtypes apply.
    auto np = py::module_::import("numpy");
    py::object a = np.attr("asarray")(obj);
    std::string k = py::str(a.attr("dtype").attr("kind"));
    if (!dtype) {
      if (k == "f") a = a.attr("astype")("float32");
      else if (k == "c") a = a.attr("astype")("complex64");
      else if (k == "i" || k == "u") a = a.attr("astype")("int64");
    }
    t = from_numpy(a).clone();  // own the bytes
    from_sequence = true;
  }
  Device target = device ? *device : (from_sequence ? Device::cuda(kCurrentDevice) : t.device());
  DType dt = dtype ? *dtype : t.dtype();
  return t.to(target, dt);
}

// ---- indexing ----
Tensor index(const Tensor& self, py::handle key) {
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
      auto opt = [](py::object o) -> std::optional<std::int64_t> {
        if (o.is_none()) return std::nullopt;
        return o.cast<std::int64_t>();
      };
      std::int64_t step = sl.attr("step").is_none() ? 1 : sl.attr("step").cast<std::int64_t>();
      t = t.slice(d++, opt(sl.attr("start")), opt(sl.attr("stop")), step);
    } else if (py::isinstance<py::int_>(it) || py::hasattr(it, "__index__")) {
      std::int64_t i = py::reinterpret_steal<py::int_>(PyNumber_Index(it.ptr())).cast<std::int64_t>();
      std::int64_t n = t.size(d);
      if (i < -n || i >= n)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " +
                              std::to_string(d) + " with size " + std::to_string(n));
      t = t.select(d, i);
    } else {
      throw py::type_error("only integers, slices, None and Ellipsis are valid indices (advanced indexing is not supported)");
    }
  }
  return t;
}

Tensor other_tensor(const Tensor& self, py::handle o) {
  if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
  return to_tensor_like(o, std::nullopt, self.device());
}

template <class TT, class TS>
py::object binop(const Tensor& a, py::handle b, TT tensor_fn, TS scalar_fn) {
  if (auto s = as_scalar(b)) return py::cast(scalar_fn(a, *s));
  if (py::isinstance<Tensor>(b)) return py::cast(tensor_fn(a, b.cast<Tensor>()));
  return py::reinterpret_borrow<py::object>(Py_NotImplemented);
}

std::string tensor_repr(const Tensor& t) {
  std::string body;
  Tensor h = t.dtype() == DType::bfloat16 ? t.to(Device::cpu(), DType::float32) : t.to(Device::cpu());
  if (t.numel() <= 1000) {
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

TensorOptions opts(py::object dtype, py::object device, bool pin_memory, DType def = DType::float32) {
  TensorOptions o;
  o.dtype = dtype.is_none() ? def : parse_dtype(dtype);
  o.device = parse_device(device);
  o.pinned = pin_memory;
  if (pin_memory && o.device.is_cuda())
    throw ValueError("pin_memory=True requires device='cpu'");
  return o;
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
      .def("__eq__", [](DType a, py::object b) {
        try { return a == parse_dtype(b); } catch (...) { return false; }
      })
      .def("__hash__", [](DType t) { return static_cast<int>(t); })
      .def("__reduce__", [](DType t) { return py::make_tuple(py::module_::import("cudakit").attr("_dtype_from_name"), py::make_tuple(dtype_name(t))); });
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
  m.def("_dtype_from_name", [](const std::string& n) { return parse_dtype(py::str(n)); });
  m.def("promote_types", [](py::object a, py::object b) { return promote_types(parse_dtype(a), parse_dtype(b)); });
  m.def("result_type", [](const Tensor& a, py::object b) {
    if (auto s = as_scalar(b)) return result_type(a, *s);
    return result_type(a, b.cast<Tensor>());
  });

  py::class_<TensorDevice>(m, "TensorDevice", "Device of a Tensor: .type ('cpu'|'cuda') and .index")
      .def_property_readonly("type", [](const TensorDevice& d) { return d.d.is_cpu() ? "cpu" : "cuda"; })
      .def_property_readonly("index", [](const TensorDevice& d) -> py::object {
        return d.d.is_cpu() ? py::none() : py::cast(d.d.index);
      })
      .def("__str__", [](const TensorDevice& d) { return d.d.str(); })
      .def("__repr__", [](const TensorDevice& d) {
        return d.d.is_cpu() ? std::string("device(type='cpu')")
                            : "device(type='cuda', index=" + std::to_string(d.d.index) + ")";
      })
      .def("__eq__", [](const TensorDevice& a, py::object b) {
        try { return a.d == parse_device(b); } catch (...) { return false; }
      })
      .def("__hash__", [](const TensorDevice& d) { return py::hash(py::str(d.d.str())); });

  // ---- Tensor ----
  py::class_<Tensor> cls(m, "Tensor", R"doc(
A strided array in cudakit memory (device, pinned or pageable host). Views share storage;
operators + - * / @ and unary - run on the current stream of the tensor's device.
Interoperates through DLPack (__dlpack__, from_dlpack) and __cuda_array_interface__.)doc");
  cls.def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.sizes())); })
      .def("size", [](const Tensor& t, py::object d) -> py::object {
        if (d.is_none()) return py::tuple(py::cast(t.sizes()));
        return py::cast(t.size(d.cast<std::int64_t>()));
      }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& t, py::object d) -> py::object {
        if (d.is_none()) return py::tuple(py::cast(t.strides()));
        return py::cast(t.stride(d.cast<std::int64_t>()));
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
      .def_property_readonly("device", [](const Tensor& t) { return TensorDevice{t.device()}; })
      .def_property_readonly("is_cuda", &Tensor::is_cuda)
      .def("get_device", [](const Tensor& t) { return t.is_cuda() ? t.device().index : -1; })
      .def("is_pinned", &Tensor::is_pinned)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()); })
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("itemsize", &Tensor::element_size)
      .def("element_size", &Tensor::element_size)
      // views
      .def("view", [](const Tensor& t, py::args a) { return t.view(parse_shape(a)); })
      .def("reshape", [](const Tensor& t, py::args a) { return t.reshape(parse_shape(a)); })
      .def("t", &Tensor::t)
      .def_property_readonly("T", [](const Tensor& t) {
        std::vector<std::int64_t> dims;
        for (std::int64_t i = t.dim() - 1; i >= 0; --i) dims.push_back(i);
        return t.permute(dims);
      })
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("permute", [](const Tensor& t, py::args a) { return t.permute(parse_shape(a)); })
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"))
      .def("squeeze", [](const Tensor& t, py::object d) {
        if (!d.is_none()) return t.squeeze(d.cast<std::int64_t>());
        Tensor r = t;
        for (std::int64_t i = t.dim() - 1; i >= 0; --i) r = r.squeeze(i);
        return r;
      }, py::arg("dim") = py::none())
      .def("expand", [](const Tensor& t, py::args a) { return t.expand(parse_shape(a)); })
      .def("flatten", &Tensor::flatten)
      .def("__getitem__", &index)
      .def("__setitem__", [](Tensor& t, py::handle key, py::handle value) {
        Tensor v = index(t, key);
        if (auto s = as_scalar(value)) v.fill_(*s);
        else v.copy_(other_tensor(t, value));
      })
      // copies
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("copy_", [](Tensor& t, py::handle src, bool nb) -> Tensor& { return t.copy_(other_tensor(t, src), nb); },
           py::arg("src"), py::arg("non_blocking") = false, py::return_value_policy::reference_internal)
      .def("to", [](const Tensor& t, py::args args, py::object dtype, py::object device, bool nb, bool copy) {
        std::optional<DType> dt;
        std::optional<Device> dev;
        if (!dtype.is_none()) dt = parse_dtype(dtype);
        if (!device.is_none()) dev = parse_device(device);
        for (auto a : args) {
          if (py::isinstance<Tensor>(a)) { dt = a.cast<Tensor>().dtype(); dev = a.cast<Tensor>().device(); continue; }
          bool is_dtype = py::isinstance<DType>(a);
          if (!is_dtype && py::isinstance<py::str>(a)) is_dtype = dtype_from_name(a.cast<std::string>()).has_value();
          if (is_dtype) dt = parse_dtype(a); else dev = parse_device(a);
        }
        Tensor r = t.to(dev.value_or(t.device()), dt.value_or(t.dtype()), nb);
        if (copy && r.storage() == t.storage()) r = r.clone();
        return r;
      }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
         py::arg("non_blocking") = false, py::arg("copy") = false)
      .def("cpu", [](const Tensor& t) { return t.to(Device::cpu()); })
      .def("cuda", [](const Tensor& t, py::object device, bool nb) { return t.to(parse_device(device), nb); },
           py::arg("device") = py::none(), py::arg("non_blocking") = false)
      .def("pin_memory", &Tensor::pin_memory)
      .def("record_stream", [](const Tensor& t, py::object s) { t.record_stream(stream_from_object(s, t.device().index)); })
      .def("numpy", [](const Tensor& t) { return to_numpy(t); })
      .def("__array__", [](const Tensor& t, py::object dtype, py::object copy) {
        py::object a = to_numpy(t);
        if (!dtype.is_none()) a = a.attr("astype")(dtype);
        return a;
      }, py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("tolist", [](const Tensor& t) {
        Tensor h = t.dtype() == DType::bfloat16 ? t.to(Device::cpu(), DType::float32) : t.to(Device::cpu());
        return to_numpy(h).attr("tolist")();
      })
      .def("item", [](const Tensor& t) -> py::object {
        Scalar s = t.item();
        switch (s.kind) {
          case Scalar::Kind::boolean: return py::bool_(s.i != 0);
          case Scalar::Kind::integer: return py::int_(s.i);
          case Scalar::Kind::floating: return py::float_(s.d);
          default: return py::cast(s.c);
        }
      })
      .def("__bool__", [](const Tensor& t) { return t.item().c != std::complex<double>(0); })
      .def("__float__", [](const Tensor& t) { return t.item().d; })
      .def("__int__", [](const Tensor& t) { return t.item().i; })
      // fills and sampling
      .def("fill_", [](Tensor& t, py::handle v) -> Tensor& {
        auto s = as_scalar(v);
        if (!s) s = other_tensor(t, v).item();
        return t.fill_(*s);
      }, py::return_value_policy::reference_internal)
      .def("zero_", &Tensor::zero_, py::return_value_policy::reference_internal)
      .def("uniform_", [](Tensor& t, double from, double to, py::object gen) -> Tensor& { Generator* g = gen.is_none() ? nullptr : gen.cast<Generator*>(); return t.uniform_(from, to, g); },
           py::arg("from_") = 0.0, py::arg("to") = 1.0, py::kw_only(), py::arg("generator") = py::none(),
           py::return_value_policy::reference_internal)
      .def("normal_", [](Tensor& t, double mean, double std, py::object gen) -> Tensor& { Generator* g = gen.is_none() ? nullptr : gen.cast<Generator*>(); return t.normal_(mean, std, g); },
           py::arg("mean") = 0.0, py::arg("std") = 1.0, py::kw_only(), py::arg("generator") = py::none(),
           py::return_value_policy::reference_internal)
      // ops
      .def("sum", [](const Tensor& t) { return sum(t); })
      .def("relu", [](const Tensor& t) { return relu(t); })
      .def("neg", [](const Tensor& t) { return neg(t); })
      .def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); })
      .def("__neg__", [](const Tensor& a) { return neg(a); })
      .def("__add__", [](const Tensor& a, py::handle b) { return binop(a, b, [](const auto& x, const auto& y) { return add(x, y); }, [](const auto& x, const auto& s) { return add(x, s); }); })
      .def("__radd__", [](const Tensor& a, py::handle b) { return binop(a, b, [](const auto& x, const auto& y) { return add(y, x); }, [](const auto& x, const auto& s) { return add(x, s); }); })
      .def("__sub__", [](const Tensor& a, py::handle b) { return binop(a, b, [](const auto& x, const auto& y) { return sub(x, y); }, [](const auto& x, const auto& s) { return sub(x, s); }); })
      .def("__rsub__", [](const Tensor& a, py::handle b) { return binop(a, b, [](const auto& x, const auto& y) { return sub(y, x); }, [](const auto& x, const auto& s) { return rsub(x, s); }); })
      .def("__mul__", [](const Tensor& a, py::handle b) { return binop(a, b, [](const auto& x, const auto& y) { return mul(x, y); }, [](const auto& x, const auto& s) { return mul(x, s); }); })
      .def("__rmul__", [](const Tensor& a, py::handle b) { return binop(a, b, [](const auto& x, const auto& y) { return mul(y, x); }, [](const auto& x, const auto& s) { return mul(x, s); }); })
      .def("__truediv__", [](const Tensor& a, py::handle b) { return binop(a, b, [](const auto& x, const auto& y) { return div(x, y); }, [](const auto& x, const auto& s) { return div(x, s); }); })
      .def("__rtruediv__", [](const Tensor& a, py::handle b) { return binop(a, b, [](const auto& x, const auto& y) { return div(y, x); }, [](const auto& x, const auto& s) { return rdiv(x, s); }); })
      .def("add", [](const Tensor& a, py::handle b) { return add(a, other_tensor(a, b)); })
      .def("sub", [](const Tensor& a, py::handle b) { return sub(a, other_tensor(a, b)); })
      .def("mul", [](const Tensor& a, py::handle b) { return mul(a, other_tensor(a, b)); })
      .def("div", [](const Tensor& a, py::handle b) { return div(a, other_tensor(a, b)); })
      .def("__iadd__", [](Tensor& a, py::handle b) -> Tensor& { return add_(a, other_tensor(a, b)); }, py::return_value_policy::reference_internal)
      .def("__isub__", [](Tensor& a, py::handle b) -> Tensor& { return sub_(a, other_tensor(a, b)); }, py::return_value_policy::reference_internal)
      .def("__imul__", [](Tensor& a, py::handle b) -> Tensor& { return mul_(a, other_tensor(a, b)); }, py::return_value_policy::reference_internal)
      .def("__itruediv__", [](Tensor& a, py::handle b) -> Tensor& { return div_(a, other_tensor(a, b)); }, py::return_value_policy::reference_internal)
      .def("add_", [](Tensor& a, py::handle b) -> Tensor& { return add_(a, other_tensor(a, b)); }, py::return_value_policy::reference_internal)
      .def("sub_", [](Tensor& a, py::handle b) -> Tensor& { return sub_(a, other_tensor(a, b)); }, py::return_value_policy::reference_internal)
      .def("mul_", [](Tensor& a, py::handle b) -> Tensor& { return mul_(a, other_tensor(a, b)); }, py::return_value_policy::reference_internal)
      .def("div_", [](Tensor& a, py::handle b) -> Tensor& { return div_(a, other_tensor(a, b)); }, py::return_value_policy::reference_internal)
      // interop
      .def("__dlpack__", &dlpack, py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const Tensor& t) {
        auto d = dl::device_of(t);
        return py::make_tuple(static_cast<int>(d.device_type), d.device_id);
      })
      .def_property_readonly("__cuda_array_interface__", &cuda_array_interface)
      .def("__repr__", &tensor_repr);

  // ---- factories ----
  m.def("empty", [](py::args s, py::object dtype, py::object device, bool pin) { return empty(parse_shape(s), opts(dtype, device, pin)); },
        py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("pin_memory") = false);
  m.def("zeros", [](py::args s, py::object dtype, py::object device, bool pin) { return zeros(parse_shape(s), opts(dtype, device, pin)); },
        py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("pin_memory") = false);
  m.def("ones", [](py::args s, py::object dtype, py::object device, bool pin) { return ones(parse_shape(s), opts(dtype, device, pin)); },
        py::arg("dtype") = py::none(), py::arg("device") = py::none(), py::arg("pin_memory") = false);
  m.def("full", [](py::object s, py::handle v, py::object dtype, py::object device, bool pin) {
          auto sc = as_scalar(v);
          if (!sc) throw ValueError("full: fill_value must be a number");
          DType def = sc->kind == Scalar::Kind::floating ? DType::float32 : sc->default_dtype();
          Shape shape = py::isinstance<py::int_>(s) ? Shape{s.cast<std::int64_t>()} : s.cast<Shape>();
          return full(shape, *sc, opts(dtype, device, pin, def));
        }, py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("pin_memory") = false);
  m.def("arange", [](py::handle a, py::handle b, py::handle step, py::object dtype, py::object device) {
          Scalar start(0LL), end, st(1LL);
          if (b.is_none()) { end = *as_scalar(a); } else { start = *as_scalar(a); end = *as_scalar(b); }
          if (!step.is_none()) st = *as_scalar(step);
          bool fl = start.kind == Scalar::Kind::floating || end.kind == Scalar::Kind::floating || st.kind == Scalar::Kind::floating;
          return arange(start, end, st, opts(dtype, device, false, fl ? DType::float32 : DType::int64));
        }, py::arg("start"), py::arg("end") = py::none(), py::arg("step") = py::none(), py::kw_only(),
        py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("empty_like", [](const Tensor& t, py::object dtype, py::object device) {
          return empty(t.sizes(), TensorOptions{dtype.is_none() ? t.dtype() : parse_dtype(dtype),
                                                device.is_none() ? t.device() : parse_device(device), false});
        }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("zeros_like", [](const Tensor& t, py::object dtype, py::object device) {
          return zeros(t.sizes(), TensorOptions{dtype.is_none() ? t.dtype() : parse_dtype(dtype),
                                                device.is_none() ? t.device() : parse_device(device), false});
        }, py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("asarray", [](py::handle obj, py::object dtype, py::object device, py::object copy) {
          std::optional<DType> dt;
          std::optional<Device> dev;
          if (!dtype.is_none()) dt = parse_dtype(dtype);
          if (!device.is_none()) dev = parse_device(device);
          Tensor r = to_tensor_like(obj, dt, dev);
          if (!copy.is_none() && copy.cast<bool>() && py::isinstance<Tensor>(obj) &&
              r.storage() == obj.cast<Tensor>().storage())
            r = r.clone();
          return r;
        }, py::arg("obj"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("copy") = py::none());
  m.def("from_dlpack", [](py::handle obj) { return from_dlpack_obj(obj); }, py::arg("ext_tensor"));
  m.def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  m.def("sum", [](const Tensor& a) { return sum(a); });
  m.def("relu", [](const Tensor& a) { return relu(a); });
  m.def("matmul_allow_tf32", &matmul_allow_tf32, "Whether float32 matmul may use TF32 tensor cores (default False).");
  m.def("set_matmul_allow_tf32", &set_matmul_allow_tf32, py::arg("allow"));
  // cudakit.current_blas_handle() (python/cudakit/_device.py): the calling thread's cuBLAS
  // handle for the current device as an int; NotImplementedError on the emulated backend.
  m.def("_current_blas_handle", [] { return reinterpret_cast<std::uintptr_t>(current_blas_handle()); });
}

}  // namespace

static Registrar reg("tensor", 40, &bind);

}  // namespace cudakit::python
