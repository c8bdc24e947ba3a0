// Snapshot serialisation (torch's memory_snapshot format) as a JSON string; the Python layer
// turns it into dicts / a pickle for PyTorch's memory visualiser.
#pragma once

#include <optional>
#include <string>

#include "memory/device_allocator.hpp"

namespace cudakit::memory {

// All devices' segments (optionally only those of `pool`) and device traces.
std::string snapshot_json(std::optional<MempoolId> pool = std::nullopt);

}  // namespace cudakit::memory
