// cuFile (GPUDirect Storage), loaded at run time through the shared loader
// (library_loader.hpp), never linked: cudakit builds without cufile.h and runs where libcufile
// is absent (every path then takes src/gds's compat engine).
//
// The types and prototypes below are declared from NVIDIA's cuFile API reference (the C ABI of
// cufile.h, unchanged since cuFile 1.0 for what we call): CUfileError_t is {CUfileOpError,
// CUresult}, CUfileDescr_t is {handle type, union {int fd; void*}, const fs-ops*}, status
// codes are 0 or 5000 + n. Only the calls cudakit makes are declared.
//
// The driver (cuFileDriverOpen) is opened once, on the first GDS use, and never closed:
// closing at exit would call into cuFile and CUDA during teardown (backend.hpp).
//
// Thread-safety: cufile() and cufile_driver() load / open once (function-local statics) and
// return immutable results; cuFile's own calls are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "backend/library_loader.hpp"

namespace cudakit::detail::cuda {

struct CuFileError {  // CUfileError_t
  int err;            // CUfileOpError: 0 = CU_FILE_SUCCESS, else 5000 + n
  int cu_err;         // CUresult when err == CU_FILE_CUDA_DRIVER_ERROR
};
inline constexpr int kCuFileSuccess = 0;
inline constexpr int kCuFileBaseError = 5000;
inline constexpr int kCuFileCudaDriverError = 5011;
inline constexpr int kCuFileHandleTypeOpaqueFd = 1;

struct CuFileDescr {  // CUfileDescr_t
  int type;           // CUfileFileHandleType
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;  // user-space file systems only
};

struct CuFileDriverProps {  // CUfileDrvProps_t (we read the nvfs version only)
  struct {
    unsigned major_version;  // nvidia-fs kernel driver; 0.0 when it is not loaded
    unsigned minor_version;
    std::size_t poll_thresh_size;
    std::size_t max_direct_io_size;
    unsigned dstatusflags;
    unsigned dcontrolflags;
  } nvfs;
  unsigned fflags;
  unsigned max_device_cache_size;
  unsigned per_buffer_cache_size;
  unsigned max_device_pinned_mem_size;
  unsigned max_batch_io_size;
  unsigned max_batch_io_timeout_msecs;
};

struct CuFileApi {
  CuFileError (*cuFileDriverOpen)() = nullptr;
  CuFileError (*cuFileDriverGetProperties)(CuFileDriverProps*) = nullptr;
  CuFileError (*cuFileHandleRegister)(void** fh, CuFileDescr* descr) = nullptr;
  void (*cuFileHandleDeregister)(void* fh) = nullptr;
  CuFileError (*cuFileBufRegister)(const void* ptr, std::size_t bytes, int flags) = nullptr;
  CuFileError (*cuFileBufDeregister)(const void* ptr) = nullptr;
  ssize_t (*cuFileRead)(void* fh, void* buf, std::size_t bytes, off_t file_offset,
                        off_t buf_offset) = nullptr;
  ssize_t (*cuFileWrite)(void* fh, const void* buf, std::size_t bytes, off_t file_offset,
                         off_t buf_offset) = nullptr;
  CuFileError (*cuFileGetVersion)(int* version) = nullptr;  // optional (cuFile 1.9+)
};

struct CuFile {
  CuFileApi api;
  LoadedLibrary lib;
};

// Loads libcufile on first call; never throws (inspect lib.available()).
const CuFile& cufile() noexcept;

// cuFileDriverOpen + the nvidia-fs probe, once. `ready`: the library loaded and its driver
// opened (cuFile calls may be made); `direct`: the nvidia-fs kernel driver is present, so
// registered files move data by DMA. `reason` explains whichever is false.
struct CuFileDriver {
  bool ready = false;
  bool direct = false;
  std::string reason;
};
const CuFileDriver& cufile_driver() noexcept;

// "CU_FILE_DRIVER_NOT_INITIALIZED (5001)", or the errno text for -1 (file-system errors).
std::string cufile_status_name(int status);

}  // namespace cudakit::detail::cuda
