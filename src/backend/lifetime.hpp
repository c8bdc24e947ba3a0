// The seam's process state, without the seam: which backend is (or will be) selected, whether it
// exists yet, whether the process is exiting, and whether the calling thread runs a host function
// the backend enqueued. Destructors and shutdown paths of every module ask these; none of them
// needs an interface (backend/backend.hpp) for it.
#pragma once

#include <string>

#include "cudakit/export.hpp"

namespace cudakit::detail {

// True when the backend object exists (so shutdown paths never create one).
bool backend_created() noexcept;
// Selects the backend by name before first use; throws if a different one is already in use.
void select_backend(const std::string& name);
// Name selected (from select_backend or the environment) without creating the backend.
std::string selected_backend_name();

// Set by an atexit handler: after it, destructors skip device calls (no CUDA at exit).
CUDAKIT_INTERNAL_API bool is_shutting_down() noexcept;

// True on a thread that is running a host function the backend enqueued on a stream (cuda:
// cuLaunchHostFunc callbacks and the destructors of captured host tasks). The CUDA driver
// forbids CUDA calls there, and blocking there on a lock whose holder is inside a driver call
// deadlocks: that holder may wait for a driver lock that a third thread keeps while the
// device drains, and draining waits for this very host function (seen on the H200: a host
// task freeing memory, cuEventCreate under the allocator lock, cuMemFreeHost elsewhere).
// Code that would take such a lock (the allocators' free paths) defers its work instead.
// The emulated backend never sets it: its workers may take any lock (no driver below them).
bool in_host_function() noexcept;
// RAII: marks the calling thread as running a host function (used by the cuda backend).
class HostFunctionScope {
 public:
  HostFunctionScope() noexcept;
  ~HostFunctionScope();
  HostFunctionScope(const HostFunctionScope&) = delete;
  HostFunctionScope& operator=(const HostFunctionScope&) = delete;

 private:
  bool previous_;
};

}  // namespace cudakit::detail
