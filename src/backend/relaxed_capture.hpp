// RelaxedCaptureScope: the calling thread in relaxed capture mode for a scope, for calls that
// have no part in any capture but that CUDA counts as "potentially unsafe" (event and stream
// queries, synchronizes of unrelated streams, exec-graph and context destroys): in global and
// thread_local mode they fail and invalidate the calling thread's capture, and in global mode
// any thread's call invalidates every global capture. Never throws: when the mode cannot be
// set (ok() false) the scope changes nothing, and the caller decides whether to go on.
// `when` false makes it a no-op (callers pass "a capture is live somewhere", so the common
// path makes no driver call). One place for what the graph destroy, the green-context
// destroy and the allocators' event queries each wrote out before.
#pragma once

#include <optional>

#include "backend/graph_ops.hpp"

namespace cudakit::detail {

class RelaxedCaptureScope {
 public:
  explicit RelaxedCaptureScope(GraphOps& graphs, bool when = true) noexcept {
    if (!when) return;
    try {
      guard_.emplace(graphs, CaptureMode::relaxed);
    } catch (...) {
      failed_ = true;
    }
  }
  bool ok() const noexcept { return !failed_; }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  std::optional<ThreadCaptureModeGuard> guard_;
  bool failed_ = false;
};

}  // namespace cudakit::detail
