// The one check of a device index. Every module resolves a device argument through
// cudakit::resolve_device (device.hpp) or resolve_device_index below, so a bad index reads the
// same wherever it is passed: invalid_device_message (device.hpp) names the index, the
// devices this process sees, the backend and CUDA_VISIBLE_DEVICES. Internal header.
//
// Thread-safety: both functions are thread-safe (the device count is cached on first use).
#pragma once

#include <cstdint>

namespace cudakit::detail {

// kCurrentDevice -> the calling thread's current device; an index this process sees -> the
// index; anything else -> ValueError(invalid_device_message(device)). Unlike
// cudakit::resolve_device it does not initialise (nor check for a forked child): the
// allocator's entry points and statistics call it, and they never initialised.
int resolve_device_index(int device);

// Throws ValueError(invalid_device_message(device)).
[[noreturn]] void throw_invalid_device(std::int64_t device);

}  // namespace cudakit::detail
