#include "backend/cuda/nvml_api.hpp"

#include <dlfcn.h>

#include <mutex>

#include "cudakit/error.hpp"

namespace cudakit::detail::cuda::nvml {
namespace {

template <class Fn>
void bind(void* lib, Fn& fn, const char* symbol) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
}

void load(State& s) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    s.reason = std::string("libnvidia-ml.so.1 not found: NVML (part of the NVIDIA driver) is "
                           "needed for device telemetry (dlopen: ") +
               (err ? err : "unknown error") + ")";
    return;
  }
  Api& a = s.api;
  bind(lib, a.nvmlInit_v2, "nvmlInit_v2");
  bind(lib, a.nvmlErrorString, "nvmlErrorString");
  bind(lib, a.nvmlDeviceGetHandleByPciBusId_v2, "nvmlDeviceGetHandleByPciBusId_v2");
  bind(lib, a.nvmlDeviceGetUtilizationRates, "nvmlDeviceGetUtilizationRates");
  bind(lib, a.nvmlDeviceGetTemperature, "nvmlDeviceGetTemperature");
  bind(lib, a.nvmlDeviceGetPowerUsage, "nvmlDeviceGetPowerUsage");
  bind(lib, a.nvmlDeviceGetClockInfo, "nvmlDeviceGetClockInfo");
  bind(lib, a.nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo");
  bind(lib, a.nvmlDeviceGetComputeRunningProcesses_v3, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!a.nvmlDeviceGetComputeRunningProcesses_v3) {
    bind(lib, a.nvmlDeviceGetComputeRunningProcesses_v2,
         "nvmlDeviceGetComputeRunningProcesses_v2");
    if (!a.nvmlDeviceGetComputeRunningProcesses_v2) {
      bind(lib, a.nvmlDeviceGetComputeRunningProcesses, "nvmlDeviceGetComputeRunningProcesses");
    }
  }
  if (!a.nvmlInit_v2 || !a.nvmlDeviceGetHandleByPciBusId_v2) {
    s.reason = "libnvidia-ml.so.1 is too old (no nvmlInit_v2 / "
               "nvmlDeviceGetHandleByPciBusId_v2): update the NVIDIA driver";
    return;
  }
  Return rc = a.nvmlInit_v2();
  if (rc != kSuccess) {
    const char* text = a.nvmlErrorString ? a.nvmlErrorString(rc) : nullptr;
    s.reason = "nvmlInit_v2 failed: " + (text ? std::string(text) : "error " + std::to_string(rc));
    return;
  }
  s.available = true;
}

}  // namespace

const State& nvml() noexcept {
  static State* state = new State();  // leaked: usable during static destruction
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      load(*state);
    } catch (...) {
      state->available = false;
    }
  });
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
