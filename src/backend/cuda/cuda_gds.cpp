// CudaBackend: GPUDirect Storage through cuFile (cufile_api.hpp). The policy (when to use
// GDS, the compat path, registration bookkeeping, errors naming the file) lives above the
// seam in src/gds; this file only forwards to cuFile and turns its statuses into exceptions.
#include <cerrno>
#include <cstring>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cufile_api.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

const CuFileApi& cufile_api(const char* what) {
  const CuFileDriver& d = cufile_driver();
  if (!d.ready) throw NotSupportedError(std::string(what) + ": " + d.reason);
  return cufile().api;
}

std::string describe(const CuFileError& e) {
  std::string s = cufile_status_name(e.err);
  if (e.err == kCuFileCudaDriverError) s += " (CUresult " + std::to_string(e.cu_err) + ")";
  return s;
}

// cuFileRead / cuFileWrite return -1 with errno for a file-system error, or a negated
// cuFile status.
[[noreturn]] void throw_io(ssize_t rc, int saved_errno, const char* call) {
  if (rc == -1) {
    throw IoError(saved_errno, "", std::string(call) + " failed: " + std::strerror(saved_errno));
  }
  throw Error(std::string(call) + " failed: " + cufile_status_name(static_cast<int>(-rc)));
}

}  // namespace

GdsStatus CudaBackend::gds_status() noexcept {
  GdsStatus s;
  try {
    const CuFileDriver& d = cufile_driver();
    s.available = d.ready && d.direct;
    if (!s.available) s.reason = d.reason;
    const LoadedLibrary& lib = cufile().lib;
    if (!lib.soname().empty()) {
      s.library = "cuFile" + (lib.version().empty() ? "" : " " + lib.version()) + " (" +
                  lib.path() + ")";
    }
  } catch (...) {
    s.available = false;
    s.reason = "probing cuFile failed";
  }
  return s;
}

GdsFileHandle CudaBackend::gds_file_register(int fd, std::string* why) {
  const CuFileApi& f = cufile_api("GdsFile.register_handle");
  CuFileDescr descr{};
  descr.type = kCuFileHandleTypeOpaqueFd;
  descr.handle.fd = fd;
  void* handle = nullptr;
  CuFileError e = f.cuFileHandleRegister(&handle, &descr);
  if (e.err != kCuFileSuccess) {
    if (why) *why = "cuFileHandleRegister failed: " + describe(e);
    return nullptr;
  }
  return handle;
}

void CudaBackend::gds_file_deregister(GdsFileHandle h) {
  if (!h || is_shutting_down()) return;
  cufile_api("GdsFile.deregister_handle").cuFileHandleDeregister(h);
}

void CudaBackend::gds_buffer_register(void* ptr, std::size_t bytes) {
  const CuFileApi& f = cufile_api("gds_register_buffer");
  CuFileError e = f.cuFileBufRegister(ptr, bytes, 0);
  if (e.err != kCuFileSuccess) throw Error("cuFileBufRegister failed: " + describe(e));
}

void CudaBackend::gds_buffer_deregister(void* ptr) {
  if (is_shutting_down()) return;
  const CuFileApi& f = cufile_api("gds_deregister_buffer");
  CuFileError e = f.cuFileBufDeregister(ptr);
  if (e.err != kCuFileSuccess) throw Error("cuFileBufDeregister failed: " + describe(e));
}

std::size_t CudaBackend::gds_read(GdsFileHandle h, void* dst, std::size_t bytes,
                                  std::int64_t file_offset) {
  const CuFileApi& f = cufile_api("GdsFile.load_storage");
  ensure_current_context("GdsFile.load_storage");
  ssize_t rc = f.cuFileRead(h, dst, bytes, static_cast<off_t>(file_offset), 0);
  if (rc < 0) throw_io(rc, errno, "cuFileRead");
  return static_cast<std::size_t>(rc);
}

std::size_t CudaBackend::gds_write(GdsFileHandle h, const void* src, std::size_t bytes,
                                   std::int64_t file_offset) {
  const CuFileApi& f = cufile_api("GdsFile.save_storage");
  ensure_current_context("GdsFile.save_storage");
  ssize_t rc = f.cuFileWrite(h, src, bytes, static_cast<off_t>(file_offset), 0);
  if (rc < 0) throw_io(rc, errno, "cuFileWrite");
  return static_cast<std::size_t>(rc);
}

}  // namespace cudakit::detail::cuda
