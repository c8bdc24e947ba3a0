// Hand-written CPython functions in front of pybind11 ones. pybind11's dispatcher (argument
// tuple, keyword matching, overload resolution, the self caster) costs 0.1-1 us per call;
// where that is over a call's budget (pinned empty() in loops, CUDAGraph.replay), a
// METH_FASTCALL / METH_NOARGS function handles the common form and the pybind11 function
// stays the reference for every other form. These helpers are what each such function
// needs besides its own fast path: installing it, reaching the C++ object, raising errors
// through the one exception table (errors.hpp).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <string>

#include "errors.hpp"

namespace cudakit::python::fast_path {
namespace py = pybind11;

// Makes `def` the module function m.<def.ml_name>, in front of the pybind11 function of that
// name, and returns that pybind11 function (a leaked reference, so it is never released
// during interpreter teardown) for the fast function to hand other forms to. The fast
// function gets the pybind11 function's docstring (signatures included); the pybind11 one
// stays reachable as m._<name>_pybind11 (tests and benchmarks compare the two).
inline PyObject* front_function(py::module_& m, PyMethodDef& def) {
  py::object slow = m.attr(def.ml_name);
  // Leaked with the function object, which lives until the interpreter ends.
  def.ml_doc = (new std::string(py::str(slow.attr("__doc__"))))->c_str();
  PyObject* fn = PyCFunction_NewEx(&def, nullptr, m.attr("__name__").ptr());
  if (!fn) throw py::error_already_set();
  m.attr(("_" + std::string(def.ml_name) + "_pybind11").c_str()) = slow;
  m.attr(def.ml_name) = py::reinterpret_steal<py::object>(fn);
  return slow.release().ptr();
}

// Makes `def` the method cls.<def.ml_name>: a method descriptor, so CPython has checked
// self's type before the call.
inline void add_method(py::handle cls, PyMethodDef& def) {
  PyObject* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &def);
  if (!descr) throw py::error_already_set();
  cls.attr(def.ml_name) = py::reinterpret_steal<py::object>(descr);
}

// The C++ object of `self`, an instance of a pybind11 class holding a T (a method added
// with add_method to that class); nullptr when its __init__ has not run.
template <class T>
T* held(PyObject* self) noexcept {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  void* value = inst->simple_layout ? inst->simple_value_holder[0]
                                    : py::detail::values_and_holders(inst).begin()->value_ptr();
  return static_cast<T*>(value);
}

// Raises the C++ exception in flight as a pybind11 function would (the one exception
// table): `catch (...) { return fast_path::raise_current(); }`. Needs the GIL.
inline PyObject* raise_current() noexcept { return set_python_error(std::current_exception()); }

}  // namespace cudakit::python::fast_path
