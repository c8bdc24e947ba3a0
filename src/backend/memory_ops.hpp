// Driver seam, memory topic: device and pinned host allocation, stream-ordered allocation,
// virtual memory (expandable segments) and its sharing by file descriptor, legacy memory IPC
// handles, and the stream-ordered copies and memsets (unified addressing).
//
// Conventions (errors, device indices, null streams, thread safety, shutdown) are the
// seam's, in backend/backend.hpp. Topic headers include backend/types.hpp (and their record
// header), public and standard headers only, never one another (tests/layout/test_layout.py).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/types.hpp"

namespace cudakit::detail {

struct MemoryOps {
  // ---- memory (return nullptr/0 on out-of-memory; throw on other errors) ----
  virtual void* mem_alloc(int device, std::size_t bytes) = 0;
  virtual void mem_free(int device, void* ptr) = 0;
  virtual void* host_alloc_pinned(std::size_t bytes) = 0;
  virtual void host_free_pinned(void* ptr) = 0;
  // Page-locks existing host memory [ptr, ptr+bytes) for every device (cuMemHostRegister,
  // portable) / undoes it (host_unregister takes the pointer given to host_register). false
  // on out-of-memory. Used by the pinned cache's pinned_use_cuda_host_register mode.
  virtual bool host_register(void* ptr, std::size_t bytes) = 0;
  virtual void host_unregister(void* ptr) = 0;
  // Stream-ordered allocation (cudaMallocAsync backend).
  virtual void* mem_alloc_async(int device, std::size_t bytes, StreamHandle s) = 0;
  virtual void mem_free_async(void* ptr, StreamHandle s) = 0;
  // Virtual memory ("expandable segments").
  virtual std::size_t vm_granularity(int device) = 0;
  virtual std::uintptr_t vm_reserve(int device, std::size_t bytes) = 0;  // 0 on failure
  virtual void vm_release(std::uintptr_t va, std::size_t bytes) = 0;
  virtual PhysMemHandle vm_create(int device, std::size_t bytes) = 0;    // 0 on OOM
  virtual void vm_destroy(PhysMemHandle h) = 0;
  // Maps h at va (bytes long) and grants read/write access to `device`.
  virtual void vm_map(std::uintptr_t va, std::size_t bytes, PhysMemHandle h, int device) = 0;
  virtual void vm_unmap(std::uintptr_t va, std::size_t bytes) = 0;
  // Maps n physical allocations h[i] of sizes[i] bytes back to back from va and grants
  // read/write access to `device` for the whole range. Sizes differ: an expandable segment's
  // chunks grow with its pool (memory/expandable_segment.hpp). On failure nothing of the
  // range stays mapped. The cuda backend grants access once per range instead of once per
  // chunk (torch's expandable segments do the same: cuMemSetAccess is the costliest of the
  // mapping calls); this default (the emulated backend's) maps chunk by chunk.
  virtual void vm_map_chunks(std::uintptr_t va, const std::size_t* sizes, const PhysMemHandle* h,
                             std::size_t n, int device) {
    std::size_t i = 0;
    std::uintptr_t at = va;
    try {
      for (; i < n; at += sizes[i], ++i) vm_map(at, sizes[i], h[i], device);
    } catch (...) {
      while (i-- > 0) {
        at -= sizes[i];
        vm_unmap(at, sizes[i]);
      }
      throw;
    }
  }
  // Sharing physical memory with another process (IPC of expandable segments, src/memory/
  // ipc.cpp; the descriptor travels with pidfd_getfd, so no server thread is needed).
  // A new file descriptor (close-on-exec, owned by the caller) for the physical allocation
  // `h` of vm_create (cuda: cuMemExportToShareableHandle, POSIX file descriptor; emulated: the
  // memfd behind h). The memory lives while any process holds a handle, a mapping or such a
  // descriptor. NotSupportedError saying why when h cannot be shared (cuda: the driver refused
  // the shareable handle type when vm_create asked for it; vm_create then made an unshareable
  // allocation rather than fail).
  virtual int vm_export_fd(PhysMemHandle h) = 0;
  // A physical allocation handle, for vm_map / vm_destroy in this process, of the allocation
  // behind `fd`, a descriptor vm_export_fd made (in this or another process) of a `bytes`-long
  // allocation on `device`. Does not take `fd` (the caller closes it). The memory is not
  // counted against `device` here (it is the exporter's). AcceleratorError invalid_value (or
  // the driver's code) when fd is not such a descriptor; emulated also checks `bytes`.
  virtual PhysMemHandle vm_import_fd(int device, int fd, std::size_t bytes) = 0;
  // Device owning a pointer, or -1 for host/unknown memory.
  virtual int pointer_device(const void* ptr) = 0;

  // ---- IPC of device memory (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle) --
  virtual IpcHandle mem_ipc_handle(void* ptr) = 0;
  virtual void* mem_open_ipc(const IpcHandle& h) = 0;
  virtual void mem_close_ipc(void* ptr) = 0;

  // ---- copies (unified addressing: any direction) ----
  virtual void memcpy_async(void* dst, const void* src, std::size_t bytes, StreamHandle s) = 0;
  virtual void memset_d8_async(void* dst, unsigned char value, std::size_t bytes,
                               StreamHandle s) = 0;

 protected:
  ~MemoryOps() = default;
};

// The process's backend (backend() in backend.hpp) as its MemoryOps: created on first use, as
// backend(); costs what backend() costs (one acquire load, the upcast is a constant offset).
MemoryOps& memory_ops();

}  // namespace cudakit::detail
