// Stream sanitizer bindings (names prefixed _sanitizer_; python/cudakit/sanitizer.py gives them
// torch.cuda._sanitizer's names): switches, declared accesses, the interpreter's stack hooks,
// warn-mode reports as Python warnings and CUDASanitizerErrors as a Python exception.
#include <Python.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "cudakit/error.hpp"
#include "cudakit/sanitizer.hpp"
#include "cudakit/tensor.hpp"
#include "errors.hpp"
#include "py_stack.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

namespace san = cudakit::sanitizer;

bool interpreter_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Holds the GIL for a scope: already held, taken back (a thread that released it around a
// cudakit call; only when `may_block`), or not at all (ok() false).
class GilIfPossible {
 public:
  explicit GilIfPossible(bool may_block) {
    if (!interpreter_usable()) return;
    if (PyGILState_Check()) {
      ok_ = true;
      return;
    }
    // A thread Python never ran on (a stream worker, a C++ thread) has no stack to show.
    if (!may_block || PyGILState_GetThisThreadState() == nullptr) return;
    state_ = PyGILState_Ensure();
    took_ = ok_ = true;
  }
  ~GilIfPossible() {
    if (took_) PyGILState_Release(state_);
  }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false, took_ = false;
  PyGILState_STATE state_{};
};

// Raw frames (code object, instruction offset), innermost first (py_stack.hpp).
void capture_stack(std::vector<PyFrameRef>& out, bool may_block) {
  GilIfPossible gil(may_block);
  if (gil.ok()) capture_python_frames(out);
}

void symbolize(const PyFrameRef& fr, std::string& file, int& line, std::string& name,
               std::string& source, bool may_block) {
  if (!fr.code) return;
  GilIfPossible gil(may_block);
  if (!gil.ok()) {
    file = "<Python frame: named only on a thread holding the GIL>";
    return;
  }
  python_frame_location(fr, file, line, name);
  try {
    py::object text = py::module_::import("linecache").attr("getline")(file, line);
    source = py::str(text).cast<std::string>();
    const auto b = source.find_first_not_of(" \t"), e = source.find_last_not_of(" \t\r\n");
    source = b == std::string::npos ? std::string() : source.substr(b, e - b + 1);
  } catch (const py::error_already_set&) {
    source.clear();
  }
}

// Warn-mode reports: cudakit.sanitizer.SanitizerWarning from an op (the thread entered from
// Python, possibly without the GIL: taken back); frees on threads without the GIL print.
// A free's report may come from a deallocator that runs while an exception is being raised:
// the interpreter's error state is set aside around the warning and restored.
void report(const std::string& message, bool from_free) {
  GilIfPossible gil(!from_free);
  if (!gil.ok()) {
    std::fprintf(stderr, "cudakit sanitizer warning:\n%s\n", message.c_str());
    return;
  }
  if (!from_free) {
    py::object cls = py::module_::import("cudakit.sanitizer").attr("SanitizerWarning");
    if (PyErr_WarnEx(cls.ptr(), message.c_str(), 1) != 0) throw py::error_already_set();
    return;
  }
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  PyObject* mod = PyImport_ImportModule("cudakit.sanitizer");
  PyObject* cls = mod ? PyObject_GetAttrString(mod, "SanitizerWarning") : nullptr;
  if (!cls || PyErr_WarnEx(cls, message.c_str(), 1) != 0) {
    PyErr_Clear();  // warnings as errors cannot fail a free: print instead
    std::fprintf(stderr, "cudakit sanitizer warning:\n%s\n", message.c_str());
  }
  Py_XDECREF(cls);
  Py_XDECREF(mod);
  PyErr_Restore(type, value, trace);
}

py::dict access_dict(const san::Access& a) {
  py::dict d;
  d["type"] = a.write ? "write" : "read";
  d["stream"] = reinterpret_cast<std::uintptr_t>(a.stream);
  d["device"] = a.device;
  d["operator"] = a.kernel;
  d["aliases"] = a.aliases;
  d["is_output"] = a.is_output;
  d["stack_trace"] = a.stack;
  return d;
}

// ---- declared buffers ----

const char* kBufferKinds =
    "a cudakit.Tensor, an object with __cuda_array_interface__ (CuPy, torch, Numba) or a "
    "(pointer, nbytes) tuple of ints";

// The bytes an array described by __cuda_array_interface__ covers.
san::Buffer from_array_interface(py::handle obj, Arg a) {
  py::dict cai = obj.attr("__cuda_array_interface__");
  if (!cai.contains("data") || !cai.contains("shape") || !cai.contains("typestr"))
    throw_value(a, "has a __cuda_array_interface__ without data, shape or typestr");
  py::tuple data = cai["data"];
  const auto ptr = to_address(data[0], a);
  const std::string typestr = to_string(cai["typestr"], a);
  if (typestr.size() < 3)
    throw_value(a, "has a __cuda_array_interface__ typestr '" + typestr + "' without a size");
  std::int64_t item = 0;
  for (char c : typestr.substr(2)) {
    if (c < '0' || c > '9' || item > (1 << 20)) {
      item = 0;
      break;
    }
    item = item * 10 + (c - '0');
  }
  if (item <= 0)
    throw_value(a, "has a __cuda_array_interface__ typestr '" + typestr + "' without a valid size");
  py::tuple shape = cai["shape"];
  std::vector<std::int64_t> sizes, strides;
  for (auto s : shape) sizes.push_back(to_int64(s, a));
  const bool has_strides = cai.contains("strides") && !cai["strides"].is_none();
  if (has_strides) {
    for (auto s : py::tuple(cai["strides"])) strides.push_back(to_int64(s, a));
  } else {  // C-contiguous
    strides.assign(sizes.size(), item);
    for (std::size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
  }
  std::int64_t lo = 0, hi = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return san::Buffer(nullptr, 0);
    const std::int64_t span = (sizes[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  return san::Buffer(reinterpret_cast<const void*>(ptr + static_cast<std::uintptr_t>(lo)),
                     static_cast<std::size_t>(hi + item - lo));
}

san::Buffer buffer_arg(py::handle v, Arg a) {
  if (py::isinstance<Tensor>(v)) return san::Buffer(v.cast<const Tensor&>());
  if (py::hasattr(v, "__cuda_array_interface__")) return from_array_interface(v, a);
  if (py::isinstance<py::tuple>(v) && py::len(v) == 2) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(v);
    return san::Buffer(reinterpret_cast<const void*>(to_address(t[0], a)), to_size(t[1], a));
  }
  throw_type(a, kBufferKinds, v);
}

// reads= / writes=: one buffer, a list or tuple of buffers, or a dict {name: buffer} (names
// label the buffers in reports, as torch's argument names).
void buffers_arg(py::handle v, Arg a, std::vector<san::Buffer>& out, std::vector<std::string>& names) {
  auto add = [&](py::handle item, const std::string* name) {
    san::Buffer b = buffer_arg(item, a);
    names.push_back(name ? *name : std::string());
    out.push_back(b);
  };
  if (v.is_none()) return;
  if (py::isinstance<py::dict>(v)) {
    for (auto [k, item] : py::reinterpret_borrow<py::dict>(v)) {
      const std::string name = to_string(k, a);
      add(item, &name);
    }
  } else if (py::isinstance<py::list>(v) ||
             (py::isinstance<py::tuple>(v) &&
              !(py::len(v) == 2 && is_int(py::reinterpret_borrow<py::tuple>(v)[0])))) {
    for (auto item : v) add(item, nullptr);
  } else {
    add(v, nullptr);
  }
}

void bind(py::module_& m) {
  san::set_python_hooks(&capture_stack, &symbolize);
  san::set_warning_handler(&report);

  m.def("_sanitizer_enable", [](py::handle on_race) {
    const std::string mode = to_string(on_race, Arg{"enable_cuda_sanitizer", "on_race"});
    if (mode != "raise" && mode != "warn")
      throw_value(Arg{"enable_cuda_sanitizer", "on_race"},
                  "must be 'raise' or 'warn', got '" + mode + "'");
    san::enable(mode == "raise" ? san::OnRace::raise : san::OnRace::warn);
  }, py::arg("on_race") = "raise");
  m.def("_sanitizer_disable", &san::disable);
  m.def("_sanitizer_is_enabled", &san::is_enabled);
  m.def("_sanitizer_on_race", [] { return san::on_race() == san::OnRace::raise ? "raise" : "warn"; });
  m.def("_sanitizer_stats", [] {
    const san::Stats s = san::stats();
    py::dict d;
    d["accesses"] = s.accesses;
    d["races"] = s.races;
    d["allocations"] = s.allocations;
    d["streams"] = s.streams;
    d["captured"] = s.captured;
    return d;
  });
  m.def("_sanitizer_declare", [](py::handle reads, py::handle writes, py::handle stream,
                                 py::handle kernel) {
    const char* fn = "sanitizer.access";
    std::vector<san::Buffer> r, w;
    std::vector<std::string> rn, wn;
    buffers_arg(reads, Arg{fn, "reads"}, r, rn);
    buffers_arg(writes, Arg{fn, "writes"}, w, wn);
    for (std::size_t i = 0; i < r.size(); ++i) r[i].name = rn[i].empty() ? nullptr : rn[i].c_str();
    for (std::size_t i = 0; i < w.size(); ++i) w[i].name = wn[i].empty() ? nullptr : wn[i].c_str();
    std::optional<StreamRef> s;
    if (!stream.is_none()) s = stream_arg(stream, Arg{fn, "stream"});
    const std::string name = kernel.is_none() ? std::string("foreign kernel")
                                              : to_string(kernel, Arg{fn, "name"});
    san::declare_access(r, w, s, name);
  }, py::arg("reads"), py::arg("writes"), py::arg("stream") = py::none(),
     py::arg("name") = py::none());
}

Registrar reg("sanitizer", order::sanitizer, bind);

}  // namespace

// The CUDASanitizerErrors entry of the exception table (errors.hpp): the Python module builds
// cudakit.sanitizer.CUDASanitizerErrors from plain dicts, so it carries torch's attributes.
void set_sanitizer_error(const san::CUDASanitizerErrors& e) {
  py::list errors;
  for (const auto& u : e.errors()) {
    py::dict d;
    d["data_ptr"] = u.data_ptr;
    d["allocation"] = u.allocation;
    d["allocation_size"] = u.allocation_size;
    d["overlap"] = py::make_tuple(u.overlap_begin, u.overlap_end);
    d["current_access"] = access_dict(u.current);
    d["previous_access"] = access_dict(u.previous);
    d["allocation_stack_trace"] = u.allocation_stack.empty() ? py::object(py::none())
                                                             : py::str(u.allocation_stack);
    d["message"] = u.message();
    errors.append(d);
  }
  py::object exc = py::module_::import("cudakit.sanitizer").attr("_errors_from_native")(errors);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

}  // namespace cudakit::python
