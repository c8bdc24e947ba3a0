// NVML (libnvidia-ml.so.1), loaded at run time for device telemetry.
//
// The toolkit we build against ships no nvml.h, so the few types and prototypes used here are
// declared from NVML's documented, long-stable C ABI (nvml.h of the R525+ drivers):
//   nvmlReturn_t is an int-sized enum (0 = success, 3 = not supported, 7 = insufficient size);
//   nvmlDevice_t is an opaque pointer; nvmlUtilization_t = {uint gpu, memory};
//   nvmlMemory_t = {ull total, free, used}; nvmlProcessInfo_v2_t (also used by the _v3 query)
//   = {uint pid; ull usedGpuMemory; uint gpuInstanceId, computeInstanceId}, while the
//   unversioned query fills the older {uint pid; ull usedGpuMemory}.
//
// Loaded through the shared loader (library_loader.hpp).
//
// Thread-safety: nvml() loads once (call_once) and NVML itself is thread-safe.
#pragma once

#include <string>

#include "backend/library_loader.hpp"

namespace cudakit::detail::cuda::nvml {

using Return = int;
using Device = struct nvmlDevice_st*;

inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
inline constexpr int kClockSm = 1;         // NVML_CLOCK_SM
inline constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE

struct Utilization { unsigned int gpu; unsigned int memory; };
struct Memory { unsigned long long total; unsigned long long free; unsigned long long used; };
struct ProcessInfoV1 { unsigned int pid; unsigned long long usedGpuMemory; };
struct ProcessInfoV2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct Api {
  Return (*nvmlInit_v2)() = nullptr;
  const char* (*nvmlErrorString)(Return) = nullptr;
  Return (*nvmlSystemGetNVMLVersion)(char*, unsigned int) = nullptr;
  Return (*nvmlDeviceGetHandleByPciBusId_v2)(const char*, Device*) = nullptr;
  Return (*nvmlDeviceGetUtilizationRates)(Device, Utilization*) = nullptr;
  Return (*nvmlDeviceGetTemperature)(Device, int /*nvmlTemperatureSensors_t*/, unsigned int*) = nullptr;
  Return (*nvmlDeviceGetPowerUsage)(Device, unsigned int*) = nullptr;
  Return (*nvmlDeviceGetClockInfo)(Device, int /*nvmlClockType_t*/, unsigned int*) = nullptr;
  Return (*nvmlDeviceGetMemoryInfo)(Device, Memory*) = nullptr;
  // Exactly one of these is set, newest first: _v3 / _v2 take ProcessInfoV2, plain takes V1.
  Return (*nvmlDeviceGetComputeRunningProcesses_v3)(Device, unsigned int*, ProcessInfoV2*) = nullptr;
  Return (*nvmlDeviceGetComputeRunningProcesses_v2)(Device, unsigned int*, ProcessInfoV2*) = nullptr;
  Return (*nvmlDeviceGetComputeRunningProcesses)(Device, unsigned int*, ProcessInfoV1*) = nullptr;
};

struct State {
  Api api;
  LoadedLibrary lib;  // lib.available(): loaded, required symbols found, nvmlInit_v2 succeeded
  bool available() const noexcept { return lib.available(); }
};

// Loads libnvidia-ml.so.1 + nvmlInit_v2, once. Never throws. NVML is never shut down: doing
// so at exit would call into the driver during teardown.
const State& nvml() noexcept;

// "<what>: <nvmlErrorString>" thrown as NotSupportedError (NVML_ERROR_NOT_SUPPORTED) or Error.
[[noreturn]] void throw_nvml(Return rc, const char* what);

}  // namespace cudakit::detail::cuda::nvml
