// CudaBackend: telemetry through NVML.
//
// CUDA ordinals are mapped to NVML handles by PCI bus id (cuDeviceGetPCIBusId ->
// nvmlDeviceGetHandleByPciBusId_v2), never by index: NVML ignores CUDA_VISIBLE_DEVICES and
// may enumerate in another order.
#include <mutex>
#include <unordered_map>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/nvml_api.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

const nvml::Api& nvml_api(const char* what) {
  const nvml::State& s = nvml::nvml();
  if (!s.available()) throw_library_unavailable(s.lib, what);
  return s.api;
}

template <class Fn>
Fn need(Fn fn, const char* symbol) {
  if (!fn) {
    throw NotSupportedError(std::string(symbol) +
                            " is missing from libnvidia-ml.so.1: update the NVIDIA driver");
  }
  return fn;
}

}  // namespace

// Resolves (and caches) the NVML handle of a CUDA ordinal.
static nvml::Device nvml_device(CudaBackend& b, int device, const char* what) {
  CUdevice dev = b.cu_device(device, what);  // validates the ordinal, needs a usable driver
  const nvml::Api& n = nvml_api(what);
  static std::mutex mutex;
  static auto* cache = new std::unordered_map<int, nvml::Device>();  // leaked: exit-safe
  std::lock_guard lock(mutex);
  if (auto it = cache->find(device); it != cache->end()) return it->second;
  char bus_id[64] = {};
  check(api(what).cuDeviceGetPCIBusId(bus_id, sizeof(bus_id), dev), "cuDeviceGetPCIBusId");
  nvml::Device h = nullptr;
  nvml::Return rc = n.nvmlDeviceGetHandleByPciBusId_v2(bus_id, &h);
  if (rc != nvml::kSuccess) {
    nvml::throw_nvml(rc, (std::string("nvmlDeviceGetHandleByPciBusId_v2('") + bus_id + "')").c_str());
  }
  cache->emplace(device, h);
  return h;
}

int CudaBackend::utilization_percent(int device) {
  nvml::Device h = nvml_device(*this, device, "utilization");
  nvml::Utilization u{};
  nvml::Return rc = need(nvml::nvml().api.nvmlDeviceGetUtilizationRates,
                         "nvmlDeviceGetUtilizationRates")(h, &u);
  if (rc != nvml::kSuccess) nvml::throw_nvml(rc, "nvmlDeviceGetUtilizationRates");
  return static_cast<int>(u.gpu);
}

int CudaBackend::memory_utilization_percent(int device) {
  nvml::Device h = nvml_device(*this, device, "memory_usage");
  nvml::Utilization u{};
  nvml::Return rc = need(nvml::nvml().api.nvmlDeviceGetUtilizationRates,
                         "nvmlDeviceGetUtilizationRates")(h, &u);
  if (rc != nvml::kSuccess) nvml::throw_nvml(rc, "nvmlDeviceGetUtilizationRates");
  return static_cast<int>(u.memory);
}

int CudaBackend::temperature_c(int device) {
  nvml::Device h = nvml_device(*this, device, "temperature");
  unsigned int t = 0;
  nvml::Return rc = need(nvml::nvml().api.nvmlDeviceGetTemperature,
                         "nvmlDeviceGetTemperature")(h, nvml::kTemperatureGpu, &t);
  if (rc != nvml::kSuccess) nvml::throw_nvml(rc, "nvmlDeviceGetTemperature");
  return static_cast<int>(t);
}

int CudaBackend::power_draw_mw(int device) {
  nvml::Device h = nvml_device(*this, device, "power_draw");
  unsigned int mw = 0;
  nvml::Return rc =
      need(nvml::nvml().api.nvmlDeviceGetPowerUsage, "nvmlDeviceGetPowerUsage")(h, &mw);
  if (rc != nvml::kSuccess) nvml::throw_nvml(rc, "nvmlDeviceGetPowerUsage");
  return static_cast<int>(mw);
}

int CudaBackend::clock_rate_mhz(int device) {
  nvml::Device h = nvml_device(*this, device, "clock_rate");
  unsigned int mhz = 0;
  nvml::Return rc = need(nvml::nvml().api.nvmlDeviceGetClockInfo, "nvmlDeviceGetClockInfo")(
      h, nvml::kClockSm, &mhz);
  if (rc != nvml::kSuccess) nvml::throw_nvml(rc, "nvmlDeviceGetClockInfo(SM)");
  return static_cast<int>(mhz);
}

std::size_t CudaBackend::device_memory_used(int device) {
  nvml::Device h = nvml_device(*this, device, "device_memory_used");
  nvml::Memory m{};
  nvml::Return rc =
      need(nvml::nvml().api.nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo")(h, &m);
  if (rc != nvml::kSuccess) nvml::throw_nvml(rc, "nvmlDeviceGetMemoryInfo");
  return static_cast<std::size_t>(m.used);
}

std::vector<Backend::ProcessMemory> CudaBackend::gpu_processes(int device) {
  nvml::Device h = nvml_device(*this, device, "list_gpu_processes");
  const nvml::Api& n = nvml::nvml().api;
  std::vector<ProcessMemory> out;
  auto used = [](unsigned long long v) {
    return v == nvml::kValueNotAvailable ? std::size_t{0} : static_cast<std::size_t>(v);
  };
  // The process list can grow between the sizing call and the fetch: retry a few times.
  auto query = [&](auto fn, auto tag, const char* symbol) {
    using Info = decltype(tag);
    for (int attempt = 0; attempt < 8; ++attempt) {
      unsigned int count = 0;
      nvml::Return rc = fn(h, &count, nullptr);
      if (rc == nvml::kSuccess) return;  // no processes
      if (rc != nvml::kErrorInsufficientSize) nvml::throw_nvml(rc, symbol);
      std::vector<Info> infos(count + 8);
      count = static_cast<unsigned int>(infos.size());
      rc = fn(h, &count, infos.data());
      if (rc == nvml::kErrorInsufficientSize) continue;
      if (rc != nvml::kSuccess) nvml::throw_nvml(rc, symbol);
      for (unsigned int i = 0; i < count; ++i) {
        out.push_back({static_cast<int>(infos[i].pid), used(infos[i].usedGpuMemory)});
      }
      return;
    }
    throw Error(std::string(symbol) + ": the process list kept changing; try again");
  };
  if (n.nvmlDeviceGetComputeRunningProcesses_v3) {
    query(n.nvmlDeviceGetComputeRunningProcesses_v3, nvml::ProcessInfoV2{},
          "nvmlDeviceGetComputeRunningProcesses_v3");
  } else if (n.nvmlDeviceGetComputeRunningProcesses_v2) {
    query(n.nvmlDeviceGetComputeRunningProcesses_v2, nvml::ProcessInfoV2{},
          "nvmlDeviceGetComputeRunningProcesses_v2");
  } else {
    query(need(n.nvmlDeviceGetComputeRunningProcesses, "nvmlDeviceGetComputeRunningProcesses"),
          nvml::ProcessInfoV1{}, "nvmlDeviceGetComputeRunningProcesses");
  }
  return out;
}

}  // namespace cudakit::detail::cuda
