// GPUDirect Storage on the emulated backend.
//
// Default: there is none. gds_status() reports it unavailable and cudakit.gds moves file data
// through its compat path (src/gds/engine.cpp), as on a GPU host without a GDS file system;
// the registration and DMA entry points refuse as the cuda backend does without cuFile.
//
// CUDAKIT_EMULATED_GDS=1 models a machine with cuFile and the nvidia-fs driver, so the gds
// path above the seam (registration, per-chunk cuFile calls, buffer registration) runs in CI:
//   * a file registers only when opened with O_DIRECT (cuFile's rule: CU_FILE_DIO_NOT_SET
//     otherwise), so files on file systems without O_DIRECT fall back to compat as on a real
//     machine; the model keeps its own descriptor of the file without O_DIRECT, standing in
//     for cuFile's internal alignment handling;
//   * reads and writes go straight between the file and (host-addressable) device memory of
//     the calling thread's current device, as cuFile DMA does;
//   * buffers register once (CU_FILE_MEMORY_ALREADY_REGISTERED) and must be device memory.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {

constexpr const char* kNoGds =
    "the emulated backend has no GPUDirect Storage (cuFile): cudakit.gds moves file data "
    "through its compat path (O_DIRECT or buffered I/O, pinned staging buffers, copy streams); "
    "CUDAKIT_EMULATED_GDS=1 emulates a machine with GDS";

[[noreturn]] void no_gds(const char* what) {
  throw NotSupportedError(std::string(what) + ": " + kNoGds);
}

[[noreturn]] void cufile_error(const char* call, const char* status, int code) {
  throw Error(std::string(call) + " failed: " + status + " (" + std::to_string(code) +
              ") [emulated cuFile]");
}

}  // namespace

GdsStatus EmulatedBackend::gds_status() noexcept {
  GdsStatus s;
  try {
    s.available = config_.gds;
    if (!s.available) s.reason = kNoGds;
    if (config_.gds) s.library = "emulated cuFile (CUDAKIT_EMULATED_GDS=1)";
  } catch (...) {
  }
  return s;
}

GdsFileHandle EmulatedBackend::gds_file_register(int fd, std::string* why) {
  if (!config_.gds) no_gds("GdsFile.register_handle");
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) {
    if (why) *why = "cuFileHandleRegister failed: CU_FILE_INVALID_FILE_TYPE (5018)";
    return nullptr;
  }
  if (!(flags & O_DIRECT)) {
    if (why) *why = "cuFileHandleRegister failed: CU_FILE_DIO_NOT_SET (5020)";
    return nullptr;
  }
  int access = flags & O_ACCMODE;
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  int own = ::open(self.c_str(), access | O_CLOEXEC);
  if (own < 0) {
    if (why) *why = std::string("cuFileHandleRegister failed: ") + std::strerror(errno);
    return nullptr;
  }
  auto file = std::make_unique<GdsFile>();
  file->fd = own;
  void* handle = file.get();
  std::lock_guard lock(gds_mu_);
  gds_files_.emplace(handle, std::move(file));
  return handle;
}

void EmulatedBackend::gds_file_deregister(GdsFileHandle h) {
  if (!config_.gds) no_gds("GdsFile.deregister_handle");
  std::unique_ptr<GdsFile> file;
  {
    std::lock_guard lock(gds_mu_);
    auto it = gds_files_.find(h);
    if (it == gds_files_.end()) return;  // cuFileHandleDeregister returns nothing either
    file = std::move(it->second);
    gds_files_.erase(it);
  }
  ::close(file->fd);
}

void EmulatedBackend::gds_buffer_register(void* ptr, std::size_t bytes) {
  if (!config_.gds) no_gds("gds_register_buffer");
  if (pointer_device(ptr) < 0 || bytes == 0) {
    cufile_error("cuFileBufRegister", "CU_FILE_CUDA_POINTER_INVALID", 5012);
  }
  std::lock_guard lock(gds_mu_);
  if (!gds_buffers_.emplace(ptr, bytes).second) {
    cufile_error("cuFileBufRegister", "CU_FILE_MEMORY_ALREADY_REGISTERED", 5023);
  }
}

void EmulatedBackend::gds_buffer_deregister(void* ptr) {
  if (!config_.gds) no_gds("gds_deregister_buffer");
  std::lock_guard lock(gds_mu_);
  if (gds_buffers_.erase(ptr) == 0) {
    cufile_error("cuFileBufDeregister", "CU_FILE_MEMORY_NOT_REGISTERED", 5024);
  }
}

namespace {

template <class Io>
std::size_t transfer(int fd, std::size_t bytes, std::int64_t offset, Io io, const char* call) {
  std::size_t done = 0;
  while (done < bytes) {
    ssize_t r = io(fd, done, bytes - done, static_cast<off_t>(offset) + static_cast<off_t>(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw IoError(errno, "", std::string(call) + " failed: " + std::strerror(errno));
    }
    if (r == 0) break;  // end of file (reads)
    done += static_cast<std::size_t>(r);
  }
  return done;
}

}  // namespace

std::size_t EmulatedBackend::gds_read(GdsFileHandle h, void* dst, std::size_t bytes,
                                      std::int64_t file_offset) {
  if (!config_.gds) no_gds("GdsFile.load_storage");
  int fd = -1;
  {
    std::lock_guard lock(gds_mu_);
    auto it = gds_files_.find(h);
    if (it == gds_files_.end()) cufile_error("cuFileRead", "CU_FILE_HANDLE_NOT_REGISTERED", 5027);
    fd = it->second->fd;
  }
  if (pointer_device(dst) != thread_current_device()) {
    cufile_error("cuFileRead", "CU_FILE_CUDA_CONTEXT_MISMATCH", 5015);
  }
  auto* out = static_cast<char*>(dst);
  return transfer(fd, bytes, file_offset,
                  [&](int f, std::size_t at, std::size_t n, off_t off) {
                    return ::pread(f, out + at, n, off);
                  },
                  "cuFileRead");
}

std::size_t EmulatedBackend::gds_write(GdsFileHandle h, const void* src, std::size_t bytes,
                                       std::int64_t file_offset) {
  if (!config_.gds) no_gds("GdsFile.save_storage");
  int fd = -1;
  {
    std::lock_guard lock(gds_mu_);
    auto it = gds_files_.find(h);
    if (it == gds_files_.end()) cufile_error("cuFileWrite", "CU_FILE_HANDLE_NOT_REGISTERED", 5027);
    fd = it->second->fd;
  }
  if (pointer_device(src) != thread_current_device()) {
    cufile_error("cuFileWrite", "CU_FILE_CUDA_CONTEXT_MISMATCH", 5015);
  }
  const auto* in = static_cast<const char*>(src);
  return transfer(fd, bytes, file_offset,
                  [&](int f, std::size_t at, std::size_t n, off_t off) {
                    return ::pwrite(f, in + at, n, off);
                  },
                  "cuFileWrite");
}

}  // namespace cudakit::detail::emulated
