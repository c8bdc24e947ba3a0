// Sync-debug hook shared by every synchronizing call (device/stream/event sync, blocking
// copies). Internal header.
#pragma once

#include <functional>
#include <string>

#include "cudakit/export.hpp"

namespace cudakit::detail {

// Call before any host-blocking device wait. Cheap when the mode is "default" (one relaxed
// atomic load). Warns through the installed handler, or throws cudakit::Error.
void on_synchronizing_call(const char* what);

// Installed with the public cudakit::set_sync_warning_handler (device.hpp).
using SyncWarningHandler = std::function<void(const std::string& message)>;

// Initialisation checks shared by every entry point that needs a device.
void ensure_initialized();
// Device count cached after first query (cheap; never throws).
int cached_device_count() noexcept;

}  // namespace cudakit::detail
