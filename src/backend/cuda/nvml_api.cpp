#include "backend/cuda/nvml_api.hpp"

#include <mutex>

#include "cudakit/error.hpp"

namespace cudakit::detail::cuda::nvml {
namespace {

void load(State& s) {
  Api& a = s.api;
  s.lib = load_library(
      {"NVML", {"libnvidia-ml.so.1"},
       "NVML ships with the NVIDIA driver and is needed for device telemetry"},
      {bind_symbol("nvmlInit_v2", a.nvmlInit_v2),
       bind_symbol("nvmlErrorString", a.nvmlErrorString, false),
       bind_symbol("nvmlSystemGetNVMLVersion", a.nvmlSystemGetNVMLVersion, false),
       bind_symbol("nvmlDeviceGetHandleByPciBusId_v2", a.nvmlDeviceGetHandleByPciBusId_v2),
       bind_symbol("nvmlDeviceGetUtilizationRates", a.nvmlDeviceGetUtilizationRates, false),
       bind_symbol("nvmlDeviceGetTemperature", a.nvmlDeviceGetTemperature, false),
       bind_symbol("nvmlDeviceGetPowerUsage", a.nvmlDeviceGetPowerUsage, false),
       bind_symbol("nvmlDeviceGetClockInfo", a.nvmlDeviceGetClockInfo, false),
       bind_symbol("nvmlDeviceGetMemoryInfo", a.nvmlDeviceGetMemoryInfo, false),
       bind_symbol("nvmlDeviceGetComputeRunningProcesses_v3",
                   a.nvmlDeviceGetComputeRunningProcesses_v3, false),
       bind_symbol("nvmlDeviceGetComputeRunningProcesses_v2",
                   a.nvmlDeviceGetComputeRunningProcesses_v2, false),
       bind_symbol("nvmlDeviceGetComputeRunningProcesses",
                   a.nvmlDeviceGetComputeRunningProcesses, false)});
  if (!s.lib.available()) return;
  // Newest process query only: the older ones would be called with the wrong struct.
  if (a.nvmlDeviceGetComputeRunningProcesses_v3) {
    a.nvmlDeviceGetComputeRunningProcesses_v2 = nullptr;
    a.nvmlDeviceGetComputeRunningProcesses = nullptr;
  } else if (a.nvmlDeviceGetComputeRunningProcesses_v2) {
    a.nvmlDeviceGetComputeRunningProcesses = nullptr;
  }
  Return rc = a.nvmlInit_v2();
  if (rc != kSuccess) {
    const char* text = a.nvmlErrorString ? a.nvmlErrorString(rc) : nullptr;
    s.lib.fail("nvmlInit_v2 failed: " + (text ? std::string(text) : "error " + std::to_string(rc)));
    return;
  }
  char version[96] = {};
  if (a.nvmlSystemGetNVMLVersion &&
      a.nvmlSystemGetNVMLVersion(version, sizeof version) == kSuccess) {
    s.lib.set_version(version);
  }
}

}  // namespace

const State& nvml() noexcept {
  static State* state = new State();  // leaked: usable during static destruction
  static std::once_flag once;
  std::call_once(once, [] { load(*state); });  // load() never throws
  return *state;
}

void throw_nvml(Return rc, const char* what) {
  const State& s = nvml();
  const char* text = s.api.nvmlErrorString ? s.api.nvmlErrorString(rc) : nullptr;
  std::string msg = std::string(what) + ": " +
                    (text ? std::string(text) : "NVML error " + std::to_string(rc));
  if (rc == kErrorNotSupported) {
    throw NotSupportedError(msg + " (this GPU or driver does not report it)");
  }
  throw Error(msg);
}

}  // namespace cudakit::detail::cuda::nvml
