// The sanitizer's state: vector clocks per stream, the host clock, recorded events, call sites
// and the accesses of every tracked allocation. See include/cudakit/sanitizer.hpp for the model.
//
// Lock order (never taken the other way round): stream registry → one StreamState::mu →
// allocation shards in ascending index → the host clock's mutex. Event shards are taken alone,
// or under one StreamState::mu (event_recorded). No lock is held while calling out (stack
// capture, the Python hooks, the warning handler).
//
// Why this shape:
//  * Per-stream and per-shard locks, no global one: two threads issuing work on different
//    streams and buffers do not contend. A stream's clock is read and advanced under its own
//    lock, which is held while the op's operands are checked and recorded, so an op's check
//    and its record are one step for every operand (two threads racing on one buffer from two
//    streams always see each other).
//  * The host clock is merged into a stream lazily, when its version changed since that
//    stream's last launch: a synchronisation costs O(streams) once, not at every op.
//  * Call sites (kernel name + C++ return addresses + Python frames) are interned per thread
//    and never freed: an access stores one pointer, and a loop issuing the same op touches one
//    site instead of copying a stack per access. Memory grows with distinct call stacks, not
//    with the number of ops.
//  * Allocations live in 64 shards of ordered maps, by 1 MiB address region, so a raw pointer
//    inside an allocation (a declared CuPy array, a DLPack alias) finds its allocation: the
//    one at or below it in its region or the region before (allocations up to 1 MiB), or in a
//    small index of larger allocations. Rejected: one ordered map (a global lock on every
//    allocation), a hash map only (no containment lookups).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/types.hpp"
#include "cudakit/python_stacks.hpp"
#include "cudakit/sanitizer.hpp"

namespace cudakit::sanitizer::detail {

// The seam's names the sanitizer's code uses unqualified (as in hooks.hpp).
using cudakit::detail::CaptureStatus;
using cudakit::detail::EventHandle;
using cudakit::detail::StreamHandle;

inline constexpr std::uint32_t kNoStream = 0xFFFFFFFFu;

// Vector clock: entry i is the last sequence number of stream i known complete.
struct Clock {
  std::vector<std::uint64_t> v;
  std::uint64_t get(std::uint32_t i) const noexcept { return i < v.size() ? v[i] : 0; }
  void set(std::uint32_t i, std::uint64_t x) {
    if (i >= v.size()) v.resize(i + 1, 0);
    v[i] = x;
  }
  void merge(const Clock& o) {
    if (o.v.size() > v.size()) v.resize(o.v.size(), 0);
    for (std::size_t i = 0; i < o.v.size(); ++i)
      if (o.v[i] > v[i]) v[i] = o.v[i];
  }
};

// ---- call sites (sites.cpp) ----
inline constexpr int kMaxFrames = 24;
struct Site {
  const char* kernel = "";  // a string literal or an interned name
  std::uint64_t hash = 0;
  int depth = 0;
  void* pc[kMaxFrames];
  std::vector<PyFrameRef> py;  // innermost first
};
// The calling thread's site for `kernel` (a string literal or interned), frames above the
// caller of the function whose frame address is `entry`. `may_block`: the Python hook may
// take the interpreter lock (ops and declared accesses; not allocations and frees).
const Site* capture_site(const char* kernel, const void* entry, bool may_block);
// A stable copy of a name (interned for the life of the process).
const char* intern(std::string_view name);
// "  File ..., line N, in f\n    source\n" (outermost first) then the C++ frames.
// `may_block` false: Python frames are named only if that needs no wait (free reports).
std::string format_site(const Site* s, bool may_block = true);
void set_python_hooks(cudakit::sanitizer::PyCaptureHook capture,
                      cudakit::sanitizer::PySourceHook symbolize) noexcept;

// ---- accesses and allocations ----
enum class Kind : std::uint8_t { read, write, allocation };
inline constexpr int kMaxNames = 3;
struct AccessRec {
  std::uint64_t begin = 0, end = 0;  // bytes [begin, end) from the allocation's start
  std::uint64_t seq = 0;
  std::uint32_t stream = kNoStream;
  Kind kind = Kind::read;
  bool is_output = false;
  const Site* site = nullptr;
  std::array<const char*, kMaxNames> names{};
};

struct AllocState {
  std::size_t size = 0;
  int device = -1;
  std::uint32_t alloc_stream = kNoStream;  // kNoStream: allocation not seen (backfilled)
  const Site* alloc_site = nullptr;
  std::uint32_t sweep_at = 16;  // prune retired accesses when there are more than this
  // Backfilled from a raw pointer or a graph replay: no free will ever name it, so a new
  // allocation over its bytes must drop it (Tracker::stale_prone counts these).
  bool stale_prone = false;
  std::vector<AccessRec> accesses;
  std::vector<std::uint32_t> recorded_streams;
};

// ---- streams ----
struct StreamState {
  std::mutex mu;
  std::uint32_t id = 0;
  StreamHandle handle = nullptr;
  int device = -1;
  Clock clock;                           // under mu; clock[id] is the last seq issued here
  std::uint64_t host_version = 0;        // host clock version merged last (under mu)
  std::atomic<std::uint64_t> own_seq{0};  // == clock[id], readable without mu
};

// One op's operand after resolution (check.cpp).
struct Pending {
  std::uintptr_t base = 0;       // allocation key
  std::uint64_t begin = 0, end = 0;
  std::uintptr_t data_ptr = 0;   // for reports
  std::size_t size_hint = 0;     // allocation size to backfill with
  int device = -1;
  bool write = false;
  bool is_output = false;
  bool exact = true;             // base is an allocation start (a storage), not a raw pointer
  std::array<const char*, kMaxNames> names{};
  int nnames = 0;
  unsigned shard = 0;
};

class Tracker {
 public:
  static Tracker& get();  // never destroyed

  // ---- streams (streams.cpp) ----
  StreamState& stream(StreamHandle h, int device);
  StreamState* stream_by_id(std::uint32_t id);
  // Merges the host clock into `s` if it changed since `s` last merged. Caller holds s.mu.
  void merge_host(StreamState& s);
  void host_merge(const Clock& c);  // the host waited for work whose clock is `c`
  Clock host_snapshot();
  void forget_stream(StreamHandle h, int device) noexcept;
  void event_record(EventHandle e, StreamState& s);  // caller holds s.mu
  bool event_clock(EventHandle e, Clock& out);
  void forget_event(EventHandle e) noexcept;
  std::uint64_t stream_count();
  void device_streams(int device, std::vector<StreamState*>& out);

  // ---- allocations (memory_map.cpp) ----
  static constexpr unsigned kShards = 64;
  static constexpr int kRegionShift = 20;  // 1 MiB
  static unsigned shard_of(std::uintptr_t addr) noexcept {
    return static_cast<unsigned>(addr >> kRegionShift) & (kShards - 1);
  }
  struct Shard {
    std::mutex mu;
    std::map<std::uintptr_t, AllocState> allocs;
  };
  Shard& shard(unsigned i) noexcept { return shards_[i]; }
  // Resolves a raw pointer to (allocation base, its size) when a tracked allocation holds it.
  bool containing(std::uintptr_t p, std::uintptr_t& base, std::size_t& size);
  // Drops tracked allocations overlapping [p, p + n) (stale: the memory was handed out again).
  // Only entries no free will erase can overlap a new allocation: nothing to do (and no lock
  // taken) while there are none.
  void erase_overlapping(std::uintptr_t p, std::size_t n);
  std::atomic<std::int64_t> stale_prone{0};
  void big_insert(std::uintptr_t p, std::size_t n);
  void big_erase(std::uintptr_t p) noexcept;

  // ---- whole state ----
  void clear() noexcept;  // forget everything (enable / disable)
  std::atomic<std::uint64_t> n_accesses{0}, n_races{0}, n_allocs{0}, n_captured{0};

 private:
  Tracker() = default;
  // streams
  std::shared_mutex reg_mu_;
  struct Key {
    StreamHandle h;
    int device;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      return std::hash<const void*>()(k.h) ^ (static_cast<std::size_t>(k.device) << 48);
    }
  };
  std::unordered_map<Key, StreamState*, KeyHash> by_handle_;  // under reg_mu_
  std::vector<std::unique_ptr<StreamState>> by_id_;           // under reg_mu_; never shrinks
  std::atomic<std::uint64_t> reg_generation_{1};               // bumped when a key is dropped
  friend struct StreamCache;
  // host clock
  std::mutex host_mu_;
  Clock host_;                                    // under host_mu_
  std::atomic<std::uint64_t> host_version_{0};
  // events
  static constexpr unsigned kEventShards = 16;
  struct EventShard {
    std::mutex mu;
    std::unordered_map<EventHandle, Clock> clocks;
  };
  std::array<EventShard, kEventShards> events_;
  EventShard& event_shard(EventHandle e) noexcept {
    return events_[(reinterpret_cast<std::uintptr_t>(e) >> 4) % kEventShards];
  }
  // allocations
  std::array<Shard, kShards> shards_;
  std::mutex big_mu_;
  std::map<std::uintptr_t, std::size_t> big_;  // allocations larger than one region
  std::atomic<std::int64_t> n_big_{0};           // big_.size(), read without big_mu_
};

// Settings and reporting (sanitizer.cpp).
bool raise_mode() noexcept;
void warn(const std::string& message);  // through the warning handler; may throw
void warn_from_free(const std::string& message) noexcept;

// Captures (capture.cpp): true when `s` belongs to a registered capture; the op's operands go
// there instead of being checked.
bool capture_record(StreamHandle s, const Pending* ops, int n, const Site* site);

// The check-and-record step shared by ops, declared accesses and graph replays (check.cpp).
// Throws CUDASanitizerErrors in raise mode. `distinct`: no two operands name the same bytes
// (a replay's accesses were merged at capture end), so the O(n^2) merge is skipped.
void run_access(const Site* site, StreamHandle s, int device, Pending* ops, int n,
                bool distinct = false);

}  // namespace cudakit::sanitizer::detail
