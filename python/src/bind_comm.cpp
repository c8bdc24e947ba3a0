// Bindings: cudakit.comm (torch.cuda.comm) and cudakit.nccl (torch.cuda.nccl, Communicator,
// NcclError). The Python modules (cudakit/comm.py, cudakit/nccl.py) add torch's signatures
// (devices-or-out, the deprecated reduce(outputs=...), sequence checks) on top of the private
// _comm_* / _nccl_* entry points here.
//
// Tensors may be cudakit tensors or any DLPack array (torch, CuPy, JAX, NumPy on the host):
// they are imported without copying, so out= arguments of other frameworks are written in
// place. Results are cudakit tensors.
//
// Calls that can wait for other ranks (joining, wait_ready, synchronize, group_end, the
// rendezvous) release the GIL, so ranks driven by threads of one interpreter make progress.
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "convert.hpp"
#include "cudakit/comm.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "cudakit/nccl.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

namespace nc = cudakit::nccl;

constexpr const char* kTensorForms =
    "a cudakit.Tensor or an array with __dlpack__ (torch, CuPy, JAX, NumPy, ...)";

Tensor tensor_like(py::handle v, Arg a) {
  if (py::isinstance<Tensor>(v)) return v.cast<Tensor>();
  if (py::hasattr(v, "__dlpack__")) return from_dlpack_obj(v);
  throw_type(a, kTensorForms, v);
}

// An optional tensor: None -> undefined.
Tensor opt_tensor(py::handle v, Arg a) { return v.is_none() ? Tensor() : tensor_like(v, a); }

py::sequence sequence_arg(py::handle v, Arg a, const char* what) {
  if (v.is_none() || py::isinstance<Tensor>(v) || PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr()) ||
      !PySequence_Check(v.ptr()) || py::hasattr(v, "__dlpack__")) {
    throw_type(a, what, v);
  }
  return py::reinterpret_borrow<py::sequence>(v);
}

std::vector<Tensor> tensor_list(py::handle v, Arg a) {
  std::vector<Tensor> out;
  for (py::handle item : sequence_arg(v, a, "a sequence of tensors")) out.push_back(tensor_like(item, a));
  return out;
}

int device_index(py::handle v, Arg a) {
  const int d = cuda_index(v, a, /*none_ok=*/false);
  return d == kCurrentDevice ? current_device() : d;
}

std::vector<int> device_list(py::handle v, Arg a) {
  std::vector<int> out;
  for (py::handle item : sequence_arg(v, a, "a sequence of cuda devices (ints, 'cuda:N' or devices)")) {
    out.push_back(device_index(item, a));
  }
  return out;
}

std::optional<int> opt_device(py::handle v, Arg a) {
  if (v.is_none()) return std::nullopt;
  return device_index(v, a);
}

// One optional stream per entry; entry i belongs to devices[i] (for foreign stream objects
// without a device attribute).
comm::StreamList stream_list(py::handle v, Arg a, const std::vector<int>& devices) {
  comm::StreamList out;
  if (v.is_none()) return out;
  std::size_t i = 0;
  for (py::handle item : sequence_arg(v, a, "a sequence of streams (or None entries), or None")) {
    if (item.is_none()) {
      out.emplace_back(std::nullopt);
    } else {
      const int d = i < devices.size() ? devices[i] : kCurrentDevice;
      out.emplace_back(stream_arg(item, a, d));
    }
    ++i;
  }
  return out;
}

std::vector<int> devices_of(const std::vector<Tensor>& ts) {
  std::vector<int> d;
  for (const Tensor& t : ts) d.push_back(t.defined() && t.is_cuda() ? t.device().index : kCurrentDevice);
  return d;
}

nc::ReduceOp op_arg(py::handle v, Arg a) {
  if (!is_int(v) || PyBool_Check(v.ptr())) throw_type(a, "a reduction operator (SUM, PROD, MAX, MIN, AVG)", v);
  const std::int64_t op = to_int64(v, a);
  if (op < 0 || op > 4) {
    throw_value(a, "must be one of SUM=0, PROD=1, MAX=2, MIN=3, AVG=4, got " + std::to_string(op));
  }
  return static_cast<nc::ReduceOp>(op);
}

std::size_t buffer_size_arg(py::handle v, Arg a) {
  if (!is_int(v) || PyBool_Check(v.ptr())) throw_type(a, "an int (bytes)", v);
  const std::int64_t n = to_int64(v, a);
  if (n < 0) throw_value(a, "must not be negative, got " + std::to_string(n));
  return static_cast<std::size_t>(n);
}

std::int64_t dim_arg(py::handle v, Arg a) {
  if (!is_int(v) || PyBool_Check(v.ptr())) throw_type(a, "an int", v);
  return to_int64(v, a);
}

int int_arg(py::handle v, Arg a) {
  if (!is_int(v) || PyBool_Check(v.ptr())) throw_type(a, "an int", v);
  return to_int(v, a);
}

nc::UniqueId uid_arg(py::handle v, Arg a) {
  if (!PyBytes_Check(v.ptr()) && !PyByteArray_Check(v.ptr())) {
    throw_type(a, "the bytes of a unique id (nccl.unique_id())", v);
  }
  std::string bytes = py::bytes(py::reinterpret_borrow<py::object>(v));
  if (bytes.size() != nc::UniqueId::kBytes) {
    throw_value(a, "must be " + std::to_string(nc::UniqueId::kBytes) + " bytes (as nccl.unique_id() makes), got " +
                       std::to_string(bytes.size()));
  }
  return nc::UniqueId::from_bytes(bytes);
}

// Seconds (int / float) or a datetime.timedelta; None keeps the default.
std::chrono::milliseconds timeout_arg(py::handle v, Arg a, std::chrono::milliseconds def) {
  if (v.is_none()) return def;
  double seconds = 0;
  if (py::hasattr(v, "total_seconds") && !is_int(v)) {
    seconds = py::reinterpret_borrow<py::object>(v).attr("total_seconds")().cast<double>();
  } else {
    seconds = to_double(v, a);
  }
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) {
    throw_value(a, "must be a number of seconds >= 0 (0: no limit) or a datetime.timedelta, got " +
                       py::repr(v).cast<std::string>());
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000.0)));
}

nc::CommOptions options_arg(const char* fn, py::handle device, py::handle blocking, py::handle timeout) {
  nc::CommOptions o;
  o.device = device.is_none() ? kCurrentDevice : device_index(device, Arg{fn, "device"});
  o.blocking = to_bool(blocking, Arg{fn, "blocking"});
  o.timeout = timeout_arg(timeout, Arg{fn, "timeout"}, o.timeout);
  return o;
}

std::vector<nc::Communicator> comm_list(py::handle v, Arg a) {
  std::vector<nc::Communicator> out;
  if (v.is_none()) return out;
  for (py::handle item : sequence_arg(v, a, "a sequence of nccl.Communicator, or None")) {
    if (!py::isinstance<nc::Communicator>(item)) throw_type(a, "a sequence of nccl.Communicator, or None", item);
    out.push_back(item.cast<nc::Communicator>());
  }
  return out;
}

std::optional<StreamRef> opt_stream(py::handle v, Arg a, int device) {
  if (v.is_none()) return std::nullopt;
  return stream_arg(v, a, device);
}

py::tuple to_tuple(const std::vector<Tensor>& ts) {
  py::tuple t(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) t[i] = py::cast(ts[i]);
  return t;
}

void bind_comm(py::module_& m) {
  m.def("_comm_broadcast", [](py::handle tensor, py::handle devices) {
    Tensor t = tensor_like(tensor, Arg{"broadcast", "tensor"});
    return comm::broadcast(t, device_list(devices, Arg{"broadcast", "devices"}));
  }, py::arg("tensor"), py::arg("devices"));
  m.def("_comm_broadcast_out", [](py::handle tensor, py::handle out) {
    Tensor t = tensor_like(tensor, Arg{"broadcast", "tensor"});
    comm::broadcast(t, tensor_list(out, Arg{"broadcast", "out"}));
  }, py::arg("tensor"), py::arg("out"));
  m.def("_comm_broadcast_coalesced", [](py::handle tensors, py::handle devices, py::handle buffer_size) {
    const Arg a{"broadcast_coalesced", "tensors"};
    return comm::broadcast_coalesced(tensor_list(tensors, a), device_list(devices, Arg{"broadcast_coalesced", "devices"}),
                                     buffer_size_arg(buffer_size, Arg{"broadcast_coalesced", "buffer_size"}));
  }, py::arg("tensors"), py::arg("devices"), py::arg("buffer_size"));
  m.def("_comm_reduce_add", [](py::handle inputs, py::handle destination) {
    return comm::reduce_add(tensor_list(inputs, Arg{"reduce_add", "inputs"}),
                            opt_device(destination, Arg{"reduce_add", "destination"}));
  }, py::arg("inputs"), py::arg("destination"));
  m.def("_comm_reduce_add_coalesced", [](py::handle inputs, py::handle destination, py::handle buffer_size) {
    const Arg a{"reduce_add_coalesced", "inputs"};
    std::vector<std::vector<Tensor>> lists;
    for (py::handle item : sequence_arg(inputs, a, "a sequence (one per device) of sequences of tensors")) {
      lists.push_back(tensor_list(item, a));
    }
    return to_tuple(comm::reduce_add_coalesced(lists, opt_device(destination, Arg{"reduce_add_coalesced", "destination"}),
                                               buffer_size_arg(buffer_size, Arg{"reduce_add_coalesced", "buffer_size"})));
  }, py::arg("inputs"), py::arg("destination"), py::arg("buffer_size"));
  m.def("_comm_scatter", [](py::handle tensor, py::handle devices, py::handle chunk_sizes, py::handle dim,
                            py::handle streams) {
    Tensor t = tensor_like(tensor, Arg{"scatter", "tensor"});
    std::vector<int> devs = device_list(devices, Arg{"scatter", "devices"});
    std::optional<std::vector<std::int64_t>> sizes;
    if (!chunk_sizes.is_none()) {
      sizes.emplace();
      for (py::handle c : sequence_arg(chunk_sizes, Arg{"scatter", "chunk_sizes"}, "a sequence of ints, or None")) {
        sizes->push_back(dim_arg(c, Arg{"scatter", "chunk_sizes"}));
      }
    }
    return to_tuple(comm::scatter(t, devs, sizes, dim_arg(dim, Arg{"scatter", "dim"}),
                                  stream_list(streams, Arg{"scatter", "streams"}, devs)));
  }, py::arg("tensor"), py::arg("devices"), py::arg("chunk_sizes"), py::arg("dim"), py::arg("streams"));
  m.def("_comm_scatter_out", [](py::handle tensor, py::handle out, py::handle dim, py::handle streams) {
    Tensor t = tensor_like(tensor, Arg{"scatter", "tensor"});
    std::vector<Tensor> outs = tensor_list(out, Arg{"scatter", "out"});
    comm::scatter(t, outs, dim_arg(dim, Arg{"scatter", "dim"}),
                  stream_list(streams, Arg{"scatter", "streams"}, devices_of(outs)));
  }, py::arg("tensor"), py::arg("out"), py::arg("dim"), py::arg("streams"));
  m.def("_comm_gather", [](py::handle tensors, py::handle dim, py::handle destination, py::handle to_cpu) {
    std::optional<Device> dest;
    if (to_bool(to_cpu, Arg{"gather", "destination"})) {
      dest = Device::cpu();
    } else if (!destination.is_none()) {
      dest = Device::cuda(device_index(destination, Arg{"gather", "destination"}));
    }
    return comm::gather(tensor_list(tensors, Arg{"gather", "tensors"}), dim_arg(dim, Arg{"gather", "dim"}), dest);
  }, py::arg("tensors"), py::arg("dim"), py::arg("destination"), py::arg("to_cpu"));
  m.def("_comm_gather_out", [](py::handle tensors, py::handle out, py::handle dim) {
    comm::gather(tensor_list(tensors, Arg{"gather", "tensors"}), tensor_like(out, Arg{"gather", "out"}),
                 dim_arg(dim, Arg{"gather", "dim"}));
  }, py::arg("tensors"), py::arg("out"), py::arg("dim"));
  m.def("_comm_set_transport", [](py::handle name) {
    const std::string s = to_string(name, Arg{"set_transport", "transport"});
    for (auto t : {comm::Transport::automatic, comm::Transport::peer, comm::Transport::nccl, comm::Transport::copy}) {
      if (s == comm::transport_name(t)) return comm::set_transport(t);
    }
    throw_value(Arg{"set_transport", "transport"}, "must be 'auto', 'peer', 'nccl' or 'copy', got '" + s + "'");
  }, py::arg("transport"));
  m.def("_comm_transport", [] { return std::string(comm::transport_name(comm::transport())); });
}

void bind_nccl(py::module_& m) {
  // NcclError (_C.NcclError) is made and raised by the one exception table (errors.hpp).
  m.def("_nccl_version", []() -> py::tuple {  // pybind11 3 types each make_tuple apart
    nc::Version v = nc::version();
    if (v.suffix.empty()) return py::make_tuple(v.major, v.minor, v.patch);
    return py::make_tuple(v.major, v.minor, v.patch, v.suffix);
  });
  m.def("_nccl_is_available", [](py::handle tensors) {
    std::vector<Tensor> ts;
    for (py::handle item : sequence_arg(tensors, Arg{"is_available", "tensors"}, "a sequence of tensors")) {
      if (!py::isinstance<Tensor>(item) && !py::hasattr(item, "__dlpack__")) return false;
      ts.push_back(tensor_like(item, Arg{"is_available", "tensors"}));
    }
    return nc::is_available(ts);
  }, py::arg("tensors"));
  m.def("_nccl_unique_id", [] { return py::bytes(nc::unique_id().to_bytes()); });
  m.def("_nccl_group_start", [] { nc::group_start(); });
  m.def("_nccl_group_end", [] {
    py::gil_scoped_release nogil;
    nc::group_end();
  });

  auto streams_of = [](py::handle streams, const std::vector<Tensor>& inputs, const char* fn) {
    return stream_list(streams, Arg{fn, "streams"}, devices_of(inputs));
  };
  m.def("_nccl_all_reduce", [streams_of](py::handle inputs, py::handle outputs, py::handle op, py::handle streams,
                                         py::handle comms) {
    auto in = tensor_list(inputs, Arg{"all_reduce", "inputs"});
    auto out = tensor_list(outputs, Arg{"all_reduce", "outputs"});
    nc::all_reduce(in, out, op_arg(op, Arg{"all_reduce", "op"}), streams_of(streams, in, "all_reduce"),
                   comm_list(comms, Arg{"all_reduce", "comms"}));
  }, py::arg("inputs"), py::arg("outputs"), py::arg("op"), py::arg("streams"), py::arg("comms"));
  m.def("_nccl_reduce", [streams_of](py::handle inputs, py::handle output, py::handle root, py::handle op,
                                     py::handle streams, py::handle comms) {
    auto in = tensor_list(inputs, Arg{"reduce", "inputs"});
    nc::reduce(in, tensor_like(output, Arg{"reduce", "output"}), int_arg(root, Arg{"reduce", "root"}),
               op_arg(op, Arg{"reduce", "op"}), streams_of(streams, in, "reduce"), comm_list(comms, Arg{"reduce", "comms"}));
  }, py::arg("inputs"), py::arg("output"), py::arg("root"), py::arg("op"), py::arg("streams"), py::arg("comms"));
  m.def("_nccl_broadcast", [streams_of](py::handle inputs, py::handle root, py::handle streams, py::handle comms) {
    auto in = tensor_list(inputs, Arg{"broadcast", "inputs"});
    nc::broadcast(in, int_arg(root, Arg{"broadcast", "root"}), streams_of(streams, in, "broadcast"),
                  comm_list(comms, Arg{"broadcast", "comms"}));
  }, py::arg("inputs"), py::arg("root"), py::arg("streams"), py::arg("comms"));
  m.def("_nccl_all_gather", [streams_of](py::handle inputs, py::handle outputs, py::handle streams, py::handle comms) {
    auto in = tensor_list(inputs, Arg{"all_gather", "inputs"});
    nc::all_gather(in, tensor_list(outputs, Arg{"all_gather", "outputs"}), streams_of(streams, in, "all_gather"),
                   comm_list(comms, Arg{"all_gather", "comms"}));
  }, py::arg("inputs"), py::arg("outputs"), py::arg("streams"), py::arg("comms"));
  m.def("_nccl_reduce_scatter", [streams_of](py::handle inputs, py::handle outputs, py::handle op, py::handle streams,
                                             py::handle comms) {
    auto in = tensor_list(inputs, Arg{"reduce_scatter", "inputs"});
    nc::reduce_scatter(in, tensor_list(outputs, Arg{"reduce_scatter", "outputs"}), op_arg(op, Arg{"reduce_scatter", "op"}),
                       streams_of(streams, in, "reduce_scatter"), comm_list(comms, Arg{"reduce_scatter", "comms"}));
  }, py::arg("inputs"), py::arg("outputs"), py::arg("op"), py::arg("streams"), py::arg("comms"));

  py::class_<nc::Communicator>(m, "Communicator", R"doc(
One rank of an NCCL communicator (cudakit.nccl.Communicator): made from a unique id every rank
shares (Communicator(world_size, uid, rank)), from torchrun-style environment variables
(Communicator.from_env()) or through a file (Communicator.from_file(path, world_size, rank)).
Collectives and send/recv are ordered on a stream of this rank's device; a dead or stuck peer
raises NcclError within `timeout` seconds, and abort() stops the communicator.)doc")
      .def(py::init([](py::handle world_size, py::handle uid, py::handle rank, py::handle device, py::handle blocking,
                       py::handle timeout) {
             const int w = int_arg(world_size, Arg{"Communicator", "world_size"});
             const nc::UniqueId id = uid_arg(uid, Arg{"Communicator", "uid"});
             const int r = int_arg(rank, Arg{"Communicator", "rank"});
             const nc::CommOptions o = options_arg("Communicator", device, blocking, timeout);
             py::gil_scoped_release nogil;
             return nc::Communicator(w, id, r, o);
           }),
           py::arg("world_size"), py::arg("uid"), py::arg("rank"), py::kw_only(), py::arg("device") = py::none(),
           py::arg("blocking") = true, py::arg("timeout") = py::none())
      .def_static("from_env", [](py::handle device, py::handle blocking, py::handle timeout) {
        const nc::CommOptions o = options_arg("Communicator.from_env", device, blocking, timeout);
        py::gil_scoped_release nogil;
        return nc::Communicator::from_env(o);
      }, py::kw_only(), py::arg("device") = py::none(), py::arg("blocking") = true, py::arg("timeout") = py::none())
      .def_static("from_file", [](py::handle path, py::handle world_size, py::handle rank, py::handle device,
                                  py::handle blocking, py::handle timeout) {
        const std::string p = to_string(path, Arg{"Communicator.from_file", "path"});
        const int w = int_arg(world_size, Arg{"Communicator.from_file", "world_size"});
        const int r = int_arg(rank, Arg{"Communicator.from_file", "rank"});
        const nc::CommOptions o = options_arg("Communicator.from_file", device, blocking, timeout);
        py::gil_scoped_release nogil;
        return nc::Communicator::from_file(p, w, r, o);
      }, py::arg("path"), py::arg("world_size"), py::arg("rank"), py::kw_only(), py::arg("device") = py::none(),
         py::arg("blocking") = true, py::arg("timeout") = py::none())
      .def_property_readonly("rank", &nc::Communicator::rank)
      .def_property_readonly("size", &nc::Communicator::size)
      .def_property_readonly("world_size", &nc::Communicator::size)
      .def_property_readonly("device", [](const nc::Communicator& c) { return Device::cuda(c.device()); })
      .def_property_readonly("timeout", [](const nc::Communicator& c) {
        return static_cast<double>(c.options().timeout.count()) / 1000.0;
      })
      .def("is_ready", [](const nc::Communicator& c) { return c.is_ready(); })
      .def("wait_ready", [](const nc::Communicator& c) {
        py::gil_scoped_release nogil;
        c.wait_ready();
      })
      .def("error", [](const nc::Communicator& c) { return c.error(); })
      .def("check", [](const nc::Communicator& c) { c.check(); })
      .def("synchronize", [](const nc::Communicator& c) {
        py::gil_scoped_release nogil;
        c.synchronize();
      })
      .def("abort", [](nc::Communicator& c) { c.abort(); })
      .def("destroy", [](nc::Communicator& c) { c.reset(); })
      .def("all_reduce", [](nc::Communicator& c, py::handle tensor, py::handle output, py::handle op, py::handle stream) {
        const Arg a{"Communicator.all_reduce", "tensor"};
        Tensor in = tensor_like(tensor, a);
        Tensor out = output.is_none() ? in : tensor_like(output, Arg{"Communicator.all_reduce", "output"});
        c.all_reduce(in, out, op_arg(op, Arg{"Communicator.all_reduce", "op"}),
                     opt_stream(stream, Arg{"Communicator.all_reduce", "stream"}, c.device()));
      }, py::arg("tensor"), py::arg("output") = py::none(), py::arg("op") = 0, py::arg("stream") = py::none())
      .def("broadcast", [](nc::Communicator& c, py::handle tensor, py::handle root, py::handle output, py::handle stream) {
        Tensor in = opt_tensor(tensor, Arg{"Communicator.broadcast", "tensor"});
        Tensor out = output.is_none() ? in : tensor_like(output, Arg{"Communicator.broadcast", "output"});
        c.broadcast(in, out, int_arg(root, Arg{"Communicator.broadcast", "root"}),
                    opt_stream(stream, Arg{"Communicator.broadcast", "stream"}, c.device()));
      }, py::arg("tensor"), py::arg("root") = 0, py::arg("output") = py::none(), py::arg("stream") = py::none())
      .def("reduce", [](nc::Communicator& c, py::handle tensor, py::handle root, py::handle output, py::handle op,
                        py::handle stream) {
        Tensor in = tensor_like(tensor, Arg{"Communicator.reduce", "tensor"});
        Tensor out = output.is_none() ? in : tensor_like(output, Arg{"Communicator.reduce", "output"});
        c.reduce(in, out, int_arg(root, Arg{"Communicator.reduce", "root"}), op_arg(op, Arg{"Communicator.reduce", "op"}),
                 opt_stream(stream, Arg{"Communicator.reduce", "stream"}, c.device()));
      }, py::arg("tensor"), py::arg("root") = 0, py::arg("output") = py::none(), py::arg("op") = 0,
         py::arg("stream") = py::none())
      .def("all_gather", [](nc::Communicator& c, py::handle input, py::handle output, py::handle stream) {
        c.all_gather(tensor_like(input, Arg{"Communicator.all_gather", "input"}),
                     tensor_like(output, Arg{"Communicator.all_gather", "output"}),
                     opt_stream(stream, Arg{"Communicator.all_gather", "stream"}, c.device()));
      }, py::arg("input"), py::arg("output"), py::arg("stream") = py::none())
      .def("reduce_scatter", [](nc::Communicator& c, py::handle input, py::handle output, py::handle op, py::handle stream) {
        c.reduce_scatter(tensor_like(input, Arg{"Communicator.reduce_scatter", "input"}),
                         tensor_like(output, Arg{"Communicator.reduce_scatter", "output"}),
                         op_arg(op, Arg{"Communicator.reduce_scatter", "op"}),
                         opt_stream(stream, Arg{"Communicator.reduce_scatter", "stream"}, c.device()));
      }, py::arg("input"), py::arg("output"), py::arg("op") = 0, py::arg("stream") = py::none())
      .def("send", [](nc::Communicator& c, py::handle tensor, py::handle peer, py::handle stream) {
        c.send(tensor_like(tensor, Arg{"Communicator.send", "tensor"}), int_arg(peer, Arg{"Communicator.send", "peer"}),
               opt_stream(stream, Arg{"Communicator.send", "stream"}, c.device()));
      }, py::arg("tensor"), py::arg("peer"), py::arg("stream") = py::none())
      .def("recv", [](nc::Communicator& c, py::handle tensor, py::handle peer, py::handle stream) {
        c.recv(tensor_like(tensor, Arg{"Communicator.recv", "tensor"}), int_arg(peer, Arg{"Communicator.recv", "peer"}),
               opt_stream(stream, Arg{"Communicator.recv", "stream"}, c.device()));
      }, py::arg("tensor"), py::arg("peer"), py::arg("stream") = py::none())
      .def("__repr__", [](const nc::Communicator& c) {
        if (!c.valid()) return std::string("<cudakit.nccl.Communicator (destroyed)>");
        return "<cudakit.nccl.Communicator rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) +
               " on cuda:" + std::to_string(c.device()) + ">";
      });
}

void bind(py::module_& m) {
  bind_comm(m);
  bind_nccl(m);
}

Registrar reg("comm", order::comm, bind);

}  // namespace
}  // namespace cudakit::python
