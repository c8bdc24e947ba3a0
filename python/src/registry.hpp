// How binding files join cudakit._C. Each bind_<module>.cpp registers itself with one static
// Registrar, so adding a module (e.g. bind_graphs.cpp) needs no edit anywhere else:
//
//   #include "args.hpp"       // every user-supplied argument is converted there
//   #include "registry.hpp"
//   namespace cudakit::python {
//   namespace {
//   void bind(py::module_& m) { m.def("graph_pool_handle", ...); }
//   Registrar reg("graphs", order::graphs, bind);
//   }  // namespace
//   }  // namespace cudakit::python
//
// module.cpp runs the registrars by `order` (ties: link order) on the one module `m`
// (= cudakit._C), after registering the exception types. A binding may use the classes
// of every module with a lower order (e.g. Device, Stream, Tensor). Use submodules
// (m.def_submodule) only where torch.cuda has one. Bindings include public headers only
// (include/cudakit/...): python/CMakeLists.txt gives them no include path into src/.
#pragma once

#include <pybind11/pybind11.h>

namespace cudakit::python {
namespace py = pybind11;

using BindFn = void (*)(py::module_&);

struct Registrar {
  Registrar(const char* name, int order, BindFn fn);
};

// Registration order of the binding files (gaps leave room for new ones).
namespace order {
inline constexpr int devices = 0;   // Device, device functions
inline constexpr int streams = 10;  // Stream, Event (return Device)
inline constexpr int memory = 30;
inline constexpr int plugin = 32;  // torch hook table, per-framework allocation (uses memory)
inline constexpr int tensor = 40;   // dtype, Tensor and its methods
inline constexpr int interop = 42;  // NumPy / DLPack / CUDA array interface (adds Tensor methods)
inline constexpr int factories = 44;  // empty, zeros, tensor, asarray, ... (use interop)
inline constexpr int random = 46;   // Generator, rand/randn/randint
inline constexpr int jiterator = 48;  // runtime-compiled elementwise functions (use Tensor, interop)
inline constexpr int graphs = 50;   // CUDA graphs (uses streams, memory pools, Generator)
inline constexpr int green_contexts = 54;  // _GreenContext (returns Stream)
inline constexpr int gds = 56;      // _GdsFile, _GdsRequest, buffer registration (use Tensor)
inline constexpr int comm = 60;     // comm.* and nccl.* (uses Device, Stream, Tensor, interop)
inline constexpr int nvtx = 61;     // _C._nvtx (CPython API, no pybind11 classes)
inline constexpr int profiler = 62;  // profiler start/stop and the tracer
inline constexpr int sanitizer = 64;  // after every module it instruments
inline constexpr int tunable = 70;  // TunableOp settings and results files (no classes)
}  // namespace order

}  // namespace cudakit::python
