// The argument layer of cudakit._C._nvtx: what bind_nvtx.cpp's calls take besides their fast
// paths — the Domain type, the domain= / color= / category= / payload= keywords, messages
// and range ids — converted in one place, with every error raised through args.hpp (torch's
// style: "mark(): argument 'color' must be ..., not float (1.5)"; a wrong type is an
// ArgTypeError, an out-of-range value a ValueError; call-shape errors via throw_call).
//
// Split from bind_nvtx.cpp by layer: that file holds the hot calls (range_push / range_pop /
// mark / range: a message and nothing else, no lock, no allocation) and hands everything
// else here. These functions throw C++ exceptions; the CPython functions that call them end
// in `catch (...) { return fast_path::raise_current(); }`. The conversions of a value that
// is accepted stay hand-written on the CPython API (no py::object temporaries): keyword
// attributes are still used per kernel (push+pop with color/category/payload ~85 ns).
//
// Thread-safety: the GIL's caller contract; the only shared state is the interned keyword
// names (set once by init, read-only after) and nvtx::Domain's own locked registry.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "args.hpp"
#include "cudakit/nvtx.hpp"

namespace cudakit::python::nvtx_args {
namespace nv = cudakit::nvtx;

// ---- Domain objects: cudakit.nvtx.Domain, one per name, never freed (as nv::Domain) ----
struct DomainObject {
  PyObject_HEAD
  nv::Domain* domain;
};
extern PyTypeObject DomainType;
PyObject* wrap_domain(nv::Domain& d);  // a new reference, nullptr with a Python error set

// Interns the keyword names and readies DomainType; py::error_already_set on failure.
void init();
// The module functions defined here (for PyModule_AddFunctions; null-terminated):
// name_category(category, name, domain=None), Domain.name_category's sibling.
extern PyMethodDef module_functions[];

// ---- values ----
// The NUL-terminated UTF-8 of a str (CPython's cached copy); py::error_already_set when it
// cannot be encoded (lone surrogates: UnicodeEncodeError, as before the argument layer).
const char* utf8_of(PyObject* str);
// msg of range_push / range_start / mark: a str or bytes.
const char* message_arg(PyObject* msg, Arg a);
// domain=: a Domain, a name (looked up under the registry's lock) or None -> nullptr (NVTX's
// default domain, as torch).
nv::Domain* domain_arg(PyObject* o, Arg a);
// range_end's range_id: the int range_start() returned.
std::uint64_t range_id_arg(PyObject* o, Arg a);

// ---- keywords ----
enum Allowed : unsigned { kDomainOnly = 1, kAttributes = 2, kMsg = 4 };

struct Parsed {
  nv::Domain* domain = nullptr;  // null: NVTX's default domain
  nv::Attributes attributes;
  bool has_attributes = false;
  PyObject* msg = nullptr;  // msg passed by keyword (kMsg); borrowed from the call
};

// Reads a call's keyword arguments (CPython's vectorcall layout: values[i] is named by
// kwnames[i]). `allowed` says which names are taken; with `strict`, any other name is an
// error (range() passes other names to str.format).
void parse_keywords(const char* fn, PyObject* const* values, PyObject* kwnames, unsigned allowed,
                    bool strict, Parsed* out);
// range_push / range_start / mark: msg as the only positional or msg=, plus the attribute
// keywords. Returns the message's UTF-8 and fills `p`.
const char* message_and_keywords(const char* fn, PyObject* const* args, Py_ssize_t nargs,
                                 PyObject* kwnames, Parsed* p);

// Whether a call with these attributes can take the plain nvtx*A path.
inline bool plain(const Parsed& p) { return !p.domain && !p.has_attributes; }
inline nv::Domain& domain_or_global(nv::Domain* d) { return d ? *d : nv::Domain::global(); }

// ---- calls made through tp_new (a tuple and a dict) in the vectorcall layout ----
struct VectorArgs {
  VectorArgs(PyObject* args, PyObject* kwargs);  // py::error_already_set on failure
  std::vector<PyObject*> stack;  // positionals, then keyword values (borrowed)
  Py_ssize_t nargs = 0;
  py::object kwnames;  // a tuple of names, or null when there are no keywords
};

}  // namespace cudakit::python::nvtx_args
