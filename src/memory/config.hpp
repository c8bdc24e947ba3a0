// Allocator configuration: CUDAKIT_ALLOC_CONF (falls back to PYTORCH_CUDA_ALLOC_CONF, then
// PYTORCH_ALLOC_CONF), with torch's keys and value syntax ("key:value,key:value").
//
// Thread-safety: parse() is pure; config()/set_config() are serialised by a mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cudakit::memory {

inline constexpr std::size_t kMiB = std::size_t(1) << 20;
inline constexpr std::size_t kGiB = std::size_t(1) << 30;

struct AllocatorConfig {
  enum class Backend { native, driver_async };
  Backend backend = Backend::native;
  // Blocks larger than this are never split (and only reused for requests within
  // max_non_split_rounding of their size). SIZE_MAX = unlimited.
  std::size_t max_split_size = SIZE_MAX;
  std::size_t max_non_split_rounding = 20 * kMiB;
  // 0 disables; otherwise reclaim cached blocks when reserved > fraction*limit.
  double garbage_collection_threshold = 0.0;
  // roundup_power2_divisions: index = log2(size in MiB) bucket (1MiB..>=32GiB, 64 buckets
  // like torch's), value = number of divisions (0 = plain rounding).
  std::array<unsigned, 64> roundup_power2_divisions{};
  bool expandable_segments = false;
  bool release_lock_on_device_malloc = false;
  double per_process_memory_fraction = 1.0;
  // Pinned host allocator.
  bool pinned_use_host_register = false;
  unsigned pinned_num_register_threads = 1;
  bool pinned_use_background_threads = false;
  bool graph_capture_record_stream_reuse = false;
  std::string source;  // "CUDAKIT_ALLOC_CONF=..." for diagnostics; "" when default

  // Parses `text`. `var` names the environment variable in error messages. Throws
  // ValueError naming the key and the accepted values.
  static AllocatorConfig parse(const std::string& text, const std::string& var = "CUDAKIT_ALLOC_CONF");
  // Reads the environment (CUDAKIT_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF).
  static AllocatorConfig from_env();

  unsigned divisions_for(std::size_t size) const noexcept;
};

// The process-wide configuration (from the environment on first use). set_config()
// replaces it before any allocator exists (used by tests and by set_allocator_settings).
// Returned by value: allocators copy it when they are created (off the hot path).
AllocatorConfig config();
void set_config(const std::string& text);

}  // namespace cudakit::memory
