// Sanitizer: stream registry, host clock, events and the synchronisation hooks.
#include <algorithm>

#include "backend/types.hpp"
#include "sanitizer/hooks.hpp"
#include "sanitizer/tracker.hpp"

namespace cudakit::sanitizer::detail {

Tracker& Tracker::get() {
  static Tracker* t = new Tracker();  // never destroyed: hooks may run during exit
  return *t;
}

// A thread's last few streams: the op path finds its stream without the registry lock.
// Entries are valid while the registry generation is unchanged (a stream destroyed bumps it,
// since its handle may come back as a new stream). States are never freed.
struct StreamCache {
  struct Entry {
    StreamHandle h = nullptr;
    int device = -2;
    StreamState* s = nullptr;
    std::uint64_t gen = 0;
  };
  static constexpr int kEntries = 4;
  Entry e[kEntries];
  int next = 0;
};
namespace {
// On the heap behind one pointer: thread_local bytes of libcudakit are scarce static TLS
// (sites.cpp says why).
thread_local std::unique_ptr<StreamCache> tls_stream_cache;
StreamCache& stream_cache() {
  if (!tls_stream_cache) [[unlikely]] tls_stream_cache = std::make_unique<StreamCache>();
  return *tls_stream_cache;
}
}  // namespace

StreamState& Tracker::stream(StreamHandle h, int device) {
  const std::uint64_t gen = reg_generation_.load(std::memory_order_acquire);
  StreamCache& tls_streams = stream_cache();
  for (auto& c : tls_streams.e)
    if (c.s && c.h == h && c.device == device && c.gen == gen) return *c.s;
  StreamState* found = nullptr;
  {
    std::shared_lock lock(reg_mu_);
    auto it = by_handle_.find(Key{h, device});
    if (it != by_handle_.end()) found = it->second;
  }
  if (!found) {
    std::unique_lock lock(reg_mu_);
    auto it = by_handle_.find(Key{h, device});
    if (it != by_handle_.end()) {
      found = it->second;
    } else {
      auto st = std::make_unique<StreamState>();
      st->id = static_cast<std::uint32_t>(by_id_.size());
      st->handle = h;
      st->device = device;
      {
        // A new stream starts from what the host knows (CSAN's create_stream): work issued
        // on it is ordered after every synchronisation the host made.
        std::lock_guard hl(host_mu_);
        st->clock = host_;
        st->host_version = host_version_.load(std::memory_order_relaxed);
      }
      st->clock.set(st->id, 0);
      found = st.get();
      by_id_.push_back(std::move(st));
      by_handle_.emplace(Key{h, device}, found);
    }
  }
  auto& slot = tls_streams.e[tls_streams.next];
  tls_streams.next = (tls_streams.next + 1) % StreamCache::kEntries;
  slot = StreamCache::Entry{h, device, found, gen};
  return *found;
}

StreamState* Tracker::stream_by_id(std::uint32_t id) {
  std::shared_lock lock(reg_mu_);
  return id < by_id_.size() ? by_id_[id].get() : nullptr;
}

std::uint64_t Tracker::stream_count() {
  std::shared_lock lock(reg_mu_);
  return by_id_.size();
}

void Tracker::device_streams(int device, std::vector<StreamState*>& out) {
  std::shared_lock lock(reg_mu_);
  for (const auto& [key, st] : by_handle_)
    if (key.device == device) out.push_back(st);
}

void Tracker::forget_stream(StreamHandle h, int device) noexcept {
  std::unique_lock lock(reg_mu_);
  if (by_handle_.erase(Key{h, device}) != 0)
    reg_generation_.fetch_add(1, std::memory_order_acq_rel);
}

void Tracker::merge_host(StreamState& s) {
  if (host_version_.load(std::memory_order_acquire) == s.host_version) return;
  std::lock_guard lock(host_mu_);
  s.clock.merge(host_);
  s.host_version = host_version_.load(std::memory_order_relaxed);
}

void Tracker::host_merge(const Clock& c) {
  std::lock_guard lock(host_mu_);
  host_.merge(c);
  host_version_.fetch_add(1, std::memory_order_release);
}

Clock Tracker::host_snapshot() {
  std::lock_guard lock(host_mu_);
  return host_;
}

void Tracker::event_record(EventHandle e, StreamState& s) {
  EventShard& sh = event_shard(e);
  std::lock_guard lock(sh.mu);
  sh.clocks[e] = s.clock;
}

bool Tracker::event_clock(EventHandle e, Clock& out) {
  EventShard& sh = event_shard(e);
  std::lock_guard lock(sh.mu);
  auto it = sh.clocks.find(e);
  if (it == sh.clocks.end()) return false;
  out = it->second;
  return true;
}

void Tracker::forget_event(EventHandle e) noexcept {
  EventShard& sh = event_shard(e);
  std::lock_guard lock(sh.mu);
  sh.clocks.erase(e);
}

// ---- hooks ----

namespace {
// Streams of a capture do not take part in eager ordering: their event records and waits
// become graph edges, which a replay's single op already accounts for.
bool capturing(StreamHandle s) {
  return capture_record(s, nullptr, 0, nullptr);
}
}  // namespace

void event_recorded(EventHandle e, StreamHandle s, int device) noexcept {
  try {
    if (capturing(s)) return;
    Tracker& t = Tracker::get();
    StreamState& st = t.stream(s, device);
    std::lock_guard lock(st.mu);
    t.merge_host(st);
    t.event_record(e, st);
  } catch (...) {  // bad_alloc: the sanitizer loses an ordering, never the program's work
  }
}

void stream_waited(StreamHandle s, int device, EventHandle e) noexcept {
  try {
    if (capturing(s)) return;
    Tracker& t = Tracker::get();
    Clock c;
    if (!t.event_clock(e, c)) return;  // recorded while the sanitizer was off: no knowledge
    StreamState& st = t.stream(s, device);
    std::lock_guard lock(st.mu);
    st.clock.merge(c);
  } catch (...) {
  }
}

void host_waited_event(EventHandle e) noexcept {
  try {
    Tracker& t = Tracker::get();
    Clock c;
    if (t.event_clock(e, c)) t.host_merge(c);
  } catch (...) {
  }
}

void host_waited_stream(StreamHandle s, int device) noexcept {
  try {
    if (capturing(s)) return;
    Tracker& t = Tracker::get();
    StreamState& st = t.stream(s, device);
    Clock c;
    {
      std::lock_guard lock(st.mu);
      c = st.clock;
    }
    t.host_merge(c);
  } catch (...) {
  }
}

void host_waited_device(int device) noexcept {
  try {
    Tracker& t = Tracker::get();
    std::vector<StreamState*> streams;
    t.device_streams(device, streams);
    Clock all;
    for (StreamState* st : streams) {
      std::lock_guard lock(st->mu);
      all.merge(st->clock);
    }
    t.host_merge(all);
  } catch (...) {
  }
}

void stream_destroyed(StreamHandle s, int device) noexcept { Tracker::get().forget_stream(s, device); }

void event_destroyed(EventHandle e) noexcept { Tracker::get().forget_event(e); }

}  // namespace cudakit::sanitizer::detail
