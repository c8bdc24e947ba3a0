#include "nvtx_args.hpp"

#include <string>

#include "cudakit/error.hpp"
#include "fast_path.hpp"

namespace cudakit::python::nvtx_args {
namespace {

// Interned keyword names (compared by pointer first: call-site keywords are interned).
PyObject* kw_msg = nullptr;
PyObject* kw_domain = nullptr;
PyObject* kw_color = nullptr;
PyObject* kw_category = nullptr;
PyObject* kw_payload = nullptr;

bool kw_is(PyObject* name, PyObject* interned) {
  return name == interned || PyUnicode_Compare(name, interned) == 0;
}

std::string repr(PyObject* o) { return py::repr(py::handle(o)).cast<std::string>(); }

bool is_plain_int(PyObject* o) { return PyLong_Check(o) && !PyBool_Check(o); }

// Binds positional-or-keyword parameters `names` (the first `required` must be given) as
// CPython binds a def's, with CPython's messages for a call of the wrong shape.
void bind_args(const char* fn, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
               const char* const* names, Py_ssize_t n, Py_ssize_t required, PyObject** out) {
  if (nargs > n) {
    throw_call(fn, "takes " + (required == n ? "" : "from " + std::to_string(required) + " to ") +
                       std::to_string(n) + " positional arguments but " + std::to_string(nargs) +
                       " were given");
  }
  for (Py_ssize_t i = 0; i < n; ++i) out[i] = i < nargs ? args[i] : nullptr;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, k);
    Py_ssize_t i = 0;
    while (i < n && PyUnicode_CompareWithASCIIString(name, names[i]) != 0) ++i;
    if (i == n) throw_call(fn, "got an unexpected keyword argument " + repr(name));
    if (out[i]) throw_call(fn, "got multiple values for argument '" + std::string(names[i]) + "'");
    out[i] = args[nargs + k];
  }
  for (Py_ssize_t i = 0; i < required; ++i) {
    if (!out[i]) throw_call(fn, "missing required argument '" + std::string(names[i]) + "'");
  }
}

// Category ids are NVTX's uint32; 0 means "no category". `o` is an int (checked by the caller).
std::uint32_t category_id(PyObject* o, Arg a) {
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if ((v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) || v > 0xFFFFFFFFull) {
    PyErr_Clear();
    throw_value(a, "is out of range: " + repr(o) + " is not an id 0 to 2**32-1 (0: no category)");
  }
  return static_cast<std::uint32_t>(v);
}

// A name that must not be empty (domains, categories).
const char* name_arg(PyObject* o, Arg a, const char* empty_fix) {
  if (!PyUnicode_Check(o)) throw_type(a, "a str", o);
  const char* utf8 = utf8_of(o);
  if (!*utf8) throw_value(a, std::string("must be a non-empty str") + empty_fix);
  return utf8;
}

nv::Domain& named_domain(PyObject* name, Arg a) {
  return nv::Domain::get(
      name_arg(name, a, ": NVTX's default domain is cudakit.nvtx.global_domain (or domain=None)"));
}

// ---- attribute keywords ----

nv::Color color_arg(PyObject* o, Arg a) {
  if (PyUnicode_Check(o)) {
    const char* utf8 = utf8_of(o);
    return with_context(a, [&] { return nv::Color::parse(utf8); });
  }
  if (is_plain_int(o)) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if ((v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) || v > 0xFFFFFFFFull) {
      PyErr_Clear();
      throw_value(a, "is out of range: " + repr(o) + " is not 0xRRGGBB or 0xAARRGGBB");
    }
    // 0xRRGGBB is opaque; an explicit alpha byte is kept.
    return nv::Color{v <= 0xFFFFFFull ? static_cast<std::uint32_t>(0xFF000000u | v)
                                      : static_cast<std::uint32_t>(v)};
  }
  if (PyTuple_Check(o) && (PyTuple_GET_SIZE(o) == 3 || PyTuple_GET_SIZE(o) == 4)) {
    unsigned c[4] = {0, 0, 0, 255};  // r, g, b, a
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
      PyObject* item = PyTuple_GET_ITEM(o, i);
      long v = is_plain_int(item) ? PyLong_AsLong(item) : -1;
      if (v < 0 || v > 255) {
        PyErr_Clear();
        throw_value(a, "is not a colour: " + repr(o) +
                           ": tuple items must be ints 0..255, (r, g, b) or (r, g, b, a)");
      }
      c[i] = static_cast<unsigned>(v);
    }
    return nv::Color{(c[3] << 24) | (c[0] << 16) | (c[1] << 8) | c[2]};
  }
  throw_type(a, "an int 0xRRGGBB / 0xAARRGGBB, a name or '#RRGGBB' str, or an (r, g, b[, a]) tuple",
             o);
}

nv::Payload payload_arg(PyObject* o, Arg a) {
  if (PyFloat_Check(o)) return nv::Payload(PyFloat_AS_DOUBLE(o));
  if (!is_plain_int(o)) throw_type(a, "an int or a float", o);
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow == 0) {
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return nv::Payload(static_cast<std::int64_t>(v));
  }
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
      return nv::Payload(static_cast<std::uint64_t>(u));
    }
    PyErr_Clear();
  }
  throw_value(a, "is out of range: " + repr(o) + " does not fit in 64 bits (int64 or uint64)");
}

std::uint32_t category_arg(PyObject* o, nv::Domain* domain, Arg a) {
  if (PyUnicode_Check(o)) {
    // Registered in the call's domain on first use (a lookup under the registry's lock).
    return domain_or_global(domain).category(name_arg(o, a, " (a category name)"));
  }
  if (!is_plain_int(o)) throw_type(a, "an int id or a str name", o);
  return category_id(o, a);
}

// ---- Domain ----

PyObject* domain_new(PyTypeObject*, PyObject* args, PyObject* kwargs) {
  try {
    VectorArgs v(args, kwargs);
    static const char* const names[] = {"name"};
    PyObject* name = nullptr;
    bind_args("Domain", v.stack.data(), v.nargs, v.kwnames.ptr(), names, 1, 1, &name);
    PyObject* r = wrap_domain(named_domain(name, Arg{"Domain", "name"}));
    if (!r) throw py::error_already_set();
    return r;
  } catch (...) {
    return fast_path::raise_current();
  }
}

nv::Domain& self_domain(PyObject* self) { return *reinterpret_cast<DomainObject*>(self)->domain; }

PyObject* domain_repr(PyObject* self) {
  const nv::Domain& d = self_domain(self);
  if (d.name().empty()) return PyUnicode_FromString("cudakit.nvtx.Domain(<global>)");
  return PyUnicode_FromFormat("cudakit.nvtx.Domain('%s')", d.name().c_str());
}

PyObject* domain_richcompare(PyObject* a, PyObject* b, int op) {
  if (!PyObject_TypeCheck(b, &DomainType) || (op != Py_EQ && op != Py_NE)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  return PyBool_FromLong((op == Py_EQ) == (&self_domain(a) == &self_domain(b)));
}

Py_hash_t domain_hash(PyObject* self) {
  auto h = static_cast<Py_hash_t>(reinterpret_cast<std::uintptr_t>(&self_domain(self)) >> 4);
  return h == -1 ? -2 : h;  // -1 means "error" to CPython
}

PyObject* domain_get_name(PyObject* self, void*) {
  const std::string& n = self_domain(self).name();
  return PyUnicode_FromStringAndSize(n.data(), static_cast<Py_ssize_t>(n.size()));
}

PyObject* domain_category(PyObject* self, PyObject* name) {
  try {
    const char* utf8 = name_arg(name, Arg{"Domain.category", "name"}, " (the category's name)");
    return PyLong_FromUnsignedLong(self_domain(self).category(utf8));
  } catch (...) {
    return fast_path::raise_current();
  }
}

// Domain.name_category and the module's name_category (fn names the one called).
void name_category(const char* fn, nv::Domain& d, PyObject* category, PyObject* name) {
  const Arg ca{fn, "category"};
  // Only an id: category_arg's "or a str name" is for the ranges' category= argument.
  if (!is_plain_int(category)) {
    throw_type(ca,
               PyUnicode_Check(category)
                   ? "an int id (name_category gives a name to a numeric id; for the id of a "
                     "named category use Domain.category(name), or pass the name as category= "
                     "directly)"
                   : "an int id",
               category);
  }
  const std::uint32_t id = category_id(category, ca);
  if (id == 0) throw_value(ca, "must not be 0: id 0 means 'no category'; use an id from 1 to 2**32-1");
  d.name_category(id, name_arg(name, Arg{fn, "name"}, " (the name tools show)"));
}

PyObject* domain_name_category(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  try {
    if (nargs != 2) {
      throw_call("Domain.name_category", "takes 2 positional arguments (category, name) but " +
                                              std::to_string(nargs) + " were given");
    }
    name_category("Domain.name_category", self_domain(self), args[0], args[1]);
    Py_RETURN_NONE;
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyObject* module_name_category(PyObject*, PyObject* const* args, Py_ssize_t nargs,
                               PyObject* kwnames) {
  try {
    static const char* const names[] = {"category", "name", "domain"};
    PyObject* a[3];
    bind_args("name_category", args, nargs, kwnames, names, 3, 2, a);
    nv::Domain* d = a[2] ? domain_arg(a[2], Arg{"name_category", "domain"}) : nullptr;
    name_category("name_category", domain_or_global(d), a[0], a[1]);
    Py_RETURN_NONE;
  } catch (...) {
    return fast_path::raise_current();
  }
}

PyMethodDef domain_methods[] = {
    {"category", domain_category, METH_O,
     "category(name) -> int: the id of a named category in this domain (assigned on first use)"},
    {"name_category", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(domain_name_category)),
     METH_FASTCALL, "name_category(category, name): names category id `category` for tools"},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef domain_getset[] = {
    {"name", domain_get_name, nullptr, "the domain's name ('' for NVTX's default domain)",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

void intern(PyObject** slot, const char* text) {
  *slot = PyUnicode_InternFromString(text);
  if (!*slot) throw py::error_already_set();
}

}  // namespace

PyTypeObject DomainType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyMethodDef module_functions[] = {
    {"name_category",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(module_name_category)),
     METH_FASTCALL | METH_KEYWORDS,
     "name_category(category, name, domain=None)\n\nNames category id `category` for tools, in "
     "`domain` (a Domain, a name, or None: the default domain)."},
    {nullptr, nullptr, 0, nullptr}};

PyObject* wrap_domain(nv::Domain& d) {
  auto* o = PyObject_New(DomainObject, &DomainType);
  if (o) o->domain = &d;
  return reinterpret_cast<PyObject*>(o);
}

void init() {
  intern(&kw_msg, "msg");
  intern(&kw_domain, "domain");
  intern(&kw_color, "color");
  intern(&kw_category, "category");
  intern(&kw_payload, "payload");

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
}

// ---- values ----

const char* utf8_of(PyObject* str) {
  const char* utf8 = PyUnicode_AsUTF8AndSize(str, nullptr);
  if (!utf8) throw py::error_already_set();
  return utf8;
}

const char* message_arg(PyObject* msg, Arg a) {
  if (PyUnicode_Check(msg)) [[likely]] return utf8_of(msg);
  if (PyBytes_Check(msg)) return PyBytes_AS_STRING(msg);
  throw_type(a, "a str (or bytes)", msg);
}

nv::Domain* domain_arg(PyObject* o, Arg a) {
  if (o == Py_None) return nullptr;
  if (Py_IS_TYPE(o, &DomainType)) return reinterpret_cast<DomainObject*>(o)->domain;
  if (PyUnicode_Check(o)) return &named_domain(o, a);
  throw_type(a, "a cudakit.nvtx.Domain, a str or None", o);
}

std::uint64_t range_id_arg(PyObject* o, Arg a) {
  if (!is_plain_int(o)) throw_type(a, "the int returned by range_start()", o);
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw_value(a, "is not an id from range_start(): " + repr(o) + " (ids are ints 0 to 2**64-1)");
  }
  return v;
}

// ---- keywords ----

void parse_keywords(const char* fn, PyObject* const* values, PyObject* kwnames, unsigned allowed,
                    bool strict, Parsed* out) {
  PyObject* category = nullptr;
  PyObject* color = nullptr;
  PyObject* payload = nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, i);
    PyObject* value = values[i];
    if (kw_is(name, kw_domain)) {
      out->domain = domain_arg(value, Arg{fn, "domain"});
    } else if ((allowed & kAttributes) && kw_is(name, kw_color)) {
      color = value;
    } else if ((allowed & kAttributes) && kw_is(name, kw_category)) {
      category = value;
    } else if ((allowed & kAttributes) && kw_is(name, kw_payload)) {
      payload = value;
    } else if ((allowed & kMsg) && kw_is(name, kw_msg)) {
      out->msg = value;
    } else if (strict) {
      throw_call(fn, "got an unexpected keyword argument " + repr(name));
    }
  }
  nv::Attributes& a = out->attributes;
  if (color && color != Py_None) {
    a.color = color_arg(color, Arg{fn, "color"});
    out->has_attributes = true;
  }
  if (payload && payload != Py_None) {
    a.payload = payload_arg(payload, Arg{fn, "payload"});
    out->has_attributes = true;
  }
  if (category && category != Py_None) {  // after domain=: a name registers in that domain
    a.category = category_arg(category, out->domain, Arg{fn, "category"});
    out->has_attributes = true;
  }
}

const char* message_and_keywords(const char* fn, PyObject* const* args, Py_ssize_t nargs,
                                 PyObject* kwnames, Parsed* p) {
  if (nargs > 1) {
    throw_call(fn, "takes 1 positional argument (msg) but " + std::to_string(nargs) +
                       " were given");
  }
  if (kwnames) parse_keywords(fn, args + nargs, kwnames, kAttributes | kMsg, true, p);
  if (nargs == 1 && p->msg) throw_call(fn, "got multiple values for argument 'msg'");
  PyObject* msg = nargs == 1 ? args[0] : p->msg;
  if (!msg) throw_call(fn, "missing required argument 'msg'");
  return message_arg(msg, Arg{fn, "msg"});
}

VectorArgs::VectorArgs(PyObject* args, PyObject* kwargs) : nargs(PyTuple_GET_SIZE(args)) {
  const Py_ssize_t nkw = kwargs ? PyDict_GET_SIZE(kwargs) : 0;
  stack.resize(static_cast<std::size_t>(nargs + nkw));
  for (Py_ssize_t i = 0; i < nargs; ++i) stack[i] = PyTuple_GET_ITEM(args, i);
  if (nkw == 0) return;
  kwnames = py::reinterpret_steal<py::object>(PyTuple_New(nkw));
  if (!kwnames) throw py::error_already_set();
  Py_ssize_t pos = 0, i = 0;
  PyObject *k, *v;
  while (PyDict_Next(kwargs, &pos, &k, &v)) {
    PyTuple_SET_ITEM(kwnames.ptr(), i, Py_NewRef(k));
    stack[nargs + i] = v;
    ++i;
  }
}

}  // namespace cudakit::python::nvtx_args
