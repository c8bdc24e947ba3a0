// Process-wide table of device allocators: created lazily, never destroyed (device memory
// must not be released during static destruction), looked up without a lock.
#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "memory/device_allocator.hpp"

namespace cudakit::memory {
namespace {

std::array<std::atomic<DeviceAllocator*>, kMaxDevices> g_allocators{};
std::mutex g_create_mutex;
std::atomic<bool> g_caching_enabled{true};

}  // namespace

DeviceAllocator& device_allocator(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw ValueError("invalid device index " + std::to_string(device) +
                     " for the caching allocator");
  if (DeviceAllocator* a = g_allocators[device].load(std::memory_order_acquire)) return *a;
  std::lock_guard lock(g_create_mutex);
  if (DeviceAllocator* a = g_allocators[device].load(std::memory_order_acquire)) return *a;
  detail::Backend& b = detail::backend();
  const int n = b.device_count();
  if (device >= n)
    throw ValueError("invalid device index " + std::to_string(device) + ": the " +
                     std::string(b.name()) + " backend has " + std::to_string(n) +
                     " device(s)" + (n ? " (valid: 0.." + std::to_string(n - 1) + ")" : ""));
  auto* a = new DeviceAllocator(device, b, config());  // leaked on purpose
  g_allocators[device].store(a, std::memory_order_release);
  return *a;
}

std::vector<DeviceAllocator*> existing_allocators() {
  std::vector<DeviceAllocator*> out;
  for (auto& slot : g_allocators)
    if (DeviceAllocator* a = slot.load(std::memory_order_acquire)) out.push_back(a);
  return out;
}

DeviceAllocator* find_allocator_of(const void* ptr) {
  for (auto& slot : g_allocators)
    if (DeviceAllocator* a = slot.load(std::memory_order_acquire))
      if (a->owns(ptr)) return a;
  return nullptr;
}

bool free_in_any_allocator(void* ptr, int skip_device) {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (d == skip_device) continue;
    if (DeviceAllocator* a = g_allocators[d].load(std::memory_order_acquire))
      if (a->free(ptr)) return true;
  }
  return false;
}

bool caching_enabled() noexcept { return g_caching_enabled.load(std::memory_order_relaxed); }
void set_caching_enabled(bool on) noexcept { g_caching_enabled.store(on, std::memory_order_relaxed); }

}  // namespace cudakit::memory
