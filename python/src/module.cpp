// cudakit._C: runs every registered binding in order and maps C++ exceptions onto Python
// exceptions with torch.cuda's names.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <vector>

#include "args.hpp"
#include "cudakit/error.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

struct Entry {
  const char* name;
  int order;
  BindFn fn;
};
std::vector<Entry>& entries() {
  static std::vector<Entry> e;
  return e;
}

}  // namespace

Registrar::Registrar(const char* name, int order, BindFn fn) {
  entries().push_back({name, order, fn});
}

}  // namespace cudakit::python

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "cudakit native core (see cudakit/__init__.py for the public API)";

  // Exceptions: AcceleratorError(RuntimeError) and OutOfMemoryError(RuntimeError), as torch.
  static py::exception<cudakit::AcceleratorError> accel_exc(m, "AcceleratorError",
                                                            PyExc_RuntimeError);
  static py::exception<cudakit::OutOfMemoryError> oom_exc(m, "OutOfMemoryError",
                                                          PyExc_RuntimeError);
  // A wrong-type argument (args.hpp): TypeError as in torch, and ValueError, cudakit's class
  // for bad input (which such arguments raised before the argument layer existed).
  static py::handle arg_type_exc = [&] {
    py::tuple bases = py::make_tuple(py::handle(PyExc_TypeError), py::handle(PyExc_ValueError));
    PyObject* cls = PyErr_NewExceptionWithDoc(
        "cudakit._C.ArgumentTypeError",
        "An argument of the wrong type: a TypeError that is also a ValueError.", bases.ptr(), nullptr);
    if (!cls) throw py::error_already_set();
    m.add_object("ArgumentTypeError", py::handle(cls));
    return py::handle(cls);
  }();
  // An unknown name (cudakit::KeyError, e.g. a sleep-pool tag): KeyError, as a dict lookup
  // raises, and ValueError, the class of cudakit's other bad-argument errors.
  static py::handle key_exc = [&] {
    py::tuple bases = py::make_tuple(py::handle(PyExc_KeyError), py::handle(PyExc_ValueError));
    PyObject* cls = PyErr_NewExceptionWithDoc(
        "cudakit._C.KeyNotFoundError",
        "An unknown name (a sleep-pool tag, ...): a KeyError that is also a ValueError.",
        bases.ptr(), nullptr);
    if (!cls) throw py::error_already_set();
    m.add_object("KeyNotFoundError", py::handle(cls));
    return py::handle(cls);
  }();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const cudakit::python::ArgTypeError& e) {
      PyErr_SetString(arg_type_exc.ptr(), e.what());
    } catch (const cudakit::OutOfMemoryError& e) {
      py::object exc = py::reinterpret_borrow<py::object>(oom_exc.ptr())(e.what());
      exc.attr("device") = e.device();
      exc.attr("requested_bytes") = e.requested_bytes();
      exc.attr("free_bytes") = e.free_bytes();
      exc.attr("total_bytes") = e.total_bytes();
      exc.attr("code") = e.code();
      PyErr_SetObject(oom_exc.ptr(), exc.ptr());
    } catch (const cudakit::AcceleratorError& e) {
      py::object exc = py::reinterpret_borrow<py::object>(accel_exc.ptr())(e.what());
      exc.attr("code") = e.code();
      exc.attr("code_name") = e.code_name();
      PyErr_SetObject(accel_exc.ptr(), exc.ptr());
    } catch (const cudakit::IoError& e) {
      // OSError(errno, strerror, filename) picks the errno's subclass (FileNotFoundError, ...).
      py::object exc = py::reinterpret_borrow<py::object>(PyExc_OSError)(
          e.error_number(), e.what(), e.path());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    } catch (const cudakit::KeyError& e) {
      PyErr_SetString(key_exc.ptr(), e.what());
    } catch (const cudakit::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const cudakit::NotSupportedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const cudakit::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  auto& list = cudakit::python::entries();
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const auto& e : list) e.fn(m);
}
