// Weight hand-off: a whole tagged pool shared with another process through one handle
// (export_pool / import_pool / close_pool / pool_view), on the expandable-segment IPC
// machinery (ipc.cpp): each physical chunk's file descriptor (Backend::vm_export_fd, made on
// the first export and kept open by its segment while the chunk stays mapped), fetched by the
// importer with pidfd_getfd and imported (vm_import_fd). The importer reserves one range as
// long as the pool's extent and maps every chunk at its offset from the pool's base, so an
// offset computed in the exporter (pointer - pool_view(tag).base) addresses the same byte in
// the importer. The handle lists the pool's chunks and nothing else: no other memory of the
// exporter is reachable through it. While a process maps the pool, its memory stays
// allocated whatever the exporter does: a sleep ends the exporter's own mapping, and the
// device memory is freed only once the importers have closed theirs.
//
// Handle layout (bytes): PoolHeader, then one PoolChunk per chunk in address order.
//
// Thread-safety: export_pool and pool_view take the sleep-op mutex (the pool cannot go to
// sleep meanwhile); imports are recorded under their own mutex; driver calls that wait
// (unmap at close) run without it.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "backend/device_ops.hpp"
#include "backend/memory_ops.hpp"
#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "memory/device_allocator.hpp"
#include "memory/locks.hpp"
#include "memory/raw.hpp"

namespace cudakit {
namespace memory {
int fetch_exported_fd(int pidfd, int pid, int remote_fd, std::uint64_t dev, std::uint64_t ino,
                      std::size_t index);  // ipc.cpp
int open_exporter_pidfd(int pid);         // ipc.cpp

std::vector<DeviceAllocator::SleepShare> DeviceAllocator::share_sleep_pool(SleepPool& sp,
                                                                        bool export_fds) {
  // Locks held throughout: vm_export_fd does not wait, and the chunks must not go away
  // meanwhile (the caller also holds the sleep-op mutex, so the pool stays awake).
  Locked lock(*this);
  if (export_fds && sp.state != SleepPool::State::awake)
    throw Error("export_pool: sleep pool '" + sp.tag + "' is asleep (its memory is released): "
                "call wake_up first");
  std::vector<SleepShare> out;
  for (auto& [va, seg] : sp.segments) {
    std::uintptr_t at = va;
    for (std::size_t i = 0; i < seg.sizes.size(); ++i) {
      if (export_fds && seg.fds[i] < 0) seg.fds[i] = memory_.vm_export_fd(seg.handles[i]);
      out.push_back(SleepShare{at, seg.sizes[i], export_fds ? seg.fds[i] : -1});
      at += seg.sizes[i];
    }
  }
  return out;
}
}  // namespace memory

namespace {
constexpr char kPoolMagic[8] = {'c', 'k', 'P', 'O', 'O', 'L', '0', '1'};
struct PoolHeader {
  char magic[8];
  std::int32_t pid;
  std::int32_t device;
  std::uint64_t count;
  std::uint64_t span;  // bytes from the pool's base to the end of its last chunk
};
struct PoolChunk {
  std::int32_t fd;
  std::uint32_t pad;
  std::uint64_t offset, bytes;  // from the pool's base
  std::uint64_t dev, ino;       // the file the descriptor names (a reused number is detected)
};
static_assert(sizeof(PoolChunk) == 40);

struct Imported {
  std::size_t span = 0;
  int device = -1;
  std::vector<std::pair<std::uintptr_t, std::size_t>> maps;  // mapped chunks
  std::vector<detail::PhysMemHandle> handles;
};
std::mutex g_import_mutex;
std::map<std::uintptr_t, Imported> g_imported;  // base -> mapping

memory::SleepPool& existing_pool(const std::string& tag, int device, const char* fn) {
  memory::SleepPool* sp = memory::find_sleep_pool(tag, device);
  if (!sp)
    throw KeyError(std::string(fn) + ": no sleep pool '" + tag + "' on device " +
                   std::to_string(device) + " (allocate inside use_sleep_pool('" + tag +
                   "') on that device first)");
  return *sp;
}

// Lowest address and extent of the pool's segments (allocator locks not needed: the
// sleep-op mutex is held and the shares came from an awake pool).
std::pair<std::uintptr_t, std::size_t> extent(
    const std::vector<memory::DeviceAllocator::SleepShare>& chunks) {
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (const auto& c : chunks) {
    lo = std::min(lo, c.va);
    hi = std::max(hi, c.va + c.bytes);
  }
  return {lo, hi - lo};
}

void unmap_imported(detail::MemoryOps& b, const Imported& im, std::uintptr_t base,
                    std::exception_ptr* error) {
  auto attempt = [&](auto&& f) {
    try {
      f();
    } catch (...) {
      if (error && !*error) *error = std::current_exception();
    }
  };
  for (const auto& [va, bytes] : im.maps) attempt([&, va = va, bytes = bytes] { b.vm_unmap(va, bytes); });
  for (detail::PhysMemHandle h : im.handles) attempt([&] { b.vm_destroy(h); });
  attempt([&] { b.vm_release(base, im.span); });
}
}  // namespace

std::vector<unsigned char> export_pool(const std::string& tag, int device) {
  const int dev = memory::resolve_alloc_device(device);
  memory::SleepPool& sp = existing_pool(tag, dev, "export_pool");
  std::lock_guard op(memory::sleep_op_mutex());
  auto chunks = memory::device_allocator(dev).share_sleep_pool(sp, /*export_fds=*/true);
  if (chunks.empty())
    throw Error("export_pool: sleep pool '" + tag + "' holds no memory (every segment was "
                "released): allocate in it first");
  const auto [base, span] = extent(chunks);
  PoolHeader hd{};
  std::memcpy(hd.magic, kPoolMagic, sizeof kPoolMagic);
  hd.pid = static_cast<std::int32_t>(::getpid());
  hd.device = dev;
  hd.count = chunks.size();
  hd.span = span;
  std::vector<unsigned char> out(sizeof hd + chunks.size() * sizeof(PoolChunk));
  std::memcpy(out.data(), &hd, sizeof hd);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    struct stat st {};
    if (::fstat(chunks[i].fd, &st) != 0)
      throw Error("export_pool: fstat of an exported chunk's descriptor failed: " +
                  std::string(std::strerror(errno)));
    PoolChunk c{};
    c.fd = chunks[i].fd;
    c.offset = chunks[i].va - base;
    c.bytes = chunks[i].bytes;
    c.dev = static_cast<std::uint64_t>(st.st_dev);
    c.ino = static_cast<std::uint64_t>(st.st_ino);
    std::memcpy(out.data() + sizeof hd + i * sizeof c, &c, sizeof c);
  }
  return out;
}

PoolView pool_view(const std::string& tag, int device) {
  const int dev = memory::resolve_alloc_device(device);
  memory::SleepPool& sp = existing_pool(tag, dev, "pool_view");
  std::lock_guard op(memory::sleep_op_mutex());
  auto chunks = memory::device_allocator(dev).share_sleep_pool(sp, /*export_fds=*/false);
  if (chunks.empty())
    throw Error("pool_view: sleep pool '" + tag + "' holds no memory: allocate in it first");
  const auto [base, span] = extent(chunks);
  return PoolView{base, span, dev};
}

PoolView import_pool(const std::vector<unsigned char>& handle) {
  PoolHeader hd{};
  if (handle.size() < sizeof hd ||
      std::memcmp(handle.data(), kPoolMagic, sizeof kPoolMagic) != 0)
    throw ValueError("import_pool: not a handle made by export_pool (" +
                     std::to_string(handle.size()) + " bytes without its header)");
  std::memcpy(&hd, handle.data(), sizeof hd);
  detail::MemoryOps& b = detail::memory_ops();
  const int n = detail::device_ops().device_count();
  if (hd.device < 0 || hd.device >= n)
    throw ValueError("import_pool: the handle's device " + std::to_string(hd.device) +
                     " is not a device of this process (valid: 0.." + std::to_string(n - 1) + ")");
  if (hd.count == 0 || hd.count > (handle.size() - sizeof hd) / sizeof(PoolChunk) ||
      handle.size() != sizeof hd + hd.count * sizeof(PoolChunk))
    throw ValueError("import_pool: not a handle made by export_pool: its chunk table does not "
                     "match its header");
  std::vector<PoolChunk> table(hd.count);
  std::memcpy(table.data(), handle.data() + sizeof hd, hd.count * sizeof(PoolChunk));
  const std::size_t gran = b.vm_granularity(hd.device);
  for (const PoolChunk& c : table) {
    if (c.bytes == 0 || c.bytes % gran || c.offset % gran || c.offset > hd.span ||
        c.bytes > hd.span - c.offset)
      throw ValueError("import_pool: not a handle made by export_pool: a chunk of " +
                       std::to_string(c.bytes) + " bytes at offset " + std::to_string(c.offset) +
                       " in a pool of " + std::to_string(hd.span) + " bytes");
  }
  if (hd.pid == static_cast<std::int32_t>(::getpid()))
    throw ValueError("import_pool: this handle was exported by this process: use the pool's "
                     "own memory here (pool_view), and import the handle in another process");
  const int pidfd = memory::open_exporter_pidfd(hd.pid);
  Imported im;
  im.span = hd.span;
  im.device = hd.device;
  std::uintptr_t base = 0;
  try {
    for (std::size_t i = 0; i < table.size(); ++i) {
      const int fd = memory::fetch_exported_fd(pidfd, hd.pid, table[i].fd, table[i].dev,
                                               table[i].ino, i);
      try {
        im.handles.push_back(b.vm_import_fd(hd.device, fd, table[i].bytes));
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
    }
    base = b.vm_reserve(hd.device, hd.span);
    if (!base)
      throw OutOfMemoryError("import_pool: cannot reserve " + std::to_string(hd.span) +
                                 " bytes of address space for the pool",
                             hd.device, hd.span);
    // Runs of adjacent chunks map with one call (one access grant on the GPU).
    for (std::size_t i = 0; i < table.size();) {
      std::size_t j = i + 1;
      while (j < table.size() && table[j].offset == table[j - 1].offset + table[j - 1].bytes) ++j;
      std::vector<std::size_t> sizes;
      for (std::size_t k = i; k < j; ++k) sizes.push_back(table[k].bytes);
      b.vm_map_chunks(base + table[i].offset, sizes.data(), im.handles.data() + i, j - i,
                      hd.device);
      for (std::size_t k = i; k < j; ++k) im.maps.emplace_back(base + table[k].offset, table[k].bytes);
      i = j;
    }
  } catch (...) {
    ::close(pidfd);
    if (base) {
      unmap_imported(b, im, base, nullptr);
    } else {
      for (detail::PhysMemHandle h : im.handles) {
        try {
          b.vm_destroy(h);
        } catch (...) {
        }
      }
    }
    throw;
  }
  ::close(pidfd);
  std::lock_guard lock(g_import_mutex);
  g_imported.emplace(base, std::move(im));
  return PoolView{base, hd.span, hd.device};
}

void close_pool(const PoolView& view) {
  Imported im;
  {
    std::lock_guard lock(g_import_mutex);
    auto it = g_imported.find(view.base);
    if (it == g_imported.end())
      throw ValueError("close_pool: this view was not returned by import_pool (or is closed "
                       "already)");
    im = std::move(it->second);
    g_imported.erase(it);
  }
  std::exception_ptr error;
  {
    memory::WaitScope wait;  // cuMemUnmap may wait for the device
    unmap_imported(detail::memory_ops(), im, view.base, &error);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace cudakit
