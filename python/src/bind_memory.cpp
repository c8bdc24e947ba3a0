// Bindings for the memory module (names prefixed _mem_; python/cudakit/memory.py gives them
// torch.cuda.memory's names and signatures).
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstdio>
#include <optional>

#include "args.hpp"
#include "convert.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/dlpack.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/python_stacks.hpp"
#include "cudakit/tensor.hpp"
#include "py_stack.hpp"
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

MempoolId required_pool_id(py::handle v, Arg a) {
  if (v.is_none()) throw_type(a, "a (int, int) pool id (MemPool.id or graph_pool_handle())", v);
  return *pool_id_arg(v, a);
}

// Python stacks for _record_memory_history(stacks="python"/"all") are captured by
// capture_python_stack (py_stack.hpp) on the allocating thread, before any allocator lock
// (PendingScope); file/line/name are looked up here, at snapshot time.
void symbolize_python_frame(const PyFrameRef& fr, std::string& file, int& line,
                            std::string& name) {
  file = "??";
  name = "??";
  line = 0;
  if (!Py_IsInitialized() || !fr.code) return;
  PyGILState_STATE g = PyGILState_Ensure();
  python_frame_location(fr, file, line, name);
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
struct PyUseSleepPool {
  std::unique_ptr<UseSleepPool> guard;
};

// Sleep-pool tags: None (every tag), one str, or an iterable of str.
std::optional<std::vector<std::string>> tags_arg(py::handle v, Arg a, bool none_ok = true) {
  if (v.is_none() && none_ok) return std::nullopt;
  if (PyUnicode_Check(v.ptr())) return std::vector<std::string>{to_string(v, a)};
  if (v.is_none() || PyBytes_Check(v.ptr()) || !py::isinstance<py::iterable>(v))
    throw_type(a, none_ok ? "None, a str or an iterable of str" : "a str or an iterable of str", v);
  std::vector<std::string> out;
  for (py::handle t : v) {
    if (!PyUnicode_Check(t.ptr())) throw_type(a, "a str or an iterable of str (tags)", t);
    out.push_back(to_string(t, a));
  }
  return out;
}

py::dict pool_view_dict(const PoolView& v) {
  py::dict d;
  d["base"] = v.base;
  d["size"] = v.size;
  d["device"] = v.device;
  return d;
}

// memory_stats() as torch returns it: a collections.OrderedDict in sorted key order. The key
// objects are built once (interned) and the dict filled in one pass from one copy of the
// counters: no per-call std::string / std::map, and no Python-side sort (these were ~95 % of
// the call, issue 31).
py::object memory_stats_dict(int device) {
  struct Keys {
    std::vector<PyObject*> names;
    PyObject* ordered_dict = nullptr;
  };
  static const Keys* keys = [] {
    auto* k = new Keys;  // lives for the process (the interpreter owns the strings)
    for (const MemoryStatField& f : memory_stat_fields()) {
      PyObject* name = PyUnicode_InternFromString(f.key.c_str());
      if (!name) throw py::error_already_set();
      k->names.push_back(name);
    }
    k->ordered_dict = py::object(py::module_::import("collections").attr("OrderedDict")).release().ptr();
    return k;
  }();
  const MemoryStats s = memory_stats_of(device);
  const auto& fields = memory_stat_fields();
  // PyODict_SetItem on a fresh OrderedDict is the cheapest way in: OrderedDict(dict) goes
  // through MutableMapping.update (~7x slower).
  py::object out = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(keys->ordered_dict));
  if (!out) throw py::error_already_set();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    PyObject* v = PyLong_FromLongLong(fields[i].value(s));
    if (!v || PyODict_SetItem(out.ptr(), keys->names[i], v) < 0) {
      Py_XDECREF(v);
      throw py::error_already_set();
    }
    Py_DECREF(v);
  }
  return out;
}

// A tensor over pool memory at base + offset; `owner` (the view, or its mapping) lives as
// long as the tensor, so the mapping outlives every tensor made from it.
Tensor pool_tensor(std::uintptr_t base, std::size_t size, py::handle offset, py::handle shape,
                   py::handle dtype, int device, py::handle owner, const char* fn) {
  const std::string f = fn;
  const std::size_t off = to_size(offset, Arg{fn, "offset"});
  const Shape sizes = shape_arg(shape, Arg{fn, "shape"});
  const DType dt = dtype_arg(dtype, Arg{fn, "dtype"});
  std::size_t bytes = element_size(dt);
  for (std::int64_t n : sizes) {
    if (n < 0 || (n > 0 && bytes > size / static_cast<std::size_t>(n)))
      throw ValueError(f + "(): shape " + shape_str(sizes) + " does not fit in the pool's " +
                       std::to_string(size) + " bytes");
    bytes *= static_cast<std::size_t>(n);
  }
  if (off > size || bytes > size - off)
    throw ValueError(f + "(): offset " + std::to_string(off) + " + " + std::to_string(bytes) +
                     " bytes runs past the pool's " + std::to_string(size) + " bytes");
  auto* ref = new py::object(py::reinterpret_borrow<py::object>(owner));
  return from_blob(reinterpret_cast<void*>(base + off), sizes, contiguous_strides(sizes), dt,
                   Device::cuda(device), false, [ref] { release_foreign([ref] { delete ref; }); });
}

void bind(py::module_& m) {
  set_allocator_wait_hooks(&release_gil_if_held, &reacquire_gil);
  set_allocator_warning_handler(&warn_from_allocator);
  m.def("_mem_stats", [](py::handle d) { return memory_stats_dict(dev(d, "memory_stats")); }, py::arg("device") = py::none());
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
  // A foreign stream (CuPy's) about to be destroyed: cudakit::stream_retiring.
  m.def("_stream_retiring", [](std::uintptr_t handle, int device) {
    cudakit::stream_retiring(StreamRef::from_handle(reinterpret_cast<NativeStream>(handle), device));
  });
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
  // A private pool's state (cudakit/memory.hpp): torch's checkPoolLiveAllocations and
  // getCheckpointState / setCheckpointPoolState go through these (_torch_interop.py).
  m.def("_mem_pool_live_allocations", [](py::handle d, py::handle pool) {
    const char* fn = "pool_live_allocations";
    const MempoolId id = required_pool_id(pool, Arg{fn, "pool"});
    const int device = dev(d, fn);
    py::gil_scoped_release nogil;
    return pool_live_allocations(id, device);
  });
  py::class_<PoolState>(m, "_PoolState")
      .def_readonly("device", &PoolState::device)
      .def_property_readonly("pool", [](const PoolState& s) { return s.pool; })
      .def_property_readonly("segments", [](const PoolState& s) {
        py::list out;
        for (const PoolSegmentState& seg : s.segments) {
          py::list blocks;
          for (const PoolBlockState& b : seg.blocks) {
            py::dict bd;
            bd["ptr"] = b.ptr;
            bd["size"] = b.size;
            bd["allocated"] = b.allocated;
            bd["requested_size"] = b.requested;
            blocks.append(bd);
          }
          py::dict sd;
          sd["address"] = seg.address;
          sd["total_size"] = seg.size;
          sd["blocks"] = blocks;
          out.append(sd);
        }
        return out;
      });
  m.def("_mem_pool_state", [](py::handle d, py::handle pool) {
    const char* fn = "get_pool_state";
    const MempoolId id = required_pool_id(pool, Arg{fn, "pool"});
    const int device = dev(d, fn);
    py::gil_scoped_release nogil;
    return get_pool_state(id, device);
  });
  m.def("_mem_set_pool_state", [](const PoolState& state) {
    PoolStateDelta delta;
    {
      py::gil_scoped_release nogil;
      delta = set_pool_state(state);
    }
    return py::make_tuple(delta.freed, delta.allocated);
  });
  m.def("_mem_snapshot_json", [](py::handle pool) {
    return memory_snapshot_json(pool_id_arg(pool, Arg{"memory_snapshot", "mempool_id"}));
  }, py::arg("pool") = py::none());
  m.def("_mem_record_history", [](py::handle enabled, py::handle context, py::handle stacks,
                                  py::handle max_entries, py::handle clear_history) {
    const char* fn = "_record_memory_history";
    std::optional<std::string> en;
    if (!enabled.is_none()) en = to_string(enabled, Arg{fn, "enabled"});
    std::string ctx = context.is_none() ? std::string() : to_string(context, Arg{fn, "context"});
    std::string st = to_string(stacks, Arg{fn, "stacks"});
    std::size_t max = to_size(max_entries, Arg{fn, "max_entries"});
    const bool clear = to_bool(clear_history, Arg{fn, "clear_history"});
    set_python_stack_hooks(&capture_python_stack, &symbolize_python_frame);
    record_memory_history(en, ctx, st, max, clear);
  }, py::arg("enabled"), py::arg("context"), py::arg("stacks"), py::arg("max_entries"),
     py::arg("clear_history") = false);
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
  // Sleep and wake of tagged memory. sleep / wake_up / sleep_state wait for the device and
  // for each other (a process-wide mutex): the GIL is released first, so a thread waiting
  // for that mutex never holds the GIL another thread needs to finish.
  py::class_<PyUseSleepPool>(m, "_UseSleepPool")
      .def(py::init([](py::handle tag, py::handle d) {
             auto g = std::make_unique<PyUseSleepPool>();
             const std::string t = to_string(tag, Arg{"use_sleep_pool", "tag"});
             g->guard = std::make_unique<UseSleepPool>(t, dev(d, "use_sleep_pool"));
             return g;
           }),
           py::arg("tag"), py::arg("device") = py::none())
      .def("close", [](PyUseSleepPool& g) { g.guard.reset(); });
  m.def("_mem_sleep", [](py::handle tags, py::handle offload) {
    auto t = tags_arg(tags, Arg{"sleep", "tags"});
    auto o = tags_arg(offload, Arg{"sleep", "offload"}, /*none_ok=*/false);
    py::gil_scoped_release nogil;
    return sleep(t, *o);
  }, py::arg("tags") = py::none(), py::arg("offload") = py::tuple());
  m.def("_mem_wake_up", [](py::handle tags) {
    auto t = tags_arg(tags, Arg{"wake_up", "tags"});
    py::gil_scoped_release nogil;
    wake_up(t);
  }, py::arg("tags") = py::none());
  m.def("_mem_sleep_state", [] {
    std::map<std::string, SleepPoolState> st;
    {
      py::gil_scoped_release nogil;
      st = sleep_state();
    }
    py::dict out;
    for (const auto& [tag, s] : st) {
      py::dict d;
      d["bytes"] = s.bytes;
      d["allocated_bytes"] = s.allocated_bytes;
      d["asleep"] = s.asleep;
      d["offloaded"] = s.offloaded;
      out[py::str(tag)] = d;
    }
    return out;
  });
  m.def("_mem_export_pool", [](py::handle tag, py::handle d) {
    const std::string t = to_string(tag, Arg{"export_pool", "tag"});
    const int di = dev(d, "export_pool");
    std::vector<unsigned char> h;
    {
      py::gil_scoped_release nogil;
      h = export_pool(t, di);
    }
    return py::bytes(reinterpret_cast<const char*>(h.data()), h.size());
  }, py::arg("tag"), py::arg("device") = py::none());
  m.def("_mem_pool_view", [](py::handle tag, py::handle d) {
    const std::string t = to_string(tag, Arg{"pool_view", "tag"});
    const int di = dev(d, "pool_view");
    PoolView v;
    {
      py::gil_scoped_release nogil;
      v = pool_view(t, di);
    }
    return pool_view_dict(v);
  }, py::arg("tag"), py::arg("device") = py::none());
  m.def("_mem_import_pool", [](py::handle handle) {
    if (!PyBytes_Check(handle.ptr()) && !PyByteArray_Check(handle.ptr()) &&
        !PyMemoryView_Check(handle.ptr()))
      throw_type(Arg{"import_pool", "handle"}, "bytes (from export_pool)", handle);
    const std::string s = py::bytes(py::reinterpret_borrow<py::object>(handle));
    std::vector<unsigned char> h(s.begin(), s.end());
    PoolView v;
    {
      py::gil_scoped_release nogil;
      v = import_pool(h);
    }
    return pool_view_dict(v);
  }, py::arg("handle"));
  m.def("_mem_close_pool", [](std::uintptr_t base, std::size_t size, int device) {
    py::gil_scoped_release nogil;
    close_pool(PoolView{base, size, device});
  });
  // A tensor over pool memory at `address` (a view's base + offset): `owner` (the view) is
  // kept alive by the tensor, so the mapping outlives every tensor made from it.
  m.def("_mem_pool_tensor", [](std::uintptr_t base, std::size_t size, py::handle offset,
                               py::handle shape, py::handle dtype, int device, py::handle owner) {
    return pool_tensor(base, size, offset, shape, dtype, device, owner, "PoolView.tensor");
  });
  // The hand-off's batch form: one call for a whole layout of (offset, shape, dtype) items,
  // as cudakit tensors or as DLPack capsules ("dltensor", for torch.from_dlpack /
  // cupy.from_dlpack): no Python call, stream query or __dlpack__ round trip per tensor.
  m.def("_mem_pool_tensors", [](std::uintptr_t base, std::size_t size, py::handle layout,
                                int device, py::handle owner, bool capsules) {
    const char* fn = capsules ? "PoolView.dlpack" : "PoolView.tensors";
    py::list out;
    for (py::handle item : py::reinterpret_borrow<py::iterable>(layout)) {
      if (!PyTuple_Check(item.ptr()) && !PyList_Check(item.ptr()))
        throw_type(Arg{fn, "layout"}, "an iterable of (offset, shape, dtype) tuples", item);
      py::sequence spec = py::reinterpret_borrow<py::sequence>(item);
      if (py::len(spec) != 3)
        throw ValueError(std::string(fn) + "(): each layout item is (offset, shape, dtype), got " +
                         std::to_string(py::len(spec)) + " values");
      Tensor t = pool_tensor(base, size, spec[0], spec[1], spec[2], device, owner, fn);
      if (!capsules) {
        out.append(py::cast(std::move(t)));
        continue;
      }
      out.append(py::capsule(dlpack::to_dlpack(t), "dltensor", [](PyObject* c) {
        if (PyCapsule_IsValid(c, "dltensor")) {  // never consumed: the capsule still owns it
          auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
          if (m && m->deleter) m->deleter(m);
        } else {
          PyErr_Clear();
        }
      }));
    }
    return out;
  });
  m.def("_mem_change_allocator", &change_current_allocator);
}

Registrar reg("memory", order::memory, bind);

}  // namespace
}  // namespace cudakit::python
