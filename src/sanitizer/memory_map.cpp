// Sanitizer: tracked allocations (lookup by address) and the allocation / free / record_stream
// hooks.
#include <algorithm>
#include <string>

#include "backend/types.hpp"
#include "sanitizer/hooks.hpp"
#include "sanitizer/tracker.hpp"

namespace cudakit::sanitizer::detail {

namespace {
constexpr std::uintptr_t kRegion = std::uintptr_t{1} << Tracker::kRegionShift;

// The allocation of shard `sh` at or below `p` that holds p, if any. Caller holds sh.mu.
bool holder_in(Tracker::Shard& sh, std::uintptr_t p, std::uintptr_t& base, std::size_t& size) {
  auto it = sh.allocs.upper_bound(p);
  if (it == sh.allocs.begin()) return false;
  --it;
  if (p - it->first < std::max<std::size_t>(it->second.size, 1)) {
    base = it->first;
    size = it->second.size;
    return true;
  }
  return false;
}
}  // namespace

bool Tracker::containing(std::uintptr_t p, std::uintptr_t& base, std::size_t& size) {
  // An allocation of at most one region starts in p's region or the one before it.
  for (std::uintptr_t r : {p, p >= kRegion ? p - kRegion : p}) {
    Shard& sh = shard(shard_of(r));
    std::lock_guard lock(sh.mu);
    if (holder_in(sh, p, base, size)) return true;
  }
  if (n_big_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(big_mu_);
  auto it = big_.upper_bound(p);
  if (it == big_.begin()) return false;
  --it;
  if (p - it->first < it->second) {
    base = it->first;
    size = it->second;
    return true;
  }
  return false;
}

void Tracker::erase_overlapping(std::uintptr_t p, std::size_t n) {
  if (stale_prone.load(std::memory_order_acquire) == 0) return;
  if (n == 0) n = 1;
  const std::uintptr_t end = p + n;
  // Starts inside [p, end): in the shards of the regions the range spans (all 64 at most).
  const std::uintptr_t regions = ((end - 1) >> kRegionShift) - (p >> kRegionShift) + 1;
  const unsigned visit = regions >= kShards ? kShards : static_cast<unsigned>(regions);
  for (unsigned i = 0; i < visit; ++i) {
    Shard& sh = shard(shard_of(p + i * kRegion));
    std::lock_guard lock(sh.mu);
    auto it = sh.allocs.lower_bound(p);
    while (it != sh.allocs.end() && it->first < end) {
      if (it->second.size > kRegion) big_erase(it->first);
      if (it->second.stale_prone) stale_prone.fetch_sub(1, std::memory_order_relaxed);
      it = sh.allocs.erase(it);
      n_allocs.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  // One starting below p and reaching into it.
  std::uintptr_t base = 0;
  std::size_t size = 0;
  if (containing(p, base, size) && base < p) {
    Shard& sh = shard(shard_of(base));
    std::lock_guard lock(sh.mu);
    if (auto it = sh.allocs.find(base); it != sh.allocs.end()) {
      if (it->second.stale_prone) stale_prone.fetch_sub(1, std::memory_order_relaxed);
      sh.allocs.erase(it);
      n_allocs.fetch_sub(1, std::memory_order_relaxed);
    }
    if (size > kRegion) big_erase(base);
  }
}

void Tracker::big_insert(std::uintptr_t p, std::size_t n) {
  std::lock_guard lock(big_mu_);
  big_[p] = n;
  n_big_.store(static_cast<std::int64_t>(big_.size()), std::memory_order_release);
}

void Tracker::big_erase(std::uintptr_t p) noexcept {
  if (n_big_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(big_mu_);
  big_.erase(p);
  n_big_.store(static_cast<std::int64_t>(big_.size()), std::memory_order_release);
}

void Tracker::clear() noexcept {
  for (auto& sh : shards_) {
    std::lock_guard lock(sh.mu);
    sh.allocs.clear();
  }
  {
    std::lock_guard lock(big_mu_);
    big_.clear();
    n_big_.store(0);
  }
  stale_prone = 0;
  for (auto& es : events_) {
    std::lock_guard lock(es.mu);
    es.clocks.clear();
  }
  n_accesses = 0;
  n_races = 0;
  n_allocs = 0;
  n_captured = 0;
}

// ---- hooks ----

void allocated(void* ptr, std::size_t n, int device, StreamHandle s) noexcept {
  if (!ptr) return;
  try {
    Tracker& t = Tracker::get();
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    const Site* site = capture_site("allocation", __builtin_frame_address(0), false);
    AllocState a;
    a.size = n;
    a.device = device;
    a.alloc_site = site;
    a.accesses.reserve(4);  // one allocation for the usual few accesses
    // Memory handed out during a capture belongs to the graph's pool; its first use is a
    // captured one, ordered by the graph.
    if (!capture_record(s, nullptr, 0, nullptr)) {
      StreamState& st = t.stream(s, device);
      a.alloc_stream = st.id;
      // "Allocated after everything enqueued on the allocation stream so far": a first use on
      // another stream must be ordered after that point (the block may have been freed by
      // work still pending there). Nothing enqueued yet: nothing to order after.
      const std::uint64_t seq = st.own_seq.load(std::memory_order_acquire);
      if (seq != 0) {
        AccessRec r;
        r.begin = 0;
        r.end = n;
        r.seq = seq;
        r.stream = st.id;
        r.kind = Kind::allocation;
        r.site = site;
        a.accesses.push_back(r);
      }
    }
    t.erase_overlapping(p, n);
    if (n > (std::size_t{1} << Tracker::kRegionShift)) t.big_insert(p, n);
    Tracker::Shard& sh = t.shard(Tracker::shard_of(p));
    std::lock_guard lock(sh.mu);
    auto [it, inserted] = sh.allocs.insert_or_assign(p, std::move(a));
    (void)it;
    if (inserted) t.n_allocs.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {  // out of memory in the sanitizer: the allocation goes untracked
  }
}

void freeing(void* ptr) noexcept {
  if (!ptr) return;
  try {
    Tracker& t = Tracker::get();
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    AllocState a;
    {
      Tracker::Shard& sh = t.shard(Tracker::shard_of(p));
      std::lock_guard lock(sh.mu);
      auto it = sh.allocs.find(p);
      if (it == sh.allocs.end()) return;
      a = std::move(it->second);
      sh.allocs.erase(it);
      t.n_allocs.fetch_sub(1, std::memory_order_relaxed);
    }
    if (a.stale_prone) t.stale_prone.fetch_sub(1, std::memory_order_relaxed);
    if (a.size > (std::size_t{1} << Tracker::kRegionShift)) t.big_erase(p);
    if (a.alloc_stream == kNoStream) return;
    // Only accesses from other streams than the allocation stream need the check.
    if (std::none_of(a.accesses.begin(), a.accesses.end(), [&](const AccessRec& r) {
          return r.kind != Kind::allocation && r.stream != a.alloc_stream;
        }))
      return;
    StreamState* home = t.stream_by_id(a.alloc_stream);
    if (!home) return;
    // The allocator hands the memory out again ordered on the allocation stream (and after
    // the streams record_stream named): every other stream's access must be ordered before
    // the allocation stream's next work.
    std::vector<AccessRec> unordered;
    {
      std::lock_guard lock(home->mu);
      t.merge_host(*home);
      for (const AccessRec& r : a.accesses) {
        if (r.kind == Kind::allocation || r.stream == home->id) continue;
        if (std::find(a.recorded_streams.begin(), a.recorded_streams.end(), r.stream) !=
            a.recorded_streams.end())
          continue;
        if (home->clock.get(r.stream) < r.seq) unordered.push_back(r);
      }
    }
    if (unordered.empty()) return;
    t.n_races.fetch_add(1, std::memory_order_relaxed);
    // One report per free: the latest unordered access (others are usually the same stream).
    const AccessRec& last = *std::max_element(
        unordered.begin(), unordered.end(),
        [](const AccessRec& x, const AccessRec& y) { return x.seq < y.seq; });
    StreamState* other = t.stream_by_id(last.stream);
    std::string msg =
        "============================\n"
        "CSAN detected a possible data race on tensor with data pointer " +
        std::to_string(p) + " (allocation of " + std::to_string(a.size) + " bytes on cuda:" +
        std::to_string(a.device) + ")\n"
        "The memory is freed (the caching allocator may hand it out again on stream " +
        std::to_string(reinterpret_cast<std::uintptr_t>(home->handle)) +
        ") while stream " +
        std::to_string(other ? reinterpret_cast<std::uintptr_t>(other->handle) : 0) +
        " may still be " + (last.kind == Kind::write ? "writing to" : "reading from") +
        " it: call record_stream(stream) on the tensor before dropping it, or make the "
        "allocation stream wait for that stream.\n"
        "Free with stack trace:\n" +
        format_site(capture_site("free", __builtin_frame_address(0), false), false) +
        "Unsynchronized access by stream " +
        std::to_string(other ? reinterpret_cast<std::uintptr_t>(other->handle) : 0) +
        " during kernel:\n" + (last.site ? last.site->kernel : "?") + "\nWith stack trace:\n" +
        format_site(last.site, false) + "Tensor was allocated with stack trace:\n" +
        format_site(a.alloc_site, false);
    warn_from_free(msg);
  } catch (...) {
  }
}

void stream_recorded(void* ptr, StreamHandle s, int device) noexcept {
  if (!ptr) return;
  try {
    Tracker& t = Tracker::get();
    StreamState& st = t.stream(s, device);
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    Tracker::Shard& sh = t.shard(Tracker::shard_of(p));
    std::lock_guard lock(sh.mu);
    auto it = sh.allocs.find(p);
    if (it == sh.allocs.end()) return;
    auto& rs = it->second.recorded_streams;
    if (std::find(rs.begin(), rs.end(), st.id) == rs.end()) rs.push_back(st.id);
  } catch (...) {
  }
}

}  // namespace cudakit::sanitizer::detail
