// Bindings: devices, properties, telemetry, sync-debug mode, Device value type.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <string>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "device_arg.hpp"
#include "devices/sync_debug.hpp"
#include "registry.hpp"

namespace cudakit::python {

namespace {

// Value type for a device, like torch.device("cuda:0"). Compares equal to torch.device
// objects and to "cuda:N" strings.
struct Device {
  std::string type = "cuda";
  int index = 0;
};

int parse_device_string(const std::string& s) {
  if (s == "cuda") return kCurrentDevice;
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int idx = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && idx >= 0) return idx;
    } catch (...) {
    }
  }
  throw ValueError("Invalid device string '" + s + "': expected 'cuda' or 'cuda:N'");
}

}  // namespace

int device_index(py::handle obj, bool optional) {
  if (obj.is_none()) {
    if (optional) return kCurrentDevice;
    throw ValueError("Expected a cuda device, but got: None");
  }
  if (PyLong_Check(obj.ptr())) {
    long v = PyLong_AsLong(obj.ptr());
    if (v < -1) throw ValueError("Invalid device index " + std::to_string(v));
    return static_cast<int>(v);
  }
  if (py::isinstance<py::str>(obj)) return parse_device_string(obj.cast<std::string>());
  if (py::hasattr(obj, "type") && py::hasattr(obj, "index")) {
    std::string type = py::str(obj.attr("type"));
    if (type != "cuda") {
      throw ValueError("Expected a cuda device, but got: " + std::string(py::str(obj)));
    }
    py::object idx = obj.attr("index");
    return idx.is_none() ? kCurrentDevice : idx.cast<int>();
  }
  throw ValueError("Expected a device (int, 'cuda:N', torch.device or None), got " +
                   std::string(py::str(py::type::of(obj))));
}

namespace {

void bind(py::module_& m) {
  py::class_<Device>(m, "Device", "A cuda device, like torch.device('cuda:N')")
      .def(py::init([](py::object spec, py::object index) {
             Device d;
             if (!index.is_none()) {
               d.index = index.cast<int>();
               std::string t = py::str(spec);
               if (t != "cuda") throw ValueError("Device type must be 'cuda', got '" + t + "'");
             } else {
               int idx = device_index(spec, /*optional=*/false);
               d.index = idx == kCurrentDevice ? current_device() : idx;
             }
             return d;
           }),
           py::arg("spec"), py::arg("index") = py::none())
      .def_readonly("type", &Device::type)
      .def_readonly("index", &Device::index)
      .def("__eq__",
           [](const Device& a, py::object other) {
             try {
               int idx = device_index(other, false);
               return idx == a.index;
             } catch (...) {
               return false;
             }
           })
      .def("__hash__", [](const Device& d) { return py::hash(py::str("cuda:" + std::to_string(d.index))); })
      .def("__str__", [](const Device& d) { return "cuda:" + std::to_string(d.index); })
      .def("__repr__", [](const Device& d) {
        return "device(type='cuda', index=" + std::to_string(d.index) + ")";
      });
  m.def("_make_device", [](int index) { return Device{"cuda", index}; });

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
        [](py::object device, bool optional) {
          int idx = device_index(device, optional);
          return idx == kCurrentDevice ? current_device() : resolve_device(idx);
        },
        py::arg("device"), py::arg("optional") = true);
  m.def("backend_name", &backend_name);
  m.def("set_backend", &set_backend, py::arg("name"));
  m.def("is_available", &is_available);
  m.def("device_count", &device_count);
  m.def("init", &init);
  m.def("is_initialized", &is_initialized);
  m.def("current_device", &current_device);
  m.def("set_device", [](py::object d) {
    int idx = device_index(d, false);
    if (idx >= 0) set_device(idx);  // torch: negative / None-like indices are a no-op
  }, py::arg("device"));
  m.def("_exchange_device", [](int idx) {
    if (idx < 0) return -1;
    int prev = current_device();
    if (prev != idx) set_device(idx);
    return prev;
  });
  m.def("get_device_name", [](py::object d) { return get_device_name(device_index(d)); },
        py::arg("device") = py::none());
  m.def("get_device_capability",
        [](py::object d) {
          auto c = get_device_capability(device_index(d));
          return py::make_tuple(c.first, c.second);
        },
        py::arg("device") = py::none());
  m.def("get_device_properties",
        [](py::object d) { return &get_device_properties(device_index(d)); },
        py::arg("device") = py::none(), py::return_value_policy::reference);
  m.def("get_arch_list", &get_arch_list);
  m.def("get_gencode_flags", &get_gencode_flags);
  m.def("is_bf16_supported", &is_bf16_supported, py::arg("including_emulation") = true);
  m.def("is_tf32_supported", &is_tf32_supported);
  m.def("synchronize", [](py::object d) {
    int idx = device_index(d);
    py::gil_scoped_release release;
    synchronize(idx);
  }, py::arg("device") = py::none());
  m.def("can_device_access_peer",
        [](py::object a, py::object b) {
          return can_device_access_peer(device_index(a, false), device_index(b, false));
        },
        py::arg("device"), py::arg("peer_device"));
  m.def("_device_of_pointer", [](std::uintptr_t p) { return device_of_pointer(reinterpret_cast<const void*>(p)); });
  m.def("utilization", [](py::object d) { return utilization(device_index(d)); },
        py::arg("device") = py::none());
  m.def("memory_usage", [](py::object d) { return memory_usage(device_index(d)); },
        py::arg("device") = py::none());
  m.def("temperature", [](py::object d) { return temperature(device_index(d)); },
        py::arg("device") = py::none());
  m.def("power_draw", [](py::object d) { return power_draw(device_index(d)); },
        py::arg("device") = py::none());
  m.def("clock_rate", [](py::object d) { return clock_rate(device_index(d)); },
        py::arg("device") = py::none());
  m.def("device_memory_used", [](py::object d) { return device_memory_used(device_index(d)); },
        py::arg("device") = py::none());
  m.def("check_error", &check_error, py::arg("res"));
  m.def("driver_version", &driver_version);
  m.def("_current_solver_handle",
        [] { return reinterpret_cast<std::uintptr_t>(current_solver_handle()); });
  m.def("_set_sync_debug_mode", [](int mode) { set_sync_debug_mode(static_cast<SyncDebugMode>(mode)); });
  m.def("_get_sync_debug_mode", [] { return static_cast<int>(get_sync_debug_mode()); });
  m.def("_set_sync_warning_handler", [](py::object handler) {
    if (handler.is_none()) {
      detail::set_sync_warning_handler(nullptr);
      return;
    }
    // Keep a strong reference for the process lifetime (never released at exit).
    auto* keep = new py::object(handler);
    detail::set_sync_warning_handler([keep](const std::string& msg) {
      py::gil_scoped_acquire gil;
      (*keep)(msg);
    });
  });
}

Registrar reg("devices", 0, bind);

}  // namespace
}  // namespace cudakit::python
