// Virtual memory emulation (the expandable-segments path of the caching allocator):
//   vm_reserve → mmap(PROT_NONE) address space, not accounted;
//   vm_create  → a memfd of `bytes` ("physical" memory), accounted against the device;
//   vm_map     → mmap(MAP_FIXED|MAP_SHARED) of the memfd over the reservation (read/write);
//   vm_unmap   → mmap(MAP_FIXED, PROT_NONE) back over the range;
//   vm_export_fd → a duplicate of the memfd; vm_import_fd → a duplicate of a descriptor that
//                  must name such a memfd of the right size (checked: a stale descriptor
//                  number may have been reused for another file), not accounted here.
// Physical memory is returned to the device when it is both destroyed and unmapped
// everywhere (CUDA allows destroying a handle that is still mapped).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {
constexpr std::size_t kGranularity = std::size_t{2} << 20;
constexpr const char kPhysName[] = "cudakit-emulated-phys";

[[noreturn]] void vm_error(const std::string& what) { fail(errc::invalid_value, what); }

void check_aligned(std::uintptr_t va, std::size_t bytes, const char* call) {
  if (va % kGranularity != 0 || bytes == 0 || bytes % kGranularity != 0) {
    vm_error(std::string(call) + ": address and size must be non-zero multiples of the 2 MiB "
                                 "granularity (vm_granularity)");
  }
}
}  // namespace

std::size_t EmulatedBackend::vm_granularity(int device) {
  dev(device);
  return kGranularity;
}

std::uintptr_t EmulatedBackend::vm_reserve(int device, std::size_t bytes) {
  dev(device);
  if (bytes == 0 || bytes % kGranularity != 0) {
    vm_error("vm_reserve: size must be a non-zero multiple of the 2 MiB granularity");
  }
  std::size_t span = bytes + kGranularity;
  void* raw = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
  if (raw == MAP_FAILED) return 0;
  auto start = reinterpret_cast<std::uintptr_t>(raw);
  std::uintptr_t va = (start + kGranularity - 1) / kGranularity * kGranularity;
  if (va > start) ::munmap(raw, va - start);
  std::uintptr_t tail = start + span - (va + bytes);
  if (tail) ::munmap(reinterpret_cast<void*>(va + bytes), tail);
  std::lock_guard lock(vm_mu_);
  reservations_[va] = {bytes, device};
  return va;
}

void EmulatedBackend::vm_release(std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(vm_mu_);
  auto it = reservations_.find(va);
  if (it == reservations_.end() || it->second.first != bytes) {
    vm_error("vm_release: (va, bytes) does not match a reservation made by vm_reserve");
  }
  auto m = mappings_.lower_bound(va);
  if (m != mappings_.end() && m->first < va + bytes) {
    vm_error("vm_release: the reservation still has mapped ranges; vm_unmap them first");
  }
  ::munmap(reinterpret_cast<void*>(va), bytes);
  reservations_.erase(it);
}

PhysMemHandle EmulatedBackend::vm_create(int device, std::size_t bytes) {
  // Unlike mem_alloc (cudaMalloc), CUDA permits cuMemCreate while another thread captures in
  // global mode (seen on the H200, driver 580: no error, the capture survives), so the
  // capture-mode rules do not apply here.
  Device& d = dev(device);
  if (bytes == 0 || bytes % kGranularity != 0) {
    vm_error("vm_create: size must be a non-zero multiple of the 2 MiB granularity");
  }
  if (!reserve_bytes(d, bytes)) return 0;
  int fd = ::memfd_create(kPhysName, MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    if (fd >= 0) ::close(fd);
    release_bytes(d, bytes);
    return 0;
  }
  std::lock_guard lock(vm_mu_);
  PhysMemHandle h = next_phys_++;
  phys_[h] = PhysMem{fd, device, bytes, 0, false};
  return h;
}

void EmulatedBackend::maybe_drop_phys(PhysMemHandle h) {
  auto it = phys_.find(h);
  if (it == phys_.end() || !it->second.destroyed || it->second.maps > 0) return;
  ::close(it->second.fd);
  if (!it->second.imported)
    release_bytes(*devices_[static_cast<std::size_t>(it->second.device)], it->second.bytes);
  phys_.erase(it);
}

void EmulatedBackend::vm_destroy(PhysMemHandle h) {
  std::lock_guard lock(vm_mu_);
  auto it = phys_.find(h);
  if (it == phys_.end() || it->second.destroyed) {
    throw_accelerator_error(errc::invalid_handle, "vm_destroy: unknown physical memory handle");
  }
  it->second.destroyed = true;
  maybe_drop_phys(h);
}

int EmulatedBackend::vm_export_fd(PhysMemHandle h) {
  std::lock_guard lock(vm_mu_);
  auto it = phys_.find(h);
  if (it == phys_.end() || it->second.destroyed) {
    throw_accelerator_error(errc::invalid_handle, "vm_export_fd: unknown physical memory handle");
  }
  const int fd = ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    throw_accelerator_error(errc::out_of_memory,
                            std::string("vm_export_fd: cannot duplicate the memfd: ") +
                                std::strerror(errno));
  }
  return fd;
}

PhysMemHandle EmulatedBackend::vm_import_fd(int device, int fd, std::size_t bytes) {
  dev(device);
  if (bytes == 0 || bytes % kGranularity != 0) {
    vm_error("vm_import_fd: size must be a non-zero multiple of the 2 MiB granularity");
  }
  // The descriptor must be one of our memfds ("/memfd:<name> (deleted)") of exactly `bytes`.
  char link[64] = {};
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(proc.c_str(), link, sizeof link - 1);
  const std::string want = std::string("/memfd:") + kPhysName;
  struct stat st {};
  if (n <= 0 || std::strncmp(link, want.c_str(), want.size()) != 0 || ::fstat(fd, &st) != 0 ||
      !S_ISREG(st.st_mode)) {
    vm_error("vm_import_fd: the descriptor is not physical memory exported by vm_export_fd");
  }
  if (static_cast<std::size_t>(st.st_size) != bytes) {
    vm_error("vm_import_fd: the physical memory is " + std::to_string(st.st_size) +
             " bytes, not the " + std::to_string(bytes) + " expected");
  }
  const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    throw_accelerator_error(errc::out_of_memory,
                            std::string("vm_import_fd: cannot duplicate the descriptor: ") +
                                std::strerror(errno));
  }
  std::lock_guard lock(vm_mu_);
  PhysMemHandle h = next_phys_++;
  phys_[h] = PhysMem{own, device, bytes, 0, false, true};
  return h;
}

void EmulatedBackend::vm_map(std::uintptr_t va, std::size_t bytes, PhysMemHandle h,
                             int device) {
  dev(device);
  check_aligned(va, bytes, "vm_map");
  std::lock_guard lock(vm_mu_);
  auto ph = phys_.find(h);
  if (ph == phys_.end() || ph->second.destroyed) {
    throw_accelerator_error(errc::invalid_handle, "vm_map: unknown physical memory handle");
  }
  if (bytes > ph->second.bytes) {
    vm_error("vm_map: the range is larger than the physical allocation");
  }
  auto r = reservations_.upper_bound(va);
  if (r == reservations_.begin() || (--r, va + bytes > r->first + r->second.first)) {
    vm_error("vm_map: [va, va+bytes) is not inside a range reserved with vm_reserve");
  }
  auto m = mappings_.lower_bound(va);
  bool overlap = (m != mappings_.end() && m->first < va + bytes);
  if (!overlap && m != mappings_.begin()) {
    auto prev = std::prev(m);
    overlap = prev->first + prev->second.bytes > va;
  }
  if (overlap) vm_error("vm_map: part of the range is already mapped (vm_unmap it first)");
  void* p = ::mmap(reinterpret_cast<void*>(va), bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, ph->second.fd, 0);
  if (p == MAP_FAILED) {
    throw_accelerator_error(errc::out_of_memory, "vm_map: mmap of the physical memory failed");
  }
  ph->second.maps++;
  mappings_[va] = Mapping{bytes, h};
  std::unique_lock rl(ranges_mu_);
  ranges_[va] = Range{va + bytes, ph->second.device, true, 0};
}

void EmulatedBackend::vm_unmap(std::uintptr_t va, std::size_t bytes) {
  check_aligned(va, bytes, "vm_unmap");
  std::lock_guard lock(vm_mu_);
  auto first = mappings_.lower_bound(va);
  if (first != mappings_.begin()) {
    auto prev = std::prev(first);
    if (prev->first + prev->second.bytes > va) {
      vm_error("vm_unmap: the range starts inside a mapping; unmap whole mappings");
    }
  }
  auto last = first;
  while (last != mappings_.end() && last->first < va + bytes) {
    if (last->first + last->second.bytes > va + bytes) {
      vm_error("vm_unmap: the range ends inside a mapping; unmap whole mappings");
    }
    ++last;
  }
  if (first == last) vm_error("vm_unmap: nothing is mapped in this range");
  ::mmap(reinterpret_cast<void*>(va), bytes, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  std::vector<PhysMemHandle> touched;
  {
    std::unique_lock rl(ranges_mu_);
    for (auto it = first; it != last; ++it) {
      ranges_.erase(it->first);
      touched.push_back(it->second.phys);
    }
  }
  mappings_.erase(first, last);
  for (PhysMemHandle h : touched) {
    auto ph = phys_.find(h);
    if (ph != phys_.end()) ph->second.maps--;
    maybe_drop_phys(h);
  }
}

}  // namespace cudakit::detail::emulated
