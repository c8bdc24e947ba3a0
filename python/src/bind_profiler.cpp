// Profiler bindings: cuProfilerStart/Stop (wrapped as cudakit.profiler.start/stop/profile in
// cudakit/profiler.py), and the process's start/stop state for tests and diagnostics.
#include <pybind11/pybind11.h>

#include "cudakit/profiler.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

void bind(py::module_& m) {
  m.def("_profiler_start", &profiler::start);
  m.def("_profiler_stop", &profiler::stop);
  m.def("_profiler_state", [] {
    const profiler::State s = profiler::state();
    py::dict d;
    d["active"] = s.active;
    d["starts"] = s.starts;
    d["stops"] = s.stops;
    return d;
  }, "{'active', 'starts', 'stops'}: what profiler start/stop did in this process (calls that "
     "reached the backend; a call that raised is not counted).");
}

Registrar reg("profiler", 61, bind);

}  // namespace
}  // namespace cudakit::python
