// libcudakit_alloc.so: cudakit's caching allocator behind torch's pluggable-allocator C ABI,
// so PyTorch (torch.cuda.memory.CUDAPluggableAllocator(path, "cudakit_malloc",
// "cudakit_free")) and CuPy (via cudakit.memory.cupy_allocator()) draw from cudakit's pool.
// Their allocations then appear in cudakit's memory_stats() and snapshots.
//
// Calls the native allocation functions (memory/raw.hpp: never a plugged allocator), so
// installing this library into cudakit itself cannot recurse. Errors cannot cross a C ABI:
// out-of-memory returns nullptr (torch then raises its own OutOfMemoryError); other errors
// print and return nullptr.
#include <sys/types.h>

#include <cstdio>
#include <exception>

#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "memory/raw.hpp"

namespace {
thread_local char g_last_error[512];
}

extern "C" {

__attribute__((visibility("default"))) void* cudakit_malloc(ssize_t size, int device,
                                                            void* stream) {
  if (size <= 0) return nullptr;
  try {
    using namespace cudakit;
    const int dev = memory::resolve_alloc_device(device < 0 ? kCurrentDevice : device);
    return memory::native_alloc(static_cast<std::size_t>(size), dev, stream);
  } catch (const cudakit::OutOfMemoryError& e) {
    std::snprintf(g_last_error, sizeof g_last_error, "%s", e.what());
    return nullptr;
  } catch (const std::exception& e) {
    std::snprintf(g_last_error, sizeof g_last_error, "%s", e.what());
    std::fprintf(stderr, "cudakit_malloc: %s\n", e.what());
    return nullptr;
  }
}

__attribute__((visibility("default"))) void cudakit_free(void* ptr, ssize_t, int device, void*) {
  if (!ptr || cudakit::detail::is_shutting_down()) return;
  try {
    if (!cudakit::memory::native_free(ptr, device))
      std::fprintf(stderr, "cudakit_free: %p is not a live cudakit allocation (ignored)\n", ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cudakit_free: %s\n", e.what());
  }
}

// Records that `stream` uses the block at `ptr` (for frameworks that expose record_stream).
__attribute__((visibility("default"))) void cudakit_record_stream(void* ptr, void* stream) {
  try {
    cudakit::memory::native_record_stream(ptr, stream);
  } catch (...) {
  }
}

// Message of the last failure on this thread ("" if none).
__attribute__((visibility("default"))) const char* cudakit_last_error() { return g_last_error; }

}  // extern "C"
