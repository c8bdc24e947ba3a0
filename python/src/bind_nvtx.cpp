// cudakit._C._nvtx: torch.cuda.nvtx's calls plus domains, colours, categories and payloads.
//
// Bound on the CPython API directly (METH_FASTCALL functions and a C `range` type with a
// vectorcall constructor), not through pybind11: annotations sit in hot loops, and pybind11's
// argument loader and overload dispatch cost more per call than the whole NVTX call with no
// tool attached. The fast paths (a message and nothing else) take no lock and allocate
// nothing: the message's UTF-8 is CPython's cached copy (the str's own data when ASCII).
// Keyword attributes take a slower, still lock-free path, except categories and domains given
// by name (a registry lookup under a lock: hoist them with Domain(...) / Domain.category()).
//
// Every other form — keywords, bytes, a wrong type or count — goes to nvtx_args.hpp, the
// argument layer (the Domain type, the keyword attributes, errors through args.hpp in torch's
// style); a slow path here is `try { ... } catch (...) { return fast_path::raise_current(); }`
// around it. Measured with bench/nvtx/bench_nvtx.py (emulated backend, this host's 2 cores):
// moving the errors onto args.hpp left every case within noise (best of 7 x 200k, before /
// after: push+pop 25/25 ns, mark 14/13, with range() 63/66, start+end 34/34, push+pop with
// color/category/payload 62/61, domain= 41/42).
//
// range(msg, *args, **kwargs) formats msg with msg.format(*args, **kwargs) as torch does, but
// skips the call when msg has no brace (then format() returns msg unchanged), and formats once
// when the range is made rather than at each entry. The keywords domain=, color=, category=,
// payload= set the range's attributes and are also passed to format().
#include <pybind11/pybind11.h>

#include <cstring>
#include <new>
#include <string>

#include "fast_path.hpp"
#include "nvtx_args.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

namespace nv = cudakit::nvtx;
using namespace nvtx_args;

PyObject* str_format = nullptr;

// ---- functions: the fast path first, then the argument layer ----

PyObject* py_range_push(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 1 && !kwnames && PyUnicode_CheckExact(args[0])) [[likely]] {
    const char* msg = PyUnicode_AsUTF8AndSize(args[0], nullptr);
    if (!msg) return nullptr;
    return PyLong_FromLong(nv::range_push(msg));
  }
  try {
    Parsed p;
    const char* msg = message_and_keywords("range_push", args, nargs, kwnames, &p);
    if (plain(p)) return PyLong_FromLong(nv::range_push(msg));
    p.attributes.message = msg;
    return PyLong_FromLong(nv::range_push(p.attributes, domain_or_global(p.domain)));
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* py_range_pop(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 0 && !kwnames) [[likely]] return PyLong_FromLong(nv::range_pop());
  try {
    if (nargs != 0) {
      throw_call("range_pop", "takes no positional arguments (" + std::to_string(nargs) +
                                  " given): range_pop(*, domain=None)");
    }
    Parsed p;
    parse_keywords("range_pop", args, kwnames, kDomainOnly, true, &p);
    return PyLong_FromLong(p.domain ? nv::range_pop(*p.domain) : nv::range_pop());
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* py_range_start(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 1 && !kwnames && PyUnicode_CheckExact(args[0])) [[likely]] {
    const char* msg = PyUnicode_AsUTF8AndSize(args[0], nullptr);
    if (!msg) return nullptr;
    return PyLong_FromUnsignedLongLong(nv::range_start(msg));
  }
  try {
    Parsed p;
    const char* msg = message_and_keywords("range_start", args, nargs, kwnames, &p);
    if (plain(p)) return PyLong_FromUnsignedLongLong(nv::range_start(msg));
    p.attributes.message = msg;
    return PyLong_FromUnsignedLongLong(nv::range_start(p.attributes, domain_or_global(p.domain)));
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* py_range_end(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 1 && !kwnames && PyLong_CheckExact(args[0])) [[likely]] {
    unsigned long long id = PyLong_AsUnsignedLongLong(args[0]);
    if (!(id == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
      nv::range_end(id);
      Py_RETURN_NONE;
    }
    PyErr_Clear();  // negative or 2**64 and more: range_id_arg says so
  }
  try {
    if (nargs != 1) {
      throw_call("range_end", "takes 1 positional argument (range_id) but " +
                                  std::to_string(nargs) + " were given");
    }
    const std::uint64_t id = range_id_arg(args[0], Arg{"range_end", "range_id"});
    Parsed p;
    if (kwnames) parse_keywords("range_end", args + nargs, kwnames, kDomainOnly, true, &p);
    if (p.domain) {
      nv::range_end(id, *p.domain);
    } else {
      nv::range_end(id);
    }
    Py_RETURN_NONE;
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* py_mark(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 1 && !kwnames && PyUnicode_CheckExact(args[0])) [[likely]] {
    const char* msg = PyUnicode_AsUTF8AndSize(args[0], nullptr);
    if (!msg) return nullptr;
    nv::mark(msg);
    Py_RETURN_NONE;
  }
  try {
    Parsed p;
    const char* msg = message_and_keywords("mark", args, nargs, kwnames, &p);
    if (plain(p)) {
      nv::mark(msg);
    } else {
      p.attributes.message = msg;
      nv::mark(p.attributes, domain_or_global(p.domain));
    }
    Py_RETURN_NONE;
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* py_depth(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    if (nargs > 1) {
      throw_call("depth", "takes at most 1 argument (domain), " + std::to_string(nargs) +
                              " given");
    }
    Parsed p;
    if (nargs == 1) p.domain = domain_arg(args[0], Arg{"depth", "domain"});
    if (kwnames) parse_keywords("depth", args + nargs, kwnames, kDomainOnly, true, &p);
    return PyLong_FromLong(nv::depth(domain_or_global(p.domain)));
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* py_tool_attached(PyObject*, PyObject*) { return PyBool_FromLong(nv::tool_attached()); }

PyMethodDef functions[] = {
    {"range_push", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(py_range_push)),
     METH_FASTCALL | METH_KEYWORDS,
     "range_push(msg, *, domain=None, color=None, category=None, payload=None) -> int\n\n"
     "Pushes a range onto this thread's stack of nested ranges; returns the zero-based depth "
     "of the range started."},
    {"range_pop", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(py_range_pop)),
     METH_FASTCALL | METH_KEYWORDS,
     "range_pop(*, domain=None) -> int\n\nPops this thread's innermost range; returns the "
     "zero-based depth of the range ended, or -1 when none was open."},
    {"range_start", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(py_range_start)),
     METH_FASTCALL | METH_KEYWORDS,
     "range_start(msg, *, domain=None, color=None, category=None, payload=None) -> int\n\n"
     "Starts a range that may end on another thread; returns its id for range_end()."},
    {"range_end", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(py_range_end)),
     METH_FASTCALL | METH_KEYWORDS,
     "range_end(range_id, *, domain=None)\n\nEnds the range started by range_start()."},
    {"mark", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(py_mark)),
     METH_FASTCALL | METH_KEYWORDS,
     "mark(msg, *, domain=None, color=None, category=None, payload=None)\n\n"
     "An instantaneous event."},
    {"depth", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(py_depth)),
     METH_FASTCALL | METH_KEYWORDS,
     "depth(domain=None) -> int\n\nRanges open on this thread in `domain` (pushed through "
     "cudakit, not yet popped)."},
    {"tool_attached", py_tool_attached, METH_NOARGS,
     "tool_attached() -> bool\n\nWhether an NVTX tool (Nsight Systems, NVTX_INJECTION64_PATH) "
     "receives cudakit's annotations."},
    {nullptr, nullptr, 0, nullptr}};

// ---- range: context manager and decorator ----

struct RangeObject {
  PyObject_HEAD
  PyObject* message;  // the formatted str (owns `utf8`)
  nv::Domain* domain;  // null: default domain
  nv::Attributes attributes;  // attributes.message = UTF-8 of `message`
  bool plain;
};

PyTypeObject RangeType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool has_brace(PyObject* s) {
  Py_ssize_t n = PyUnicode_GET_LENGTH(s);
  if (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND) {
    const void* data = PyUnicode_DATA(s);
    return std::memchr(data, '{', static_cast<std::size_t>(n)) ||
           std::memchr(data, '}', static_cast<std::size_t>(n));
  }
  return PyUnicode_FindChar(s, '{', 0, n, 1) >= 0 || PyUnicode_FindChar(s, '}', 0, n, 1) >= 0;
}

// A message with a brace formatted as torch does: msg.format(*args, **kwargs), with msg as
// self (args[0]) in CPython's vectorcall layout.
py::object format_message(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto formatted = py::reinterpret_steal<py::object>(
      PyObject_VectorcallMethod(str_format, args, static_cast<std::size_t>(nargs), kwnames));
  if (!formatted) throw py::error_already_set();  // IndexError, KeyError, ... as torch
  if (!PyUnicode_Check(formatted.ptr())) {  // a str subclass with its own format()
    throw ArgTypeError(where(Arg{"range", "msg"}) + ": msg.format() returned " +
                       describe(formatted) + ", not a str: pass a plain str");
  }
  return formatted;
}

// range(msg, *args, **kwargs): args[0] is msg, then the format arguments, then the keyword
// values named by kwnames (CPython's vectorcall layout, which is also what str.format takes
// with msg as self). Made at each `with range(...)`: a plain message costs a brace scan and
// the object, nothing else.
PyObject* range_make(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  try {
    if (nargs < 1) throw_call("range", "missing required argument 'msg'");
    PyObject* msg = args[0];
    if (!PyUnicode_Check(msg)) throw_type(Arg{"range", "msg"}, "a str", msg);
    Parsed p;
    if (kwnames) parse_keywords("range", args + nargs, kwnames, kAttributes, false, &p);
    // Without a brace str.format would return the same text: skip the call.
    py::object formatted = has_brace(msg) ? format_message(args, nargs, kwnames)
                                          : py::reinterpret_borrow<py::object>(msg);
    const char* utf8 = utf8_of(formatted.ptr());
    auto* self = PyObject_New(RangeObject, &RangeType);
    if (!self) throw py::error_already_set();
    // PyObject_New leaves the fields raw: construct them in place.
    self->message = formatted.release().ptr();
    self->domain = p.domain;
    new (&self->attributes) nv::Attributes(p.attributes);
    self->attributes.message = utf8;
    self->plain = plain(p);
    return reinterpret_cast<PyObject*>(self);
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* range_vectorcall(PyObject*, PyObject* const* args, std::size_t nargsf,
                           PyObject* kwnames) {
  return range_make(args, PyVectorcall_NARGS(nargsf), kwnames);
}

// range.__new__ for callers that bypass vectorcall (e.g. range.__new__(range, ...)).
PyObject* range_new(PyTypeObject*, PyObject* args, PyObject* kwargs) {
  try {
    VectorArgs v(args, kwargs);
    return range_make(v.stack.data(), v.nargs, v.kwnames.ptr());
  } catch (...) {
    return fast_path::raise_current();
  }
}

void range_dealloc(PyObject* self) {
  Py_XDECREF(reinterpret_cast<RangeObject*>(self)->message);
  PyObject_Free(self);
}

PyObject* range_enter(PyObject* o, PyObject*) {
  auto* self = reinterpret_cast<RangeObject*>(o);
  if (self->plain) {
    nv::range_push(self->attributes.message);
  } else {
    nv::range_push(self->attributes, domain_or_global(self->domain));
  }
  Py_RETURN_NONE;  // as torch's contextmanager, which yields nothing
}

PyObject* range_exit(PyObject* o, PyObject* const*, Py_ssize_t) {
  auto* self = reinterpret_cast<RangeObject*>(o);
  if (self->domain) {
    nv::range_pop(*self->domain);
  } else {
    nv::range_pop();
  }
  Py_RETURN_FALSE;  // exceptions propagate
}

// range(...)(func): the decorator form; cudakit.nvtx._decorate wraps func (functools.wraps),
// pushing and popping this range around each call.
PyObject* range_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  try {
    if ((kwargs && PyDict_GET_SIZE(kwargs)) || PyTuple_GET_SIZE(args) != 1) {
      throw_call("range.__call__", "takes 1 positional argument (the function to decorate): "
                                   "a cudakit.nvtx.range is called only to decorate a function, "
                                   "@range(msg) def f(...)");
    }
    PyObject* func = PyTuple_GET_ITEM(args, 0);
    if (!PyCallable_Check(func)) {
      throw_type(Arg{"range.__call__", "func"},
                 "a callable: a cudakit.nvtx.range is called only to decorate a function, "
                 "@range(msg) def f(...)",
                 func);
    }
    return py::module_::import("cudakit.nvtx").attr("_decorate")(py::handle(self), py::handle(func)).release().ptr();
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* range_repr(PyObject* o) {
  return PyUnicode_FromFormat("cudakit.nvtx.range(%R)", reinterpret_cast<RangeObject*>(o)->message);
}

PyObject* range_get_message(PyObject* o, void*) {
  return Py_NewRef(reinterpret_cast<RangeObject*>(o)->message);
}

PyMethodDef range_methods[] = {
    {"__enter__", range_enter, METH_NOARGS, "pushes the range"},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(range_exit)),
     METH_FASTCALL, "pops the range"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef range_getset[] = {
    {"message", range_get_message, nullptr, "the formatted message", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

void bind(py::module_& m) {
  py::module_ sub = m.def_submodule(
      "_nvtx", "NVTX annotations (see cudakit/nvtx.py for the public module)");
  nvtx_args::init();
  str_format = PyUnicode_InternFromString("format");
  if (!str_format) throw py::error_already_set();

  RangeType.tp_name = "cudakit.nvtx.range";
  RangeType.tp_basicsize = sizeof(RangeObject);
  RangeType.tp_flags = Py_TPFLAGS_DEFAULT;
  RangeType.tp_doc =
      "range(msg, *args, domain=None, color=None, category=None, payload=None, **kwargs)\n\n"
      "Context manager / decorator that pushes an NVTX range at the beginning of its scope and "
      "pops it at the end. Extra arguments are passed to msg.format().";
  RangeType.tp_new = range_new;
  RangeType.tp_vectorcall = range_vectorcall;
  RangeType.tp_dealloc = range_dealloc;
  RangeType.tp_call = range_call;
  RangeType.tp_repr = range_repr;
  RangeType.tp_methods = range_methods;
  RangeType.tp_getset = range_getset;
  if (PyType_Ready(&RangeType) < 0) throw py::error_already_set();

  if (PyModule_AddFunctions(sub.ptr(), functions) < 0) throw py::error_already_set();
  if (PyModule_AddFunctions(sub.ptr(), module_functions) < 0) throw py::error_already_set();
  sub.attr("Domain") = py::handle(reinterpret_cast<PyObject*>(&DomainType));
  sub.attr("range") = py::handle(reinterpret_cast<PyObject*>(&RangeType));
  // Domain objects create their NVTX handle on first use, so importing cudakit leaves NVTX (and
  // any tool) uninitialised.
  sub.attr("global_domain") = py::reinterpret_steal<py::object>(wrap_domain(nv::Domain::global()));
  sub.attr("cudakit_domain") =
      py::reinterpret_steal<py::object>(wrap_domain(nv::Domain::cudakit()));
}

Registrar reg("nvtx", order::nvtx, bind);

}  // namespace
}  // namespace cudakit::python
