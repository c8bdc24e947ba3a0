#include "backend/cuda/cufile_api.hpp"

#include <cerrno>
#include <cstring>

#include "backend/cuda/driver_api.hpp"

namespace cudakit::detail::cuda {
namespace {

std::string cufile_version(const LoadedLibrary& l) {
  auto get = reinterpret_cast<CuFileError (*)(int*)>(l.symbol("cuFileGetVersion"));
  int v = 0;
  if (!get || get(&v).err != kCuFileSuccess || v <= 0) return "";
  return "API " + std::to_string(v);  // cuFile's integer encoding, shown as reported
}

}  // namespace

const CuFile& cufile() noexcept {
  static const CuFile* lib = [] {
    auto* c = new CuFile();  // leaked: cuFile state lives until process exit
    c->lib = load_library(
        {"cuFile", {"libcufile.so.0", "libcufile.so"},
         "install the GPUDirect Storage runtime (libcufile, part of the CUDA toolkit's "
         "gds packages); without it cudakit.gds uses its compat path",
         cufile_version},
        {bind_symbol("cuFileDriverOpen", c->api.cuFileDriverOpen),
         bind_symbol("cuFileDriverGetProperties", c->api.cuFileDriverGetProperties),
         bind_symbol("cuFileHandleRegister", c->api.cuFileHandleRegister),
         bind_symbol("cuFileHandleDeregister", c->api.cuFileHandleDeregister),
         bind_symbol("cuFileBufRegister", c->api.cuFileBufRegister),
         bind_symbol("cuFileBufDeregister", c->api.cuFileBufDeregister),
         bind_symbol("cuFileRead", c->api.cuFileRead),
         bind_symbol("cuFileWrite", c->api.cuFileWrite),
         bind_symbol("cuFileGetVersion", c->api.cuFileGetVersion, false)});
    return c;
  }();
  return *lib;
}

const CuFileDriver& cufile_driver() noexcept {
  static const CuFileDriver* state = [] {
    auto* d = new CuFileDriver();
    try {
      const DriverState& drv = driver();
      const CuFile& f = cufile();
      if (!drv.available) {
        d->reason = "the CUDA driver is unavailable: " + drv.reason;
      } else if (!f.lib.available()) {
        d->reason = f.lib.reason();
      } else if (CuFileError e = f.api.cuFileDriverOpen(); e.err != kCuFileSuccess) {
        d->reason = "cuFileDriverOpen failed: " + cufile_status_name(e.err);
      } else {
        d->ready = true;
        CuFileDriverProps props{};
        CuFileError e2 = f.api.cuFileDriverGetProperties(&props);
        if (e2.err != kCuFileSuccess) {
          d->reason = "cuFileDriverGetProperties failed: " + cufile_status_name(e2.err);
        } else if (props.nvfs.major_version == 0 && props.nvfs.minor_version == 0) {
          d->reason = "the nvidia-fs kernel driver is not loaded: cuFile could only run in "
                      "its compatibility mode (POSIX I/O through host memory)";
        } else {
          d->direct = true;
        }
      }
    } catch (const std::exception& e) {  // string allocation only
      d->ready = d->direct = false;
      d->reason = e.what();
    }
    return d;
  }();
  return *state;
}

std::string cufile_status_name(int status) {
  if (status < 0) status = -status;
  if (status == 1) return std::string("file-system error: ") + std::strerror(errno);
  static const char* const names[] = {
      "CU_FILE_SUCCESS", "CU_FILE_DRIVER_NOT_INITIALIZED", "CU_FILE_DRIVER_INVALID_PROPS",
      "CU_FILE_DRIVER_UNSUPPORTED_LIMIT", "CU_FILE_DRIVER_VERSION_MISMATCH",
      "CU_FILE_DRIVER_VERSION_READ_ERROR", "CU_FILE_DRIVER_CLOSING",
      "CU_FILE_PLATFORM_NOT_SUPPORTED", "CU_FILE_IO_NOT_SUPPORTED",
      "CU_FILE_DEVICE_NOT_SUPPORTED", "CU_FILE_NVFS_DRIVER_ERROR", "CU_FILE_CUDA_DRIVER_ERROR",
      "CU_FILE_CUDA_POINTER_INVALID", "CU_FILE_CUDA_MEMORY_TYPE_INVALID",
      "CU_FILE_CUDA_POINTER_RANGE_ERROR", "CU_FILE_CUDA_CONTEXT_MISMATCH",
      "CU_FILE_INVALID_MAPPING_SIZE", "CU_FILE_INVALID_MAPPING_RANGE",
      "CU_FILE_INVALID_FILE_TYPE", "CU_FILE_INVALID_FILE_OPEN_FLAG", "CU_FILE_DIO_NOT_SET",
      nullptr, "CU_FILE_INVALID_VALUE", "CU_FILE_MEMORY_ALREADY_REGISTERED",
      "CU_FILE_MEMORY_NOT_REGISTERED", "CU_FILE_PERMISSION_DENIED",
      "CU_FILE_DRIVER_ALREADY_OPEN", "CU_FILE_HANDLE_NOT_REGISTERED",
      "CU_FILE_HANDLE_ALREADY_REGISTERED", "CU_FILE_DEVICE_NOT_FOUND",
      "CU_FILE_INTERNAL_ERROR", "CU_FILE_GETNEWFD_FAILED", nullptr, "CU_FILE_NVFS_SETUP_ERROR",
      "CU_FILE_IO_DISABLED", "CU_FILE_BATCH_SUBMIT_FAILED",
      "CU_FILE_GPU_MEMORY_PINNING_FAILED", "CU_FILE_BATCH_FULL",
      "CU_FILE_ASYNC_NOT_SUPPORTED"};
  constexpr int count = static_cast<int>(sizeof(names) / sizeof(names[0]));
  if (status == 0) return names[0];
  int n = status - kCuFileBaseError;
  std::string name = n > 0 && n < count && names[n] ? names[n] : "cuFile status";
  return name + " (" + std::to_string(status) + ")";
}

}  // namespace cudakit::detail::cuda
