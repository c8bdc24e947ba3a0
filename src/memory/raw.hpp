// The raw allocation functions every entry point goes through (allocate_device,
// caching_allocator_alloc/delete, record_stream, the C ABI plug-in library). The plug-in
// library links against these, so they are exported (CUDAKIT_INTERNAL_API).
//
// Thread-safety: all functions are thread-safe.
#pragma once

#include <cstddef>

#include "backend/backend.hpp"

namespace cudakit::memory {

// kCurrentDevice → the calling thread's current device; other negative values → ValueError.
CUDAKIT_INTERNAL_API int resolve_alloc_device(int device);

// The built-in caching allocator of device `dev`, never a plugged one (the plug-in library
// calls these, so installing it into cudakit itself cannot recurse).
CUDAKIT_INTERNAL_API void* native_alloc(std::size_t bytes, int dev, detail::StreamHandle stream);
// Frees `ptr` in the allocator of `dev_hint` (if >= 0) or whichever holds it; false if none.
CUDAKIT_INTERNAL_API bool native_free(void* ptr, int dev_hint);
// record_stream in whichever device allocator holds `ptr`; false if none.
CUDAKIT_INTERNAL_API bool native_record_stream(void* ptr, detail::StreamHandle stream);

// The allocator in use: the plugged one (change_current_allocator) if any, else native.
// Exported: the first frame of allocation-history stacks, named through the dynamic symbols.
CUDAKIT_INTERNAL_API void* raw_alloc(std::size_t bytes, int dev, detail::StreamHandle stream);
// Frees memory of any plugged or native allocator; false if nobody owns `ptr`.
bool raw_free(void* ptr, int dev_hint);

}  // namespace cudakit::memory
