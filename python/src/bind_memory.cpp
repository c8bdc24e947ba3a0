// Bindings for the memory module (names prefixed _mem_; python/cudakit/memory.py gives them
// torch.cuda.memory's names and signatures).
#include <Python.h>
#include <frameobject.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <unordered_set>

#include "args.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/python_stacks.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

// Device argument of a torch.cuda.memory function named `fn`.
int dev(py::handle d, const char* fn) { return cuda_index(d, Arg{fn, "device"}); }

// (a, b) pool id of a MemPool / graph_pool_handle(), or None.
std::optional<MempoolId> pool_id_arg(py::handle v, Arg a) {
  if (v.is_none()) return std::nullopt;
  if (!PySequence_Check(v.ptr()) || PyUnicode_Check(v.ptr()) || py::len(v) != 2)
    throw_type(a, "a (int, int) pool id (MemPool.id or graph_pool_handle())", v);
  py::sequence t = py::reinterpret_borrow<py::sequence>(v);
  return MempoolId{to_uint64(t[0], a), to_uint64(t[1], a)};
}

// Python stack capture for _record_memory_history(stacks="python"/"all"): runs on the
// allocating thread, only when it holds the GIL (allocations from C++ threads have no Python
// stack). Records raw (code object, instruction offset) pairs; file/line/name are looked up
// at snapshot time (symbolize_python_frame). Code objects seen here are kept alive for the
// life of the process (one reference each, taken the first time), so a recorded pointer can
// never dangle or be reused by another code object.
void capture_python_stack(std::vector<PyFrameRef>& out) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return;
  static auto* kept = new std::unordered_set<const void*>();  // guarded by the GIL
  PyFrameObject* f = PyEval_GetFrame();
  if (f) Py_INCREF(f);
  int depth = 0;
  while (f && depth++ < 64) {
    PyCodeObject* code = PyFrame_GetCode(f);
    // A direct-mapped cache of code objects already kept saves the set lookup (~20 ns a
    // frame) for the frames a program allocates from again and again.
    static const void* seen[1024] = {};  // guarded by the GIL
    const void*& slot = seen[(reinterpret_cast<std::uintptr_t>(code) >> 4) & 1023];
    if (slot != code) {
      if (kept->insert(code).second) Py_INCREF(code);
      slot = code;
    }
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

void symbolize_python_frame(const PyFrameRef& fr, std::string& file, int& line,
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

// The allocator's wait hooks (cudakit/python_stacks.hpp): a thread entering from Python gives up the
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
  set_allocator_wait_hooks(&release_gil_if_held, &reacquire_gil);
  set_allocator_warning_handler(&warn_from_allocator);
  m.def("_mem_stats", [](py::handle d) { return memory_stats(dev(d, "memory_stats")); }, py::arg("device") = py::none());
  m.def("_mem_allocated", [](py::handle d) { return memory_allocated(dev(d, "memory_allocated")); }, py::arg("device") = py::none());
  m.def("_mem_max_allocated", [](py::handle d) { return max_memory_allocated(dev(d, "max_memory_allocated")); }, py::arg("device") = py::none());
  m.def("_mem_reserved", [](py::handle d) { return memory_reserved(dev(d, "memory_reserved")); }, py::arg("device") = py::none());
  m.def("_mem_max_reserved", [](py::handle d) { return max_memory_reserved(dev(d, "max_memory_reserved")); }, py::arg("device") = py::none());
  m.def("_mem_reset_peak", [](py::handle d) { reset_peak_memory_stats(dev(d, "reset_peak_memory_stats")); }, py::arg("device") = py::none());
  m.def("_mem_reset_accumulated", [](py::handle d) { reset_accumulated_memory_stats(dev(d, "reset_accumulated_memory_stats")); }, py::arg("device") = py::none());
  m.def("_mem_summary", [](py::handle d, py::handle abbreviated) {
    const int di = dev(d, "memory_summary");
    return memory_summary(di, to_bool(abbreviated, Arg{"memory_summary", "abbreviated"}));
  }, py::arg("device") = py::none(), py::arg("abbreviated") = false);
  m.def("_mem_empty_cache", [] {
    py::gil_scoped_release nogil;
    empty_cache();
  });
  m.def("_mem_set_fraction", [](py::handle f, py::handle d) {
    const double fraction = to_double(f, Arg{"set_per_process_memory_fraction", "fraction"});
    set_per_process_memory_fraction(fraction, dev(d, "set_per_process_memory_fraction"));
  }, py::arg("fraction"), py::arg("device") = py::none());
  m.def("_mem_get_fraction", [](py::handle d) { return get_per_process_memory_fraction(dev(d, "get_per_process_memory_fraction")); },
        py::arg("device") = py::none());
  m.def("_mem_backend", &get_allocator_backend);
  m.def("_mem_set_settings", [](py::handle conf) {
    set_allocator_settings(to_string(conf, Arg{"_set_allocator_settings", "env"}));
  });
  m.def("_mem_get_info", [](py::handle d) {
    auto mi = mem_get_info(dev(d, "mem_get_info"));
    return py::make_tuple(mi.first, mi.second);
  }, py::arg("device") = py::none());
  m.def("_mem_alloc", [](py::handle size, py::handle d, py::handle stream) {
    const Arg a{"caching_allocator_alloc", "size"};
    const std::size_t bytes = to_size(size, a);
    const int di = dev(d, "caching_allocator_alloc");
    // A stream object or raw handle passes through as is; a raw handle belongs to `device`
    // when one is given, else to the device the driver reports.
    std::optional<StreamRef> s;
    if (!stream.is_none()) s = stream_arg(stream, Arg{"caching_allocator_alloc", "stream"}, di, /*allow_handle=*/true);
    return reinterpret_cast<std::uintptr_t>(caching_allocator_alloc(bytes, di, s));
  }, py::arg("size"), py::arg("device") = py::none(), py::arg("stream") = py::none());
  // _mem_alloc / _mem_delete keep the GIL (the history records their Python stacks); the
  // allocator releases it itself while it waits (the wait hooks above).
  m.def("_mem_delete", [](py::handle p) {
    caching_allocator_delete(reinterpret_cast<void*>(to_address(p, Arg{"caching_allocator_delete", "mem_ptr"})));
  });
  m.def("_mem_record_stream", [](py::handle p, py::handle stream, py::handle d) {
    void* ptr = reinterpret_cast<void*>(to_address(p, Arg{"_record_stream", "mem_ptr"}));
    StreamRef s = stream_arg(stream, Arg{"_record_stream", "stream"}, dev(d, "_record_stream"), /*allow_handle=*/true);
    if (auto info = allocation_info(ptr); info && s.device() >= 0 && info->device != s.device())
      throw ValueError("_record_stream(): the stream is on cuda:" + std::to_string(s.device()) +
                       " but the memory is on cuda:" + std::to_string(info->device) +
                       "; pass a stream of the memory's device");
    record_stream(ptr, s);
  }, py::arg("ptr"), py::arg("stream"), py::arg("device") = py::none());
  m.def("_mem_caching_enable", [](py::handle e) { caching_allocator_enable(to_bool(e, Arg{"caching_allocator_enable", "value"})); },
        py::arg("enabled") = true);
  m.def("_mem_caching_enabled", &caching_allocator_enabled);
  m.def("_mem_list_gpu_processes", [](py::handle d) { return list_gpu_processes(dev(d, "list_gpu_processes")); },
        py::arg("device") = py::none());
  m.def("_mem_host_stats", &host_memory_stats);
  m.def("_mem_host_reset_accumulated", &reset_accumulated_host_memory_stats);
  m.def("_mem_host_reset_peak", &reset_peak_host_memory_stats);
  m.def("_mem_host_empty_cache", &host_empty_cache, py::call_guard<py::gil_scoped_release>());
  m.def("_mem_snapshot_json", [](py::handle pool) {
    return memory_snapshot_json(pool_id_arg(pool, Arg{"memory_snapshot", "mempool_id"}));
  }, py::arg("pool") = py::none());
  m.def("_mem_record_history", [](py::handle enabled, py::handle context, py::handle stacks, py::handle max_entries) {
    const char* fn = "_record_memory_history";
    std::optional<std::string> en;
    if (!enabled.is_none()) en = to_string(enabled, Arg{fn, "enabled"});
    std::string ctx = context.is_none() ? std::string() : to_string(context, Arg{fn, "context"});
    std::string st = to_string(stacks, Arg{fn, "stacks"});
    std::size_t max = to_size(max_entries, Arg{fn, "max_entries"});
    set_python_stack_hooks(&capture_python_stack, &symbolize_python_frame);
    record_memory_history(en, ctx, st, max);
  }, py::arg("enabled"), py::arg("context"), py::arg("stacks"), py::arg("max_entries"));
  m.def("_mem_ipc_collect", &ipc_collect, py::call_guard<py::gil_scoped_release>());
  m.def("_mem_ipc_export", [](std::uintptr_t p) {
    IpcMemHandle h = ipc_export(reinterpret_cast<void*>(p));
    // Expandable segments: the 64-byte header, then the chunk table (IpcMemHandle::chunks).
    std::string bytes(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes);
    bytes.append(reinterpret_cast<const char*>(h.chunks.data()), h.chunks.size());
    return py::make_tuple(py::bytes(bytes), h.device, h.offset, h.size);
  });
  m.def("_mem_ipc_import", [](py::bytes handle, int device, std::size_t offset, std::size_t size) {
    std::string s = handle;
    if (s.size() < 64)
      throw ValueError("ipc handle must be at least 64 bytes (64, or more for memory of an "
                       "expandable segment), got " + std::to_string(s.size()));
    IpcMemHandle h;
    std::copy(s.begin(), s.begin() + 64, h.bytes);
    h.chunks.assign(s.begin() + 64, s.end());
    h.device = device;
    h.offset = offset;
    h.size = size;
    return reinterpret_cast<std::uintptr_t>(ipc_import(h));
  });
  m.def("_mem_ipc_close", [](std::uintptr_t p) { ipc_close(reinterpret_cast<void*>(p)); });
  m.def("_mem_graph_pool_handle", &graph_pool_handle);

  // Called by cudakit.memory.MemPool / use_mem_pool / CUDAPluggableAllocator, which pass the
  // user's values through: converted here like every public argument.
  py::class_<MemPool>(m, "_MemPool")
      .def(py::init([](py::handle use_on_oom, py::handle no_split, py::handle d) {
             const bool oom = to_bool(use_on_oom, Arg{"MemPool", "use_on_oom"});
             const bool split = to_bool(no_split, Arg{"MemPool", "no_split"});
             return std::make_unique<MemPool>(oom, split, dev(d, "MemPool"));
           }),
           py::arg("use_on_oom") = false, py::arg("no_split") = false, py::arg("device") = py::none())
      .def(py::init([](MempoolId id, py::handle d) { return std::make_unique<MemPool>(id, dev(d, "MemPool")); }),
           py::arg("id"), py::arg("device") = py::none())
      .def(py::init([](const PluggableAllocator& a, py::handle use_on_oom, py::handle no_split, py::handle d) {
             const bool oom = to_bool(use_on_oom, Arg{"MemPool", "use_on_oom"});
             const bool split = to_bool(no_split, Arg{"MemPool", "no_split"});
             return std::make_unique<MemPool>(a, oom, split, dev(d, "MemPool"));
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
             g->guard = std::make_unique<UseMemPool>(pool, dev(d, "use_mem_pool"));
             return g;
           }),
           py::arg("pool"), py::arg("device") = py::none())
      .def("close", [](PyUseMemPool& g) { g.guard.reset(); });
  py::class_<PluggableAllocator>(m, "_PluggableAllocator")
      .def(py::init([](py::handle path, py::handle alloc_fn, py::handle free_fn) {
             const char* fn = "CUDAPluggableAllocator";
             const std::string so = to_string(path, Arg{fn, "path_to_so_file"});
             const std::string a = to_string(alloc_fn, Arg{fn, "alloc_fn_name"});
             return std::make_unique<PluggableAllocator>(so, a, to_string(free_fn, Arg{fn, "free_fn_name"}));
           }),
           py::arg("path_to_so"), py::arg("alloc_fn_name"), py::arg("free_fn_name"));
  m.def("_mem_change_allocator", &change_current_allocator);
}

Registrar reg("memory", order::memory, bind);

}  // namespace
}  // namespace cudakit::python
