// libcudakit_alloc.so: cudakit's caching allocator behind torch's pluggable-allocator C ABI,
// by name, for loading by path:
//   torch.cuda.memory.CUDAPluggableAllocator(path, "cudakit_malloc", "cudakit_free")
// and, for the optional hooks of torch's allocator object (set_reset_fn, set_record_stream_fn,
// set_begin_allocate_to_pool, ...), the cudakit_* functions below. Each forwards to the hook
// table of include/cudakit/plugin.hpp (cudakit.memory.use_with_torch() takes the addresses from
// that table directly and needs no library path). Allocations made here count as
// MemoryClient::torch in memory_stats()' "framework.*" breakdown.
//
// Failures: nothing crosses this C ABI as an exception (its callers may be C, or ctypes).
// cudakit_malloc returns nullptr (reason in cudakit_last_error()); torch does not check
// alloc_fn's result for null, which is why use_with_torch() hands torch the hook table's
// malloc instead, which throws (torch turns that into a RuntimeError with cudakit's message).
// Every other function catches everything, prints one line to stderr and leaves the
// allocator as it was.
#include <sys/types.h>

#include "cudakit/plugin.hpp"

namespace {
const cudakit::TorchAllocatorHooks& hooks() noexcept { return cudakit::torch_allocator_hooks(); }
thread_local std::string g_error_copy;  // keeps cudakit_last_error()'s pointer valid
}  // namespace

#define CUDAKIT_C_EXPORT extern "C" __attribute__((visibility("default")))

CUDAKIT_C_EXPORT void* cudakit_malloc(ssize_t size, int device, CUstream_st* stream) {
  if (size <= 0) return nullptr;
  try {
    return hooks().malloc(static_cast<std::size_t>(size), device, stream);
  } catch (...) {
    return nullptr;  // the hook noted the reason for cudakit_last_error()
  }
}

CUDAKIT_C_EXPORT void cudakit_free(void* ptr, ssize_t size, int device, CUstream_st* stream) {
  hooks().free(ptr, size < 0 ? 0 : static_cast<std::size_t>(size), device, stream);
}

// Records that `stream` uses the block at `ptr` (torch: set_record_stream_fn).
CUDAKIT_C_EXPORT void cudakit_record_stream(void* ptr, CUstream_st* stream) {
  hooks().record_stream(ptr, stream);
}

CUDAKIT_C_EXPORT void cudakit_init(int device_count) { hooks().init(device_count); }

// torch.cuda.empty_cache() (torch: set_reset_fn).
CUDAKIT_C_EXPORT void cudakit_empty_cache() { hooks().reset(); }

// torch.cuda.set_per_process_memory_fraction (torch: set_memory_fraction_fn).
CUDAKIT_C_EXPORT void cudakit_memory_fraction(double fraction, int device) {
  hooks().memory_fraction(fraction, device);
}

// The segment holding `ptr` and its size (torch: set_base_alloc_fn).
CUDAKIT_C_EXPORT void* cudakit_base_alloc(void* ptr, size_t* size) {
  return hooks().base_alloc(ptr, size);
}

// CUDA graph capture and use_mem_pool (torch: set_begin_allocate_to_pool,
// set_end_allocate_to_pool_fn, set_release_pool). C++ parameter types: torch's own.
CUDAKIT_C_EXPORT void cudakit_begin_allocate_to_pool(int device, cudakit::TorchMempoolId pool,
                                                     cudakit::TorchStreamFilter filter) {
  hooks().begin_allocate_to_pool(device, pool, std::move(filter));
}
CUDAKIT_C_EXPORT void cudakit_end_allocate_to_pool(int device, cudakit::TorchMempoolId pool) {
  hooks().end_allocate_to_pool(device, pool);
}
CUDAKIT_C_EXPORT void cudakit_release_pool(int device, cudakit::TorchMempoolId pool) {
  hooks().release_pool(device, pool);
}

// Message of the last failure of these functions on this thread ("" if none).
CUDAKIT_C_EXPORT const char* cudakit_last_error() {
  try {
    g_error_copy = cudakit::last_plugin_error();
  } catch (...) {
    g_error_copy.clear();
  }
  return g_error_copy.c_str();
}
