// Small query for tests and diagnostics: is the process running on the emulated backend?
// (Tests use it to skip GPU-only checks, or to assert emulator-specific behaviour.)
//
// Thread-safety: safe from any thread.
#pragma once

#include <cstdint>
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

// What profiler_start/profiler_stop did on the emulated backend (it has nothing to profile,
// so tests observe the recorded state instead): whether profiling is on, and how many calls
// reached the backend.
struct EmulatedProfilerState {
  bool active = false;
  std::uint64_t starts = 0, stops = 0;
};
// The emulated backend's profiler state; false (and *out untouched) on another backend.
// Never creates the backend.
bool emulated_profiler_state(EmulatedProfilerState* out) noexcept;

}  // namespace cudakit::detail
