// Process-wide table of device allocators: created lazily, never destroyed (device memory
// must not be released during static destruction), looked up without a lock.
#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "backend/device_ops.hpp"
#include "backend/graph_ops.hpp"
#include "backend/memory_ops.hpp"
#include "backend/stream_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "devices/resolve.hpp"
#include "memory/device_allocator.hpp"
#include "memory/host_allocator.hpp"

namespace cudakit::memory {
namespace {

std::array<std::atomic<DeviceAllocator*>, kMaxDevices> g_allocators{};
std::mutex g_create_mutex;
std::atomic<bool> g_caching_enabled{true};

}  // namespace

DeviceAllocator& device_allocator(int device) {
  if (device < 0 || device >= kMaxDevices) [[unlikely]] detail::throw_invalid_device(device);
  if (DeviceAllocator* a = g_allocators[device].load(std::memory_order_acquire)) return *a;
  DeviceAllocator* a = nullptr;
  {
    // Creation and apply_allocator_settings are serialised: an allocator never starts with
    // settings that a concurrent change has just refused or replaced.
    std::lock_guard lock(g_create_mutex);
    if ((a = g_allocators[device].load(std::memory_order_acquire))) return *a;
    if (device >= detail::device_ops().device_count()) detail::throw_invalid_device(device);
    a = new DeviceAllocator(device, detail::device_ops(), detail::memory_ops(),
                            detail::stream_ops(), detail::graph_ops(), config());  // leaked on purpose
    g_allocators[device].store(a, std::memory_order_release);
  }
  warn_about_env_config_once();  // no lock held: the handler may take the GIL
  return *a;
}

AllocatorConfig settings_in_force() {
  for (auto& slot : g_allocators)
    if (DeviceAllocator* a = slot.load(std::memory_order_acquire)) return a->settings();
  return config();
}

void apply_allocator_settings(const std::string& text) {
  warn_about_env_config_once();  // the environment's warnings come first, once
  // g_apply_mutex orders concurrent calls (allocators end with the settings stored last);
  // g_create_mutex is held only to check and store, so allocator locks are never taken under
  // it (a pool's plug-in allocator may create another device's allocator under its lock).
  static std::mutex g_apply_mutex;
  std::lock_guard apply(g_apply_mutex);
  AllocatorConfig next;
  std::vector<DeviceAllocator*> live;
  {
    std::lock_guard lock(g_create_mutex);
    const AllocatorConfig cur = config();
    // As torch's parseArgs: each call puts these three back to their defaults unless the text
    // sets them again (test_allocator_settings: "should have reset the power2 divisions").
    AllocatorConfig base = cur;
    const AllocatorConfig defaults;
    base.max_split_size = defaults.max_split_size;
    base.roundup_power2_divisions = defaults.roundup_power2_divisions;
    base.garbage_collection_threshold = defaults.garbage_collection_threshold;
    next = AllocatorConfig::parse_over(base, text, "set_allocator_settings");
    live = existing_allocators();
    // Init-only keys: the allocators run with the values in `cur` (they were created from
    // it, and nothing changed them since).
    if (!live.empty()) {
      for (const std::string& key : next.keys) {
        if (key_scope(key) != KeyScope::init) continue;
        const bool same = key == "backend" ? next.backend == cur.backend
                          : key == "expandable_segments_chunk_pages"
                              ? next.expandable_chunk_pages == cur.expandable_chunk_pages
                              : next.device_mutex_spin == cur.device_mutex_spin;
        if (!same)
          throw ValueError("set_allocator_settings: '" + key + "' cannot change once a device "
                           "allocator exists (it is fixed at the first device allocation): set "
                           "it in CUDAKIT_ALLOC_CONF before the process allocates");
      }
    }
    AllocatorConfig stored = next;
    stored.keys.clear();
    stored.warnings.clear();
    store_config(stored);
  }
  const bool fraction_given = std::find(next.keys.begin(), next.keys.end(),
                                        "per_process_memory_fraction") != next.keys.end();
  for (DeviceAllocator* a : live) {
    a->apply_settings(next);
    if (fraction_given) a->set_memory_fraction(next.per_process_memory_fraction);
  }
  host_allocator().apply_settings(next);
  for (const std::string& w : next.warnings) warn(w);
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
