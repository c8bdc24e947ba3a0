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
  m.def("_mem_torch_pool_create", [](py::handle d, py::handle id, py::handle use_on_oom,
                                     py::handle no_split, const PluggableAllocator* source) {
    const char* fn = "MemPool";
    create_torch_pool(cuda_index(d, Arg{fn, "device"}), torch_id_arg(id, Arg{fn, "id"}),
                      to_bool(use_on_oom, Arg{fn, "use_on_oom"}), to_bool(no_split, Arg{fn, "no_split"}),
                      source);
  }, py::arg("device"), py::arg("id"), py::arg("use_on_oom"), py::arg("no_split"),
     py::arg("allocator") = nullptr);
  // The allocator of functions torch._C._cuda_customAllocator was given (their addresses):
  // torch.cuda.MemPool(allocator=...) takes its segments from them.
  m.def("_mem_pluggable_from_addresses", [](py::handle alloc, py::handle free, py::handle name) {
    const char* fn = "MemPool";
    const auto a = to_uint64(alloc, Arg{fn, "alloc_fn"});
    const auto f = to_uint64(free, Arg{fn, "free_fn"});
    if (!a || !f) throw ValueError("MemPool(allocator=...): the allocator's functions are null");
    return PluggableAllocator(reinterpret_cast<PluggableAllocator::AllocFn>(a),
                              reinterpret_cast<PluggableAllocator::FreeFn>(f),
                              to_string(name, Arg{fn, "name"}));
  });
  m.def("_mem_torch_pool_release", [](py::handle d, py::handle id) {
    const Arg a{"MemPool", "id"};
    torch_allocator_hooks().release_pool(cuda_index(d, Arg{"MemPool", "device"}), torch_id_arg(id, a));
  });
  m.def("_mem_torch_pool_use_count", [](py::handle d, py::handle id) {
    return torch_pool_use_count(cuda_index(d, Arg{"MemPool.use_count", "device"}),
                                torch_id_arg(id, Arg{"MemPool.use_count", "id"}));
  });
  // torch._C._cuda_cudaCachingAllocator_enable, forwarded (use_with_torch)
  m.def("_mem_torch_set_caching_enabled", [](py::handle v) {
    set_torch_caching_enabled(to_bool(v, Arg{"caching_allocator_enable", "value"}));
  });
  m.def("_mem_torch_caching_enabled", &torch_caching_enabled);
  // torch.OutOfMemoryError for the hook table's malloc (None: cudakit's own error again). The
  // type is kept alive here (one reference, never dropped: the table may use it until exit).
  m.def("_mem_torch_set_oom_type", [](py::handle type) {
    if (type.is_none()) {
      set_torch_out_of_memory_type(nullptr);
      return;
    }
    if (!PyType_Check(type.ptr()) ||
        !PyObject_IsSubclass(type.ptr(), PyExc_BaseException))
      throw_type(Arg{"use_with_torch", "OutOfMemoryError"}, "an exception class", type);
    set_torch_out_of_memory_type(type.inc_ref().ptr());
  });
  // torch._C._cuda_attach_out_of_memory_observer(fn): fn(device, alloc, allowed, free). The
  // callable is leaked on purpose: observers live until exit, when no GIL may be taken to
  // drop it.
  m.def("_mem_torch_add_oom_observer", [](py::handle fn) {
    if (!PyCallable_Check(fn.ptr()))
      throw_type(Arg{"_cuda_attach_out_of_memory_observer", "observer"}, "a callable", fn);
    auto* keep = new py::object(py::reinterpret_borrow<py::object>(fn));
    add_torch_oom_observer([keep](int device, std::size_t requested, std::size_t allowed,
                                  std::size_t free) {
      py::gil_scoped_acquire gil;
      try {
        (*keep)(device, requested, allowed, free);
      } catch (py::error_already_set& e) {
        // An observer's error must not replace the out-of-memory error torch raises next.
        e.discard_as_unraisable("cudakit: out-of-memory observer");
      }
    });
  });
  // torch's profiler reporting (set_torch_memory_reporter): the addresses of libc10's
  // memoryProfilingEnabled and reportMemoryUsageToProfiler, which use_with_torch() looks up by
  // symbol; (0, 0) turns it off.
  m.def("_mem_torch_set_memory_reporter", [](std::uintptr_t enabled, std::uintptr_t report) {
    if ((enabled == 0) != (report == 0))
      throw ValueError("_mem_torch_set_memory_reporter: give both function addresses, or 0 for "
                       "both (reporting off)");
    TorchMemoryReporter r;
    r.enabled = reinterpret_cast<bool (*)()>(enabled);
    r.report = reinterpret_cast<decltype(r.report)>(report);
    set_torch_memory_reporter(r);
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
