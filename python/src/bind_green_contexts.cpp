// Green-context bindings: _GreenContext, wrapped by cudakit/green_contexts.py (torch's
// GreenContext names, the deprecation warnings, keeping the context alive from its streams).
#include <pybind11/pybind11.h>

#include <memory>

#include "args.hpp"
#include "bound_types.hpp"
#include "cudakit/green_context.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

// torch deprecated these two (the Python layer warns); the binding still calls them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
void set_context(GreenContext& g) { g.set_context(); }
void pop_context(GreenContext& g) { g.pop_context(); }
#pragma GCC diagnostic pop

// Destroying a context waits for its streams' work: without the GIL, since that work may
// include Python host functions that need it.
struct ReleaseGilDeleter {
  void operator()(GreenContext* g) const {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      delete g;
    } else {
      delete g;
    }
  }
};
using Holder = std::unique_ptr<GreenContext, ReleaseGilDeleter>;

void bind(py::module_& m) {
  py::class_<GreenContext, Holder>(m, "_GreenContext", R"doc(
A partition of a device's SMs (cudakit::GreenContext).
Use cudakit.green_contexts.GreenContext.)doc")
      .def_static(
          "create",
          [](py::handle num_sms, py::handle device) {
            const int n = to_int(num_sms, Arg{"GreenContext.create", "num_sms"});
            const int d = cuda_index(device, Arg{"GreenContext.create", "device_id"});
            py::gil_scoped_release nogil;
            return Holder(new GreenContext(GreenContext::create(n, d)));
          },
          py::arg("num_sms"), py::arg("device_id") = py::none())
      .def_static(
          "sm_resource",
          [](py::handle device) {
            SmResource r = GreenContext::sm_resource(
                cuda_index(device, Arg{"GreenContext.sm_resource", "device_id"}));
            py::dict d;
            d["sm_count"] = r.sm_count;
            d["min_partition_sms"] = r.min_partition_sms;
            d["sm_alignment"] = r.sm_alignment;
            return d;
          },
          py::arg("device_id") = py::none(),
          "{'sm_count', 'min_partition_sms', 'sm_alignment'}: how the device's SMs partition.")
      .def_property_readonly("sm_count", &GreenContext::sm_count)
      .def_property_readonly("requested_sms", &GreenContext::requested_sms)
      .def_property_readonly("device_id", &GreenContext::device)
      .def_property_readonly("handle", [](const GreenContext& g) {
        return reinterpret_cast<std::uintptr_t>(g.handle());
      })
      .def("Stream", [](GreenContext& g) { return PyStream{g.stream()}; })
      .def("set_context", &set_context)
      .def("pop_context", &pop_context)
      .def("_destroy", [](GreenContext& g) {
        // Destroys now (waiting for the streams' work) rather than when Python collects it;
        // `g` is left empty (its methods then raise).
        GreenContext gone(std::move(g));
        py::gil_scoped_release nogil;
        { GreenContext dropped(std::move(gone)); }
      });
}

Registrar reg("green_contexts", order::green_contexts, bind);

}  // namespace
}  // namespace cudakit::python
