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
// range(msg, *args, **kwargs) formats msg with msg.format(*args, **kwargs) as torch does, but
// skips the call when msg has no brace (then format() returns msg unchanged), and formats once
// when the range is made rather than at each entry. The keywords domain=, color=, category=,
// payload= set the range's attributes and are also passed to format().
#include <pybind11/pybind11.h>

#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cudakit/error.hpp"
#include "cudakit/nvtx.hpp"
#include "errors.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

namespace nv = cudakit::nvtx;

// Interned keyword names (compared by pointer first: call-site keywords are interned).
PyObject* kw_msg = nullptr;
PyObject* kw_domain = nullptr;
PyObject* kw_color = nullptr;
PyObject* kw_category = nullptr;
PyObject* kw_payload = nullptr;
PyObject* str_format = nullptr;

bool kw_is(PyObject* name, PyObject* interned) {
  return name == interned || PyUnicode_Compare(name, interned) == 0;
}

// Sets a Python exception from the C++ exception in flight (slow paths only), with the one
// table every binding uses (errors.hpp).
void set_error_from_current() { set_python_error(std::current_exception()); }

const char* type_name(PyObject* o) { return Py_TYPE(o)->tp_name; }

// NUL-terminated UTF-8 of a str (CPython's cached copy) or the bytes of a bytes object.
const char* message_utf8(const char* fn, PyObject* msg) {
  if (PyUnicode_Check(msg)) [[likely]] return PyUnicode_AsUTF8AndSize(msg, nullptr);
  if (PyBytes_Check(msg)) return PyBytes_AS_STRING(msg);
  PyErr_Format(PyExc_TypeError, "%s(): msg must be a str, got %s", fn, type_name(msg));
  return nullptr;
}

// ---- Domain objects ----

struct DomainObject {
  PyObject_HEAD
  nv::Domain* domain;
};

PyTypeObject DomainType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* wrap_domain(nv::Domain& d) {
  auto* o = PyObject_New(DomainObject, &DomainType);
  if (o) o->domain = &d;
  return reinterpret_cast<PyObject*>(o);
}

PyObject* domain_new(PyTypeObject*, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"name", nullptr};
  PyObject* name = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U:Domain", const_cast<char**>(names), &name)) {
    return nullptr;
  }
  const char* utf8 = PyUnicode_AsUTF8AndSize(name, nullptr);
  if (!utf8) return nullptr;
  try {
    return wrap_domain(nv::Domain::get(utf8));
  } catch (...) {
    set_error_from_current();
    return nullptr;
  }
}

PyObject* domain_repr(PyObject* self) {
  const nv::Domain* d = reinterpret_cast<DomainObject*>(self)->domain;
  if (d->name().empty()) return PyUnicode_FromString("cudakit.nvtx.Domain(<global>)");
  return PyUnicode_FromFormat("cudakit.nvtx.Domain('%s')", d->name().c_str());
}

PyObject* domain_richcompare(PyObject* a, PyObject* b, int op) {
  if (!PyObject_TypeCheck(b, &DomainType) || (op != Py_EQ && op != Py_NE)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  bool same = reinterpret_cast<DomainObject*>(a)->domain ==
              reinterpret_cast<DomainObject*>(b)->domain;
  return PyBool_FromLong((op == Py_EQ) == same);
}

Py_hash_t domain_hash(PyObject* self) {
  auto h = static_cast<Py_hash_t>(
      reinterpret_cast<std::uintptr_t>(reinterpret_cast<DomainObject*>(self)->domain) >> 4);
  return h == -1 ? -2 : h;  // -1 means "error" to CPython
}

PyObject* domain_get_name(PyObject* self, void*) {
  const std::string& n = reinterpret_cast<DomainObject*>(self)->domain->name();
  return PyUnicode_FromStringAndSize(n.data(), static_cast<Py_ssize_t>(n.size()));
}

PyObject* domain_category(PyObject* self, PyObject* name) {
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "Domain.category(): name must be a str, got %s",
                 type_name(name));
    return nullptr;
  }
  const char* utf8 = PyUnicode_AsUTF8AndSize(name, nullptr);
  if (!utf8) return nullptr;
  try {
    return PyLong_FromUnsignedLong(reinterpret_cast<DomainObject*>(self)->domain->category(utf8));
  } catch (...) {
    set_error_from_current();
    return nullptr;
  }
}

// Category ids are NVTX's uint32; 0 means "no category".
bool category_id(const char* fn, PyObject* o, std::uint32_t* out) {
  if (PyBool_Check(o) || !PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s(): category must be an int id or a str name, got %s", fn,
                 type_name(o));
    return false;
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if ((v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) || v > 0xFFFFFFFFull) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%s(): category %R is out of range: ids are 0 to 2**32-1 "
                 "(0: none)", fn, o);
    return false;
  }
  *out = static_cast<std::uint32_t>(v);
  return true;
}

PyObject* domain_name_category(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "Domain.name_category() takes (id, name), got %zd arguments",
                 nargs);
    return nullptr;
  }
  std::uint32_t id = 0;
  // Only an id: category_id's "or a str name" is for the ranges' category= argument.
  if (PyBool_Check(args[0]) || !PyLong_Check(args[0])) {
    PyErr_Format(PyExc_TypeError,
                 "name_category(): argument 'category' must be an int id, got %s%s",
                 type_name(args[0]),
                 PyUnicode_Check(args[0])
                     ? " (name_category gives a name to a numeric id; for the id of a named "
                       "category use Domain.category(name), or pass the name as category= "
                       "directly)"
                     : "");
    return nullptr;
  }
  if (!category_id("name_category", args[0], &id)) return nullptr;
  if (!PyUnicode_Check(args[1])) {
    PyErr_Format(PyExc_TypeError, "Domain.name_category(): name must be a str, got %s",
                 type_name(args[1]));
    return nullptr;
  }
  const char* utf8 = PyUnicode_AsUTF8AndSize(args[1], nullptr);
  if (!utf8) return nullptr;
  try {
    reinterpret_cast<DomainObject*>(self)->domain->name_category(id, utf8);
  } catch (...) {
    set_error_from_current();
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef domain_methods[] = {
    {"category", domain_category, METH_O,
     "category(name) -> int: the id of a named category in this domain (assigned on first use)"},
    {"name_category", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(domain_name_category)),
     METH_FASTCALL, "name_category(id, name): names category `id` for tools"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef domain_getset[] = {
    {"name", domain_get_name, nullptr, "the domain's name ('' for NVTX's default domain)",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// domain= accepts a Domain, a name, or None (NVTX's default domain, as torch).
bool resolve_domain(const char* fn, PyObject* o, nv::Domain** out) {
  if (o == Py_None) {
    *out = nullptr;
    return true;
  }
  if (Py_IS_TYPE(o, &DomainType)) {
    *out = reinterpret_cast<DomainObject*>(o)->domain;
    return true;
  }
  if (PyUnicode_Check(o)) {
    const char* utf8 = PyUnicode_AsUTF8AndSize(o, nullptr);
    if (!utf8) return false;
    try {
      *out = &nv::Domain::get(utf8);
      return true;
    } catch (...) {
      set_error_from_current();
      return false;
    }
  }
  PyErr_Format(PyExc_TypeError, "%s(): domain must be a cudakit.nvtx.Domain, a str or None, got %s",
               fn, type_name(o));
  return false;
}

// ---- attribute keywords ----

bool parse_color(const char* fn, PyObject* o, nv::Color* out) {
  if (PyUnicode_Check(o)) {
    const char* utf8 = PyUnicode_AsUTF8AndSize(o, nullptr);
    if (!utf8) return false;
    try {
      *out = nv::Color::parse(utf8);
      return true;
    } catch (...) {
      set_error_from_current();
      return false;
    }
  }
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if ((v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) || v > 0xFFFFFFFFull) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "%s(): color %R is out of range: expected 0xRRGGBB or "
                   "0xAARRGGBB", fn, o);
      return false;
    }
    // 0xRRGGBB is opaque; an explicit alpha byte is kept.
    *out = nv::Color{v <= 0xFFFFFFull ? static_cast<std::uint32_t>(0xFF000000u | v)
                                      : static_cast<std::uint32_t>(v)};
    return true;
  }
  if (PyTuple_Check(o) && (PyTuple_GET_SIZE(o) == 3 || PyTuple_GET_SIZE(o) == 4)) {
    unsigned c[4] = {0, 0, 0, 255};  // r, g, b, a
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
      PyObject* item = PyTuple_GET_ITEM(o, i);
      long v = PyLong_Check(item) && !PyBool_Check(item) ? PyLong_AsLong(item) : -1;
      if (v < 0 || v > 255) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s(): color %R: tuple items must be ints 0..255 "
                     "(r, g, b) or (r, g, b, a)", fn, o);
        return false;
      }
      c[i] = static_cast<unsigned>(v);
    }
    *out = nv::Color{(c[3] << 24) | (c[0] << 16) | (c[1] << 8) | c[2]};
    return true;
  }
  PyErr_Format(PyExc_TypeError, "%s(): color must be an int 0xRRGGBB/0xAARRGGBB, a name or "
               "'#RRGGBB' str, or an (r, g, b[, a]) tuple, got %s", fn, type_name(o));
  return false;
}

bool parse_payload(const char* fn, PyObject* o, nv::Payload* out) {
  if (PyFloat_Check(o)) {
    *out = nv::Payload(PyFloat_AS_DOUBLE(o));
    return true;
  }
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow == 0) {
      if (v == -1 && PyErr_Occurred()) return false;
      *out = nv::Payload(static_cast<std::int64_t>(v));
      return true;
    }
    if (overflow > 0) {
      unsigned long long u = PyLong_AsUnsignedLongLong(o);
      if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
        *out = nv::Payload(static_cast<std::uint64_t>(u));
        return true;
      }
      PyErr_Clear();
    }
    PyErr_Format(PyExc_ValueError, "%s(): payload %R does not fit in 64 bits (int64 or uint64)",
                 fn, o);
    return false;
  }
  PyErr_Format(PyExc_TypeError, "%s(): payload must be an int or a float, got %s", fn,
               type_name(o));
  return false;
}

enum Allowed : unsigned { kDomainOnly = 1, kAttributes = 2, kMsg = 4 };

struct Parsed {
  nv::Domain* domain = nullptr;  // null: NVTX's default domain
  nv::Attributes attributes;
  bool has_attributes = false;
  PyObject* msg = nullptr;  // msg passed by keyword (kMsg)
};

// Reads the keyword arguments. `allowed` says which are accepted; with `strict`, any other
// name is a TypeError (with range(), other names belong to str.format).
bool parse_keywords(const char* fn, PyObject* const* values, PyObject* kwnames, unsigned allowed,
                    bool strict, Parsed* out) {
  PyObject* category = nullptr;
  PyObject* color = nullptr;
  PyObject* payload = nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, i);
    PyObject* value = values[i];
    if (kw_is(name, kw_domain)) {
      if (!resolve_domain(fn, value, &out->domain)) return false;
    } else if ((allowed & kAttributes) && kw_is(name, kw_color)) {
      color = value;
    } else if ((allowed & kAttributes) && kw_is(name, kw_category)) {
      category = value;
    } else if ((allowed & kAttributes) && kw_is(name, kw_payload)) {
      payload = value;
    } else if ((allowed & kMsg) && kw_is(name, kw_msg)) {
      out->msg = value;
    } else if (strict) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", fn, name);
      return false;
    }
  }
  nv::Attributes& a = out->attributes;
  if (color && color != Py_None) {
    if (!parse_color(fn, color, &a.color)) return false;
    out->has_attributes = true;
  }
  if (payload && payload != Py_None) {
    if (!parse_payload(fn, payload, &a.payload)) return false;
    out->has_attributes = true;
  }
  if (category && category != Py_None) {
    if (PyUnicode_Check(category)) {
      const char* utf8 = PyUnicode_AsUTF8AndSize(category, nullptr);
      if (!utf8) return false;
      try {
        nv::Domain& d = out->domain ? *out->domain : nv::Domain::global();
        a.category = d.category(utf8);
      } catch (...) {
        set_error_from_current();
        return false;
      }
    } else if (!category_id(fn, category, &a.category)) {
      return false;
    }
    out->has_attributes = true;
  }
  return true;
}

// Whether a call with these attributes can take the plain nvtx*A path.
bool plain(const Parsed& p) { return !p.domain && !p.has_attributes; }

nv::Domain& domain_or_global(nv::Domain* d) { return d ? *d : nv::Domain::global(); }

// ---- functions ----

// Shared by range_push / range_start / mark: msg as the only positional, or msg=, plus the
// attribute keywords. Returns the message (null on error) and fills `p`.
const char* message_and_keywords(const char* fn, PyObject* const* args, Py_ssize_t nargs,
                                 PyObject* kwnames, Parsed* p) {
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "%s() takes 1 positional argument (msg) but %zd were given",
                 fn, nargs);
    return nullptr;
  }
  if (kwnames && !parse_keywords(fn, args + nargs, kwnames, kAttributes | kMsg, true, p)) {
    return nullptr;
  }
  PyObject* msg = nargs == 1 ? args[0] : p->msg;
  if (nargs == 1 && p->msg) {
    PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument 'msg'", fn);
    return nullptr;
  }
  if (!msg) {
    PyErr_Format(PyExc_TypeError, "%s() missing required argument 'msg'", fn);
    return nullptr;
  }
  return message_utf8(fn, msg);
}

PyObject* py_range_push(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 1 && !kwnames && PyUnicode_CheckExact(args[0])) [[likely]] {
    const char* msg = PyUnicode_AsUTF8AndSize(args[0], nullptr);
    if (!msg) return nullptr;
    return PyLong_FromLong(nv::range_push(msg));
  }
  Parsed p;
  const char* msg = message_and_keywords("range_push", args, nargs, kwnames, &p);
  if (!msg) return nullptr;
  if (plain(p)) return PyLong_FromLong(nv::range_push(msg));
  p.attributes.message = msg;
  return PyLong_FromLong(nv::range_push(p.attributes, domain_or_global(p.domain)));
}

PyObject* py_range_pop(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 0 && !kwnames) [[likely]] return PyLong_FromLong(nv::range_pop());
  if (nargs != 0) {
    PyErr_Format(PyExc_TypeError, "range_pop() takes no positional arguments (%zd given)", nargs);
    return nullptr;
  }
  Parsed p;
  if (!parse_keywords("range_pop", args, kwnames, kDomainOnly, true, &p)) return nullptr;
  return PyLong_FromLong(p.domain ? nv::range_pop(*p.domain) : nv::range_pop());
}

PyObject* py_range_start(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 1 && !kwnames && PyUnicode_CheckExact(args[0])) [[likely]] {
    const char* msg = PyUnicode_AsUTF8AndSize(args[0], nullptr);
    if (!msg) return nullptr;
    return PyLong_FromUnsignedLongLong(nv::range_start(msg));
  }
  Parsed p;
  const char* msg = message_and_keywords("range_start", args, nargs, kwnames, &p);
  if (!msg) return nullptr;
  if (plain(p)) return PyLong_FromUnsignedLongLong(nv::range_start(msg));
  p.attributes.message = msg;
  return PyLong_FromUnsignedLongLong(nv::range_start(p.attributes, domain_or_global(p.domain)));
}

bool range_id(PyObject* o, std::uint64_t* out) {
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (!(v == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
      *out = v;
      return true;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "range_end(): range_id %R is not an id from range_start() "
                 "(ids are ints 0 to 2**64-1)", o);
    return false;
  }
  PyErr_Format(PyExc_TypeError, "range_end(): range_id must be the int returned by "
               "range_start(), got %s", type_name(o));
  return false;
}

PyObject* py_range_end(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError, "range_end() takes 1 positional argument (range_id) but %zd "
                 "were given", nargs);
    return nullptr;
  }
  std::uint64_t id = 0;
  if (!range_id(args[0], &id)) return nullptr;
  if (!kwnames) [[likely]] {
    nv::range_end(id);
    Py_RETURN_NONE;
  }
  Parsed p;
  if (!parse_keywords("range_end", args + nargs, kwnames, kDomainOnly, true, &p)) return nullptr;
  if (p.domain) {
    nv::range_end(id, *p.domain);
  } else {
    nv::range_end(id);
  }
  Py_RETURN_NONE;
}

PyObject* py_mark(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 1 && !kwnames && PyUnicode_CheckExact(args[0])) [[likely]] {
    const char* msg = PyUnicode_AsUTF8AndSize(args[0], nullptr);
    if (!msg) return nullptr;
    nv::mark(msg);
    Py_RETURN_NONE;
  }
  Parsed p;
  const char* msg = message_and_keywords("mark", args, nargs, kwnames, &p);
  if (!msg) return nullptr;
  if (plain(p)) {
    nv::mark(msg);
  } else {
    p.attributes.message = msg;
    nv::mark(p.attributes, domain_or_global(p.domain));
  }
  Py_RETURN_NONE;
}

PyObject* py_depth(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "depth() takes at most 1 argument (domain), %zd given", nargs);
    return nullptr;
  }
  Parsed p;
  if (nargs == 1 && !resolve_domain("depth", args[0], &p.domain)) return nullptr;
  if (kwnames && !parse_keywords("depth", args + nargs, kwnames, kDomainOnly, true, &p)) {
    return nullptr;
  }
  return PyLong_FromLong(nv::depth(domain_or_global(p.domain)));
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

// range(msg, *args, **kwargs): args[0] is msg, then the format arguments, then the keyword
// values named by kwnames (CPython's vectorcall layout, which is also what str.format takes
// with msg as self).
PyObject* range_make(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "range() missing required argument 'msg'");
    return nullptr;
  }
  PyObject* msg = args[0];
  if (!PyUnicode_Check(msg)) {
    PyErr_Format(PyExc_TypeError, "range(): msg must be a str, got %s", type_name(msg));
    return nullptr;
  }
  Parsed p;
  if (kwnames && !parse_keywords("range", args + nargs, kwnames, kAttributes, false, &p)) {
    return nullptr;
  }
  PyObject* formatted;
  if (has_brace(msg)) {
    formatted = PyObject_VectorcallMethod(str_format, args, static_cast<std::size_t>(nargs),
                                          kwnames);
    if (!formatted) return nullptr;
    if (!PyUnicode_Check(formatted)) {
      PyErr_Format(PyExc_TypeError, "range(): msg.format() returned %s, not a str",
                   type_name(formatted));
      Py_DECREF(formatted);
      return nullptr;
    }
  } else {
    formatted = Py_NewRef(msg);  // str.format would return the same text
  }
  const char* utf8 = PyUnicode_AsUTF8AndSize(formatted, nullptr);
  if (!utf8) {
    Py_DECREF(formatted);
    return nullptr;
  }
  auto* self = PyObject_New(RangeObject, &RangeType);
  if (!self) {
    Py_DECREF(formatted);
    return nullptr;
  }
  // PyObject_New leaves the fields raw: construct them in place.
  self->message = formatted;
  self->domain = p.domain;
  new (&self->attributes) nv::Attributes(p.attributes);
  self->attributes.message = utf8;
  self->plain = plain(p);
  return reinterpret_cast<PyObject*>(self);
}

PyObject* range_vectorcall(PyObject*, PyObject* const* args, std::size_t nargsf,
                           PyObject* kwnames) {
  return range_make(args, PyVectorcall_NARGS(nargsf), kwnames);
}

// range.__new__ for callers that bypass vectorcall (e.g. range.__new__(range, ...)).
PyObject* range_new(PyTypeObject*, PyObject* args, PyObject* kwargs) {
  Py_ssize_t nargs = PyTuple_GET_SIZE(args);
  Py_ssize_t nkw = kwargs ? PyDict_GET_SIZE(kwargs) : 0;
  std::vector<PyObject*> stack(static_cast<std::size_t>(nargs + nkw));
  for (Py_ssize_t i = 0; i < nargs; ++i) stack[i] = PyTuple_GET_ITEM(args, i);
  PyObject* kwnames = nullptr;
  if (nkw) {
    kwnames = PyTuple_New(nkw);
    if (!kwnames) return nullptr;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      PyTuple_SET_ITEM(kwnames, i, Py_NewRef(k));
      stack[nargs + i] = v;
      ++i;
    }
  }
  PyObject* r = range_make(stack.data(), nargs, kwnames);
  Py_XDECREF(kwnames);
  return r;
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
  PyObject* func = nullptr;
  if ((kwargs && PyDict_GET_SIZE(kwargs)) || PyTuple_GET_SIZE(args) != 1 ||
      !PyCallable_Check(func = PyTuple_GET_ITEM(args, 0))) {
    PyErr_SetString(PyExc_TypeError,
                    "a cudakit.nvtx.range is called only to decorate a function: "
                    "@range(msg) def f(...)");
    return nullptr;
  }
  PyObject* module = PyImport_ImportModule("cudakit.nvtx");
  if (!module) return nullptr;
  PyObject* decorate = PyObject_GetAttrString(module, "_decorate");
  Py_DECREF(module);
  if (!decorate) return nullptr;
  PyObject* r = PyObject_CallFunctionObjArgs(decorate, self, func, nullptr);
  Py_DECREF(decorate);
  return r;
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

bool intern(PyObject** slot, const char* text) {
  *slot = PyUnicode_InternFromString(text);
  return *slot != nullptr;
}

void bind(py::module_& m) {
  py::module_ sub = m.def_submodule(
      "_nvtx", "NVTX annotations (see cudakit/nvtx.py for the public module)");
  if (!intern(&kw_msg, "msg") || !intern(&kw_domain, "domain") || !intern(&kw_color, "color") ||
      !intern(&kw_category, "category") || !intern(&kw_payload, "payload") ||
      !intern(&str_format, "format")) {
    throw py::error_already_set();
  }

  DomainType.tp_name = "cudakit.nvtx.Domain";
  DomainType.tp_basicsize = sizeof(DomainObject);
  DomainType.tp_flags = Py_TPFLAGS_DEFAULT;
  DomainType.tp_doc =
      "Domain(name): the NVTX domain called `name` (one per name, lives until exit).\n"
      "Ranges, marks and categories of a domain are grouped by tools; each domain has its own "
      "push/pop stack per thread.";
  DomainType.tp_new = domain_new;
  DomainType.tp_dealloc = [](PyObject* o) { PyObject_Free(o); };
  DomainType.tp_repr = domain_repr;
  DomainType.tp_richcompare = domain_richcompare;
  DomainType.tp_hash = domain_hash;
  DomainType.tp_methods = domain_methods;
  DomainType.tp_getset = domain_getset;
  if (PyType_Ready(&DomainType) < 0) throw py::error_already_set();

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
