// The emulated collectives engine's shared segments (comm_segment.hpp): futex waits, peer
// liveness, the barrier, unique ids, and making or joining a segment (named for ranks in
// several processes, anonymous for comm_init_all).
#include "backend/emulated/comm_segment.hpp"

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

namespace cudakit::detail::emulated {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
namespace res = nccl::result;

namespace {
constexpr unsigned char kIdMagic[8] = {'c', 'k', 'E', 'M', 'c', 'o', 'm', 'm'};
}  // namespace

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, milliseconds slice) {
  timespec ts{static_cast<time_t>(slice.count() / 1000),
              static_cast<long>((slice.count() % 1000) * 1000000)};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts,
          nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
          nullptr, 0);
}

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

void Waiter::check_failed() const {
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

void Waiter::check_peers(const std::string& what, const std::vector<int>& peers) const {
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

// ---------------------------------------------------------------- joining

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

}  // namespace cudakit::detail::emulated
