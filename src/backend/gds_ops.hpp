// Driver seam, GPUDirect Storage topic: cuFile's state, file and buffer registration, and DMA
// between files and device memory.
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/types.hpp"

namespace cudakit::detail {

// State of GPUDirect Storage (cuFile) on this backend. `available`: file data can move by DMA
// between storage and device memory (cuFile loaded, its driver opened, the nvidia-fs kernel
// driver present); otherwise `reason` says why and cudakit moves file data through its
// compat path (src/gds). `library` describes cuFile when it was loaded (version, path).
struct GdsStatus {
  bool available = false;
  std::string reason;
  std::string library;
};

struct GdsOps {
  // ---- GPUDirect Storage (cuFile on cuda; the emulated backend has none) ----
  // Probes once (cuda: loads cuFile and opens its driver on first call); never throws.
  virtual GdsStatus gds_status() noexcept = 0;
  // Registers an open file descriptor with cuFile (cuFileHandleRegister). Returns nullptr and
  // sets *why when the driver refuses this file (e.g. its file system has no GDS support):
  // callers then take the compat path. Throws only when GDS is unavailable altogether.
  virtual GdsFileHandle gds_file_register(int fd, std::string* why) = 0;
  virtual void gds_file_deregister(GdsFileHandle h) = 0;
  // cuFileBufRegister / cuFileBufDeregister of device memory (AcceleratorError / Error on
  // failure, with cuFile's status name).
  virtual void gds_buffer_register(void* ptr, std::size_t bytes) = 0;
  virtual void gds_buffer_deregister(void* ptr) = 0;
  // Synchronous DMA between a registered file and device memory of the calling thread's
  // current device (cuFileRead / cuFileWrite). Returns the bytes moved (fewer only at the end
  // of the file); throws on failure.
  virtual std::size_t gds_read(GdsFileHandle h, void* dst, std::size_t bytes,
                               std::int64_t file_offset) = 0;
  virtual std::size_t gds_write(GdsFileHandle h, const void* src, std::size_t bytes,
                                std::int64_t file_offset) = 0;

 protected:
  ~GdsOps() = default;
};

// The process's backend (backend() in backend.hpp) as its GdsOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
GdsOps& gds_ops();

}  // namespace cudakit::detail
