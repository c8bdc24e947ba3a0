// The tracer's record store: per-thread buffers of ActivityRecord, the ActivitySink the
// backends deliver to, and the per-thread NVTX range stacks.
//
// Why per-thread buffers: records come from every thread that launches, allocates or pushes a
// range, from the emulated backend's stream workers and from CUPTI's buffer thread, at up to a
// few million per second. A shared vector behind a mutex serialises them (and a global lock on
// hot paths is against the project's rules); a lock-free MPSC queue allocates per node. Here
// each thread appends to chunks it alone writes: the cost of a record is a 96-byte copy plus
// one atomic exchange, and a chunk allocation every kChunk records.
//
// Stopping while other threads record (the only synchronization): every writer raises its
// state's `busy` flag (seq_cst), re-reads the session id and only then writes; stop() clears
// the session id (seq_cst) and waits for each state's flag to drop before taking its chunks.
// Either the writer sees the cleared id and backs off, or stop() sees the flag and waits
// (Dekker's pattern). ThreadState objects are never freed (a writer may still touch one after
// its session ended); a thread's state is reused by the next thread once it exits.
//
// Thread-safety: record()/push/pop/... from any thread; begin/end from one controlling thread
// (the profiler serialises traces).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backend/activity.hpp"

namespace cudakit::profiler::detail {

using cudakit::detail::ActivityKind;
using cudakit::detail::ActivityRecord;

// Records per chunk: a thread's chunks grow from kFirstChunk to kChunk (~360 KB), so a
// thread that records little wastes little (measured: <= 94 bytes per record in steady
// state with 4096-record chunks, tests/cpp/test_profiler_trace.cpp).
inline constexpr std::size_t kFirstChunk = 256;
inline constexpr std::size_t kChunk = 4096;

// What a finished session hands to the post-processing: the records and the text they point
// to (arena blocks), moved out of the thread states.
struct Collected {
  std::vector<std::unique_ptr<ActivityRecord[]>> chunks;
  std::vector<std::size_t> chunk_sizes;     // records used in each chunk
  std::vector<std::size_t> chunk_capacity;  // records allocated in each chunk
  std::vector<std::unique_ptr<char[]>> text;
  std::vector<std::string> messages;  // from ActivitySink::message, in arrival order
  std::size_t records = 0;
  std::uint64_t device_mask = 0;      // devices seen in records (bit d)
};

class Collector final : public cudakit::detail::ActivitySink {
 public:
  static Collector& instance() noexcept;

  // Opens session `id` (> 0); records belong to it until end(id).
  void begin(std::uint64_t id);
  // Closes the session and returns what was recorded in it.
  Collected end(std::uint64_t id);
  std::uint64_t session() const noexcept { return session_.load(std::memory_order_acquire); }
  std::uint64_t device_mask() const noexcept {
    return device_mask_.load(std::memory_order_relaxed);
  }

  // ---- ActivitySink (backends) ----
  void record(const ActivityRecord& r) noexcept override;
  void message(std::string_view text) noexcept override;

  // ---- the tracer's own events ----
  // Appends `r` with r.name and (if set) r.u.range.domain copied into the thread's arena.
  void record_with_text(ActivityRecord r, std::string_view name,
                        std::string_view domain = {}) noexcept;
  // NVTX push/pop on this thread (a complete user_range is recorded at pop; a pop without a
  // push recorded in this session is ignored).
  void nvtx_push(int slot, const char* domain, const char* message) noexcept;
  void nvtx_pop(int slot) noexcept;
  // NVTX start/end (may cross threads).
  void nvtx_start(std::uint64_t id, const char* domain, const char* message) noexcept;
  void nvtx_end(std::uint64_t id) noexcept;

  static std::uint32_t thread_id() noexcept;
  static std::uint32_t process_id() noexcept;

  struct ThreadState;

 private:
  Collector() = default;
  ThreadState* state() noexcept;  // this thread's, registered on first use
  // Runs `fn(ThreadState&)` inside the busy protocol when session `s` is still open.
  template <class Fn>
  bool write(Fn&& fn) noexcept;

  std::atomic<std::uint64_t> session_{0};
  std::atomic<std::uint64_t> device_mask_{0};
  std::mutex mu_;  // states_ registration, messages_, open_ranges_, begin/end
  std::vector<ThreadState*> states_;
  std::vector<std::string> messages_;
  struct OpenRange {
    std::int64_t start_ns;
    std::uint32_t tid;
    std::string name, domain;
  };
  std::map<std::uint64_t, OpenRange> open_ranges_;  // range_start ids of this session
};

}  // namespace cudakit::profiler::detail
