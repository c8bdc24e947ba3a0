// The shared-memory segment of the emulated collectives engine (comm_engine.hpp has the
// design): its layout (header, rank slots, FIFO controls, staging and FIFO buffers), the
// futex waits, the liveness checks of peers, the barrier. Used by the engine's collectives
// (comm_engine.cpp) and send/recv (comm_p2p.cpp); comm_segment.cpp makes and joins segments.
// Internal to src/backend/emulated.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "backend/emulated/comm_engine.hpp"
#include "cudakit/nccl_types.hpp"

namespace cudakit::detail::emulated {

inline constexpr std::uint64_t kSegmentMagic = 0x6d6d6f63756d6563ull;  // "cemucomm"
inline constexpr std::uint32_t kLayoutVersion = 1;
// A waiting rank re-checks failure, peers and its deadline this often; it is also the worst
// wake-up latency after a missed futex wake.
inline constexpr std::chrono::milliseconds kSlice{20};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
              sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// Futex waits and wakes on a word of the segment (shared, not FUTEX_PRIVATE: the word may
// live in memory mapped by several processes). A wait ends after `slice` at the latest.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::milliseconds slice);
void futex_wake(std::atomic<std::uint32_t>& word);

// Start time of process `pid` (field 22 of /proc/<pid>/stat, clock ticks since boot); 0 when
// the process is gone or a zombie. Comparing it with the value recorded at join tells a live
// peer from a dead one whose pid was recycled.
std::uint64_t process_start(int pid);

// "2.5 s": a timeout in messages.
std::string seconds_text(std::chrono::milliseconds d);

struct alignas(64) RankSlot {
  // 0 not joined, 3 joining (claimed, pid/start not written yet), 1 member, 2 left
  // (communicator gone). Peers judge a member by pid/start, so those are written before 1.
  std::atomic<std::uint32_t> present;
  std::atomic<std::uint32_t> doorbell;  // bumped when something this rank may wait for moved
  std::int32_t pid;
  std::int32_t device;
  std::uint64_t start;                  // process_start(pid) at join
  OpDesc desc;                          // the collective this rank is in
};

struct alignas(64) FifoCtl {
  std::atomic<std::uint64_t> head;  // bytes written by the sender, ever
  std::atomic<std::uint64_t> tail;  // bytes consumed by the receiver, ever
};

struct Header {
  std::uint64_t magic;
  std::uint32_t version;
  std::atomic<std::uint32_t> ready;  // the creator finished writing this header
  std::int32_t nranks;
  std::uint64_t staging_bytes, fifo_bytes, total_bytes;
  std::atomic<std::uint32_t> joined;  // futex word of the join wait
  std::atomic<std::uint32_t> failed;  // 0 healthy, 1 reason being written, 2 failed
  std::int32_t fail_code;
  std::int32_t fail_timed_out;
  char reason[512];
  alignas(64) std::atomic<std::uint32_t> bar_count;
  alignas(64) std::atomic<std::uint32_t> bar_gen;  // futex word of the barrier
};

struct Layout {
  std::size_t ranks, fifos, staging, fifo_data, total;
};
inline constexpr std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
inline Layout layout_for(int n, std::size_t staging, std::size_t fifo) {
  const auto un = static_cast<std::size_t>(n);
  Layout l{};
  l.ranks = align_up(sizeof(Header), 64);
  l.fifos = align_up(l.ranks + un * sizeof(RankSlot), 64);
  l.staging = align_up(l.fifos + un * un * sizeof(FifoCtl), 4096);
  l.fifo_data = l.staging + un * staging;
  l.total = l.fifo_data + un * un * fifo;
  return l;
}
// FIFOs shrink for large communicators: n^2 of them.
inline std::size_t fifo_bytes_for(int n) { return n > 16 ? (std::size_t{64} << 10) : kFifoBytes; }

class Segment {
 public:
  Segment(void* base, std::size_t bytes) : base_(static_cast<unsigned char*>(base)), bytes_(bytes) {
    const Header& hd = h();
    lay_ = layout_for(hd.nranks, hd.staging_bytes, hd.fifo_bytes);
  }
  ~Segment() { ::munmap(base_, bytes_); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  Header& h() const { return *reinterpret_cast<Header*>(base_); }
  int nranks() const { return h().nranks; }
  RankSlot& slot(int r) const {
    return reinterpret_cast<RankSlot*>(base_ + lay_.ranks)[r];
  }
  FifoCtl& fifo(int src, int dst) const {
    return reinterpret_cast<FifoCtl*>(base_ + lay_.fifos)[src * nranks() + dst];
  }
  unsigned char* staging(int r) const {
    return base_ + lay_.staging + static_cast<std::size_t>(r) * h().staging_bytes;
  }
  unsigned char* fifo_data(int src, int dst) const {
    return base_ + lay_.fifo_data +
           static_cast<std::size_t>(src * nranks() + dst) * h().fifo_bytes;
  }

  // Writes the header of a fresh (zero-filled) segment.
  static void format(void* base, int n, std::size_t total) {
    auto* hd = new (base) Header{};
    hd->magic = kSegmentMagic;
    hd->version = kLayoutVersion;
    hd->nranks = n;
    hd->staging_bytes = kStagingBytes;
    hd->fifo_bytes = fifo_bytes_for(n);
    hd->total_bytes = total;
    hd->ready.store(1, std::memory_order_release);
  }

  // Marks the communicator failed (the first reason wins) and wakes every waiter.
  void fail(int code, const std::string& why, bool timed_out = false) noexcept {
    Header& hd = h();
    std::uint32_t expected = 0;
    if (hd.failed.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      hd.fail_code = code;
      hd.fail_timed_out = timed_out ? 1 : 0;
      std::size_t n = std::min(why.size(), sizeof hd.reason - 1);
      std::memcpy(hd.reason, why.data(), n);
      hd.reason[n] = '\0';
      hd.failed.store(2, std::memory_order_release);
    }
    wake_all();
  }
  // True when failed; fills code and reason.
  bool failed(int* code, std::string* why, bool* timed_out = nullptr) const {
    const Header& hd = h();
    std::uint32_t f = hd.failed.load(std::memory_order_acquire);
    if (f == 0) return false;
    while (f == 1) {  // another rank is writing the reason: a few instructions
      std::this_thread::yield();
      f = hd.failed.load(std::memory_order_acquire);
    }
    if (code) *code = hd.fail_code;
    if (why) *why = hd.reason;
    if (timed_out) *timed_out = hd.fail_timed_out != 0;
    return true;
  }
  void wake_all() noexcept {
    Header& hd = h();
    futex_wake(hd.bar_gen);
    futex_wake(hd.joined);
    for (int r = 0; r < nranks(); ++r) ring(r);
  }
  void ring(int r) noexcept {
    slot(r).doorbell.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(slot(r).doorbell);
  }

 private:
  unsigned char* base_;
  std::size_t bytes_;
  Layout lay_{};
};

// Waits until pred() holds: futex waits on `word` in slices; between them checks the
// segment's failure flag, this rank's abort, the liveness of `peers` (empty: all ranks) and
// the deadline.
class Waiter {
 public:
  Waiter(const Segment& seg, int rank, std::chrono::milliseconds timeout,
         const std::atomic<bool>& aborted)
      : seg_(seg), rank_(rank), timeout_(timeout), aborted_(aborted) {}

  template <class Pred>
  void until(std::atomic<std::uint32_t>& word, Pred pred, const std::string& what,
             const std::vector<int>& peers) {
    const auto start = std::chrono::steady_clock::now();
    auto next_check = start + kSlice;
    for (;;) {
      const std::uint32_t seen = word.load(std::memory_order_acquire);
      if (pred()) return;
      check_failed();
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_check) {
        check_peers(what, peers);
        if (timeout_.count() > 0 && now - start >= timeout_) {
          const std::string why = "rank " + std::to_string(rank_) + " timed out after " +
                                  seconds_text(timeout_) + " in " + what;
          const_cast<Segment&>(seg_).fail(nccl::result::remote_error, why, /*timed_out=*/true);
          throw nccl::NcclError(nccl::result::remote_error, why, /*timed_out=*/true);
        }
        next_check = now + kSlice;
      }
      futex_wait(word, seen, kSlice);
    }
  }

  // Throws NcclError when the communicator failed or this rank aborted.
  void check_failed() const;

  // Throws NcclError (and fails the segment) when one of `peers` (empty: all) is gone.
  void check_peers(const std::string& what, const std::vector<int>& peers) const;

 private:
  const Segment& seg_;
  int rank_;
  std::chrono::milliseconds timeout_;
  const std::atomic<bool>& aborted_;
};

// All ranks of the segment meet; throws as Waiter::until.
void barrier(Segment& seg, Waiter& w, const std::string& what);

}  // namespace cudakit::detail::emulated
