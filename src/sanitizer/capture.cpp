// Sanitizer and CUDA graphs: ops issued on a capturing stream are recorded into the capture
// (not checked: nothing runs at capture time), and a replay makes the recorded accesses on the
// replay stream, as one op. Ordering inside the graph (captured fork/join) is the graph's own:
// races between branches of one graph are not checked.
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "backend/graph_ops.hpp"
#include "sanitizer/hooks.hpp"
#include "sanitizer/tracker.hpp"

namespace cudakit::sanitizer::detail {

namespace {
struct CaptureRec {
  std::vector<Pending> ops;  // deduplicated at capture end
};

struct Captures {
  std::mutex mu;
  std::unordered_map<std::uint64_t, std::shared_ptr<CaptureRec>> live;  // under mu
  std::atomic<int> count{0};
};
Captures& captures() {
  static auto* c = new Captures();  // never destroyed
  return *c;
}
}  // namespace

bool capture_record(StreamHandle s, const Pending* ops, int n, const Site* site) {
  // The legacy default stream never captures, and asking about it while another stream
  // captures is itself an error on CUDA. Other streams are asked every time, not only while
  // a CUDAGraph capture is registered: a capture begun through the backend directly (or while
  // the sanitizer was off) must not be checked as eager work either. Measured: ~20 ns on
  // emulated (a shared lock and an atomic load); one driver call on cuda.
  if (s == nullptr) return false;
  Captures& c = captures();
  std::uint64_t id = 0;
  try {
    if (cudakit::detail::graph_ops().stream_capture_status(s, &id) == CaptureStatus::none) return false;
  } catch (...) {
    return false;
  }
  (void)site;
  if (!ops || c.count.load(std::memory_order_acquire) == 0) return true;
  std::lock_guard lock(c.mu);
  auto it = c.live.find(id);
  if (it != c.live.end()) {
    it->second->ops.insert(it->second->ops.end(), ops, ops + n);
    Tracker::get().n_captured.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
  }
  return true;  // captured work is never checked eagerly, registered or not
}

void capture_begin(std::uint64_t id) noexcept {
  if (!on()) return;
  try {
    Captures& c = captures();
    std::lock_guard lock(c.mu);
    if (c.live.emplace(id, std::make_shared<CaptureRec>()).second) c.count.fetch_add(1);
  } catch (...) {
  }
}

std::shared_ptr<const void> capture_end(std::uint64_t id) noexcept {
  Captures& c = captures();
  if (c.count.load(std::memory_order_acquire) == 0) return nullptr;
  std::shared_ptr<CaptureRec> rec;
  {
    std::lock_guard lock(c.mu);
    auto it = c.live.find(id);
    if (it == c.live.end()) return nullptr;
    rec = std::move(it->second);
    c.live.erase(it);
    c.count.fetch_sub(1);
  }
  try {
    // One access per distinct byte range: a write if any captured op wrote it.
    std::map<std::tuple<std::uintptr_t, std::uint64_t, std::uint64_t>, std::size_t> index;
    std::vector<Pending> merged;
    for (const Pending& p : rec->ops) {
      auto [it, fresh] = index.emplace(std::make_tuple(p.base, p.begin, p.end), merged.size());
      if (fresh) {
        merged.push_back(p);
        continue;
      }
      Pending& q = merged[it->second];
      q.write = q.write || p.write;
      q.is_output = q.is_output || p.is_output;
      for (int k = 0; k < p.nnames && q.nnames < kMaxNames; ++k) {
        bool have = false;
        for (int j = 0; j < q.nnames; ++j) have = have || q.names[j] == p.names[k];
        if (!have) q.names[q.nnames++] = p.names[k];
      }
    }
    rec->ops = std::move(merged);
  } catch (...) {
  }
  return rec;
}

void graph_replayed(const std::shared_ptr<const void>& captured, StreamHandle s, int device) {
  if (!captured) return;
  const auto& rec = *static_cast<const CaptureRec*>(captured.get());
  if (rec.ops.empty()) return;
  std::vector<Pending> ops = rec.ops;
  const Site* site = capture_site("CUDAGraph.replay", __builtin_frame_address(0), true);
  run_access(site, s, device, ops.data(), static_cast<int>(ops.size()), /*distinct=*/true);
}

}  // namespace cudakit::sanitizer::detail
