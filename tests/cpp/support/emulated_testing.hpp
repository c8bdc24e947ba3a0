// Test support (not part of the library): is the process running on the emulated backend?
// Tests use it to assert emulator-specific behaviour; library code asks
// detail::backend().capabilities() instead and never branches on the name.
//
// Thread-safety: safe from any thread.
#pragma once

#include <cstring>
#include <string>

#include "backend/backend.hpp"

namespace cudakit::detail {

// True when the backend in use (or, before creation, the one selected) is "emulated".
// Never creates the backend.
inline bool is_emulated_backend() {
  if (backend_created()) return std::strcmp(backend().name(), "emulated") == 0;
  return selected_backend_name() == "emulated";
}


}  // namespace cudakit::detail
