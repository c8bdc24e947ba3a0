// Profiler bindings: cuProfilerStart/Stop (wrapped as cudakit.profiler.start/stop/profile in
// cudakit/profiler.py), and the emulated backend's recorded state for tests.
#include <pybind11/pybind11.h>

#include "backend/emulated/emulated_control.hpp"
#include "cudakit/profiler.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

void bind(py::module_& m) {
  m.def("_profiler_start", &profiler::start);
  m.def("_profiler_stop", &profiler::stop);
  m.def("_profiler_emulated_state", []() -> py::object {
    detail::EmulatedProfilerState s;
    if (!detail::emulated_profiler_state(&s)) return py::none();
    py::dict d;
    d["active"] = s.active;
    d["starts"] = s.starts;
    d["stops"] = s.stops;
    return d;
  }, "Emulated backend only: {'active', 'starts', 'stops'} as recorded by profiler start/stop; "
     "None on another backend or before the backend exists.");
}

Registrar reg("profiler", 61, bind);

}  // namespace
}  // namespace cudakit::python
