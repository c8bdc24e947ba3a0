// Bindings: CUDA graphs (_CUDAGraph, hooks, is_current_stream_capturing) and graph kernel
// annotations. The Python layer (cudakit/graphs.py, cudakit/_graph_annotations.py) adds the
// graph context manager, make_graphed_callables and torch's names on top.
//
// replay() is the hot path: it is a native method with the GIL released (as torch, and as a
// ctypes call of cuGraphLaunch), with no Python code unless hooks are registered. Hooks
// written in Python are stored in C++ lists; each call takes the GIL and hands the hook the
// graph's own Python object (pybind11 finds the registered instance).
//
// Python objects held by C++ (hooks, destroy callbacks, retained objects) are released
// with the GIL held; after interpreter shutdown they are leaked instead.
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cudakit/error.hpp"
#include "cudakit/graph_annotations.hpp"
#include "cudakit/graphs.hpp"
#include "args.hpp"
#include "fast_path.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

namespace ga = cudakit::graph_annotations;

// torch's warning at capture_end for a capture that recorded no work (its usual cause: the
// work ran on another device or stream than the one capturing).
void warn_if_empty(const CUDAGraph& g) {
  if (!g.captured_empty()) return;
  if (PyErr_WarnEx(PyExc_UserWarning,
                   "The CUDA Graph is empty. This usually means that the graph was attempted to "
                   "be captured on wrong device or stream.",
                   1) != 0) {
    throw py::error_already_set();
  }
}

bool interpreter_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// A Python object owned from C++: destroyed under the GIL (or leaked at shutdown).
std::shared_ptr<py::object> hold(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    if (!interpreter_alive()) return;  // leak: the interpreter is gone or going
    py::gil_scoped_acquire gil;
    delete p;
  });
}

void require_callable(py::handle fn, const char* what) {
  if (!PyCallable_Check(fn.ptr())) {
    throw py::type_error(std::string(what) + ": expected a callable, got " +
                         std::string(py::str(py::type::of(fn).attr("__name__"))));
  }
}

GraphHook graph_hook(py::handle fn, const char* what) {
  require_callable(fn, what);
  auto ref = hold(py::reinterpret_borrow<py::object>(fn));
  return [ref](CUDAGraph& g) {
    py::gil_scoped_acquire gil;
    (*ref)(py::cast(&g, py::return_value_policy::reference));
  };
}

std::optional<MempoolId> pool_arg(py::handle pool) {
  if (pool.is_none()) return std::nullopt;
  py::object p = py::reinterpret_borrow<py::object>(pool);
  if (py::hasattr(p, "id") && !py::isinstance<py::tuple>(p)) p = p.attr("id");  // MemPool
  if (py::isinstance<py::tuple>(p) || py::isinstance<py::list>(p)) {
    py::sequence seq = p;
    if (seq.size() == 2) {
      try {
        return MempoolId{seq[0].cast<std::uint64_t>(), seq[1].cast<std::uint64_t>()};
      } catch (const py::cast_error&) {
      }
    }
  }
  throw ValueError("pool must be None, a pool handle (graph_pool_handle() or "
                   "CUDAGraph.pool(): a pair of ints) or a MemPool, got " +
                   std::string(py::repr(pool)));
}

CaptureErrorMode mode_arg(py::handle mode) {
  if (!py::isinstance<py::str>(mode)) {
    throw py::type_error("capture_error_mode must be a str ('global', 'thread_local' or "
                         "'relaxed'), got " + std::string(py::repr(mode)));
  }
  return parse_capture_error_mode(mode.cast<std::string>());
}

py::tuple pool_tuple(const MempoolId& id) { return py::make_tuple(id.first, id.second); }

// ---- annotations: dict <-> Annotation ----

ga::AnnotationValue annotation_value(const std::string& key, py::handle v) {
  if (v.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::int_>(v) || py::hasattr(v, "__index__")) {
    try {
      return py::cast<std::int64_t>(py::reinterpret_borrow<py::object>(v));
    } catch (const py::cast_error&) {
      throw ValueError("mark_kernels: annotation value for key '" + key +
                       "' does not fit a 64-bit integer: " + std::string(py::repr(v)));
    }
  }
  if (py::isinstance<py::float_>(v) || py::hasattr(v, "__float__")) {
    return py::cast<double>(py::reinterpret_borrow<py::object>(v));
  }
  throw py::type_error("mark_kernels: annotation value for key '" + key +
                       "' must be a JSON scalar (str, int, float, bool or None), got " +
                       std::string(py::str(py::type::of(v).attr("__name__"))));
}

ga::Annotation annotation_arg(py::handle a) {
  if (py::isinstance<py::str>(a)) return {{"name", a.cast<std::string>()}};
  if (!py::isinstance<py::dict>(a)) {
    throw py::type_error("mark_kernels: annotation must be a str or a dict, got " +
                         std::string(py::str(py::type::of(a).attr("__name__"))));
  }
  ga::Annotation out;
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(a)) {
    if (!py::isinstance<py::str>(k)) {
      throw py::type_error("mark_kernels: annotation keys must be str, got " +
                           std::string(py::repr(k)));
    }
    std::string key = k.cast<std::string>();
    out.emplace_back(key, annotation_value(key, v));
  }
  return out;
}

py::dict annotation_dict(const ga::Annotation& a) {
  py::dict d;
  for (const auto& [k, v] : a) {
    d[py::str(k)] = std::visit(
        [](const auto& x) -> py::object {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::nullptr_t>) {
            return py::none();
          } else {
            return py::cast(x);
          }
        },
        v);
  }
  return d;
}

struct PyMarkKernels {
  ga::Annotation annotation;
  std::unique_ptr<ga::MarkKernels> scope;
  std::string label;  // "mark_kernels('attention')", for errors
  std::shared_ptr<int> token = std::make_shared<int>(0);  // identity; expires with the object
};

// The scopes the calling thread entered and has not exited, innermost last. Scopes nest
// (an inner scope's annotation merges over the outer's until it exits), so exiting one
// that is not the innermost, or one that is not entered, is a program error: said at once,
// naming the scope, instead of leaving the merge silently wrong. Weak references: a scope
// object collected without __exit__ has ended its C++ scope, and is skipped.
struct OpenScope {
  std::weak_ptr<int> token;
  std::string label;
};
std::vector<OpenScope>& open_scopes() {
  thread_local std::vector<OpenScope> v;
  return v;
}

void enter_scope(PyMarkKernels& s) {
  if (s.scope) throw Error(s.label + ": this scope is already entered (exit it first)");
  s.scope = std::make_unique<ga::MarkKernels>(s.annotation);
  open_scopes().push_back(OpenScope{s.token, s.label});
}

void exit_scope(PyMarkKernels& s) {
  if (!s.scope) {
    throw Error(s.label + ": __exit__ without a matching __enter__ (the scope was exited twice, or "
                "never entered)");
  }
  auto& v = open_scopes();
  while (!v.empty() && v.back().token.expired()) v.pop_back();
  auto mine = std::find_if(v.begin(), v.end(), [&](const OpenScope& o) {
    return !o.token.owner_before(s.token) && !s.token.owner_before(o.token);
  });
  if (mine != v.end() && mine + 1 != v.end()) {
    throw Error(s.label + ": exited while the inner scope " + v.back().label +
                " is still open (scopes must exit in the reverse order of entry)");
  }
  if (mine != v.end()) v.erase(mine);
  s.scope.reset();
}

// ---- get_graph_data ----

py::object graph_data_dict(const GraphData& d) {
  py::list nodes;
  bool nested = false;
  for (const GraphNodeData& n : d.nodes) {
    py::dict nd;
    nd["index"] = n.index;
    nd["node_type"] = n.node_type;
    nd["tools_id"] = n.tools_id;
    nd["graph_id"] = n.graph_id;
    nd["node_id"] = n.node_id;
    nd["kernel_name"] = n.kernel_name ? py::object(py::str(*n.kernel_name)) : py::object(py::none());
    nd["event_ptr"] = n.event_ptr;
    nd["host_fn_addr"] = n.host_fn_addr;
    nd["host_fn_name"] =
        n.host_fn_name ? py::object(py::str(*n.host_fn_name)) : py::object(py::none());
    nd["dependencies"] = py::cast(n.dependencies);
    nd["dependents"] = py::cast(n.dependents);
    nodes.append(nd);
    nested = nested || n.node_type == "child_graph" || n.node_type == "conditional";
  }
  if (nested) {
    PyErr_WarnEx(PyExc_UserWarning,
                 "get_graph_data: the graph has child_graph/conditional nodes; their bodies are "
                 "separate graphs and are not listed (the reported ids stay valid)",
                 2);
  }
  py::dict out;
  out["exec_graph_id"] = d.exec_graph_id;
  out["nodes"] = nodes;
  return out;
}

// Within one instantiate()'s hooks C++ returns the same GraphData; return the same dict too.
struct GraphDataCache {
  std::shared_ptr<const GraphData> data;
  py::object dict;
};

py::object get_graph_data(py::object self) {
  CUDAGraph& g = self.cast<CUDAGraph&>();
  std::shared_ptr<const GraphData> data = g.get_graph_data();
  py::object cached = py::getattr(self, "_cudakit_graph_data_cache", py::none());
  if (!cached.is_none()) {
    auto& c = cached.cast<GraphDataCache&>();
    if (c.data == data) return c.dict;
  }
  GraphDataCache c{data, graph_data_dict(*data)};
  py::object dict = c.dict;
  py::setattr(self, "_cudakit_graph_data_cache", py::cast(std::move(c)));
  return dict;
}

// ---- replay(): a CPython method, not a pybind11 one (fast_path.hpp) ----
// pybind11's dispatcher (overload resolution, the self caster, a call guard) cost ~0.15 us per
// replay on the H200 host: cudakit replay was 2.51 us against 2.07 us for a raw ctypes
// cuGraphLaunch, over the issue's +0.3 us budget. This METH_NOARGS method finds the C++
// object in the pybind11 instance directly (the method descriptor has already checked
// self's type), releases the GIL around the launch, and raises any exception through the
// one exception table once it holds the GIL again.
PyObject* fast_replay(PyObject* self, PyObject* /*unused*/) {
  auto* graph = fast_path::held<CUDAGraph>(self);
  if (graph == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "CUDAGraph.replay(): the graph was not initialised "
                                        "(call CUDAGraph.__init__)");
    return nullptr;
  }
  std::exception_ptr error;
  Py_BEGIN_ALLOW_THREADS
  try {
    graph->replay();
  } catch (...) {
    error = std::current_exception();
  }
  Py_END_ALLOW_THREADS
  if (!error) Py_RETURN_NONE;
  return set_python_error(error);
}

PyMethodDef g_fast_replay_def = {
    "replay", &fast_replay, METH_NOARGS,
    "replay()\n--\n\nLaunches the instantiated graph on the current stream (instantiating it "
    "first when keep_graph=True and it was not instantiated yet). Fires replay hooks."};

void bind(py::module_& m) {
  py::class_<HookHandle>(m, "_HookHandle", R"doc(
Handle of a registered hook (torch.utils.hooks.RemovableHandle): remove() unregisters it;
usable as a context manager.)doc")
      .def("remove", &HookHandle::remove)
      .def_property_readonly("id", &HookHandle::id)
      .def_property_readonly("registered", &HookHandle::registered)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](HookHandle& h, py::handle, py::handle, py::handle) { h.remove(); });

  py::class_<GraphDataCache>(m, "_GraphDataCache");

  auto graph_cls = py::class_<CUDAGraph>(m, "_CUDAGraph", py::dynamic_attr());
  fast_path::add_method(graph_cls, g_fast_replay_def);
  graph_cls
      .def(py::init([](py::handle keep) {
             return std::make_unique<CUDAGraph>(to_bool(keep, Arg{"CUDAGraph", "keep_graph"}));
           }),
           py::arg("keep_graph") = false)
      .def(
          "capture_begin",
          [](CUDAGraph& g, py::handle pool, py::handle mode, bool check_input_liveness,
             bool enable_annotations) {
            if (check_input_liveness) {
              throw NotSupportedError("capture_begin: check_input_liveness=True is not "
                                      "implemented by cudakit");
            }
            g.capture_begin(pool_arg(pool), mode_arg(mode), enable_annotations);
          },
          py::arg("pool") = py::none(), py::arg("capture_error_mode") = "global",
          py::arg("check_input_liveness") = false, py::arg("enable_annotations") = false)
      .def("capture_end",
           [](CUDAGraph& g) {
             g.capture_end();
             warn_if_empty(g);
           })
      .def("capture_end_pre",
           [](CUDAGraph& g) {
             g.capture_end_pre();
             warn_if_empty(g);
           })
      .def("capture_end_post", &CUDAGraph::capture_end_post)
      .def("_abort_capture", &CUDAGraph::abort_capture)
      .def("instantiate", &CUDAGraph::instantiate)
      .def("reset", &CUDAGraph::reset)
      .def("update",
           [](CUDAGraph& g, py::handle other) {
             if (!py::isinstance<CUDAGraph>(other)) {
               throw py::type_error("CUDAGraph.update(): argument 'other' must be a "
                                    "cudakit.CUDAGraph, not " +
                                    std::string(py::str(py::type::of(other).attr("__name__"))));
             }
             g.update(other.cast<const CUDAGraph&>());
           },
           py::arg("other"))
      .def("pool", [](const CUDAGraph& g) { return pool_tuple(g.pool()); })
      .def("pools",
           [](const CUDAGraph& g) {
             py::list out;
             for (const MempoolId& id : g.pools()) out.append(pool_tuple(id));
             return out;
           })
      .def("_retain_pool",
           [](CUDAGraph& g, py::handle pool) {
             auto id = pool_arg(pool);
             if (!id) throw ValueError("_retain_pool: expected a memory pool, got None");
             g.retain_pool(*id);
           })
      .def("raw_cuda_graph",
           [](const CUDAGraph& g) { return reinterpret_cast<std::uintptr_t>(g.raw_cuda_graph()); })
      .def("raw_cuda_graph_exec",
           [](const CUDAGraph& g) {
             return reinterpret_cast<std::uintptr_t>(g.raw_cuda_graph_exec());
           })
      .def("enable_debug_mode", &CUDAGraph::enable_debug_mode)
      .def("debug_dump", &CUDAGraph::debug_dump, py::arg("debug_path"), py::kw_only(),
           py::arg("verbose") = true)
      .def("get_graph_data", &get_graph_data)
      .def(
          "register_destroy_callback",
          [](CUDAGraph& g, py::handle cb, bool sync) {
            require_callable(cb, "register_destroy_callback");
            auto ref = hold(py::reinterpret_borrow<py::object>(cb));
            return g.register_destroy_callback(
                [ref] {
                  py::gil_scoped_acquire gil;
                  (*ref)();
                },
                sync);
          },
          py::arg("cb"), py::kw_only(), py::arg("synchronize_before_release") = false)
      .def(
          "retain_object",
          [](CUDAGraph& g, py::handle obj, bool sync) {
            return g.retain_object(hold(py::reinterpret_borrow<py::object>(obj)), sync);
          },
          py::arg("obj"), py::kw_only(), py::arg("synchronize_before_release") = false)
      .def("register_capture_start_hook",
           [](CUDAGraph& g, py::handle h) {
             return g.register_capture_start_hook(graph_hook(h, "register_capture_start_hook"));
           })
      .def("register_capture_end_hook",
           [](CUDAGraph& g, py::handle h) {
             return g.register_capture_end_hook(graph_hook(h, "register_capture_end_hook"));
           })
      .def("register_post_instantiate_hook",
           [](CUDAGraph& g, py::handle h) {
             return g.register_post_instantiate_hook(
                 graph_hook(h, "register_post_instantiate_hook"));
           })
      .def("register_replay_start_hook",
           [](CUDAGraph& g, py::handle h) {
             return g.register_replay_start_hook(graph_hook(h, "register_replay_start_hook"));
           })
      .def("register_replay_end_hook",
           [](CUDAGraph& g, py::handle h) {
             return g.register_replay_end_hook(graph_hook(h, "register_replay_end_hook"));
           })
      .def_property_readonly("_keep_graph", &CUDAGraph::keep_graph)
      .def_property_readonly("_has_graph", &CUDAGraph::has_graph)
      .def_property_readonly("_has_graph_exec", &CUDAGraph::has_graph_exec)
      .def_property_readonly("_is_capturing", &CUDAGraph::is_capturing)
      .def_property_readonly("_device", &CUDAGraph::device)
      .def_property_readonly("_capture_id", &CUDAGraph::capture_id)
      .def_property_readonly("_exec_graph_id", &CUDAGraph::exec_graph_id);

  m.def("_is_current_stream_capturing", &is_current_stream_capturing);
  m.def("_synchronize_for_capture", [](int device) {
    py::gil_scoped_release release;
    return synchronize_for_capture(device);
  }, py::arg("device") = -1);
  m.def("_parse_capture_error_mode",
        [](py::handle mode) { return std::string(capture_error_mode_name(mode_arg(mode))); });

  m.def("_register_graph_capture_start_hook", [](py::handle fn) {
    return register_graph_capture_start_hook(graph_hook(fn, "register_graph_capture_start_hook"));
  });
  m.def("_register_graph_capture_end_hook", [](py::handle fn) {
    return register_graph_capture_end_hook(graph_hook(fn, "register_graph_capture_end_hook"));
  });
  m.def("_register_graph_instantiate_hook", [](py::handle fn) {
    return register_graph_instantiate_hook(graph_hook(fn, "register_graph_instantiate_hook"));
  });
  m.def("_register_graph_replay_start_hook", [](py::handle fn) {
    return register_graph_replay_start_hook(graph_hook(fn, "register_graph_replay_start_hook"));
  });
  m.def("_register_graph_replay_end_hook", [](py::handle fn) {
    return register_graph_replay_end_hook(graph_hook(fn, "register_graph_replay_end_hook"));
  });
  m.def("_register_graph_destroy_hook", [](py::handle fn) {
    require_callable(fn, "register_graph_destroy_hook");
    auto ref = hold(py::reinterpret_borrow<py::object>(fn));
    return register_graph_destroy_hook([ref](const std::vector<std::uint32_t>& ids) {
      py::gil_scoped_acquire gil;
      py::set s;
      for (std::uint32_t id : ids) s.add(py::int_(id));
      (*ref)(s);
    });
  });

  // ---- kernel annotations ----
  py::class_<PyMarkKernels>(m, "_MarkKernels")
      .def(py::init([](py::handle a) {
             PyMarkKernels s{annotation_arg(a), nullptr};
             s.label = "mark_kernels(" + py::repr(a).cast<std::string>() + ")";
             return s;
           }),
           py::arg("annotation"))
      .def("__enter__",
           [](py::object self) {
             enter_scope(self.cast<PyMarkKernels&>());
             return self;
           })
      .def("__exit__",
           [](PyMarkKernels& s, py::handle, py::handle, py::handle) { exit_scope(s); })
      .def_property_readonly("recording",
                             [](const PyMarkKernels& s) { return s.scope && s.scope->recording(); });
  m.def("_graph_annotations_available", &ga::is_available);
  m.def("_kernel_annotation", [](std::uint64_t id) -> py::object {
    auto a = ga::kernel_annotation(id);
    if (!a) return py::none();
    return annotation_dict(*a);
  });
  m.def("_annotated_node_ids", &ga::annotated_node_ids);
  m.def("_annotated_node_count", &ga::annotated_node_count);
  m.def("_clear_kernel_annotations", &ga::clear_kernel_annotations);
}

Registrar reg("graphs", order::graphs, bind);

}  // namespace
}  // namespace cudakit::python
