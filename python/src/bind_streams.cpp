// Bindings: Stream, ExternalStream, Event, StreamContext and the current-stream functions.
// These are native classes (not Python wrappers) so current_stream(), Event.record() and
// `with stream(s):` each cost well under a microsecond.
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "args.hpp"
#include "bound_types.hpp"
#include "cudakit/error.hpp"
#include "cudakit/stream.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

// `with stream(s):` — saves/restores device and current stream. None is a no-op (torch).
struct PyStreamContext {
  std::optional<StreamRef> stream;
  std::optional<StreamRef> prev_stream;
  int prev_device = -1;
};

py::object cuda_device(int index) { return py::cast(Device{Device::Type::cuda, index}); }

PyEvent& event_arg(py::handle v, Arg a) {
  if (!py::isinstance<PyEvent>(v)) throw_type(a, "a cudakit.Event", v);
  return v.cast<PyEvent&>();
}

PyStreamContext make_context(py::handle s, const char* fn) {
  PyStreamContext c;
  if (!s.is_none()) c.stream = stream_arg(s, Arg{fn, "stream"});
  return c;
}

void bind(py::module_& m) {
  // Test support: occupies `stream` for `seconds` with a host function (a kernel-free way to
  // keep later work queued while a test looks at the allocator).
  m.def("_launch_host_sleep", [](py::handle stream, py::handle seconds) {
    const StreamRef s = stream_arg(stream, Arg{"_launch_host_sleep", "stream"});
    const double sec = to_double(seconds, Arg{"_launch_host_sleep", "seconds"});
    py::gil_scoped_release release;
    s.launch_host_func([sec] {
      std::this_thread::sleep_for(std::chrono::duration<double>(sec));
    });
  });
  // Raw-pointer copies (torch has none; the names are cudakit::memcpy_async & co.'s). Pointers
  // are ints (tensor.data_ptr(), __cuda_array_interface__['data'][0], ...).
  m.def("memcpy_async",
        [](py::handle dst, py::handle src, py::handle nbytes, py::handle stream) {
          const Arg a{"memcpy_async", "stream"};
          memcpy_async(reinterpret_cast<void*>(to_address(dst, Arg{"memcpy_async", "dst"})),
                       reinterpret_cast<const void*>(to_address(src, Arg{"memcpy_async", "src"})),
                       to_size(nbytes, Arg{"memcpy_async", "nbytes"}), stream_arg(stream, a));
        },
        py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("stream") = py::none());
  m.def("memset_async",
        [](py::handle dst, py::handle value, py::handle nbytes, py::handle stream) {
          memset_async(reinterpret_cast<void*>(to_address(dst, Arg{"memset_async", "dst"})),
                       to_int(value, Arg{"memset_async", "value"}),
                       to_size(nbytes, Arg{"memset_async", "nbytes"}),
                       stream_arg(stream, Arg{"memset_async", "stream"}));
        },
        py::arg("dst"), py::arg("value"), py::arg("nbytes"), py::arg("stream") = py::none());
  m.def("memcpy_peer_async",
        [](py::handle dst, py::handle dst_device, py::handle src, py::handle src_device,
           py::handle nbytes, py::handle stream) {
          const char* f = "memcpy_peer_async";
          memcpy_peer_async(reinterpret_cast<void*>(to_address(dst, Arg{f, "dst"})),
                            cuda_index(dst_device, Arg{f, "dst_device"}, false),
                            reinterpret_cast<const void*>(to_address(src, Arg{f, "src"})),
                            cuda_index(src_device, Arg{f, "src_device"}, false),
                            to_size(nbytes, Arg{f, "nbytes"}), stream_arg(stream, Arg{f, "stream"}));
        },
        py::arg("dst"), py::arg("dst_device"), py::arg("src"), py::arg("src_device"),
        py::arg("nbytes"), py::arg("stream") = py::none());
  auto stream_cls = py::class_<PyStream>(m, "Stream", py::dynamic_attr(), R"doc(
A CUDA stream (torch.cuda.Stream). Stream(device=None, priority=0) draws from the device's
pool of streams (round-robin, 32 per priority); lower priority numbers run first.)doc");
  stream_cls
      .def(py::init([](py::handle device, py::handle priority, py::kwargs kw) {
             const int dev = cuda_index(device, Arg{"Stream", "device"});
             if (kw.contains("stream_ptr")) {  // internal: wrap an existing handle
               return PyStream{get_stream_from_external(to_address(kw["stream_ptr"], Arg{"Stream", "stream_ptr"}), dev)};
             }
             return PyStream{stream_from_pool(dev, to_int(priority, Arg{"Stream", "priority"}))};
           }),
           py::arg("device") = py::none(), py::arg("priority") = 0)
      .def("query", [](const PyStream& s) { return s.ref.is_done(); })
      .def("synchronize", [](const PyStream& s) {
        py::gil_scoped_release r;
        s.ref.sync();
      })
      .def("wait_event", [](const PyStream& s, py::handle e) { s.ref.wait(event_arg(e, Arg{"Stream.wait_event", "event"}).event); },
           py::arg("event"))
      .def("wait_stream",
           [](const PyStream& s, py::handle other) {
             if (other.is_none()) throw_type(Arg{"Stream.wait_stream", "stream"}, "a cudakit.Stream", other);
             s.ref.wait(stream_arg(other, Arg{"Stream.wait_stream", "stream"}));
           },
           py::arg("stream"))
      .def("record_event",
           [](const PyStream& s, py::object event) -> py::object {
             if (event.is_none()) {
               auto e = py::cast(PyEvent{Event()});
               e.cast<PyEvent&>().event.record(s.ref);
               return e;
             }
             event_arg(event, Arg{"Stream.record_event", "event"}).event.record(s.ref);
             return event;
           },
           py::arg("event") = py::none())
      .def_property_readonly("priority", [](const PyStream& s) { return s.ref.priority(); })
      .def_static("priority_range",
                  [](py::handle device) {
                    auto [least, greatest] =
                        stream_priority_range(cuda_index(device, Arg{"Stream.priority_range", "device"}));
                    return py::make_tuple(least, greatest);
                  },
                  py::arg("device") = py::none())
      .def_property_readonly("cuda_stream", [](const PyStream& s) {
        return reinterpret_cast<std::uintptr_t>(s.ref.handle());
      })
      .def_property_readonly("stream_id", [](const PyStream& s) { return s.ref.id(); })
      .def_property_readonly("device_index", [](const PyStream& s) { return s.ref.device(); })
      .def_property_readonly("device_type", [](const PyStream&) { return 1; })  // kCUDA
      .def_property_readonly("device", [](const PyStream& s) { return cuda_device(s.ref.device()); })
      .def("__cuda_stream__", [](const PyStream& s) {
        return py::make_tuple(0, reinterpret_cast<std::uintptr_t>(s.ref.handle()));
      })
      .def("__eq__",
           [](const PyStream& a, py::handle b) {
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
      .def(py::init([](py::handle ptr, py::handle device) {
             const std::uintptr_t h = to_address(ptr, Arg{"ExternalStream", "stream_ptr"});
             return PyExternalStream{{get_stream_from_external(h, cuda_index(device, Arg{"ExternalStream", "device"}))}};
           }),
           py::arg("stream_ptr"), py::arg("device") = py::none());

  py::class_<PyEvent>(m, "Event", R"doc(
A CUDA event (torch.cuda.Event). Created lazily on the device of the first stream it is
recorded on.)doc")
      .def(py::init([](py::handle enable_timing, py::handle blocking, py::handle interprocess) {
             return PyEvent{Event(EventOptions{to_bool(enable_timing, Arg{"Event", "enable_timing"}),
                                               to_bool(blocking, Arg{"Event", "blocking"}),
                                               to_bool(interprocess, Arg{"Event", "interprocess"})})};
           }),
           py::arg("enable_timing") = false, py::arg("blocking") = false,
           py::arg("interprocess") = false)
      .def("record",
           [](PyEvent& e, py::handle stream) { e.event.record(stream_arg(stream, Arg{"Event.record", "stream"})); },
           py::arg("stream") = py::none())
      .def("wait", [](PyEvent& e, py::handle stream) { e.event.wait(stream_arg(stream, Arg{"Event.wait", "stream"})); },
           py::arg("stream") = py::none())
      .def("query", [](PyEvent& e) { return e.event.query(); })
      .def("synchronize", [](PyEvent& e) {
        py::gil_scoped_release r;
        e.event.sync();
      })
      .def("elapsed_time",
           [](PyEvent& a, py::handle b) {
             return a.event.elapsed_time(event_arg(b, Arg{"Event.elapsed_time", "end_event"}).event);
           },
           py::arg("end_event"))
      .def("ipc_handle", [](PyEvent& e) {
        auto h = e.event.ipc_handle();
        return py::bytes(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes);
      })
      .def_static("from_ipc_handle",
                  [](py::handle device, py::handle handle) {
                    const Arg a{"Event.from_ipc_handle", "handle"};
                    if (!PyBytes_Check(handle.ptr())) throw_type(a, "bytes (from Event.ipc_handle())", handle);
                    std::string raw = handle.cast<std::string>();
                    if (raw.size() != 64)
                      throw_value(a, "must be 64 bytes (from Event.ipc_handle()), got " + std::to_string(raw.size()));
                    Event::IpcHandle h;
                    std::memcpy(h.bytes, raw.data(), 64);
                    return PyEvent{Event::from_ipc_handle(cuda_index(device, Arg{"Event.from_ipc_handle", "device"}), h)};
                  },
                  py::arg("device"), py::arg("handle"))
      .def_property_readonly("cuda_event", [](PyEvent& e) {
        return reinterpret_cast<std::uintptr_t>(e.event.handle());
      })
      .def_property_readonly("device", [](PyEvent& e) -> py::object {
        return e.event.device() < 0 ? py::none() : cuda_device(e.event.device());
      })
      .def("__repr__", [](PyEvent& e) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "<cudakit.Event 0x%zx>",
                      reinterpret_cast<std::uintptr_t>(e.event.handle()));
        return std::string(buf);
      });

  py::class_<PyStreamContext>(m, "StreamContext", R"doc(
Context manager that selects a stream (and its device); None makes it a no-op.)doc")
      .def(py::init([](py::handle s) { return make_context(s, "StreamContext"); }), py::arg("stream"))
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

  m.def("stream", [](py::handle s) { return make_context(s, "stream"); }, py::arg("stream"));
  m.def("current_stream",
        [](py::handle d) { return PyStream{current_stream(cuda_index(d, Arg{"current_stream", "device"}))}; },
        py::arg("device") = py::none());
  m.def("default_stream",
        [](py::handle d) { return PyStream{default_stream(cuda_index(d, Arg{"default_stream", "device"}))}; },
        py::arg("device") = py::none());
  m.def("set_stream", [](py::handle s) {
    if (!s.is_none()) set_stream(stream_arg(s, Arg{"set_stream", "stream"}));
  }, py::arg("stream"));
  m.def("get_stream_from_external",
        [](py::handle ptr, py::handle d) {
          const std::uintptr_t h = to_address(ptr, Arg{"get_stream_from_external", "data_ptr"});
          return PyStream{get_stream_from_external(h, cuda_index(d, Arg{"get_stream_from_external", "device"}))};
        },
        py::arg("data_ptr"), py::arg("device") = py::none());
}

Registrar reg("streams", order::streams, bind);

}  // namespace
}  // namespace cudakit::python
