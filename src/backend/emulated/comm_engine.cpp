// The emulated collectives engine (see comm_engine.hpp for the design).
#include "backend/emulated/comm_engine.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"
#include "kernels/reduce.hpp"

namespace cudakit::detail::emulated {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
namespace res = nccl::result;

namespace {

constexpr std::uint64_t kSegmentMagic = 0x6d6d6f63756d6563ull;  // "cemucomm"
constexpr std::uint32_t kLayoutVersion = 1;
constexpr std::uint32_t kP2pMagic = 0x3250504bu;  // "KPP2": header of a send
constexpr unsigned char kIdMagic[8] = {'c', 'k', 'E', 'M', 'c', 'o', 'm', 'm'};
// A waiting rank re-checks failure, peers and its deadline this often; it is also the worst
// wake-up latency after a missed futex wake.
constexpr milliseconds kSlice{20};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
              sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, milliseconds slice) {
  timespec ts{static_cast<time_t>(slice.count() / 1000),
              static_cast<long>((slice.count() % 1000) * 1000000)};
  // Shared (not FUTEX_PRIVATE): the word may live in memory mapped by several processes.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts,
          nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
          nullptr, 0);
}

// Start time of process `pid` (field 22 of /proc/<pid>/stat, clock ticks since boot); 0 when
// the process is gone or a zombie. Comparing it with the value recorded at join tells a live
// peer from a dead one whose pid was recycled.
std::uint64_t process_start(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may contain spaces
  if (!p || p[1] != ' ') return 0;
  const char state = p[2];
  if (state == 'Z' || state == 'X' || state == 'x') return 0;
  int field = 3;
  const char* q = p + 2;
  while (*q && field < 22) {
    if (*q == ' ') ++field;
    ++q;
  }
  return field == 22 ? std::strtoull(q, nullptr, 10) : 0;
}

std::string seconds_text(milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

int type_code(CommDataType t) {  // the kernels' dtype code of an NCCL type
  switch (t) {
    case CommDataType::int8: return ops::kInt8;
    case CommDataType::uint8: return ops::kUInt8;
    case CommDataType::int32: return ops::kInt32;
    case CommDataType::int64: return ops::kInt64;
    case CommDataType::float16: return ops::kFloat16;
    case CommDataType::bfloat16: return ops::kBFloat16;
    case CommDataType::float64: return ops::kFloat64;
    default: return ops::kFloat32;
  }
}

bool valid_type(CommDataType t) {
  switch (t) {
    case CommDataType::int8: case CommDataType::uint8: case CommDataType::int32:
    case CommDataType::int64: case CommDataType::float16: case CommDataType::float32:
    case CommDataType::float64: case CommDataType::bfloat16: return true;
  }
  return false;
}

const char* task_name(CommKind k) {  // string literals: graph nodes keep the pointer
  switch (k) {
    case CommKind::all_reduce: return "nccl_all_reduce";
    case CommKind::broadcast: return "nccl_broadcast";
    case CommKind::reduce: return "nccl_reduce";
    case CommKind::all_gather: return "nccl_all_gather";
    case CommKind::reduce_scatter: return "nccl_reduce_scatter";
    case CommKind::send: return "nccl_send";
    case CommKind::recv: return "nccl_recv";
  }
  return "nccl_op";
}

}  // namespace

// ---------------------------------------------------------------- the shared segment

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

namespace {
struct Layout {
  std::size_t ranks, fifos, staging, fifo_data, total;
};
constexpr std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
Layout layout_for(int n, std::size_t staging, std::size_t fifo) {
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
std::size_t fifo_bytes_for(int n) { return n > 16 ? (std::size_t{64} << 10) : kFifoBytes; }
}  // namespace

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

// ---------------------------------------------------------------- ids

nccl::UniqueId make_engine_id() {
  nccl::UniqueId id;
  std::memcpy(id.bytes.data(), kIdMagic, sizeof kIdMagic);
  unsigned char* token = id.bytes.data() + 8;
  std::size_t got = 0;
  while (got < 16) {
    ssize_t n = ::getrandom(token + got, 16 - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw nccl::NcclError(res::system_error,
                            std::string("unique_id: getrandom failed: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(n);
  }
  const std::int32_t pid = ::getpid();
  std::memcpy(id.bytes.data() + 24, &pid, sizeof pid);
  return id;
}

std::string segment_name(const nccl::UniqueId& id) {
  if (std::memcmp(id.bytes.data(), kIdMagic, sizeof kIdMagic) != 0) {
    throw nccl::NcclError(res::invalid_argument,
                          "the unique id was not made by the emulated backend's engine "
                          "(nccl.unique_id() on this backend makes one; ids of the cuda "
                          "backend's NCCL, or other bytes, cannot be used here)");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = "/cudakit-comm-";
  for (int i = 8; i < 24; ++i) {
    name += kHex[id.bytes[static_cast<std::size_t>(i)] >> 4];
    name += kHex[id.bytes[static_cast<std::size_t>(i)] & 15];
  }
  return name;
}

// ---------------------------------------------------------------- EmulatedComm

EmulatedComm::EmulatedComm(EmulatedBackend& backend, int nranks, int rank, int device,
                           milliseconds timeout)
    : backend_(backend), nranks_(nranks), rank_(rank), device_(device), timeout_(timeout) {}

EmulatedComm::~EmulatedComm() {
  if (!joined_.load(std::memory_order_acquire)) return;
  // Peers waiting for this rank learn at their next check that it is gone, instead of
  // waiting for the timeout.
  seg_->slot(rank_).present.store(2, std::memory_order_release);
  seg_->wake_all();
}

CommState EmulatedComm::state(CommError* error) noexcept {
  auto s = static_cast<CommState>(state_.load(std::memory_order_acquire));
  if (s == CommState::ready) {
    int code = 0;
    bool timed_out = false;
    std::string why;
    try {
      if (seg_->failed(&code, &why, &timed_out)) {
        fail_local(why, code, timed_out);
        s = CommState::failed;
      }
    } catch (...) {
      s = CommState::failed;
    }
  }
  if (s == CommState::failed && error) {
    try {
      std::lock_guard lock(mu_);
      error->code = error_code_;
      error->timed_out = error_timed_out_;
      error->message = error_;
    } catch (...) {
    }
  }
  return s;
}

void EmulatedComm::fail_local(const std::string& why, int code, bool timed_out) noexcept {
  try {
    std::lock_guard lock(mu_);
    if (error_.empty()) {
      error_ = why;
      error_code_ = code;
      error_timed_out_ = timed_out;
    }
  } catch (...) {
  }
  state_.store(static_cast<int>(CommState::failed), std::memory_order_release);
  ready_cv_.notify_all();
}

void EmulatedComm::raise(int code, const std::string& why) {
  fail_local(why, code);
  throw nccl::NcclError(code, why);
}

void EmulatedComm::abort() noexcept {
  if (aborted_.exchange(true)) return;
  const std::string why = "rank " + std::to_string(rank_) + " aborted the communicator";
  // seg_ is written by a background join before joined_ turns true (release), so it is read
  // only after seeing it; an abort during the join makes the join itself fail.
  if (joined_.load(std::memory_order_acquire)) seg_->fail(res::remote_error, why);
  fail_local(why);
}

void EmulatedComm::wait_ready() {
  auto s = static_cast<CommState>(state_.load(std::memory_order_acquire));
  if (s == CommState::initializing) {
    std::unique_lock lock(ready_mu_);
    auto done = [&] {
      return static_cast<CommState>(state_.load(std::memory_order_acquire)) !=
             CommState::initializing;
    };
    if (timeout_.count() > 0) {
      if (!ready_cv_.wait_for(lock, timeout_, done)) {
        raise(res::remote_error, "rank " + std::to_string(rank_) +
                                     ": the communicator did not finish joining within " +
                                     seconds_text(timeout_));
      }
    } else {
      ready_cv_.wait(lock, done);
    }
    s = static_cast<CommState>(state_.load(std::memory_order_acquire));
  }
  if (aborted_.load()) {
    throw nccl::NcclError(res::remote_error, "the communicator was aborted");
  }
  if (s == CommState::failed) {
    std::string why;
    {
      std::lock_guard lock(mu_);
      why = error_;
    }
    throw nccl::NcclError(res::remote_error, "the communicator failed earlier: " + why);
  }
}

namespace {
// Waits until pred() holds: futex waits on `word` in slices; between them checks the
// segment's failure flag, this rank's abort, the liveness of `peers` (empty: all ranks) and
// the deadline.
class Waiter {
 public:
  Waiter(const Segment& seg, int rank, milliseconds timeout, const std::atomic<bool>& aborted)
      : seg_(seg), rank_(rank), timeout_(timeout), aborted_(aborted) {}

  template <class Pred>
  void until(std::atomic<std::uint32_t>& word, Pred pred, const std::string& what,
             const std::vector<int>& peers) {
    const auto start = steady_clock::now();
    auto next_check = start + kSlice;
    for (;;) {
      const std::uint32_t seen = word.load(std::memory_order_acquire);
      if (pred()) return;
      check_failed();
      const auto now = steady_clock::now();
      if (now >= next_check) {
        check_peers(what, peers);
        if (timeout_.count() > 0 && now - start >= timeout_) {
          const std::string why = "rank " + std::to_string(rank_) + " timed out after " +
                                  seconds_text(timeout_) + " in " + what;
          const_cast<Segment&>(seg_).fail(res::remote_error, why, /*timed_out=*/true);
          throw nccl::NcclError(res::remote_error, why, /*timed_out=*/true);
        }
        next_check = now + kSlice;
      }
      futex_wait(word, seen, kSlice);
    }
  }

  void check_failed() const {
    if (aborted_.load(std::memory_order_acquire)) {
      throw nccl::NcclError(res::remote_error, "the communicator was aborted on this rank");
    }
    int code = 0;
    bool timed_out = false;
    std::string why;
    if (seg_.failed(&code, &why, &timed_out)) {
      throw nccl::NcclError(code, "the communicator failed: " + why, timed_out);
    }
  }

  void check_peers(const std::string& what, const std::vector<int>& peers) const {
    const int self = ::getpid();
    auto check = [&](int r) {
      if (r == rank_) return;
      const RankSlot& s = seg_.slot(r);
      const std::uint32_t p = s.present.load(std::memory_order_acquire);
      std::string why;
      if (p == 2) {
        why = "rank " + std::to_string(r) + " destroyed its communicator while rank " +
              std::to_string(rank_) + " waited for it in " + what;
      } else if (p == 1 && s.pid != self && process_start(s.pid) != s.start) {
        why = "rank " + std::to_string(r) + " (pid " + std::to_string(s.pid) +
              ") exited while rank " + std::to_string(rank_) + " waited for it in " + what;
      }
      if (!why.empty()) {
        const_cast<Segment&>(seg_).fail(res::remote_error, why);
        throw nccl::NcclError(res::remote_error, why);
      }
    };
    if (peers.empty()) {
      for (int r = 0; r < seg_.nranks(); ++r) check(r);
    } else {
      for (int r : peers) check(r);
    }
  }

 private:
  const Segment& seg_;
  int rank_;
  milliseconds timeout_;
  const std::atomic<bool>& aborted_;
};

void barrier(Segment& seg, Waiter& w, const std::string& what) {
  Header& h = seg.h();
  const std::uint32_t gen = h.bar_gen.load(std::memory_order_acquire);
  const auto n = static_cast<std::uint32_t>(seg.nranks());
  if (h.bar_count.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
    // Last to arrive: reset the count before releasing the others, so their next arrival
    // counts from zero.
    h.bar_count.store(0, std::memory_order_relaxed);
    h.bar_gen.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(h.bar_gen);
    return;
  }
  w.until(h.bar_gen, [&] { return h.bar_gen.load(std::memory_order_acquire) != gen; }, what, {});
}

std::string describe(const OpDesc& d) {
  return std::string(comm_kind_name(static_cast<CommKind>(d.kind))) + "(operation #" +
         std::to_string(d.seq) + ", " + std::to_string(d.count) + " x " +
         comm_type_name(static_cast<CommDataType>(d.type)) + ", op " +
         nccl::reduce_op_name(static_cast<nccl::ReduceOp>(d.op)) + ", root " +
         std::to_string(d.root) + ")";
}

bool same(const OpDesc& a, const OpDesc& b) {
  return a.seq == b.seq && a.kind == b.kind && a.type == b.type && a.op == b.op &&
         a.root == b.root && a.count == b.count;
}
}  // namespace

void EmulatedComm::attach(std::shared_ptr<Segment> seg) {
  seg_ = std::move(seg);
  joined_.store(true, std::memory_order_release);
  state_.store(static_cast<int>(CommState::ready), std::memory_order_release);
}

void EmulatedComm::join_named(const std::string& name) {
  const Layout lay = layout_for(nranks_, kStagingBytes, fifo_bytes_for(nranks_));
  const auto start = steady_clock::now();
  auto over = [&] {
    return timeout_.count() > 0 && steady_clock::now() - start >= timeout_;
  };
  void* base = MAP_FAILED;
  std::size_t mapped = 0;
  bool unlinked = false;
  auto unlink_once = [&] {
    if (!unlinked) ::shm_unlink(name.c_str());
    unlinked = true;
  };
  try {
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {  // first rank here: make the segment
      if (::ftruncate(fd, static_cast<off_t>(lay.total)) != 0) {
        int e = errno;
        ::close(fd);
        unlink_once();
        raise(res::system_error, "cannot size the shared segment " + name + " (" +
                                     std::to_string(lay.total) + " bytes): " + std::strerror(e));
      }
      base = ::mmap(nullptr, lay.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      if (base == MAP_FAILED) {
        unlink_once();
        raise(res::system_error, "cannot map the shared segment " + name + ": " +
                                     std::strerror(errno));
      }
      mapped = lay.total;
      Segment::format(base, nranks_, lay.total);
    } else if (errno == EEXIST) {  // another rank made it: wait until its header is written
      fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
      if (fd < 0) raise(res::system_error, "cannot open the shared segment " + name + ": " + std::strerror(errno));
      for (;;) {
        struct stat st {};
        if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= sizeof(Header)) {
          void* head = ::mmap(nullptr, sizeof(Header), PROT_READ, MAP_SHARED, fd, 0);
          if (head != MAP_FAILED) {
            const Header* hd = static_cast<const Header*>(head);
            const bool ready = hd->ready.load(std::memory_order_acquire) == 1;
            const int n = hd->nranks;
            const std::size_t total = hd->total_bytes;
            const bool ours = hd->magic == kSegmentMagic && hd->version == kLayoutVersion;
            ::munmap(head, sizeof(Header));
            if (ready) {
              if (!ours) {
                ::close(fd);
                raise(res::invalid_usage, "shared segment " + name + " was not made by this version of cudakit");
              }
              if (n != nranks_) {
                ::close(fd);
                raise(res::invalid_usage,
                      "rank " + std::to_string(rank_) + " was told the communicator has " +
                          std::to_string(nranks_) + " ranks, but the rank that created it said " +
                          std::to_string(n) + " (every rank must pass the same world size)");
              }
              base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
              if (base == MAP_FAILED) {
                int e = errno;
                ::close(fd);
                raise(res::system_error, "cannot map the shared segment " + name + ": " + std::strerror(e));
              }
              mapped = total;
              break;
            }
          }
        }
        if (over()) {
          ::close(fd);
          const std::string why = "rank " + std::to_string(rank_) + " timed out after " +
                                  seconds_text(timeout_) +
                                  " waiting for the shared segment to be set up";
          fail_local(why, res::remote_error, true);
          throw nccl::NcclError(res::remote_error, why, true);
        }
        std::this_thread::sleep_for(milliseconds(1));
      }
      ::close(fd);
    } else {
      raise(res::system_error, "cannot create the shared segment " + name + " in /dev/shm: " +
                                   std::strerror(errno));
    }
    seg_ = std::make_shared<Segment>(base, mapped);
    base = MAP_FAILED;  // owned by seg_ now
    RankSlot& me = seg_->slot(rank_);
    std::uint32_t expected = 0;
    if (!me.present.compare_exchange_strong(expected, 3, std::memory_order_acq_rel)) {
      const int pid = me.pid;
      seg_.reset();  // do not mark the other holder of this rank as gone
      raise(res::invalid_usage, "rank " + std::to_string(rank_) + " joined twice (first by pid " +
                                    std::to_string(pid) + "): every rank needs its own number");
    }
    // Published with present = 1 only once written: a peer that read present == 1 before
    // `start` was set took this live rank for one that had exited (seen once in CI, 2 cores).
    me.pid = ::getpid();
    me.device = device_;
    me.start = process_start(me.pid);
    me.present.store(1, std::memory_order_release);
    joined_.store(true, std::memory_order_release);
    Header& h = seg_->h();
    h.joined.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(h.joined);
    Waiter w(*seg_, rank_, timeout_, aborted_);
    w.until(h.joined,
            [&] { return h.joined.load(std::memory_order_acquire) >= static_cast<std::uint32_t>(nranks_); },
            "joining the communicator (" + std::to_string(nranks_) + " ranks)", {});
    unlink_once();  // every rank has it mapped: the name is no longer needed
    state_.store(static_cast<int>(CommState::ready), std::memory_order_release);
    ready_cv_.notify_all();
  } catch (const nccl::NcclError& e) {
    if (base != MAP_FAILED) ::munmap(base, mapped);
    if (seg_) seg_->fail(e.code(), e.what(), e.timed_out());
    unlink_once();
    fail_local(e.what(), e.code(), e.timed_out());
  } catch (const std::exception& e) {
    if (base != MAP_FAILED) ::munmap(base, mapped);
    unlink_once();
    fail_local(std::string("joining failed: ") + e.what(), res::system_error);
  }
}

void EmulatedComm::enqueue(CommArgs a, NativeStream s) {
  CommError why;
  if (state(&why) == CommState::failed) {
    throw nccl::NcclError(why.code, std::string(comm_kind_name(a.kind)) +
                                        ": the communicator failed earlier: " + why.message,
                          why.timed_out);
  }
  if (aborted_.load()) {
    throw nccl::NcclError(res::remote_error, std::string(comm_kind_name(a.kind)) +
                                                 ": the communicator was aborted");
  }
  const char* what = comm_kind_name(a.kind);
  if (!valid_type(a.type)) {
    throw ValueError(std::string(what) + ": unsupported data type code " +
                     std::to_string(static_cast<int>(a.type)));
  }
  const bool reduces = a.kind == CommKind::all_reduce || a.kind == CommKind::reduce ||
                       a.kind == CommKind::reduce_scatter;
  if (reduces && (static_cast<int>(a.op) < 0 || static_cast<int>(a.op) > 4)) {
    throw ValueError(std::string(what) + ": unknown reduction operator " +
                     std::to_string(static_cast<int>(a.op)));
  }
  if ((a.kind == CommKind::broadcast || a.kind == CommKind::reduce || a.kind == CommKind::send ||
       a.kind == CommKind::recv) &&
      (a.root < 0 || a.root >= nranks_)) {
    throw ValueError(std::string(what) + ": " +
                     (a.kind == CommKind::send || a.kind == CommKind::recv ? "peer " : "root ") +
                     std::to_string(a.root) + " is out of range for " + std::to_string(nranks_) +
                     " ranks");
  }
  if (a.count > 0) {
    const bool needs_send = a.kind != CommKind::recv &&
                            !(a.kind == CommKind::broadcast && a.root != rank_);
    const bool needs_recv = a.kind != CommKind::send &&
                            !(a.kind == CommKind::reduce && a.root != rank_);
    if ((needs_send && !a.send) || (needs_recv && !a.recv)) {
      throw ValueError(std::string(what) + ": null buffer with a count of " +
                       std::to_string(a.count));
    }
  }
  auto self = shared_from_this();
  if (group_defer(self, a, s)) return;
  backend_.launch_host_kernel(s, task_name(a.kind), [self, args = std::move(a)] { self->run(args); });
}

void EmulatedComm::run(const CommArgs& a) noexcept {
  try {
    if (a.kind == CommKind::send || a.kind == CommKind::recv) {
      run_group_or_throw({{shared_from_this(), a}});
    } else {
      run_or_throw(a);
    }
  } catch (const nccl::NcclError& e) {
    fail_local(e.what(), e.code(), e.timed_out());
  } catch (const std::exception& e) {
    fail_local(std::string(comm_kind_name(a.kind)) + " failed on rank " + std::to_string(rank_) +
                   ": " + e.what(),
               res::internal_error);
  } catch (...) {
    fail_local("unknown exception", res::internal_error);
  }
}

void EmulatedComm::run_group(
    const std::vector<std::pair<std::shared_ptr<EmulatedComm>, CommArgs>>& ops) noexcept {
  try {
    run_group_or_throw(ops);
  } catch (const std::exception& e) {
    // run_group_or_throw recorded an NcclError on the communicator that failed; anything
    // else (an allocation failure) on every communicator of the group.
    for (const auto& op : ops) op.first->fail_local(std::string("group failed: ") + e.what(), res::internal_error);
  } catch (...) {
    for (const auto& op : ops) op.first->fail_local("group failed: unknown exception", res::internal_error);
  }
}

void EmulatedComm::run_or_throw(const CommArgs& a) {
  wait_ready();
  if (a.count == 0) return;  // as NCCL: nothing to do, no synchronization
  try {
    collective(a);
  } catch (const nccl::NcclError& e) {
    fail_local(e.what(), e.code(), e.timed_out());
    throw;
  } catch (const std::exception& e) {
    const std::string why = std::string(comm_kind_name(a.kind)) + " failed on rank " +
                            std::to_string(rank_) + ": " + e.what();
    seg_->fail(res::internal_error, why);
    raise(res::internal_error, why);
  }
}

void EmulatedComm::collective(const CommArgs& a) {
  Segment& seg = *seg_;
  const int n = nranks_, me = rank_;
  const std::size_t es = comm_type_size(a.type);
  const std::size_t bytes = a.count * es;  // per rank (all_gather: sent; reduce_scatter: received)
  std::size_t chunk = (a.kind == CommKind::reduce_scatter ? kStagingBytes / static_cast<std::size_t>(n)
                                                          : kStagingBytes);
  chunk = std::max(es, chunk / es * es);
  const OpDesc d{++seq_, static_cast<std::int32_t>(a.kind), static_cast<std::int32_t>(a.type),
                 static_cast<std::int32_t>(a.op), a.root, a.count};
  seg.slot(me).desc = d;
  Waiter w(seg, me, timeout_, aborted_);
  const std::string what = comm_kind_name(a.kind);
  const auto* send = static_cast<const unsigned char*>(a.send);
  auto* recv = static_cast<unsigned char*>(a.recv);
  const int dtype = type_code(a.type);
  std::vector<const void*> parts(static_cast<std::size_t>(n));
  unsigned char* mine = seg.staging(me);
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const std::size_t c = std::min(chunk, bytes - off);
    switch (a.kind) {  // stage this rank's contribution
      case CommKind::all_reduce:
      case CommKind::reduce:
      case CommKind::all_gather: std::memcpy(mine, send + off, c); break;
      case CommKind::broadcast:
        if (me == a.root) std::memcpy(mine, send + off, c);
        break;
      case CommKind::reduce_scatter:
        for (int r = 0; r < n; ++r) std::memcpy(mine + static_cast<std::size_t>(r) * c, send + static_cast<std::size_t>(r) * bytes + off, c);
        break;
      default: break;
    }
    barrier(seg, w, what);
    if (off == 0) {
      for (int r = 0; r < n; ++r) {
        const OpDesc other = seg.slot(r).desc;
        if (!same(other, d)) {
          const std::string why = "mismatched operations: rank " + std::to_string(me) +
                                  " is in " + describe(d) + " but rank " + std::to_string(r) +
                                  " is in " + describe(other) +
                                  " (every rank must issue the same operations in the same order)";
          seg.fail(res::invalid_usage, why);
          raise(res::invalid_usage, why);
        }
      }
    }
    const auto elems = static_cast<std::int64_t>(c / es);
    switch (a.kind) {  // read the others'
      case CommKind::all_reduce:
      case CommKind::reduce:
        if (a.kind == CommKind::all_reduce || me == a.root) {
          for (int r = 0; r < n; ++r) parts[static_cast<std::size_t>(r)] = seg.staging(r);
          ops::reduce_host(dtype, static_cast<int>(a.op), recv + off, parts.data(), n, elems);
        }
        break;
      case CommKind::broadcast:
        if (me != a.root) std::memcpy(recv + off, seg.staging(a.root), c);
        else if (recv != send) std::memmove(recv + off, send + off, c);
        break;
      case CommKind::all_gather:
        for (int r = 0; r < n; ++r) {
          std::memmove(recv + static_cast<std::size_t>(r) * bytes + off, seg.staging(r), c);
        }
        break;
      case CommKind::reduce_scatter:
        for (int r = 0; r < n; ++r) {
          parts[static_cast<std::size_t>(r)] = seg.staging(r) + static_cast<std::size_t>(me) * c;
        }
        ops::reduce_host(dtype, static_cast<int>(a.op), recv + off, parts.data(), n, elems);
        break;
      default: break;
    }
    barrier(seg, w, what);  // staging buffers free again
  }
}

// ---------------------------------------------------------------- send / recv

struct EmulatedComm::P2p {
  EmulatedComm* comm;
  bool is_send;
  int peer;
  const unsigned char* src;  // send
  unsigned char* dst;        // recv
  std::uint64_t bytes;
  std::int32_t type;
  unsigned char header[16];
  std::uint64_t moved = 0;  // bytes of header + payload moved so far
  bool done = false;
};

bool EmulatedComm::step(P2p& op) {
  Segment& seg = *seg_;
  const std::uint64_t cap = seg.h().fifo_bytes;
  const std::uint64_t total = sizeof op.header + op.bytes;
  const int src = op.is_send ? rank_ : op.peer, dst = op.is_send ? op.peer : rank_;
  FifoCtl& f = seg.fifo(src, dst);
  unsigned char* ring = seg.fifo_data(src, dst);
  bool moved_any = false;
  while (!op.done) {
    const std::uint64_t head = f.head.load(std::memory_order_acquire);
    const std::uint64_t tail = f.tail.load(std::memory_order_acquire);
    std::uint64_t room = op.is_send ? cap - (head - tail) : head - tail;
    if (room == 0) break;
    // Stop at the end of the header (the receiver checks it before taking payload) and at
    // the ring's end.
    std::uint64_t want = op.moved < sizeof op.header ? sizeof op.header - op.moved : total - op.moved;
    const std::uint64_t pos = (op.is_send ? head : tail) % cap;
    const std::uint64_t k = std::min({room, want, cap - pos});
    unsigned char* ring_at = ring + pos;
    if (op.is_send) {
      if (op.moved < sizeof op.header) std::memcpy(ring_at, op.header + op.moved, k);
      else std::memcpy(ring_at, op.src + (op.moved - sizeof op.header), k);
      f.head.store(head + k, std::memory_order_release);
    } else {
      if (op.moved < sizeof op.header) std::memcpy(op.header + op.moved, ring_at, k);
      else std::memcpy(op.dst + (op.moved - sizeof op.header), ring_at, k);
      f.tail.store(tail + k, std::memory_order_release);
    }
    op.moved += k;
    moved_any = true;
    seg.ring(op.peer);
    if (!op.is_send && op.moved == sizeof op.header) {
      std::uint32_t magic = 0;
      std::int32_t type = 0;
      std::uint64_t bytes = 0;
      std::memcpy(&magic, op.header, 4);
      std::memcpy(&type, op.header + 4, 4);
      std::memcpy(&bytes, op.header + 8, 8);
      if (magic != kP2pMagic || bytes != op.bytes || type != op.type) {
        const std::string why =
            "mismatched send/recv: rank " + std::to_string(op.peer) + " sent " +
            std::to_string(bytes) + " bytes of " +
            comm_type_name(static_cast<CommDataType>(type)) + " but rank " +
            std::to_string(rank_) + " posted a recv of " + std::to_string(op.bytes) +
            " bytes of " + comm_type_name(static_cast<CommDataType>(op.type));
        seg.fail(res::invalid_usage, why);
        raise(res::invalid_usage, why);
      }
    }
    if (op.moved == total) op.done = true;
  }
  return moved_any;
}

void EmulatedComm::run_group_or_throw(
    const std::vector<std::pair<std::shared_ptr<EmulatedComm>, CommArgs>>& ops) {
  std::vector<P2p> p2p;
  for (const auto& [comm, a] : ops) {
    comm->wait_ready();
    if (a.kind != CommKind::send && a.kind != CommKind::recv) continue;
    P2p op{};
    op.comm = comm.get();
    op.is_send = a.kind == CommKind::send;
    op.peer = a.root;
    op.src = static_cast<const unsigned char*>(a.send);
    op.dst = static_cast<unsigned char*>(a.recv);
    op.bytes = a.count * comm_type_size(a.type);
    op.type = static_cast<std::int32_t>(a.type);
    std::memcpy(op.header, &kP2pMagic, 4);
    std::memcpy(op.header + 4, &op.type, 4);
    std::memcpy(op.header + 8, &op.bytes, 8);
    p2p.push_back(op);
  }
  EmulatedComm* failing = nullptr;
  try {
    // Point to point first, all together: no order of sends and receives can deadlock.
    for (;;) {
      EmulatedComm* waiter = nullptr;
      std::vector<int> peers;
      std::uint32_t bell = 0;
      for (P2p& op : p2p) {
        if (op.done) continue;
        if (!waiter) {
          waiter = op.comm;
          bell = waiter->seg_->slot(waiter->rank_).doorbell.load(std::memory_order_acquire);
        }
      }
      if (!waiter) break;
      bool progressed = false;
      for (P2p& op : p2p) {
        if (op.done) continue;
        failing = op.comm;
        progressed = op.comm->step(op) || progressed;
        if (!op.done && op.comm == waiter) peers.push_back(op.peer);
      }
      if (progressed) continue;
      failing = waiter;
      if (peers.empty()) continue;  // only other communicators' operations are pending
      Segment& seg = *waiter->seg_;
      auto& word = seg.slot(waiter->rank_).doorbell;
      Waiter w(seg, waiter->rank_, waiter->timeout_, waiter->aborted_);
      w.until(word, [&] { return word.load(std::memory_order_acquire) != bell; },
              "send/recv with rank(s) " + [&] {
                std::string s;
                for (int p : peers) s += (s.empty() ? "" : ", ") + std::to_string(p);
                return s;
              }(),
              peers);
    }
  } catch (const nccl::NcclError& e) {
    if (failing) failing->fail_local(e.what(), e.code(), e.timed_out());
    throw;
  }
  for (const auto& [comm, a] : ops) {
    if (a.kind == CommKind::send || a.kind == CommKind::recv) continue;
    comm->run(a);
  }
}

// ---------------------------------------------------------------- comm_init_all

std::vector<std::shared_ptr<BackendComm>> init_all(EmulatedBackend& backend,
                                                   const std::vector<int>& devices,
                                                   milliseconds timeout) {
  const int n = static_cast<int>(devices.size());
  const Layout lay = layout_for(n, kStagingBytes, fifo_bytes_for(n));
  void* base = ::mmap(nullptr, lay.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    throw nccl::NcclError(res::system_error, std::string("comm_init_all: cannot map ") +
                                                 std::to_string(lay.total) + " bytes: " +
                                                 std::strerror(errno));
  }
  Segment::format(base, n, lay.total);
  auto seg = std::make_shared<Segment>(base, lay.total);
  const int pid = ::getpid();
  std::vector<std::shared_ptr<BackendComm>> out;
  for (int r = 0; r < n; ++r) {
    RankSlot& s = seg->slot(r);
    s.pid = pid;
    s.device = devices[static_cast<std::size_t>(r)];
    s.start = 0;  // same process: never checked
    s.present.store(1, std::memory_order_release);
    auto c = std::make_shared<EmulatedComm>(backend, n, r, devices[static_cast<std::size_t>(r)], timeout);
    c->attach(seg);
    out.push_back(std::move(c));
  }
  seg->h().joined.store(static_cast<std::uint32_t>(n), std::memory_order_release);
  return out;
}

// ---------------------------------------------------------------- groups

namespace {
struct Deferred {
  std::shared_ptr<EmulatedComm> comm;
  CommArgs args;
  NativeStream stream;
  int device;
};
struct GroupState {
  int depth = 0;
  std::vector<Deferred> ops;
};
GroupState& group_state() {
  thread_local GroupState g;
  return g;
}
}  // namespace

void group_start() { ++group_state().depth; }

bool group_defer(const std::shared_ptr<EmulatedComm>& comm, CommArgs& args, NativeStream s) {
  GroupState& g = group_state();
  if (g.depth == 0) return false;
  g.ops.push_back(Deferred{comm, std::move(args), s, comm->device()});
  return true;
}

void group_end(EmulatedBackend& backend) {
  GroupState& g = group_state();
  if (g.depth == 0) {
    throw ValueError("group_end(): no group is open on this thread (call group_start() first)");
  }
  if (--g.depth > 0) return;
  std::vector<Deferred> ops = std::move(g.ops);
  g.ops.clear();
  // One task per stream (a null handle means a device's legacy stream), in first-use order.
  std::vector<bool> taken(ops.size(), false);
  const int saved = thread_current_device();
  try {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (taken[i]) continue;
      std::vector<std::pair<std::shared_ptr<EmulatedComm>, CommArgs>> batch;
      for (std::size_t j = i; j < ops.size(); ++j) {
        if (taken[j] || ops[j].stream != ops[i].stream ||
            (ops[i].stream == nullptr && ops[j].device != ops[i].device)) {
          continue;
        }
        taken[j] = true;
        batch.emplace_back(ops[j].comm, std::move(ops[j].args));
      }
      thread_current_device() = ops[i].device;
      backend.launch_host_kernel(ops[i].stream, "nccl_group",
                                 [batch = std::move(batch)] { EmulatedComm::run_group(batch); });
    }
  } catch (...) {
    thread_current_device() = saved;
    throw;
  }
  thread_current_device() = saved;
}

}  // namespace cudakit::detail::emulated
