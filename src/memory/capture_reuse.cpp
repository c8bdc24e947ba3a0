// graph_capture_record_stream_reuse: a block freed during a CUDA graph capture after
// record_stream is reused inside that same capture once the graph orders all its uses first.
//
// Why the graph and not events: an event recorded on a capturing stream is a captured event,
// which can never be queried, so outside this rule such a block waits until no capture is
// underway (free()'s limbo). Inside the capture, the graph's topology says the same thing: at
// the free, each stream that used the block (its allocation stream included) has a capture
// frontier (the nodes its next captured work will depend on); those are the block's free
// markers. Later, when the allocation stream's frontier has every marker among its ancestors,
// all work captured on it from then on runs after every use of the block, so handing the block
// out again on that stream is as safe as reuse after an event completes. Torch's rule, with
// the same two limits: only allocations on the block's own stream reclaim it, and a block
// with a user stream that is not part of a capture waits for the capture's end.
#include <algorithm>
#include <unordered_set>

#include "backend/types.hpp"
#include "cudakit/error.hpp"
#include "memory/device_allocator.hpp"

namespace cudakit::memory {

std::vector<std::uint64_t> DeviceAllocator::capture_free_markers(const Block* b) {
  std::vector<std::uint64_t> markers;
  auto add = [&](detail::StreamHandle s) {
    if (!s) return false;  // the legacy default stream never captures
    std::vector<std::uint64_t> f;
    try {
      f = graphs_.stream_capture_frontier(s, /*ancestors=*/false);
    } catch (const AcceleratorError&) {
      return false;  // undescribable stream: keep the safe path (wait for the capture's end)
    }
    if (f.empty()) {
      // Not capturing, or capturing with nothing recorded yet: an empty frontier of a
      // capturing stream orders nothing, and a stream outside the capture may still be running.
      return graphs_.stream_capture_status(s, nullptr) == detail::CaptureStatus::active;
    }
    markers.insert(markers.end(), f.begin(), f.end());
    return true;
  };
  if (!add(b->stream)) return {};
  for (detail::StreamHandle s : b->stream_uses)
    if (!add(s)) return {};
  std::sort(markers.begin(), markers.end());
  markers.erase(std::unique(markers.begin(), markers.end()), markers.end());
  return markers;
}

void DeviceAllocator::reclaim_in_capture(detail::StreamHandle stream) {
  std::vector<std::uint64_t> reach;
  try {
    reach = graphs_.stream_capture_frontier(stream, /*ancestors=*/true);
  } catch (const AcceleratorError&) {
    return;
  }
  if (reach.empty()) return;  // nothing captured on it yet: nothing is ordered
  const std::unordered_set<std::uint64_t> before(reach.begin(), reach.end());
  for (auto it = capture_markers_.begin(); it != capture_markers_.end();) {
    Block* b = it->first;
    const std::vector<std::uint64_t>& markers = it->second;
    const bool safe = b->stream == stream && !markers.empty() &&
                      std::all_of(markers.begin(), markers.end(),
                                  [&](std::uint64_t m) { return before.count(m) != 0; });
    if (!safe) {
      ++it;
      continue;
    }
    // The graph orders the other streams' uses: no event is needed (free()'s limbo ends).
    capture_deferred_.erase(std::find(capture_deferred_.begin(), capture_deferred_.end(), b));
    b->stream_uses.clear();
    b->event_count = 0;
    it = capture_markers_.erase(it);
    free_block(b);
  }
}

}  // namespace cudakit::memory
