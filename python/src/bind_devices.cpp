// Bindings: the Device value type, devices, properties, telemetry, sync-debug mode.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <string>

#include "args.hpp"
#include "cudakit/device.hpp"
#include "cudakit/libraries.hpp"
#include "cudakit/error.hpp"
#include "cudakit/tensor.hpp"
#include "registry.hpp"

namespace cudakit::python {
namespace {

// Device(type, index=None): Device('cuda:1'), Device('cuda', 1), Device(1), Device('cpu'),
// Device(torch.device(...)). 'cuda' alone is the current device (resolved now).
Device make_device(py::handle type, py::handle index) {
  const Arg a{"Device", "type"};
  if (index.is_none()) return device_arg(type.is_none() ? py::handle(py::str("cuda")) : type, a);
  if (!PyUnicode_Check(type.ptr())) throw_type(a, "a device type ('cuda' or 'cpu') when index is given", type);
  const std::string t = type.cast<std::string>();
  const std::int64_t i = to_int64(index, Arg{"Device", "index"});
  if (t == "cpu") {
    if (i != 0) throw_value(Arg{"Device", "index"}, "must be 0 (or None) for a cpu device, got " + std::to_string(i));
    return Device::cpu();
  }
  if (t != "cuda") throw_value(a, "is an unsupported device type '" + t + "' (expected 'cuda' or 'cpu')");
  if (i < 0) throw ValueError("Device(): argument 'index': Invalid device index " + std::to_string(i) + ": expected >= 0");
  return device_arg(index, Arg{"Device", "index"});
}

// get_device_properties & co.: None / 'cuda' is the current device; an explicit negative
// index is an error, as torch ("Invalid device id"), not the current device.
int props_device(py::handle d, const char* fn) {
  if (is_int(d) && to_int64(d, Arg{fn, "device"}) < 0)
    throw ValueError(std::string(fn) + "(): Invalid device id " + std::to_string(to_int64(d, Arg{fn, "device"})) +
                     ": expected 0 <= device < " + std::to_string(device_count()) +
                     " (None for the current device)");
  return cuda_index(d, Arg{fn, "device"});
}

void bind(py::module_& m) {
  // Diagnostics for `python -m cudakit info` (python/cudakit/_info.py).
  m.def("_unavailable_reason", [] { return unavailable_reason(); });
  m.def("_backend_capabilities", [] {
    const BackendCapabilities c = backend_capabilities();
    py::dict d;
    d["host_addressable_device_memory"] = c.host_addressable_device_memory;
    d["runs_kernels"] = c.runs_kernels;
    d["vendor_math_handles"] = c.vendor_math_handles;
    d["cross_process_ipc"] = c.cross_process_ipc;
    d["hardware_telemetry"] = c.hardware_telemetry;
    d["graph_tools_ids"] = c.graph_tools_ids;
    return d;
  });
  m.def("_optional_libraries", [] {
    py::list out;
    for (const LibraryInfo& l : optional_libraries()) {
      py::dict d;
      d["name"] = l.name;
      d["found"] = l.found;
      d["soname"] = l.soname;
      d["path"] = l.path;
      d["version"] = l.version;
      d["reason"] = l.reason;
      out.append(d);
    }
    return out;
  });
  py::class_<Device>(m, "Device", R"doc(
A device, like torch.device: Device('cuda:0'), Device('cuda', 0), Device(0), Device('cpu').
.type is 'cuda' or 'cpu', .index an int (None for cpu). Compares equal to equivalent strings
and torch.device objects. Tensor.device, Stream.device and Event.device return one.)doc")
      .def(py::init(&make_device), py::arg("type"), py::arg("index") = py::none())
      .def_property_readonly("type", [](const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; })
      .def_property_readonly("index", [](const Device& d) -> py::object {
        return d.is_cpu() ? py::none() : py::cast(d.index);
      })
      .def("__eq__",
           [](const Device& a, py::handle b) {
             if (py::isinstance<Device>(b)) return a == b.cast<Device>();
             try {
               return a == device_arg(b, Arg{"Device.__eq__", "other"});
             } catch (const std::exception&) {
               return false;  // not a device: unequal, as == must not raise
             }
           })
      .def("__hash__", [](const Device& d) { return py::hash(py::str(d.str())); })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) {
        return d.is_cpu() ? std::string("device(type='cpu')")
                          : "device(type='cuda', index=" + std::to_string(d.index) + ")";
      })
      .def("__reduce__", [](const Device& d) {
        return py::make_tuple(py::type::of<Device>(), py::make_tuple(d.str()));
      });

  py::class_<DeviceProperties>(m, "_CudaDeviceProperties")
      .def_readonly("name", &DeviceProperties::name)
      .def_readonly("major", &DeviceProperties::major)
      .def_readonly("minor", &DeviceProperties::minor)
      .def_readonly("total_memory", &DeviceProperties::total_memory)
      .def_readonly("multi_processor_count", &DeviceProperties::multi_processor_count)
      .def_readonly("L2_cache_size", &DeviceProperties::L2_cache_size)
      .def_readonly("max_threads_per_multi_processor",
                    &DeviceProperties::max_threads_per_multi_processor)
      .def_readonly("max_threads_per_block", &DeviceProperties::max_threads_per_block)
      .def_readonly("warp_size", &DeviceProperties::warp_size)
      .def_readonly("regs_per_multiprocessor", &DeviceProperties::regs_per_multiprocessor)
      .def_readonly("shared_memory_per_block", &DeviceProperties::shared_memory_per_block)
      .def_readonly("shared_memory_per_block_optin",
                    &DeviceProperties::shared_memory_per_block_optin)
      .def_readonly("shared_memory_per_multiprocessor",
                    &DeviceProperties::shared_memory_per_multiprocessor)
      .def_readonly("clock_rate", &DeviceProperties::clock_rate)
      .def_readonly("memory_clock_rate", &DeviceProperties::memory_clock_rate)
      .def_readonly("memory_bus_width", &DeviceProperties::memory_bus_width)
      .def_readonly("is_integrated", &DeviceProperties::is_integrated)
      .def_readonly("is_multi_gpu_board", &DeviceProperties::is_multi_gpu_board)
      .def_readonly("pci_bus_id", &DeviceProperties::pci_bus_id)
      .def_readonly("pci_device_id", &DeviceProperties::pci_device_id)
      .def_readonly("pci_domain_id", &DeviceProperties::pci_domain_id)
      .def_readonly("uuid", &DeviceProperties::uuid)
      .def_readonly("backend", &DeviceProperties::backend)
      .def("__repr__", [](const DeviceProperties& p) {
        return "_CudaDeviceProperties(name='" + p.name + "', major=" + std::to_string(p.major) +
               ", minor=" + std::to_string(p.minor) +
               ", total_memory=" + std::to_string(p.total_memory / (1024 * 1024)) +
               "MB, multi_processor_count=" + std::to_string(p.multi_processor_count) +
               ", uuid=" + p.uuid + ", L2_cache_size=" +
               std::to_string(p.L2_cache_size / (1024 * 1024)) + "MB)";
      });

  m.def("_get_device_index",
        [](py::handle device, py::handle optional) {
          int idx = cuda_index(device, Arg{"_get_device_index", "device"},
                               to_bool(optional, Arg{"_get_device_index", "optional"}));
          return idx == kCurrentDevice ? current_device() : resolve_device(idx);
        },
        py::arg("device"), py::arg("optional") = true);
  m.def("backend_name", &backend_name);
  py::class_<BackendCapabilities>(m, "_BackendCapabilities", R"doc(
What the backend in use can do (cudakit.backend_capabilities()): decide by these fields,
never by comparing backend_name().)doc")
      .def_readonly("backend", &BackendCapabilities::backend)
      .def_readonly("runs_kernels", &BackendCapabilities::runs_kernels)
      .def_readonly("host_addressable_device_memory",
                    &BackendCapabilities::host_addressable_device_memory)
      .def_readonly("vendor_math_handles", &BackendCapabilities::vendor_math_handles)
      .def_readonly("cross_process_ipc", &BackendCapabilities::cross_process_ipc)
      .def_readonly("hardware_telemetry", &BackendCapabilities::hardware_telemetry)
      .def_readonly("graph_tools_ids", &BackendCapabilities::graph_tools_ids)
      .def("_asdict", [](const BackendCapabilities& c) {
        py::dict d;
        d["backend"] = c.backend;
        d["runs_kernels"] = c.runs_kernels;
        d["host_addressable_device_memory"] = c.host_addressable_device_memory;
        d["vendor_math_handles"] = c.vendor_math_handles;
        d["cross_process_ipc"] = c.cross_process_ipc;
        d["hardware_telemetry"] = c.hardware_telemetry;
        d["graph_tools_ids"] = c.graph_tools_ids;
        return d;
      })
      .def("__repr__", [](const BackendCapabilities& c) {
        auto b = [](bool v) { return v ? std::string("True") : std::string("False"); };
        return "BackendCapabilities(backend='" + c.backend + "', runs_kernels=" +
               b(c.runs_kernels) + ", host_addressable_device_memory=" +
               b(c.host_addressable_device_memory) + ", vendor_math_handles=" +
               b(c.vendor_math_handles) + ", cross_process_ipc=" + b(c.cross_process_ipc) +
               ", hardware_telemetry=" + b(c.hardware_telemetry) + ", graph_tools_ids=" +
               b(c.graph_tools_ids) + ")";
      });
  m.def("backend_capabilities", &backend_capabilities);
  m.def("set_backend", [](py::handle name) { set_backend(to_string(name, Arg{"set_backend", "name"})); },
        py::arg("name"));
  m.def("is_available", &is_available);
  m.def("device_count", &device_count);
  m.def("init", &init);
  m.def("is_initialized", &is_initialized);
  m.def("current_device", &current_device);
  m.def("set_device", [](py::handle d) {
    int idx = cuda_index(d, Arg{"set_device", "device"}, /*none_ok=*/false);
    if (idx >= 0) set_device(idx);  // torch: a negative index is a no-op
  }, py::arg("device"));
  m.def("_exchange_device", [](int idx) {
    if (idx < 0) return -1;
    int prev = current_device();
    if (prev != idx) set_device(idx);
    return prev;
  });
  m.def("get_device_name", [](py::handle d) { return get_device_name(props_device(d, "get_device_name")); },
        py::arg("device") = py::none());
  m.def("get_device_capability",
        [](py::handle d) {
          auto c = get_device_capability(props_device(d, "get_device_capability"));
          return py::make_tuple(c.first, c.second);
        },
        py::arg("device") = py::none());
  m.def("get_device_properties",
        [](py::handle d) { return &get_device_properties(props_device(d, "get_device_properties")); },
        py::arg("device") = py::none(), py::return_value_policy::reference);
  m.def("get_arch_list", &get_arch_list);
  m.def("get_gencode_flags", &get_gencode_flags);
  m.def("is_bf16_supported",
        [](py::handle emu) { return is_bf16_supported(to_bool(emu, Arg{"is_bf16_supported", "including_emulation"})); },
        py::arg("including_emulation") = true);
  m.def("is_tf32_supported", &is_tf32_supported);
  m.def("synchronize", [](py::handle d) {
    int idx = cuda_index(d, Arg{"synchronize", "device"});
    py::gil_scoped_release release;
    synchronize(idx);
  }, py::arg("device") = py::none());
  m.def("can_device_access_peer",
        [](py::handle a, py::handle b) {
          const int d = cuda_index(a, Arg{"can_device_access_peer", "device"}, false);
          return can_device_access_peer(d, cuda_index(b, Arg{"can_device_access_peer", "peer_device"}, false));
        },
        py::arg("device"), py::arg("peer_device"));
  m.def("utilization", [](py::handle d) { return utilization(cuda_index(d, Arg{"utilization", "device"})); },
        py::arg("device") = py::none());
  m.def("memory_usage", [](py::handle d) { return memory_usage(cuda_index(d, Arg{"memory_usage", "device"})); },
        py::arg("device") = py::none());
  m.def("temperature", [](py::handle d) { return temperature(cuda_index(d, Arg{"temperature", "device"})); },
        py::arg("device") = py::none());
  m.def("power_draw", [](py::handle d) { return power_draw(cuda_index(d, Arg{"power_draw", "device"})); },
        py::arg("device") = py::none());
  m.def("clock_rate", [](py::handle d) { return clock_rate(cuda_index(d, Arg{"clock_rate", "device"})); },
        py::arg("device") = py::none());
  m.def("device_memory_used",
        [](py::handle d) { return device_memory_used(cuda_index(d, Arg{"device_memory_used", "device"})); },
        py::arg("device") = py::none());
  m.def("check_error", [](py::handle res) { check_error(to_int(res, Arg{"check_error", "res"})); },
        py::arg("res"));
  m.def("driver_version", &driver_version);
  m.def("_current_blas_handle", [] { return reinterpret_cast<std::uintptr_t>(current_blas_handle()); });
  m.def("_current_solver_handle", [] { return reinterpret_cast<std::uintptr_t>(current_solver_handle()); });
  m.def("_set_sync_debug_mode", [](int mode) { set_sync_debug_mode(static_cast<SyncDebugMode>(mode)); });
  m.def("_get_sync_debug_mode", [] { return static_cast<int>(get_sync_debug_mode()); });
  m.def("_set_sync_warning_handler", [](py::object handler) {
    if (handler.is_none()) {
      set_sync_warning_handler(nullptr);
      return;
    }
    // Keep a strong reference for the process lifetime (never released at exit).
    auto* keep = new py::object(handler);
    set_sync_warning_handler([keep](const std::string& msg) {
      py::gil_scoped_acquire gil;
      (*keep)(msg);
    });
  });
}

Registrar reg("devices", order::devices, bind);

}  // namespace
}  // namespace cudakit::python
