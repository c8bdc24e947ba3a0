// include/cudakit/plugin.hpp: the hook table torch's pluggable allocator calls. Compiled into
// libcudakit.so (cudakit.memory.use_with_torch takes the addresses from there);
// alloc_plugin.cpp exports the same functions by name in libcudakit_alloc.so.
#include "cudakit/plugin.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>

#include "cudakit/error.hpp"
#include "memory/device_allocator.hpp"
#include "memory/raw.hpp"

namespace cudakit {
namespace {

// Torch's pool ids are counters ((n, 0) for capture pools, (0, n) for user pools): the top
// bit of the first half is never theirs, so it marks the torch space without a table.
constexpr unsigned long long kTorchPoolBit = 1ull << 63;

thread_local char g_last_error[512];
std::atomic<bool> g_used{false};

constexpr auto kTorch = static_cast<std::uint8_t>(MemoryClient::torch);

void note_failure(const char* fn, const char* what, bool print) noexcept {
  // cudakit's messages usually start with the function's name already: no second prefix
  const bool named = std::strncmp(what, fn, std::strlen(fn)) == 0;
  std::snprintf(g_last_error, sizeof g_last_error, "%s%s%s", named ? "" : fn, named ? "" : ": ",
                what);
  if (print) std::fprintf(stderr, "cudakit: %s\n", g_last_error);
}

void mark_used() noexcept {
  if (!g_used.load(std::memory_order_relaxed)) g_used.store(true, std::memory_order_relaxed);
}

// Torch's pluggable allocator does not check alloc_fn's result for null (a null data pointer
// would become a tensor), and has no error channel: failures are thrown, and torch's Python
// layer turns them into RuntimeError with cudakit's message. The throw happens before torch
// records the allocation, so its bookkeeping stays consistent.
void* hook_malloc(std::size_t size, int device, CUstream_st* stream) {
  mark_used();
  if (size == 0) return nullptr;  // torch frees a null pointer of a 0-byte allocation again
  try {
    // Some torch versions declare alloc_fn's device as c10::DeviceIndex (int8_t) and call
    // through that type: only the low byte is then defined. Device indices fit in it.
    const int index = static_cast<std::int8_t>(device);
    const int dev = memory::resolve_alloc_device(index < 0 ? kCurrentDevice : index);
    return memory::native_alloc(size, dev, stream, kTorch);
  } catch (const std::exception& e) {
    note_failure("malloc", e.what(), false);
    throw;
  }
}

void hook_free(void* ptr, std::size_t, int device, CUstream_st*) {
  if (!ptr || detail::is_shutting_down()) return;
  try {
    if (!memory::native_free(ptr, static_cast<std::int8_t>(device))) {  // hook_malloc: why
      std::fprintf(stderr, "cudakit: torch freed %p, which is not a live cudakit allocation "
                   "(ignored)\n", ptr);
    }
  } catch (const std::exception& e) {
    note_failure("free", e.what(), true);
  }
}

void hook_init(int) { mark_used(); }  // allocators are created on first use

void hook_reset() {
  try {
    empty_cache();
  } catch (const std::exception& e) {
    note_failure("empty_cache", e.what(), true);
  }
}

void hook_memory_fraction(double fraction, int device) {
  try {
    set_per_process_memory_fraction(fraction, device);
  } catch (const std::exception& e) {
    note_failure("set_per_process_memory_fraction", e.what(), true);
  }
}

// torch.cuda's getBaseAllocation: the segment holding `ptr` (torch's default when a plug-in
// has no such hook is `ptr` itself, which is what memory of an expandable segment gets).
void* hook_base_alloc(void* ptr, std::size_t* size) {
  try {
    if (memory::DeviceAllocator* a = memory::find_allocator_of(ptr)) {
      std::size_t n = 0;
      if (std::uintptr_t base = a->segment_base(ptr, &n)) {
        if (size) *size = n;
        return reinterpret_cast<void*>(base);
      }
    }
  } catch (const NotSupportedError&) {
    // expandable segment: no fixed base; fall through to the allocation itself
  } catch (const std::exception& e) {
    note_failure("base_alloc", e.what(), true);
  }
  if (size) {
    if (auto info = allocation_info(ptr)) *size = info->size;
  }
  return ptr;
}

void hook_record_stream(void* ptr, CUstream_st* stream) {
  try {
    if (!memory::native_record_stream(ptr, stream)) {
      std::fprintf(stderr, "cudakit: record_stream on %p, which is not a live cudakit "
                   "allocation (ignored)\n", ptr);
    }
  } catch (const std::exception& e) {
    note_failure("record_stream", e.what(), true);
  }
}

void hook_begin_allocate_to_pool(int device, TorchMempoolId pool, TorchStreamFilter filter) {
  try {
    // The filter is torch's (capture id or thread id test): it runs on the allocation path
    // and makes no waiting driver call (cudaStreamGetCaptureInfo at most).
    begin_allocate_to_pool(device, torch_pool_id(pool),
                           [f = std::move(filter)](NativeStream s) {
                             return f(static_cast<CUstream_st*>(s));
                           });
  } catch (const std::exception& e) {
    note_failure("begin_allocate_to_pool", e.what(), true);
  }
}

void hook_end_allocate_to_pool(int device, TorchMempoolId pool) {
  try {
    end_allocate_to_pool(device, torch_pool_id(pool));
  } catch (const std::exception& e) {
    note_failure("end_allocate_to_pool", e.what(), true);
  }
}

void hook_release_pool(int device, TorchMempoolId pool) {
  if (detail::is_shutting_down()) return;
  try {
    release_pool(device, torch_pool_id(pool));
  } catch (const std::exception& e) {
    note_failure("release_pool", e.what(), true);
  }
}

constexpr TorchAllocatorHooks kHooks{
    &hook_malloc,        &hook_free,          &hook_init,
    &hook_reset,         &hook_memory_fraction, &hook_base_alloc,
    &hook_record_stream, &hook_begin_allocate_to_pool, &hook_end_allocate_to_pool,
    &hook_release_pool};

}  // namespace

const TorchAllocatorHooks& torch_allocator_hooks() noexcept { return kHooks; }

MempoolId torch_pool_id(TorchMempoolId id) noexcept { return {id.first | kTorchPoolBit, id.second}; }
TorchMempoolId torch_pool_id_of(MempoolId id) noexcept {
  return {id.first & ~kTorchPoolBit, id.second};
}
bool is_torch_pool_id(MempoolId id) noexcept { return (id.first & kTorchPoolBit) != 0; }

void create_torch_pool(int device, TorchMempoolId id, bool use_on_oom, bool no_split) {
  memory::device_allocator(memory::resolve_alloc_device(device))
      .create_pool(torch_pool_id(id), no_split, use_on_oom);
}

int torch_pool_use_count(int device, TorchMempoolId id) {
  return memory::device_allocator(memory::resolve_alloc_device(device))
      .pool_use_count(torch_pool_id(id));
}

bool torch_hooks_used() noexcept { return g_used.load(std::memory_order_relaxed); }
std::string last_plugin_error() { return g_last_error; }

}  // namespace cudakit
