// GPUDirect Storage bindings: _GdsFile, _GdsRequest and the buffer registry, wrapped by
// cudakit/gds.py (torch's names; foreign buffers arrive there as DLPack imports).
//
// Transfers release the GIL: a 1 GiB load takes a fraction of a second to seconds, and the
// engine's threads never need the interpreter.
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

#include "args.hpp"
#include "cudakit/gds.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

using gds::File;
using gds::IoRequest;

std::uint64_t offset_arg(py::handle v, const char* fn) {
  return to_uint64(v, Arg{fn, "offset"});
}

void bind(py::module_& m) {
  m.def("_gds_is_available", &gds::is_available);
  m.def("_gds_unavailable_reason", &gds::unavailable_reason);
  m.def("_gds_register_buffer", [](py::handle t) {
    gds::register_buffer(tensor_arg(t, Arg{"gds_register_buffer", "s"}));
  });
  m.def("_gds_deregister_buffer", [](py::handle t) {
    gds::deregister_buffer(tensor_arg(t, Arg{"gds_deregister_buffer", "s"}));
  });
  m.def("_gds_is_buffer_registered", [](py::handle t) {
    return gds::is_buffer_registered(tensor_arg(t, Arg{"gds_is_buffer_registered", "s"}));
  });

  py::class_<IoRequest>(m, "_GdsRequest", R"doc(
Completion of a stream-ordered GdsFile transfer (read_into / write_from).)doc")
      .def("done", &IoRequest::done, "True once the transfer finished (successfully or not).")
      .def("wait", &IoRequest::wait, py::call_guard<py::gil_scoped_release>(),
           "Blocks until the transfer finished; returns the bytes moved or raises its error.");

  py::class_<File>(m, "_GdsFile", R"doc(
A file for GPUDirect Storage transfers (cudakit::gds::File). Use cudakit.gds.GdsFile.)doc")
      .def(py::init([](py::handle filename, py::handle flags, py::handle mode) {
             std::string path = to_string(filename, Arg{"GdsFile", "filename"});
             int f = to_int(flags, Arg{"GdsFile", "flags"});
             int md = to_int(mode, Arg{"GdsFile", "mode"});
             if (md < 0 || md > 07777) {
               throw_value(Arg{"GdsFile", "mode"},
                           "must be a permission mode from 0 to 0o7777, got " + std::to_string(md));
             }
             py::gil_scoped_release nogil;
             return std::make_unique<File>(path, f, static_cast<unsigned>(md));
           }),
           py::arg("filename"), py::arg("flags"), py::arg("mode") = 0644)
      .def("register_handle", &File::register_handle)
      .def("deregister_handle", &File::deregister_handle)
      .def("is_registered", &File::is_registered)
      .def("io_path", [](const File& f) { return gds::io_path_name(f.io_path()); })
      .def("compat_reason", &File::compat_reason)
      .def("handle", &File::handle)
      .def("fd", &File::fd)
      .def("size", &File::size)
      .def("close", &File::close)
      .def("load", [](File& f, py::handle t, py::handle offset) {
        const Tensor& tensor = tensor_arg(t, Arg{"GdsFile.load_storage", "storage"});
        const std::uint64_t off = offset_arg(offset, "GdsFile.load_storage");
        py::gil_scoped_release nogil;
        f.load(tensor, off);
      })
      .def("save", [](File& f, py::handle t, py::handle offset) {
        const Tensor& tensor = tensor_arg(t, Arg{"GdsFile.save_storage", "storage"});
        const std::uint64_t off = offset_arg(offset, "GdsFile.save_storage");
        py::gil_scoped_release nogil;
        f.save(tensor, off);
      })
      .def("read_into", [](File& f, py::handle t, py::handle offset, py::handle stream) {
        const Tensor& tensor = tensor_arg(t, Arg{"GdsFile.read_into", "tensor"});
        const std::uint64_t off = offset_arg(offset, "GdsFile.read_into");
        std::optional<StreamRef> s;
        if (!stream.is_none()) s = stream_arg(stream, Arg{"GdsFile.read_into", "stream"});
        py::gil_scoped_release nogil;
        return f.read_into(tensor, off, s);
      })
      .def("write_from", [](File& f, py::handle t, py::handle offset, py::handle stream) {
        const Tensor& tensor = tensor_arg(t, Arg{"GdsFile.write_from", "tensor"});
        const std::uint64_t off = offset_arg(offset, "GdsFile.write_from");
        std::optional<StreamRef> s;
        if (!stream.is_none()) s = stream_arg(stream, Arg{"GdsFile.write_from", "stream"});
        py::gil_scoped_release nogil;
        return f.write_from(tensor, off, s);
      });
}

Registrar reg("gds", order::gds, bind);

}  // namespace
}  // namespace cudakit::python
