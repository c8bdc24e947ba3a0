// Bindings for the memory module (names prefixed _mem_; python/cudakit/memory.py gives them
// torch.cuda.memory's names and signatures).
#include <Python.h>
#include <frameobject.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <optional>
#include <unordered_set>

#include "backend/backend.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "device_arg.hpp"
#include "memory/config.hpp"
#include "memory/history.hpp"
#include "memory/locks.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

int dev(py::handle d) {
  int i = device_index(d, true);
  return i < 0 ? detail::backend().current_device() : i;
}

std::optional<StreamRef> stream_of(std::optional<std::uintptr_t> handle, int device) {
  if (!handle) return std::nullopt;
  return StreamRef::from_handle(reinterpret_cast<detail::StreamHandle>(*handle), device);
}

// Python stack capture for _record_memory_history(stacks="python"/"all"): runs on the
// allocating thread, only when it holds the GIL (allocations from C++ threads have no Python
// stack). Records raw (code object, instruction offset) pairs; file/line/name are looked up
// at snapshot time (symbolize_python_frame). Code objects seen here are kept alive for the
// life of the process (one reference each, taken the first time), so a recorded pointer can
// never dangle or be reused by another code object.
void capture_python_stack(std::vector<memory::PyFrameRef>& out) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return;
  static auto* kept = new std::unordered_set<const void*>();  // guarded by the GIL
  PyFrameObject* f = PyEval_GetFrame();
  if (f) Py_INCREF(f);
  int depth = 0;
  while (f && depth++ < 64) {
    PyCodeObject* code = PyFrame_GetCode(f);
    if (kept->insert(code).second) Py_INCREF(code);
#if PY_VERSION_HEX >= 0x030B0000
    out.push_back({code, PyFrame_GetLasti(f)});
#else
    out.push_back({code, -2 - PyFrame_GetLineNumber(f)});  // no lasti before 3.11: the line
#endif
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  if (f) Py_DECREF(f);
}

void symbolize_python_frame(const memory::PyFrameRef& fr, std::string& file, int& line,
                            std::string& name) {
  file = "??";
  name = "??";
  line = 0;
  if (!Py_IsInitialized() || !fr.code) return;
  PyGILState_STATE g = PyGILState_Ensure();
  auto* code = static_cast<PyCodeObject*>(const_cast<void*>(fr.code));
  if (const char* s = PyUnicode_AsUTF8(code->co_filename)) file = s;
  if (const char* s = PyUnicode_AsUTF8(code->co_name)) name = s;
  line = fr.lasti <= -2 ? -2 - fr.lasti : PyCode_Addr2Line(code, fr.lasti);
  if (PyErr_Occurred()) PyErr_Clear();
  PyGILState_Release(g);
}

// The allocator's wait hooks (memory/locks.hpp): a thread entering from Python gives up the
// GIL while the allocator waits for streams or the device (what it waits for may need the
// GIL: a finaliser, a task dropping a Python-owned buffer), and only then, so allocations
// keep their Python stacks in the history.
void* release_gil_if_held() {
  if (!Py_IsInitialized() || !PyGILState_Check()) return nullptr;
  return PyEval_SaveThread();
}
void reacquire_gil(void* state) { PyEval_RestoreThread(static_cast<PyThreadState*>(state)); }

// Allocator warnings (inert CUDAKIT_ALLOC_CONF keys) as Python UserWarnings when the calling
// thread holds the GIL; other threads (stream tasks, C++ threads) print them.
void warn_from_allocator(const std::string& msg) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 2) != 0) throw py::error_already_set();
    return;
  }
  std::fprintf(stderr, "cudakit: warning: %s\n", msg.c_str());
}

struct PyUseMemPool {
  std::unique_ptr<UseMemPool> guard;
};

void bind(py::module_& m) {
  memory::set_wait_hooks({&release_gil_if_held, &reacquire_gil});
  memory::set_warning_handler(&warn_from_allocator);
  m.def("_mem_stats", [](py::handle d) { return memory_stats(dev(d)); }, py::arg("device") = py::none());
  m.def("_mem_allocated", [](py::handle d) { return memory_allocated(dev(d)); }, py::arg("device") = py::none());
  m.def("_mem_max_allocated", [](py::handle d) { return max_memory_allocated(dev(d)); }, py::arg("device") = py::none());
  m.def("_mem_reserved", [](py::handle d) { return memory_reserved(dev(d)); }, py::arg("device") = py::none());
  m.def("_mem_max_reserved", [](py::handle d) { return max_memory_reserved(dev(d)); }, py::arg("device") = py::none());
  m.def("_mem_reset_peak", [](py::handle d) { reset_peak_memory_stats(dev(d)); }, py::arg("device") = py::none());
  m.def("_mem_reset_accumulated", [](py::handle d) { reset_accumulated_memory_stats(dev(d)); }, py::arg("device") = py::none());
  m.def("_mem_summary", [](py::handle d, bool abbreviated) { return memory_summary(dev(d), abbreviated); },
        py::arg("device") = py::none(), py::arg("abbreviated") = false);
  m.def("_mem_empty_cache", [] {
    py::gil_scoped_release nogil;
    empty_cache();
  });
  m.def("_mem_set_fraction", [](double f, py::handle d) { set_per_process_memory_fraction(f, dev(d)); },
        py::arg("fraction"), py::arg("device") = py::none());
  m.def("_mem_get_fraction", [](py::handle d) { return get_per_process_memory_fraction(dev(d)); },
        py::arg("device") = py::none());
  m.def("_mem_backend", &get_allocator_backend);
  m.def("_mem_set_settings", &set_allocator_settings);
  m.def("_mem_get_info", [](py::handle d) {
    auto mi = detail::backend().mem_get_info(dev(d));
    return py::make_tuple(mi.free, mi.total);
  }, py::arg("device") = py::none());
  m.def("_mem_alloc", [](std::int64_t size, py::handle d, std::optional<std::uintptr_t> stream) {
    if (size < 0)
      throw ValueError("caching_allocator_alloc: size must be >= 0, got " + std::to_string(size));
    const int di = dev(d);
    return reinterpret_cast<std::uintptr_t>(
        caching_allocator_alloc(static_cast<std::size_t>(size), di, stream_of(stream, di)));
  }, py::arg("size"), py::arg("device") = py::none(), py::arg("stream") = py::none());
  // _mem_alloc / _mem_delete keep the GIL (the history records their Python stacks); the
  // allocator releases it itself while it waits (the wait hooks above).
  m.def("_mem_delete", [](std::uintptr_t p) { caching_allocator_delete(reinterpret_cast<void*>(p)); });
  m.def("_mem_record_stream", [](std::uintptr_t p, std::uintptr_t stream, py::handle d) {
    record_stream(reinterpret_cast<void*>(p),
                  StreamRef::from_handle(reinterpret_cast<detail::StreamHandle>(stream), dev(d)));
  }, py::arg("ptr"), py::arg("stream"), py::arg("device") = py::none());
  m.def("_mem_caching_enable", &caching_allocator_enable, py::arg("enabled") = true);
  m.def("_mem_caching_enabled", &caching_allocator_enabled);
  m.def("_mem_list_gpu_processes", [](py::handle d) { return list_gpu_processes(dev(d)); },
        py::arg("device") = py::none());
  m.def("_mem_host_stats", &host_memory_stats);
  m.def("_mem_host_reset_accumulated", &reset_accumulated_host_memory_stats);
  m.def("_mem_host_reset_peak", &reset_peak_host_memory_stats);
  m.def("_mem_host_empty_cache", &host_empty_cache, py::call_guard<py::gil_scoped_release>());
  m.def("_mem_snapshot_json", [](std::optional<MempoolId> pool) { return memory_snapshot_json(pool); },
        py::arg("pool") = py::none());
  m.def("_mem_record_history", [](std::optional<std::string> enabled, std::optional<std::string> context,
                                  std::string stacks, std::size_t max_entries) {
    memory::set_python_stack_hook(&capture_python_stack, &symbolize_python_frame);
    record_memory_history(enabled, context.value_or(""), stacks, max_entries);
  }, py::arg("enabled"), py::arg("context"), py::arg("stacks"), py::arg("max_entries"));
  m.def("_mem_ipc_collect", &ipc_collect, py::call_guard<py::gil_scoped_release>());
  m.def("_mem_ipc_export", [](std::uintptr_t p) {
    IpcMemHandle h = ipc_export(reinterpret_cast<void*>(p));
    return py::make_tuple(py::bytes(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes),
                          h.device, h.offset, h.size);
  });
  m.def("_mem_ipc_import", [](py::bytes handle, int device, std::size_t offset, std::size_t size) {
    std::string s = handle;
    if (s.size() != 64) throw ValueError("ipc handle must be 64 bytes, got " + std::to_string(s.size()));
    IpcMemHandle h;
    std::copy(s.begin(), s.end(), h.bytes);
    h.device = device;
    h.offset = offset;
    h.size = size;
    return reinterpret_cast<std::uintptr_t>(ipc_import(h));
  });
  m.def("_mem_ipc_close", [](std::uintptr_t p) { ipc_close(reinterpret_cast<void*>(p)); });
  m.def("_mem_graph_pool_handle", &graph_pool_handle);

  py::class_<MemPool>(m, "_MemPool")
      .def(py::init([](bool use_on_oom, bool no_split, py::handle d) {
             return std::make_unique<MemPool>(use_on_oom, no_split, dev(d));
           }),
           py::arg("use_on_oom") = false, py::arg("no_split") = false, py::arg("device") = py::none())
      .def(py::init([](MempoolId id, py::handle d) { return std::make_unique<MemPool>(id, dev(d)); }),
           py::arg("id"), py::arg("device") = py::none())
      .def(py::init([](const PluggableAllocator& a, bool use_on_oom, bool no_split, py::handle d) {
             return std::make_unique<MemPool>(a, use_on_oom, no_split, dev(d));
           }),
           py::arg("allocator"), py::arg("use_on_oom") = false, py::arg("no_split") = false,
           py::arg("device") = py::none())
      .def_property_readonly("id", &MemPool::id)
      .def_property_readonly("device", &MemPool::device)
      .def("use_count", &MemPool::use_count)
      .def("snapshot", [](const MemPool& p) { return memory_snapshot_json(p.id()); });
  py::class_<PyUseMemPool>(m, "_UseMemPool")
      .def(py::init([](const MemPool& pool, py::handle d) {
             auto g = std::make_unique<PyUseMemPool>();
             g->guard = std::make_unique<UseMemPool>(pool, d.is_none() ? kCurrentDevice : dev(d));
             return g;
           }),
           py::arg("pool"), py::arg("device") = py::none())
      .def("close", [](PyUseMemPool& g) { g.guard.reset(); });
  py::class_<PluggableAllocator>(m, "_PluggableAllocator")
      .def(py::init<const std::string&, const std::string&, const std::string&>(),
           py::arg("path_to_so"), py::arg("alloc_fn_name"), py::arg("free_fn_name"));
  m.def("_mem_change_allocator", &change_current_allocator);
  m.def("_mem_reset_allocator", &reset_current_allocator);
}

Registrar reg("memory", 30, bind);

}  // namespace
}  // namespace cudakit::python
