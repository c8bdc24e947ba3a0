// Each binding file registers itself here, so adding a module needs no edit elsewhere:
//
//   static cudakit::python::Registrar reg("memory", 30, [](py::module_& m) { ... });
//
// module.cpp runs the registrars in `order` (core devices/streams first), all on module `m`
// (= cudakit._C). Use submodules (m.def_submodule) only where torch.cuda has one.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>

namespace cudakit::python {
namespace py = pybind11;

using BindFn = void (*)(py::module_&);

struct Registrar {
  Registrar(const char* name, int order, BindFn fn);
};

}  // namespace cudakit::python
