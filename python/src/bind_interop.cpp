// Interop with other array libraries: NumPy (Tensor.numpy, __array__, zero-copy import),
// DLPack (Tensor.__dlpack__ / __dlpack_device__, cudakit.from_dlpack) and the CUDA array
// interface (Tensor.__cuda_array_interface__). Adds its methods to the Tensor class that
// bind_tensor.cpp registers.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <functional>
#include <string>

#include "args.hpp"
#include "convert.hpp"
#include "cudakit/device.hpp"
#include "cudakit/dlpack.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace dl = cudakit::dlpack;

namespace {

py::object numpy_dtype(DType t) {
  auto np = py::module_::import("numpy");
  if (t == DType::bfloat16)
    throw py::type_error("numpy has no bfloat16: convert first with .to(cudakit.float32)");
  return np.attr("dtype")(t == DType::bool_ ? "bool" : dtype_name(t));
}

}  // namespace

// Deleters of foreign buffers may need the GIL; storage can die on a stream worker thread,
// so defer them to the interpreter via Py_AddPendingCall when we don't hold it.
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

namespace {

constexpr const char* kCapsule = "dltensor";
constexpr const char* kCapsuleVersioned = "dltensor_versioned";
constexpr const char* kUsedCapsule = "used_dltensor";
constexpr const char* kUsedCapsuleVersioned = "used_dltensor_versioned";

Tensor consume_capsule(py::handle cap) {
  PyObject* c = cap.ptr();
  if (!PyCapsule_CheckExact(c))
    throw_type(Arg{"from_dlpack", "ext_tensor"}, "a DLPack capsule or an object with __dlpack__", cap);
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

std::pair<int, int> int_pair(py::handle v, Arg a) {
  if (!PySequence_Check(v.ptr()) || PyUnicode_Check(v.ptr()) || py::len(v) != 2) throw_type(a, "a tuple of two ints", v);
  py::sequence s = py::reinterpret_borrow<py::sequence>(v);
  return {to_int(s[0], a), to_int(s[1], a)};
}

py::object dlpack(const Tensor& self, py::handle stream, py::handle max_version, py::handle dl_device, py::handle copy) {
  Tensor t = self;
  bool copied = false;
  const std::optional<bool> want_copy =
      copy.is_none() ? std::nullopt : std::optional<bool>(to_bool(copy, Arg{"Tensor.__dlpack__", "copy"}));
  if (!dl_device.is_none()) {
    auto want = int_pair(dl_device, Arg{"Tensor.__dlpack__", "dl_device"});
    auto have = dl::device_of(t);
    if (want.first != have.device_type || want.second != have.device_id) {
      if (want_copy && !*want_copy)
        throw py::buffer_error("__dlpack__: dl_device differs from the tensor's device and copy=False");
      if (want.first == dl::kDLCPU) t = t.to(Device::cpu());
      else if (want.first == dl::kDLCUDA) t = t.to(Device::cuda(want.second));
      else throw py::buffer_error("__dlpack__: cannot export to device type " + std::to_string(want.first));
      copied = true;
    }
  }
  if (!copied && want_copy && *want_copy) {
    t = t.clone();
    copied = true;
  }
  const Arg sa{"Tensor.__dlpack__", "stream"};
  if (t.is_cuda()) {
    // Stream semantics (DLPack spec, CUDA): None/1 = legacy default, 2 = per-thread
    // default, -1 = no synchronization, 0 is disallowed, else a stream handle.
    std::int64_t s = stream.is_none() ? 1 : to_int64(stream, sa);
    if (s == 0) throw ValueError("__dlpack__: stream=0 is ambiguous and disallowed; use 1 for the legacy default stream");
    if (s < -1) throw_value(sa, "must be -1, 1, 2 or a stream handle, got " + std::to_string(s));
    if (s != -1) {
      int dev = t.device().index;
      StreamRef producer = current_stream(dev);
      StreamRef consumer = (s == 1 || s == 2) ? StreamRef::default_for(dev)
                                              : get_stream_from_external(static_cast<std::uintptr_t>(s), dev);
      if (!(producer == consumer)) consumer.wait(producer);
    }
  } else if (!stream.is_none() && !t.is_pinned()) {
    // Host tensors: the spec says stream must be None for kDLCPU.
    if (to_int64(stream, sa) != -1)
      throw py::buffer_error("__dlpack__: stream must be None for host (kDLCPU) tensors");
  }
  bool versioned = false;
  if (!max_version.is_none()) versioned = int_pair(max_version, Arg{"Tensor.__dlpack__", "max_version"}).first >= 1;
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

void bind(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  cls.def("numpy", [](const Tensor& t) { return to_numpy(t); })
      .def("__array__",
           [](const Tensor& t, py::object dtype, py::object copy) {
             py::object a = to_numpy(t);
             if (!dtype.is_none()) a = a.attr("astype")(dtype);
             return a;
           },
           py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack__", &dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const Tensor& t) {
        auto d = dl::device_of(t);
        return py::make_tuple(static_cast<int>(d.device_type), d.device_id);
      })
      .def_property_readonly("__cuda_array_interface__", &cuda_array_interface);
  m.def("from_dlpack", [](py::handle obj) { return from_dlpack_obj(obj); }, py::arg("ext_tensor"));
}

Registrar reg("interop", order::interop, bind);

}  // namespace

// ---- shared conversions (convert.hpp) ----
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

bool is_numpy_array(py::handle obj) {
  // Only a type from numpy can be an ndarray (or subclass): skip importing NumPy otherwise.
  py::object mod = py::getattr(py::type::handle_of(obj), "__module__", py::none());
  if (mod.is_none() || py::str(mod).cast<std::string>().rfind("numpy", 0) != 0) return false;
  return py::isinstance(obj, py::module_::import("numpy").attr("ndarray"));
}

Tensor from_numpy(py::handle arr, Arg a) {
  auto np = py::module_::import("numpy");
  py::object x = np.attr("asarray")(arr);
  py::object npdt = x.attr("dtype");
  const std::string kind = py::str(npdt.attr("name"));
  auto dt = dtype_from_name(kind);
  if (!dt)
    throw ArgTypeError(where(a) + ": can't convert a NumPy array of dtype " + py::repr(npdt).cast<std::string>() +
                       "; supported: bool, uint8, int8, int16, int32, int64, float16, float32, float64, "
                       "complex64, complex128");
  // Byte-swapped or misaligned arrays cannot be viewed: make a native, aligned copy.
  if (!npdt.attr("isnative").cast<bool>()) x = x.attr("astype")(npdt.attr("newbyteorder")("="));
  if (!x.attr("flags").attr("aligned").cast<bool>()) x = np.attr("ascontiguousarray")(x);
  py::buffer_info info = x.cast<py::array>().request();
  Shape sizes(info.shape.begin(), info.shape.end());
  Shape strides;
  const auto es = static_cast<std::int64_t>(element_size(*dt));
  for (auto s : info.strides) {
    if (s % es) return from_numpy(np.attr("ascontiguousarray")(x), a);  // strides between elements
    strides.push_back(s / es);
  }
  // Keep the array alive with the storage (released with the GIL, see release_foreign);
  // from_blob checks the sizes and owns the release from here on.
  auto* ref = new py::object(x);
  return from_blob(info.ptr, sizes, strides, *dt, Device::cpu(), false,
                   [ref] { release_foreign([ref] { delete ref; }); });
}

Tensor from_dlpack_obj(py::handle obj) {
  if (PyCapsule_CheckExact(obj.ptr())) return consume_capsule(obj);
  if (!py::hasattr(obj, "__dlpack__"))
    throw_type(Arg{"from_dlpack", "ext_tensor"}, "an object supporting __dlpack__ (or a DLPack capsule)", obj);
  py::object stream = py::none();
  if (py::hasattr(obj, "__dlpack_device__")) {
    auto dev = int_pair(obj.attr("__dlpack_device__")(), Arg{"from_dlpack", "__dlpack_device__()"});
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

namespace {
// numpy typestr ("<f4", "|b1") -> dtype; nullopt for what cudakit has no dtype for.
std::optional<DType> typestr_dtype(const std::string& t) {
  if (t.size() < 3 || (t[0] != '<' && t[0] != '|' && t[0] != '=')) return std::nullopt;
  const std::string k = t.substr(1);
  static const std::pair<const char*, DType> table[] = {
      {"b1", DType::bool_},   {"u1", DType::uint8},     {"i1", DType::int8},
      {"i2", DType::int16},   {"i4", DType::int32},     {"i8", DType::int64},
      {"f2", DType::float16}, {"f4", DType::float32},   {"f8", DType::float64},
      {"c8", DType::complex64}, {"c16", DType::complex128}};
  for (const auto& [name, dt] : table)
    if (k == name) return dt;
  return std::nullopt;
}
}  // namespace

Tensor from_cuda_array_interface(py::handle obj, Arg a) {
  py::object cai = obj.attr("__cuda_array_interface__");
  if (!PyDict_Check(cai.ptr())) throw_type(a, "an object whose __cuda_array_interface__ is a dict", obj);
  py::dict d = py::reinterpret_borrow<py::dict>(cai);
  auto field = [&](const char* key) -> py::object {
    if (!d.contains(key))
      throw_value(a, std::string("has a __cuda_array_interface__ without '") + key + "'");
    return d[key];
  };
  if (d.contains("mask") && !d["mask"].is_none())
    throw_value(a, "is a masked array (__cuda_array_interface__ 'mask'), which cudakit cannot view");
  const std::string typestr = py::str(field("typestr"));
  const auto dtype = typestr_dtype(typestr);
  if (!dtype)
    throw ArgTypeError(where(a) + ": __cuda_array_interface__ typestr '" + typestr +
                       "' has no cudakit dtype (supported: little-endian b1, u1, i1, i2, i4, i8, "
                       "f2, f4, f8, c8, c16)");
  py::object shape_o = field("shape");
  if (!PyTuple_Check(shape_o.ptr())) throw_value(a, "has a __cuda_array_interface__ 'shape' that is not a tuple");
  Shape sizes;
  for (py::handle s : shape_o) sizes.push_back(to_int64(s, a));
  py::object data = field("data");
  if (!PyTuple_Check(data.ptr()) || py::len(data) != 2)
    throw_value(a, "has a __cuda_array_interface__ 'data' that is not a (pointer, read_only) tuple");
  void* ptr = reinterpret_cast<void*>(to_address(py::reinterpret_borrow<py::tuple>(data)[0], a));
  const auto esize = static_cast<std::int64_t>(element_size(*dtype));
  Shape strides;
  py::object st = d.contains("strides") ? py::object(d["strides"]) : py::object(py::none());
  if (st.is_none()) {
    strides = contiguous_strides(sizes);
  } else {
    if (!PyTuple_Check(st.ptr()) || py::len(st) != sizes.size())
      throw_value(a, "has __cuda_array_interface__ 'strides' that do not match its shape");
    for (py::handle s : st) {
      const std::int64_t b = to_int64(s, a);
      if (b % esize) throw_value(a, "has strides that are not a multiple of the element size");
      strides.push_back(b / esize);
    }
  }
  int device = current_device();
  if (ptr) {
    device = device_of_pointer(ptr);
    if (device < 0) throw_value(a, "has a __cuda_array_interface__ pointer that is not device memory");
  }
  // Version 3: the producer's stream, which the consumer must wait for (1: legacy default,
  // 2: per-thread default, None: the producer synchronised already).
  if (d.contains("stream") && !d["stream"].is_none()) {
    const std::uint64_t s = to_uint64(d["stream"], a);
    if (s == 0) throw_value(a, "has __cuda_array_interface__ stream 0, which the protocol disallows");
    StreamRef consumer = current_stream(device);
    StreamRef producer = (s == 1 || s == 2) ? StreamRef::default_for(device)
                                            : get_stream_from_external(static_cast<std::uintptr_t>(s), device);
    if (!(producer == consumer)) consumer.wait(producer);
  }
  auto* ref = new py::object(py::reinterpret_borrow<py::object>(obj));
  return from_blob(ptr, sizes, strides, *dtype, Device::cuda(device), false,
                   [ref] { release_foreign([ref] { delete ref; }); });
}

}  // namespace cudakit::python
