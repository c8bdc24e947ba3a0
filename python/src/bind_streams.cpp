// Bindings: Stream, ExternalStream, Event, StreamContext and the current-stream functions.
// These are native classes (not Python wrappers) so current_stream(), Event.record() and
// `with stream(s):` each cost well under a microsecond.
#include <pybind11/stl.h>

#include <cstring>
#include <optional>

#include "cudakit/stream.hpp"
#include "cudakit/error.hpp"
#include "device_arg.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

// Python-visible stream: a StreamRef value (pool, default or external stream; cudakit never
// destroys these, as torch never destroys pool streams).
struct PyStream {
  StreamRef ref;
};

// Distinct C++ type so pybind11 can register the Python subclass ExternalStream.
struct PyExternalStream : PyStream {};

struct PyEvent {
  Event event;
};

// `with stream(s):` — saves/restores device and current stream. None is a no-op (torch).
struct PyStreamContext {
  std::optional<StreamRef> stream;
  std::optional<StreamRef> prev_stream;
  int prev_device = -1;
};

StreamRef stream_arg(py::handle obj) {
  if (obj.is_none()) return current_stream();
  if (py::isinstance<PyStream>(obj)) return obj.cast<PyStream&>().ref;
  // Foreign stream objects: torch.cuda.Stream / cupy streams expose cuda_stream / ptr, or
  // the __cuda_stream__ protocol.
  if (py::hasattr(obj, "__cuda_stream__")) {
    py::tuple t = obj.attr("__cuda_stream__")();
    return get_stream_from_external(t[1].cast<std::uintptr_t>());
  }
  if (py::hasattr(obj, "cuda_stream")) {
    return get_stream_from_external(obj.attr("cuda_stream").cast<std::uintptr_t>());
  }
  throw ValueError("expected a cudakit.Stream (or an object with __cuda_stream__), got " +
                   std::string(py::str(py::type::of(obj))));
}

py::object make_device(int index) {
  return py::module_::import("cudakit._C").attr("_make_device")(index);
}

void bind(py::module_& m) {
  auto stream_cls = py::class_<PyStream>(m, "Stream", py::dynamic_attr(), R"doc(
A CUDA stream (torch.cuda.Stream). Stream(device=None, priority=0) draws from the device's
pool of streams (round-robin, 32 per priority); lower priority numbers run first.)doc");
  stream_cls
      .def(py::init([](py::object device, int priority, py::kwargs kw) {
             if (kw.contains("stream_ptr")) {  // internal: wrap an existing handle
               return PyStream{get_stream_from_external(kw["stream_ptr"].cast<std::uintptr_t>(),
                                                        device_index(device))};
             }
             return PyStream{stream_from_pool(device_index(device), priority)};
           }),
           py::arg("device") = py::none(), py::arg("priority") = 0)
      .def("query", [](const PyStream& s) { return s.ref.is_done(); })
      .def("synchronize", [](const PyStream& s) {
        py::gil_scoped_release r;
        s.ref.sync();
      })
      .def("wait_event", [](const PyStream& s, PyEvent& e) { s.ref.wait(e.event); }, py::arg("event"))
      .def("wait_stream", [](const PyStream& s, py::handle other) { s.ref.wait(stream_arg(other)); },
           py::arg("stream"))
      .def("record_event",
           [](const PyStream& s, py::object event) -> py::object {
             if (event.is_none()) {
               auto e = py::cast(PyEvent{Event()});
               e.cast<PyEvent&>().event.record(s.ref);
               return e;
             }
             event.cast<PyEvent&>().event.record(s.ref);
             return event;
           },
           py::arg("event") = py::none())
      .def_property_readonly("priority", [](const PyStream& s) { return s.ref.priority(); })
      .def_property_readonly("cuda_stream", [](const PyStream& s) {
        return reinterpret_cast<std::uintptr_t>(s.ref.handle());
      })
      .def_property_readonly("stream_id", [](const PyStream& s) { return s.ref.id(); })
      .def_property_readonly("device_index", [](const PyStream& s) { return s.ref.device(); })
      .def_property_readonly("device_type", [](const PyStream&) { return 1; })  // kCUDA
      .def_property_readonly("device", [](const PyStream& s) { return make_device(s.ref.device()); })
      .def("__cuda_stream__", [](const PyStream& s) {
        return py::make_tuple(0, reinterpret_cast<std::uintptr_t>(s.ref.handle()));
      })
      .def("__eq__",
           [](const PyStream& a, py::object b) {
             return py::isinstance<PyStream>(b) && a.ref == b.cast<PyStream&>().ref;
           })
      .def("__hash__", [](const PyStream& s) { return std::hash<StreamRef>()(s.ref); })
      .def("__repr__", [](const PyStream& s) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "<cudakit.Stream device=cuda:%d cuda_stream=0x%zx>",
                      s.ref.device(), reinterpret_cast<std::uintptr_t>(s.ref.handle()));
        return std::string(buf);
      });

  py::class_<PyExternalStream, PyStream>(m, "ExternalStream", R"doc(
Wraps a stream created elsewhere (another library, raw CUDA). The caller keeps it alive.)doc")
      .def(py::init([](std::uintptr_t ptr, py::object device) {
             return PyExternalStream{{get_stream_from_external(ptr, device_index(device))}};
           }),
           py::arg("stream_ptr"), py::arg("device") = py::none());

  py::class_<PyEvent>(m, "Event", R"doc(
A CUDA event (torch.cuda.Event). Created lazily on the device of the first stream it is
recorded on.)doc")
      .def(py::init([](bool enable_timing, bool blocking, bool interprocess) {
             return PyEvent{Event(EventOptions{enable_timing, blocking, interprocess})};
           }),
           py::arg("enable_timing") = false, py::arg("blocking") = false,
           py::arg("interprocess") = false)
      .def("record",
           [](PyEvent& e, py::object stream) { e.event.record(stream_arg(stream)); },
           py::arg("stream") = py::none())
      .def("wait", [](PyEvent& e, py::object stream) { e.event.wait(stream_arg(stream)); },
           py::arg("stream") = py::none())
      .def("query", [](PyEvent& e) { return e.event.query(); })
      .def("synchronize", [](PyEvent& e) {
        py::gil_scoped_release r;
        e.event.sync();
      })
      .def("elapsed_time", [](PyEvent& a, PyEvent& b) { return a.event.elapsed_time(b.event); },
           py::arg("end_event"))
      .def("ipc_handle", [](PyEvent& e) {
        auto h = e.event.ipc_handle();
        return py::bytes(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes);
      })
      .def_static("from_ipc_handle",
                  [](py::object device, py::bytes handle) {
                    std::string raw = handle;
                    if (raw.size() != 64) throw ValueError("ipc handle must be 64 bytes");
                    Event::IpcHandle h;
                    std::memcpy(h.bytes, raw.data(), 64);
                    return PyEvent{Event::from_ipc_handle(device_index(device), h)};
                  },
                  py::arg("device"), py::arg("handle"))
      .def_property_readonly("cuda_event", [](PyEvent& e) {
        return reinterpret_cast<std::uintptr_t>(e.event.handle());
      })
      .def_property_readonly("device", [](PyEvent& e) -> py::object {
        return e.event.device() < 0 ? py::none() : make_device(e.event.device());
      })
      .def("__repr__", [](PyEvent& e) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "<cudakit.Event 0x%zx>",
                      reinterpret_cast<std::uintptr_t>(e.event.handle()));
        return std::string(buf);
      });

  py::class_<PyStreamContext>(m, "StreamContext", R"doc(
Context manager that selects a stream (and its device); None makes it a no-op.)doc")
      .def(py::init([](py::object s) {
             PyStreamContext c;
             if (!s.is_none()) c.stream = stream_arg(s);
             return c;
           }),
           py::arg("stream"))
      .def("__enter__",
           [](PyStreamContext& c) {
             if (!c.stream) return;
             c.prev_device = current_device();
             c.prev_stream = current_stream(c.stream->device());
             if (c.stream->device() != c.prev_device) set_device(c.stream->device());
             set_stream(*c.stream);
           })
      .def("__exit__", [](PyStreamContext& c, py::handle, py::handle, py::handle) {
        if (!c.stream) return;
        set_stream(*c.prev_stream);
        if (c.stream->device() != c.prev_device) set_device(c.prev_device);
      });

  m.def("stream", [](py::object s) {
    PyStreamContext c;
    if (!s.is_none()) c.stream = stream_arg(s);
    return c;
  }, py::arg("stream"));
  m.def("current_stream", [](py::object d) { return PyStream{current_stream(device_index(d))}; },
        py::arg("device") = py::none());
  m.def("default_stream", [](py::object d) { return PyStream{default_stream(device_index(d))}; },
        py::arg("device") = py::none());
  m.def("set_stream", [](py::object s) {
    if (!s.is_none()) set_stream(stream_arg(s));
  }, py::arg("stream"));
  m.def("get_stream_from_external",
        [](std::uintptr_t ptr, py::object d) {
          return PyStream{get_stream_from_external(ptr, device_index(d))};
        },
        py::arg("data_ptr"), py::arg("device") = py::none());
  m.def("_stream_arg_handle", [](py::object s) {
    return reinterpret_cast<std::uintptr_t>(stream_arg(s).handle());
  });
}

Registrar reg("streams", 10, bind);

}  // namespace
}  // namespace cudakit::python
