// One-time loading of libcuda.so.1 and resolution of the entry-point table (see the header).
#include "backend/cuda/driver_api.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

// Every PFN_ type we call through must be the prototype cuda.h declares for that name after
// its version macros (e.g. cuStreamBeginCapture -> cuStreamBeginCapture_v2). A mismatch would
// corrupt calls silently, so it is a compile error instead.
#define CUDAKIT_CUDA_CHECK_PROTOTYPE(name, pfn_version, request_version, required) \
  static_assert(std::is_same_v<decltype(&name), PFN_##name##_v##pfn_version>,      \
                "PFN type of " #name " differs from cuda.h's prototype");
CUDAKIT_CUDA_ENTRY_POINTS(CUDAKIT_CUDA_CHECK_PROTOTYPE)
#undef CUDAKIT_CUDA_CHECK_PROTOTYPE

static_assert(CUDA_VERSION >= 12080, "cudakit's cuda backend needs CUDA 12.8+ headers");

using GetProcAddress = PFN_cuGetProcAddress_v12000;
constexpr int kNewestKnownMajor = 13;  // cap for the header-less entry points

// Returns the entry point or nullptr when the driver lacks it or is older than its ABI.
void* resolve(GetProcAddress get_proc, const char* symbol, int pfn_version, int request,
              int driver_version) {
  if (driver_version != 0 && driver_version < pfn_version) return nullptr;
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult rc = get_proc(symbol, &fn, request, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
  if (rc != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) return nullptr;
  return fn;
}

std::string describe(const DriverState& s, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (s.api.cuGetErrorName) s.api.cuGetErrorName(rc, &name);
  if (s.api.cuGetErrorString) s.api.cuGetErrorString(rc, &text);
  std::string out = name ? name : error_code_name(static_cast<int>(rc));
  if (text) out += std::string(": ") + text;
  return out;
}

void fail(DriverState& s, int code, std::string reason) {
  s.available = false;
  if (!s.lib.soname().empty()) s.lib.fail(reason);  // loaded but unusable: say why in reports
  s.error_code = code;
  const char* name = nullptr;
  if (s.api.cuGetErrorName) s.api.cuGetErrorName(static_cast<CUresult>(code), &name);
  s.error_name = name ? name : error_code_name(code);
  s.reason = std::move(reason);
}

std::string visible_devices_note() {
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!env) return "";
  return std::string(" (CUDA_VISIBLE_DEVICES='") + env + "')";
}

void load(DriverState& s) {
  // Only the real driver's soname: the toolkit's stubs/libcuda.so answers every call with
  // CUDA_ERROR_STUB_LIBRARY, and a bare "libcuda.so" would pick it up from a build tree.
  GetProcAddress get_proc = nullptr;
  s.lib = load_library({"CUDA driver", {"libcuda.so.1"}, "install the NVIDIA driver"},
                       {bind_symbol("cuGetProcAddress_v2", get_proc)});
  if (s.lib.soname().empty()) {
    fail(s, errc::no_device,
         "libcuda.so.1 not found: no NVIDIA driver on this machine (dlopen: " +
             s.lib.open_error() + ")");
    return;
  }
  const std::string& path = s.lib.path();
  if (path.find("/stubs/") != std::string::npos) {
    fail(s, 34, "libcuda.so.1 resolved to the CUDA toolkit's stub library (" + path +
                    "), not a real NVIDIA driver: remove the stubs directory from "
                    "LD_LIBRARY_PATH");
    return;
  }
  if (!get_proc) {
    fail(s, errc::not_supported,
         "the NVIDIA driver at " + path +
             " is too old (it lacks cuGetProcAddress_v2): cudakit needs a CUDA 12.8+ driver");
    return;
  }

  // The driver version first: it gates which ABI versions may be requested.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult rc = get_proc("cuDriverGetVersion", &fn, 12080, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                         &status);
  int version = 0;
  if (rc == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && fn) {
    s.api.cuDriverGetVersion = reinterpret_cast<PFN_cuDriverGetVersion_v2020>(fn);
    rc = s.api.cuDriverGetVersion(&version);
  } else if (rc == CUDA_SUCCESS) {
    rc = CUDA_ERROR_NOT_FOUND;
  }
  if (rc == CUDA_ERROR_STUB_LIBRARY) {
    fail(s, CUDA_ERROR_STUB_LIBRARY,
         path + " is the CUDA toolkit's stub library, not a real NVIDIA driver: remove the "
                "directory holding it from LD_LIBRARY_PATH");
    return;
  }
  if (rc != CUDA_SUCCESS) {
    fail(s, static_cast<int>(rc),
         "cannot query the driver version of " + path + " (" +
             error_code_name(static_cast<int>(rc)) + "): is it a real NVIDIA driver?");
    return;
  }
  s.driver_version = version;
  s.lib.set_version(std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10));

  std::string missing;
#define CUDAKIT_CUDA_RESOLVE(name, pfn_version, request_version, required)                   \
  s.api.name = reinterpret_cast<PFN_##name##_v##pfn_version>(                                  \
      resolve(get_proc, #name, pfn_version, request_version, version));                        \
  if (required && !s.api.name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  CUDAKIT_CUDA_ENTRY_POINTS(CUDAKIT_CUDA_RESOLVE)
#undef CUDAKIT_CUDA_RESOLVE

  // Pre-12.8 drivers only have the first cuEventElapsedTime, with the same C prototype.
  if (!s.api.cuEventElapsedTime) {
    static_assert(std::is_same_v<PFN_cuEventElapsedTime_v2000, PFN_cuEventElapsedTime_v12080>);
    s.api.cuEventElapsedTime = reinterpret_cast<PFN_cuEventElapsedTime_v12080>(
        resolve(get_proc, "cuEventElapsedTime", 2000, 12000, version));
  }
  int capped = std::min(version, kNewestKnownMajor * 1000 + 990);
  s.api.cuGraphNodeGetToolsId = reinterpret_cast<PFN_cuGraphNodeGetToolsId_ext>(
      resolve(get_proc, "cuGraphNodeGetToolsId", 0, capped, version));
  s.api.cuGraphNodeGetLocalId = reinterpret_cast<PFN_cuGraphNodeGetLocalId_ext>(
      resolve(get_proc, "cuGraphNodeGetLocalId", 0, capped, version));
  s.api.cuGraphExecGetId = reinterpret_cast<PFN_cuGraphExecGetId_ext>(
      resolve(get_proc, "cuGraphExecGetId", 0, capped, version));

  if (!missing.empty()) {
    fail(s, errc::not_supported,
         "the NVIDIA driver (CUDA " + std::to_string(version / 1000) + "." +
             std::to_string(version % 1000 / 10) + ", " + path + ") lacks " + missing +
             ": update the driver (cudakit needs CUDA 12.8+)");
    return;
  }

  rc = s.api.cuInit(0);
  if (rc != CUDA_SUCCESS) {
    std::string why = describe(s, rc);
    if (rc == CUDA_ERROR_STUB_LIBRARY) why += " (" + path + " is the toolkit stub)";
    if (rc == CUDA_ERROR_NO_DEVICE) why += visible_devices_note();
    fail(s, static_cast<int>(rc), "cuInit failed: " + why);
    return;
  }
  int count = 0;
  rc = s.api.cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) {
    fail(s, static_cast<int>(rc), "cuDeviceGetCount failed: " + describe(s, rc));
    return;
  }
  if (count <= 0) {
    fail(s, errc::no_device, "no CUDA devices are visible" + visible_devices_note());
    return;
  }
  s.device_count = count;
  s.available = true;
}

}  // namespace

const DriverState& driver() noexcept {
  // Leaked: the table must stay valid during static destruction of other objects.
  static DriverState* state = new DriverState();
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      load(*state);
    } catch (const std::exception& e) {  // std::string allocation failure only
      state->available = false;
      state->error_code = errc::unknown;
      state->reason = std::string("loading the CUDA driver failed: ") + e.what();
    }
  });
  return *state;
}

}  // namespace cudakit::detail::cuda
