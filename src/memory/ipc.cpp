// IPC sharing of caching-allocator memory. Export hands out the handle of the whole device
// segment containing the allocation plus the offset; import opens each segment once per
// process and reference-counts it; ipc_collect closes segments nobody references.
// The driver's close runs outside the registry's mutex (locks.hpp: a release may wait for the
// device, and ipc_close may be called by a finaliser).
//
// Expandable segments have no segment allocation to hand out: their memory is a run of
// physical chunks mapped into reserved address space. Export (as torch >= 2.5) shares the
// chunks covering the allocation: each chunk's file descriptor (Backend::vm_export_fd, made on
// its first export and kept open by the segment while the chunk stays mapped, see
// expandable_segment.hpp) goes into the handle with the exporter's pid. The importer fetches
// the descriptors with pidfd_open + pidfd_getfd (Linux >= 5.6; no server thread in the
// exporter), imports them (Backend::vm_import_fd), maps them back to back into address space
// it reserves, and on close unmaps, destroys and releases them. Handle layout:
//   bytes[64]: VmHeader (magic "ckVMipc2", pid, chunk count, unit bytes: the exporter's
//              vm_granularity);
//   chunks:    one VmChunk per chunk, in address order (fd in the exporter; the chunk's size
//              in units: chunks differ in size, as a large pool's chunks grow with the pool,
//              expandable_segment.hpp; version 1 had one chunk size in the header; device and inode
//              of the file it names, so a descriptor number reused for another file after
//              the exporter released the chunk is detected; a serial number, so a handle
//              re-made from reused numbers never hits the importer's cache of older ones).
// Lifetime: as for ordinary handles, the exporter keeps the allocation alive until importers
// have opened it; once imported, the memory stays valid for the importer whatever the
// exporter does (the driver, or the kernel for the emulated backend's memfds, frees physical
// memory when the last process lets go of it). Exported chunks are never reused by the
// exporter for other allocations while an importer might map them (expandable_segment.hpp).
//
// Thread-safety: every function is thread-safe (g_ipc_mutex guards the registry).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include "backend/device_ops.hpp"
#include "backend/memory_ops.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "memory/device_allocator.hpp"
#include "memory/locks.hpp"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace cudakit {
namespace {
constexpr char kVmMagic[8] = {'c', 'k', 'V', 'M', 'i', 'p', 'c', '2'};

struct VmHeader {
  char magic[8];
  std::int32_t pid;
  std::uint32_t count;
  std::uint64_t unit_bytes;
};
struct VmChunk {
  std::int32_t fd;
  std::uint32_t units;  // the chunk's size, in VmHeader::unit_bytes
  std::uint64_t dev, ino, serial;
};
static_assert(sizeof(VmHeader) <= sizeof(IpcMemHandle::bytes));
static_assert(sizeof(VmChunk) == 32);

// An imported expandable range (vm == true) or an opened segment handle.
struct Opened {
  void* base = nullptr;
  int refs = 0;
  bool vm = false;
  std::uintptr_t va = 0;
  std::size_t bytes = 0;
  std::vector<std::size_t> sizes;  // per chunk
  std::vector<detail::PhysMemHandle> handles;
};
std::mutex g_ipc_mutex;
std::map<std::string, Opened> g_opened;             // handle bytes -> mapping
// Returned pointer -> handle key and how many ipc_import calls returned it (importing one
// handle twice returns the same pointer, and each import is closed by its own ipc_close).
struct UserPtr {
  std::string key;
  int imports = 0;
};
std::map<void*, UserPtr> g_user_ptr_to_handle;
std::map<std::string, int> g_exported;              // handles this process exported

std::string key_of(const IpcMemHandle& h) {
  std::string key(reinterpret_cast<const char*>(h.bytes), sizeof h.bytes);
  key.append(reinterpret_cast<const char*>(h.chunks.data()), h.chunks.size());
  return key;
}

bool is_vm_handle(const IpcMemHandle& h) {
  return std::memcmp(h.bytes, kVmMagic, sizeof kVmMagic) == 0;
}

IpcMemHandle export_expandable(int device, const memory::DeviceAllocator::ExpandableShare& s,
                               std::uintptr_t ptr) {
  IpcMemHandle h;
  VmHeader hd{};
  std::memcpy(hd.magic, kVmMagic, sizeof kVmMagic);
  hd.pid = static_cast<std::int32_t>(::getpid());
  hd.count = static_cast<std::uint32_t>(s.chunks.size());
  hd.unit_bytes = detail::memory_ops().vm_granularity(device);
  std::memcpy(h.bytes, &hd, sizeof hd);
  h.chunks.resize(s.chunks.size() * sizeof(VmChunk));
  for (std::size_t i = 0; i < s.chunks.size(); ++i) {
    struct stat st {};
    if (::fstat(s.chunks[i].fd, &st) != 0)
      throw Error("ipc_export: fstat of an exported chunk's descriptor failed: " +
                  std::string(std::strerror(errno)));
    VmChunk c{};
    c.fd = s.chunks[i].fd;
    c.units = static_cast<std::uint32_t>(s.chunks[i].bytes / hd.unit_bytes);
    c.dev = static_cast<std::uint64_t>(st.st_dev);
    c.ino = static_cast<std::uint64_t>(st.st_ino);
    c.serial = s.chunks[i].serial;
    std::memcpy(h.chunks.data() + i * sizeof c, &c, sizeof c);
  }
  h.device = device;
  h.offset = ptr - s.va;
  return h;
}

}  // namespace

namespace memory {
// A descriptor of process `pidfd` (pid for messages) in this process, checked to name the
// file (device, inode) the exporter saw; throws naming the cause. Also used by the tagged
// pools' hand-off (pool_share.cpp).
int fetch_exported_fd(int pidfd, int pid, int remote_fd, std::uint64_t dev, std::uint64_t ino,
                      std::size_t index) {
  const VmChunk c{remote_fd, 0, dev, ino, 0};
  const int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, c.fd, 0));
  if (fd >= 0) {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    struct stat st {};
    if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_dev) == c.dev &&
        static_cast<std::uint64_t>(st.st_ino) == c.ino)
      return fd;
    ::close(fd);
  }
  const int err = fd >= 0 ? 0 : errno;
  const std::string proc = "/proc/" + std::to_string(pid);
  if (err == EPERM || err == EACCES)
    throw IoError(
        err, proc,
        "ipc_import: pidfd_getfd may not take a descriptor from process " + std::to_string(pid) +
            " (EPERM): importing memory of an expandable segment needs ptrace access to the "
            "exporting process (the same user, and with Yama's ptrace_scope >= 1 in "
            "/proc/sys/kernel/yama/ptrace_scope, the importer must be an ancestor of the "
            "exporter). Fix: import in a parent of the exporting process, or set "
            "kernel.yama.ptrace_scope=0 (sysctl), or give the importer CAP_SYS_PTRACE, or "
            "export from memory outside expandable segments (CUDAKIT_ALLOC_CONF="
            "expandable_segments:False in the exporting process)");
  if (err == ENOSYS)
    throw NotSupportedError(
        "ipc_import: this kernel has no pidfd_getfd system call (Linux >= 5.6 needed, or a "
        "seccomp filter forbids it), which importing memory of an expandable segment needs: "
        "set CUDAKIT_ALLOC_CONF=expandable_segments:False in the exporting process");
  throw Error("ipc_import: the handle is stale: process " + std::to_string(pid) +
              " no longer holds chunk " + std::to_string(index) + "'s descriptor " +
              std::to_string(c.fd) + (err ? std::string(" (") + std::strerror(err) + ")" : "") +
              " (the exported allocation was freed and its memory released; the exporter "
              "must keep the allocation alive until every importer has opened the handle)");
}

// pidfd_open of the exporting process, errors named as for ipc_import.
int open_exporter_pidfd(int pid) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) return pidfd;
  const int err = errno;
  if (err == ENOSYS)
    throw NotSupportedError(
        "ipc_import: this kernel has no pidfd_open system call (Linux >= 5.6 needed), which "
        "importing memory of an expandable segment (or a tagged pool) needs");
  throw IoError(err, "/proc/" + std::to_string(pid),
                "ipc_import: the handle is stale: its exporting process " + std::to_string(pid) +
                    " cannot be reached (" + std::strerror(err) + "; it has exited?)");
}
}  // namespace memory

namespace {
int fetch_fd(int pidfd, int pid, const VmChunk& c, std::size_t index) {
  return memory::fetch_exported_fd(pidfd, pid, c.fd, c.dev, c.ino, index);
}

// Imports an expandable-segment handle (g_ipc_mutex held): reserves, imports, maps.
void open_expandable(const IpcMemHandle& handle, Opened& o) {
  detail::MemoryOps& b = detail::memory_ops();
  VmHeader hd{};
  std::memcpy(&hd, handle.bytes, sizeof hd);
  const std::size_t gran = b.vm_granularity(handle.device);
  if (hd.count == 0 || handle.chunks.size() != hd.count * sizeof(VmChunk) ||
      hd.unit_bytes == 0 || hd.unit_bytes % gran != 0 || hd.unit_bytes > (SIZE_MAX >> 1) / hd.count)
    throw ValueError("ipc_import: not a handle made by ipc_export: the chunk table of an "
                     "expandable-segment handle does not match its header (" +
                     std::to_string(handle.chunks.size()) + " bytes for " +
                     std::to_string(hd.count) + " chunks in units of " +
                     std::to_string(hd.unit_bytes) + " bytes)");
  std::vector<VmChunk> table(hd.count);
  std::memcpy(table.data(), handle.chunks.data(), handle.chunks.size());
  // Each chunk's size; their sum must not overflow (units < 2^32, unit < 2^63 / count).
  std::vector<std::size_t> sizes;
  std::size_t bytes = 0;
  for (const VmChunk& c : table) {
    if (c.units == 0 || c.units > (SIZE_MAX >> 1) / hd.unit_bytes / hd.count)
      throw ValueError("ipc_import: not a handle made by ipc_export: a chunk of " +
                       std::to_string(c.units) + " units in the chunk table");
    sizes.push_back(c.units * hd.unit_bytes);
    bytes += sizes.back();
  }
  if (handle.offset + handle.size > bytes)
    throw ValueError("ipc_import: handle.offset " + std::to_string(handle.offset) +
                     " + handle.size " + std::to_string(handle.size) + " runs past the " +
                     std::to_string(bytes) + " bytes of the exported chunks");
  if (hd.pid == static_cast<std::int32_t>(::getpid()))
    throw ValueError("ipc_import: this handle was exported by this process: use the original "
                     "pointer here, and import the handle in another process");
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, hd.pid, 0));
  if (pidfd < 0) {
    const int err = errno;
    if (err == ENOSYS)
      throw NotSupportedError(
          "ipc_import: this kernel has no pidfd_open system call (Linux >= 5.6 needed), which "
          "importing memory of an expandable segment needs: set CUDAKIT_ALLOC_CONF="
          "expandable_segments:False in the exporting process");
    throw IoError(err, "/proc/" + std::to_string(hd.pid),
                  "ipc_import: the handle is stale: its exporting process " +
                      std::to_string(hd.pid) + " cannot be reached (" + std::strerror(err) +
                      "; it has exited?)");
  }
  std::uintptr_t va = 0;
  std::vector<detail::PhysMemHandle> handles;
  try {
    for (std::size_t i = 0; i < table.size(); ++i) {
      const int fd = fetch_fd(pidfd, hd.pid, table[i], i);
      try {
        handles.push_back(b.vm_import_fd(handle.device, fd, sizes[i]));
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
    }
    va = b.vm_reserve(handle.device, bytes);
    if (!va)
      throw OutOfMemoryError("ipc_import: cannot reserve " + std::to_string(bytes) +
                                 " bytes of address space for the imported memory",
                             handle.device, bytes);
    b.vm_map_chunks(va, sizes.data(), handles.data(), handles.size(), handle.device);
  } catch (...) {
    ::close(pidfd);
    for (detail::PhysMemHandle h : handles) {
      try {
        b.vm_destroy(h);
      } catch (...) {  // keep the first error
      }
    }
    if (va) {
      try {
        b.vm_release(va, bytes);
      } catch (...) {
      }
    }
    throw;
  }
  ::close(pidfd);
  o.vm = true;
  o.va = va;
  o.bytes = bytes;
  o.sizes = std::move(sizes);
  o.handles = std::move(handles);
  o.base = reinterpret_cast<void*>(va);
}

void close_opened(detail::MemoryOps& b, const Opened& o) {
  if (!o.vm) {
    b.mem_close_ipc(o.base);
    return;
  }
  std::exception_ptr error;
  auto attempt = [&](auto&& f) {
    try {
      f();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  };
  // Chunk by chunk: cuMemUnmap takes whole mappings.
  std::uintptr_t at = o.va;
  for (std::size_t size : o.sizes) {
    attempt([&] { b.vm_unmap(at, size); });
    at += size;
  }
  for (detail::PhysMemHandle h : o.handles) attempt([&] { b.vm_destroy(h); });
  attempt([&] { b.vm_release(o.va, o.bytes); });
  if (error) std::rethrow_exception(error);
}
}  // namespace

IpcMemHandle ipc_export(void* ptr) {
  auto info = allocation_info(ptr);
  if (!info)
    throw ValueError("ipc_export: pointer is not a live allocation of cudakit's caching "
                     "allocator");
  memory::DeviceAllocator& a = memory::device_allocator(info->device);
  IpcMemHandle h;
  memory::DeviceAllocator::ExpandableShare share;
  if (a.share_expandable(ptr, share)) {
    h = export_expandable(info->device, share, reinterpret_cast<std::uintptr_t>(ptr));
  } else {
    // The driver exports whole allocations: export the segment and the offset inside it.
    const std::uintptr_t base = a.segment_base(ptr);
    detail::IpcHandle raw = detail::memory_ops().mem_ipc_handle(reinterpret_cast<void*>(base));
    std::copy(std::begin(raw.bytes), std::end(raw.bytes), h.bytes);
    {
      std::lock_guard lock(g_ipc_mutex);
      g_exported[key_of(h)] = info->device;
    }
    h.device = info->device;
    h.offset = reinterpret_cast<std::uintptr_t>(ptr) - base;
  }
  h.size = info->requested;
  return h;
}

void* ipc_import(const IpcMemHandle& handle) {
  const int n = detail::device_ops().device_count();
  if (handle.device < 0 || handle.device >= n)
    throw ValueError("ipc_import: handle.device " + std::to_string(handle.device) +
                     " is not a device of this process (valid: 0.." + std::to_string(n - 1) +
                     ")");
  if (handle.size == 0 || handle.offset > SIZE_MAX - handle.size)
    throw ValueError("ipc_import: handle.offset " + std::to_string(handle.offset) +
                     " + handle.size " + std::to_string(handle.size) +
                     " is not a valid range (a handle from ipc_export has size >= 1 and "
                     "offset + size within the exported segment)");
  const bool vm = is_vm_handle(handle);
  if (vm != !handle.chunks.empty())
    throw ValueError(vm ? "ipc_import: this handle of memory in an expandable segment lacks "
                          "its chunk table (IpcMemHandle::chunks; in Python, the handle's "
                          "bytes past the first 64)"
                        : "ipc_import: not a handle made by ipc_export (chunk table without "
                          "the header of an expandable-segment handle)");
  std::string key = key_of(handle);
  std::lock_guard lock(g_ipc_mutex);
  // No backend opens a handle in the process that exported it (CUDA answers
  // CUDA_ERROR_INVALID_CONTEXT, and the emulated backend does the same); say so clearly.
  if (g_exported.count(key))
    throw ValueError("ipc_import: this handle was exported by this process, and CUDA cannot "
                     "open an IPC handle in the exporting process: use the original pointer "
                     "here, and import the handle in another process");
  Opened& o = g_opened[key];
  if (!o.base) {
    try {
      if (vm) {
        open_expandable(handle, o);
      } else {
        detail::IpcHandle raw;
        std::copy(std::begin(handle.bytes), std::end(handle.bytes), raw.bytes);
        o.base = detail::memory_ops().mem_open_ipc(raw);
      }
    } catch (...) {
      g_opened.erase(key);
      throw;
    }
  }
  const auto base = reinterpret_cast<std::uintptr_t>(o.base);
  if (base > UINTPTR_MAX - handle.offset - handle.size)
    throw ValueError("ipc_import: handle.offset " + std::to_string(handle.offset) +
                     " + handle.size " + std::to_string(handle.size) +
                     " runs past the end of the address space from the segment's base");
  ++o.refs;
  void* p = reinterpret_cast<void*>(base + handle.offset);
  UserPtr& user = g_user_ptr_to_handle[p];
  user.key = key;
  ++user.imports;
  return p;
}

void ipc_close(void* ptr) {
  std::lock_guard lock(g_ipc_mutex);
  auto it = g_user_ptr_to_handle.find(ptr);
  if (it == g_user_ptr_to_handle.end())
    throw ValueError("ipc_close: pointer was not returned by ipc_import");
  --g_opened[it->second.key].refs;
  if (--it->second.imports == 0) g_user_ptr_to_handle.erase(it);
}

void ipc_collect() {
  std::vector<Opened> close;
  {
    std::lock_guard lock(g_ipc_mutex);
    for (auto it = g_opened.begin(); it != g_opened.end();) {
      if (it->second.refs <= 0) {
        if (it->second.base) close.push_back(std::move(it->second));
        it = g_opened.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::exception_ptr error;
  memory::WaitScope wait;
  detail::MemoryOps& b = detail::memory_ops();
  for (const Opened& o : close) {
    try {
      close_opened(b, o);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace cudakit
