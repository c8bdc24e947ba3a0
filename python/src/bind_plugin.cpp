// Bindings for cudakit/plugin.hpp (names prefixed _mem_; used by python/cudakit/
// _torch_interop.py and _cupy_interop.py): the torch hook table as addresses, torch's pool ids
// in cudakit, and allocation on behalf of another framework.
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "args.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/plugin.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

template <class F>
std::uintptr_t address(F* f) {
  return reinterpret_cast<std::uintptr_t>(f);
}

TorchMempoolId torch_id_arg(py::handle v, Arg a) {
  if (!PySequence_Check(v.ptr()) || PyUnicode_Check(v.ptr()) || py::len(v) != 2)
    throw_type(a, "a (int, int) torch pool id (MemPool.id or graph_pool_handle())", v);
  py::sequence t = py::reinterpret_borrow<py::sequence>(v);
  return {to_uint64(t[0], a), to_uint64(t[1], a)};
}

MemoryClient client_arg(py::handle v, Arg a) {
  const std::string name = to_string(v, a);
  for (int c = 0; c < kNumMemoryClients; ++c)
    if (name == kMemoryClientNames[c]) return static_cast<MemoryClient>(c);
  throw ValueError(std::string(a.fn) + "(): argument '" + a.name + "' must be one of "
                   "'cudakit', 'torch', 'cupy', not '" + name + "'");
}

void bind(py::module_& m) {
  m.def("_mem_torch_hooks", [] {
    const TorchAllocatorHooks& h = torch_allocator_hooks();
    py::dict d;
    d["malloc"] = address(h.malloc);
    d["free"] = address(h.free);
    d["init"] = address(h.init);
    d["reset"] = address(h.reset);
    d["memory_fraction"] = address(h.memory_fraction);
    d["base_alloc"] = address(h.base_alloc);
    d["record_stream"] = address(h.record_stream);
    d["begin_allocate_to_pool"] = address(h.begin_allocate_to_pool);
    d["end_allocate_to_pool"] = address(h.end_allocate_to_pool);
    d["release_pool"] = address(h.release_pool);
    return d;
  });
  m.def("_mem_torch_hooks_used", &torch_hooks_used);
  m.def("_mem_torch_pool_id", [](py::handle id) {
    return torch_pool_id(torch_id_arg(id, Arg{"torch_pool_id", "id"}));
  });
  m.def("_mem_torch_pool_create", [](py::handle d, py::handle id, py::handle use_on_oom, py::handle no_split) {
    const char* fn = "MemPool";
    create_torch_pool(cuda_index(d, Arg{fn, "device"}), torch_id_arg(id, Arg{fn, "id"}),
                      to_bool(use_on_oom, Arg{fn, "use_on_oom"}), to_bool(no_split, Arg{fn, "no_split"}));
  });
  m.def("_mem_torch_pool_release", [](py::handle d, py::handle id) {
    const Arg a{"MemPool", "id"};
    torch_allocator_hooks().release_pool(cuda_index(d, Arg{"MemPool", "device"}), torch_id_arg(id, a));
  });
  m.def("_mem_torch_pool_use_count", [](py::handle d, py::handle id) {
    return torch_pool_use_count(cuda_index(d, Arg{"MemPool.use_count", "device"}),
                                torch_id_arg(id, Arg{"MemPool.use_count", "id"}));
  });
  // caching_allocator_alloc on behalf of `client` ("cudakit" | "torch" | "cupy"); the stream is
  // a raw handle of `device` (CuPy's current stream), as _mem_alloc takes it.
  m.def("_mem_alloc_for", [](py::handle client, py::handle size, py::handle d, py::handle stream) {
    const char* fn = "caching_allocator_alloc_for";
    const MemoryClient c = client_arg(client, Arg{fn, "client"});
    const std::size_t bytes = to_size(size, Arg{fn, "size"});
    const int di = cuda_index(d, Arg{fn, "device"});
    std::optional<StreamRef> s;
    if (!stream.is_none()) s = stream_arg(stream, Arg{fn, "stream"}, di, /*allow_handle=*/true);
    return reinterpret_cast<std::uintptr_t>(caching_allocator_alloc_for(c, bytes, di, s));
  }, py::arg("client"), py::arg("size"), py::arg("device") = py::none(), py::arg("stream") = py::none());
}

Registrar reg("plugin", order::plugin, bind);

}  // namespace
}  // namespace cudakit::python
