// cudakit._C: runs every registered binding in order and maps C++ exceptions onto Python
// exceptions with torch.cuda's names.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <vector>

#include "args.hpp"
#include "cudakit/error.hpp"
#include "cudakit/nccl.hpp"
#include "errors.hpp"
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

// The Python exception types the table raises (made once, when _C is imported).
py::handle g_accel_exc, g_oom_exc, g_arg_type_exc, g_nccl_exc, g_key_exc;

// The table of errors.hpp, most derived type first. False when `p` is none of cudakit's
// exceptions (pybind11 maps it then).
bool set_cudakit_error(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const ArgTypeError& e) {
    PyErr_SetString(g_arg_type_exc.ptr(), e.what());
  } catch (const sanitizer::CUDASanitizerErrors& e) {
    set_sanitizer_error(e);
  } catch (const nccl::NcclError& e) {
    py::object exc = py::reinterpret_borrow<py::object>(g_nccl_exc)(e.what());
    exc.attr("code") = e.code();
    exc.attr("code_name") = nccl::result_name(e.code());
    exc.attr("timed_out") = e.timed_out();
    PyErr_SetObject(g_nccl_exc.ptr(), exc.ptr());
  } catch (const OutOfMemoryError& e) {
    py::object exc = py::reinterpret_borrow<py::object>(g_oom_exc)(e.what());
    exc.attr("device") = e.device();
    exc.attr("requested_bytes") = e.requested_bytes();
    exc.attr("free_bytes") = e.free_bytes();
    exc.attr("total_bytes") = e.total_bytes();
    exc.attr("code") = e.code();
    PyErr_SetObject(g_oom_exc.ptr(), exc.ptr());
  } catch (const AcceleratorError& e) {
    py::object exc = py::reinterpret_borrow<py::object>(g_accel_exc)(e.what());
    exc.attr("code") = e.code();
    exc.attr("code_name") = e.code_name();
    PyErr_SetObject(g_accel_exc.ptr(), exc.ptr());
  } catch (const IoError& e) {
    // OSError(errno, strerror, filename) picks the errno's subclass (FileNotFoundError, ...).
    py::object exc = py::reinterpret_borrow<py::object>(PyExc_OSError)(
        e.error_number(), e.what(), e.path());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (const KeyError& e) {
    PyErr_SetString(g_key_exc.ptr(), e.what());
  } catch (const ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const NotSupportedError& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what());
  } catch (const Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    return false;
  }
  return true;
}

}  // namespace

Registrar::Registrar(const char* name, int order, BindFn fn) {
  entries().push_back({name, order, fn});
}

PyObject* set_python_error(std::exception_ptr e) noexcept {
  try {
    if (!set_cudakit_error(e)) py::detail::translate_exception(e);
  } catch (py::error_already_set& inner) {
    inner.restore();  // building the exception object failed: raise that instead
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "cudakit: an exception could not be translated to Python");
  }
  return nullptr;
}

}  // namespace cudakit::python

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "cudakit native core (see cudakit/__init__.py for the public API)";
  namespace ckpy = cudakit::python;

  // Exceptions: AcceleratorError(RuntimeError) and OutOfMemoryError(RuntimeError), as torch;
  // NcclError(RuntimeError), re-exported by cudakit.nccl.
  static py::exception<cudakit::AcceleratorError> accel_exc(m, "AcceleratorError",
                                                            PyExc_RuntimeError);
  static py::exception<cudakit::OutOfMemoryError> oom_exc(m, "OutOfMemoryError",
                                                          PyExc_RuntimeError);
  static py::exception<cudakit::nccl::NcclError> nccl_exc(m, "NcclError", PyExc_RuntimeError);
  ckpy::g_accel_exc = accel_exc;
  ckpy::g_oom_exc = oom_exc;
  ckpy::g_nccl_exc = nccl_exc;
  // A wrong-type argument (args.hpp): TypeError as in torch, and ValueError, cudakit's class
  // for bad input (which such arguments raised before the argument layer existed).
  ckpy::g_arg_type_exc = [&] {
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
  ckpy::g_key_exc = [&] {
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
    if (p && !ckpy::set_cudakit_error(p)) std::rethrow_exception(p);  // pybind11's mapping
  });

  auto& list = ckpy::entries();
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const auto& e : list) e.fn(m);
}
