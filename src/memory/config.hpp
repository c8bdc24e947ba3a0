// Allocator settings: one source of truth. CUDAKIT_ALLOC_CONF (falls back to
// PYTORCH_CUDA_ALLOC_CONF, then PYTORCH_ALLOC_CONF) with torch's keys and value syntax
// ("key:value,key:value"), read once; set_allocator_settings() changes them at run time.
// No other environment variable changes how the allocators behave.
//
// Keys, and when a change takes effect (set_allocator_settings):
//   live: applied to existing allocators at once
//     garbage_collection_threshold, max_non_split_rounding_mb, roundup_power2_divisions,
//     per_process_memory_fraction (every device, as set_per_process_memory_fraction),
//     quick_cache, expandable_segments_slack_div, expandable_segments_max_chunk_mb (new
//     mappings), expandable_segments and max_split_size_mb (later segments and requests, as
//     torch: both segment kinds coexist; oversize counters are recounted at the change),
//     pinned_use_cuda_host_register (alias pinned_use_host_register), pinned_num_register_
//     threads, pinned_use_background_threads (new pinned blocks / the pinned cache)
//   init: fixed once a device allocator exists; changing them afterwards raises ValueError
//     backend (a pool cannot switch between the native allocator and the driver's),
//     expandable_segments_chunk_pages (the unit every chunk is a power-of-two multiple of),
//     device_mutex_spin (the mutex is built with it)
//
//   inert: accepted so a PYTORCH_CUDA_ALLOC_CONF written for torch works, but have no effect
//     here; each use warns
//     release_lock_on_cudamalloc (the allocator never waits under its locks; the device
//       allocation call itself is short)
// cudakit's own keys (not torch's): quick_cache (True/False, default True: the exact-size
// cache of recently freed blocks, see quick_cache.hpp), expandable_segments_chunk_pages
// (pages of the large pool's smallest physical allocation, default 4 = 8 MiB: its chunks
// grow from there in powers of two with the pool, expandable_segment.hpp; the small pool's
// are one page), expandable_segments_slack_div (expandable segments may reserve the live
// high-water mark plus 1/N of it before they move pages; default 32),
// expandable_segments_max_chunk_mb (the largest chunk a large pool's chunks grow to, a power
// of two, default 32: a chunk is unmapped only when all of it is free, so this bounds the
// memory one small live block can pin), expandable_segments_small (True/False, live: the
// small pool's segments expandable too; expandable_segments:True sets it, as torch's key makes
// every segment expandable, and expandable_segments:False clears it; so
// "expandable_segments:True,expandable_segments_small:False" is the default policy below,
// the way back to it after either), device_mutex_spin
// (True/False, default True, fixed at the first device allocation: the slow-path lock spins
// briefly before it sleeps, see locks.hpp). The measurements behind the defaults are in
// expandable_segment.hpp and docs/performance.md.
//
// The default: expandable segments for the large pool (blocks > 1 MiB; the small pool keeps
// 2 MiB plain segments), since issue 27. Measured on 15 design traces (real
// transformers / timm / torchvision workloads recorded with bench/memory/record_torch_trace.py,
// replayed on the emulated backend; docs/performance.md "Issue 27"): peak reserved / peak
// allocated 1.006-1.047 on 14 of them, server_bert_threads 1.169 (torch-compatible mode
// 1.017-3.2; holdout: 7 of 8 at 1.014-1.042, server_gpt2_streams 1.149-1.152; 2026-12-07,
// with the quick cache parking small blocks only and the split-tail merge), against more device
// memory calls (create + map + access per chunk, unmap + release when pages move). What was
// rejected and why is in expandable_segment.hpp. expandable_segments:True, given, means what
// torch's key means: the small pool's segments are expandable too (torch's
// test_mempool_expandable checks that a 1 MiB block lands in one; small pools then pay create
// + map + access per 2 MiB page where a plain segment is one cudaMalloc: t5_train's calls
// 2176 -> 5431). expandable_segments:False gives the
// torch-compatible mode (c10's default: one cudaMalloc per segment, no page moves);
// backend:cudaMallocAsync alone turns expandable segments off (the driver's pool has its own
// address space). Private pools (graph capture, MemPool) keep plain segments either way.
//
// Thread-safety: parse() is pure; config(), the registry's apply and the warning handler are
// serialised by mutexes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cudakit::memory {

inline constexpr std::size_t kMiB = std::size_t(1) << 20;
inline constexpr std::size_t kGiB = std::size_t(1) << 30;

enum class KeyScope { live, init, inert };

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
  bool expandable_segments = true;  // the default since issue 27 (see the comment above)
  // The small pool's segments expandable too (needs expandable_segments): set and cleared
  // with expandable_segments when that key is given (torch's meaning of it), or on its own
  // with expandable_segments_small. Off by default: small blocks keep 2 MiB plain segments.
  bool expandable_small = false;
  bool release_lock_on_device_malloc = false;  // inert
  double per_process_memory_fraction = 1.0;
  bool quick_cache = true;
  bool device_mutex_spin = true;  // init-only: the device mutex spins before it sleeps
  std::size_t expandable_chunk_pages = 4;
  std::size_t expandable_slack_div = 32;
  std::size_t expandable_max_chunk_mb = 32;  // largest chunk a large pool grows to
  // Pinned host allocator.
  bool pinned_use_host_register = false;
  unsigned pinned_num_register_threads = 1;
  bool pinned_use_background_threads = false;
  // A block freed during a capture after record_stream is reused inside that capture once
  // the capture's graph orders every stream's use of it before new work (torch's rule).
  bool graph_capture_record_stream_reuse = false;
  std::string source;  // "CUDAKIT_ALLOC_CONF=..." for diagnostics; "" when default
  // Filled by parse: the keys the text gave (canonical names, in order) and one warning per
  // inert key.
  std::vector<std::string> keys;
  std::vector<std::string> warnings;

  // Parses `text` over the defaults. `var` names the source in error messages. Throws
  // ValueError naming the key and the accepted values.
  static AllocatorConfig parse(const std::string& text, const std::string& var = "CUDAKIT_ALLOC_CONF");
  // Parses `text` onto `base`: keys given replace their values, the others keep base's.
  static AllocatorConfig parse_over(const AllocatorConfig& base, const std::string& text,
                                    const std::string& var);
  // Reads the environment (CUDAKIT_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF).
  static AllocatorConfig from_env();

  unsigned divisions_for(std::size_t size) const noexcept;
};

KeyScope key_scope(const std::string& canonical_key);

// The settings in force (from the environment on first use, then as changed by
// set_allocator_settings). Returned by value: allocators copy it when they are created.
AllocatorConfig config();
// Replaces the settings in force (the registry's set_allocator_settings checks them first).
void store_config(const AllocatorConfig& c);
// Warnings of the environment's settings, once per process (call outside any allocator lock).
void warn_about_env_config_once();

// Where warnings go: stderr by default; the Python bindings route them to warnings.warn.
// The handler is called outside every allocator lock.
void set_warning_handler(std::function<void(const std::string&)> handler);
void warn(const std::string& message);

}  // namespace cudakit::memory
