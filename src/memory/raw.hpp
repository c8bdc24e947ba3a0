// The raw allocation functions every entry point goes through (allocate_device,
// caching_allocator_alloc/delete, record_stream, the torch hook table of cudakit/plugin.hpp).
// raw_alloc is exported (CUDAKIT_INTERNAL_API) only to name history stacks' first frame.
//
// Thread-safety: all functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/types.hpp"
#include "devices/resolve.hpp"

namespace cudakit::memory {

// kCurrentDevice → the calling thread's current device; an index this process does not see →
// ValueError (the one device check, devices/resolve.hpp).
inline int resolve_alloc_device(int device) { return detail::resolve_device_index(device); }

// The built-in caching allocator of device `dev`, never a plugged one (the torch hook table
// calls these, so installing the plug-in into cudakit itself cannot recurse). `client` (a
// MemoryClient) is the framework the allocation is counted for.
void* native_alloc(std::size_t bytes, int dev, detail::StreamHandle stream,
                   std::uint8_t client = 0);
// Frees `ptr` in the allocator of `dev_hint` (if >= 0) or whichever holds it; false if none.
bool native_free(void* ptr, int dev_hint);
// record_stream in whichever device allocator holds `ptr`; false if none.
bool native_record_stream(void* ptr, detail::StreamHandle stream);

// The allocator in use: the plugged one (change_current_allocator) if any, else native.
// Exported: the first frame of allocation-history stacks, named through the dynamic symbols.
CUDAKIT_INTERNAL_API void* raw_alloc(std::size_t bytes, int dev, detail::StreamHandle stream);
// Frees memory of any plugged or native allocator; false if nobody owns `ptr`.
bool raw_free(void* ptr, int dev_hint);
// raw_alloc on behalf of `client`: native allocations are counted for it; a plugged
// allocator's (change_current_allocator) count for cudakit, as all its statistics.
void* raw_alloc_for(std::uint8_t client, std::size_t bytes, int dev, detail::StreamHandle stream);

}  // namespace cudakit::memory
