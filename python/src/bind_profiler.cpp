// Profiler bindings: cuProfilerStart/Stop (wrapped as cudakit.profiler.start/stop/profile in
// cudakit/profiler.py), the process's start/stop state for tests and diagnostics, and the
// tracer (cudakit.profiler.trace wraps _C._Trace).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <type_traits>

#include "args.hpp"
#include "cudakit/profiler.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

using profiler::Trace;
using profiler::TraceEvent;

py::object arg_value(const profiler::TraceArgValue& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::nullptr_t>) {
          return py::none();
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          py::list l;
          for (std::int64_t i : x) l.append(i);
          return std::move(l);
        } else {
          return py::cast(x);
        }
      },
      v);
}

// One event as json.load() of the exported file gives it (ts / dur in microseconds).
py::dict event_dict(const TraceEvent& e) {
  py::dict d;
  const char ph[2] = {e.phase, '\0'};
  d["ph"] = ph;
  if (e.phase == 's' || e.phase == 'f') d["id"] = e.flow_id;
  if (!e.category.empty()) d["cat"] = e.category;
  if (e.phase == 'i') d["s"] = "t";
  d["name"] = e.name;
  d["pid"] = e.pid;
  d["tid"] = e.tid;
  d["ts"] = static_cast<double>(e.ts_ns) / 1000.0;
  if (e.phase == 'X') d["dur"] = static_cast<double>(e.dur_ns) / 1000.0;
  if (e.phase == 'f') d["bp"] = "e";
  if (!e.args.empty()) {
    py::dict args;
    for (const auto& [k, v] : e.args) args[py::str(k)] = arg_value(v);
    d["args"] = std::move(args);
  }
  return d;
}

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

  py::class_<Trace>(m, "_Trace",
                    "A recording trace (cudakit::profiler::Trace); cudakit.profiler.trace "
                    "wraps it.")
      .def(py::init([](py::handle device, py::handle api, py::handle nvtx, py::handle memory,
                       py::handle graphs, py::handle synchronize) {
             profiler::TraceOptions o;
             o.device = to_bool(device, {"trace", "device"});
             o.api = to_bool(api, {"trace", "api"});
             o.nvtx = to_bool(nvtx, {"trace", "nvtx"});
             o.memory = to_bool(memory, {"trace", "memory"});
             o.graphs = to_bool(graphs, {"trace", "graphs"});
             o.synchronize = to_bool(synchronize, {"trace", "synchronize"});
             py::gil_scoped_release release;  // loads CUPTI on first use (milliseconds)
             return std::make_unique<Trace>(o);
           }),
           py::kw_only(), py::arg("device"), py::arg("api"), py::arg("nvtx"), py::arg("memory"),
           py::arg("graphs"), py::arg("synchronize"))
      .def("stop", &Trace::stop, py::call_guard<py::gil_scoped_release>(),
           "Stops recording (synchronizing the devices first unless synchronize=False).")
      .def_property_readonly("recording", &Trace::recording)
      .def("events", [](const Trace& t) {
        std::vector<TraceEvent> ev = t.events();
        py::list out(ev.size());
        for (std::size_t i = 0; i < ev.size(); ++i) out[i] = event_dict(ev[i]);
        return out;
      }, "The trace events as dicts (what json.load() of the exported file lists).")
      .def("export_chrome_trace", [](const Trace& t, py::handle path) {
        std::string p = to_string(path, {"export_chrome_trace", "path"});
        py::gil_scoped_release release;
        t.export_chrome_trace(p);
      }, py::arg("path"))
      .def("export_perfetto", [](const Trace& t, py::handle path) {
        std::string p = to_string(path, {"export_perfetto", "path"});
        py::gil_scoped_release release;
        t.export_perfetto(p);
      }, py::arg("path"))
      .def("chrome_trace_json", [](const Trace& t) {
        std::string s;
        {
          py::gil_scoped_release release;
          s = t.chrome_trace_json();
        }
        return py::bytes(s);
      })
      .def_property_readonly("warnings", &Trace::warnings)
      .def_property_readonly("record_count", &Trace::record_count)
      .def_property_readonly("base_time_ns", &Trace::base_time_ns)
      .def_property_readonly("device_source", &Trace::device_source);
}

Registrar reg("profiler", order::profiler, bind);

}  // namespace
}  // namespace cudakit::python
