// The emulated backend's collectives engine: NCCL's communicators (collectives.hpp) between
// the emulated devices of one process and between processes of one machine, over shared
// memory. It exists so that everything above the seam — comm.*, nccl.*, Communicator, the
// launcher and their failure handling — runs in CI without a GPU.
//
// A communicator is one shared segment: a POSIX shared-memory object named after the unique
// id for ranks in several processes (unlinked as soon as every rank has mapped it, so a crash
// leaves nothing behind), an anonymous shared mapping for comm_init_all. It holds
//   * a header (rank count, failure flag and reason, a barrier),
//   * one slot per rank (pid, liveness, the operation it is in, a doorbell futex word),
//   * a staging buffer per rank for collectives (kStagingBytes; larger operations go in
//     chunks), and a byte FIFO per ordered rank pair for send/recv.
// Operations run as host tasks on the caller's stream (so they are stream-ordered and can be
// captured into graphs like any emulated kernel): a collective stages its chunk, meets the
// other ranks at a barrier, reads what it needs, and meets them again before the staging
// buffers are reused. Reductions run in rank order (kernels/reduce.hpp), so every rank gets
// the same bits.
//
// Failure handling, the point of the exercise: every wait is a futex wait in short slices;
// between slices a rank checks the segment's failure flag, whether each peer's process is
// still alive (pid + start time from /proc, so a recycled pid is not mistaken for the peer)
// and still holds its communicator, and the deadline (CommInitOptions::timeout). A dead peer,
// an abort() on any rank or a timeout sets the shared failure flag with the reason, wakes
// everyone, and every rank's operation throws NcclError(remote_error). Mismatched operations
// (ranks calling different collectives, counts or types, or a send whose size differs from
// the matching recv) fail the same way with invalid_usage instead of corrupting data.
//
// What was rejected: a process-shared pthread barrier (no timeout, no way to notice a dead
// peer); robust mutexes for liveness (they track threads, and a rank's thread may exit
// normally); kill(pid, 0) alone (true for a zombie whose parent has not reaped it yet).
//
// Files, by layer: comm_segment.hpp/.cpp (the segment's layout, futex waits, peer liveness,
// barrier, ids, making and joining segments), comm_engine.cpp (a communicator's life, the
// collectives, groups), comm_p2p.cpp (send/recv over the FIFOs).
//
// Thread-safety: EmulatedComm methods may be called from any thread; the group state is per
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace cudakit::detail::emulated {

class EmulatedBackend;

// Sizes of a segment's buffers (bytes). Small enough that tests cover chunking with a few
// megabytes; the emulated engine is about behaviour, not bandwidth.
inline constexpr std::size_t kStagingBytes = std::size_t{1} << 20;
inline constexpr std::size_t kFifoBytes = std::size_t{256} << 10;

// The API level the engine implements: NCCL 2.28.9's (the nccl.h the seam's enums follow).
inline constexpr int kEngineVersionCode = 22809;

class Segment;

// What a rank is doing in a collective, compared across ranks to catch mismatches.
struct OpDesc {
  std::uint64_t seq = 0;
  std::int32_t kind = 0, type = 0, op = 0, root = 0;
  std::uint64_t count = 0;
};

class EmulatedComm final : public BackendComm, public std::enable_shared_from_this<EmulatedComm> {
 public:
  EmulatedComm(EmulatedBackend& backend, int nranks, int rank, int device,
               std::chrono::milliseconds timeout);
  ~EmulatedComm() override;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return nranks_; }
  int device() const noexcept override { return device_; }
  CommState state(CommError* error) noexcept override;
  void abort() noexcept override;
  void enqueue(CommArgs args, NativeStream s) override;

  // Joins the named segment (blocking; records ready / failed in state()).
  void join_named(const std::string& name);
  // Attaches to a segment made by comm_init_all, already registered.
  void attach(std::shared_ptr<Segment> seg);

  // Runs one operation now (on a stream worker). A failure is recorded on the communicator
  // (state() reports it, before the task completes) and never thrown: as an NCCL kernel
  // that an abort or a dead peer ends, the task just finishes, so the stream and every
  // unrelated operation on it stay usable (a thrown error would become the stream's sticky
  // error and poison the survivor's default stream).
  void run(const CommArgs& a) noexcept;
  // Runs several operations of one group task: point-to-point ones together (so sends and
  // receives in any order cannot deadlock), then collectives in call order. Failures as run().
  static void run_group(const std::vector<std::pair<std::shared_ptr<EmulatedComm>, CommArgs>>& ops) noexcept;

 private:
  friend class Segment;
  struct P2p;
  void wait_ready();
  void fail_local(const std::string& why, int code = nccl::result::remote_error,
                  bool timed_out = false) noexcept;
 
  [[noreturn]] void raise(int code, const std::string& why);
  void collective(const CommArgs& a);
  void run_or_throw(const CommArgs& a);
  static void run_group_or_throw(
      const std::vector<std::pair<std::shared_ptr<EmulatedComm>, CommArgs>>& ops);
  bool step(P2p& op);  // one progress attempt; true when it moved bytes

  EmulatedBackend& backend_;
  const int nranks_, rank_, device_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<Segment> seg_;
  // Collectives run so far. Atomic because a user may (wrongly) run one rank's operations on
  // two streams at once; the mismatch check then reports it instead of a data race.
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<int> state_{static_cast<int>(CommState::initializing)};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> joined_{false};  // seg_ is set and this rank is a member (release/acquire)
  mutable std::mutex mu_;  // guards error_
  std::string error_;
  int error_code_ = nccl::result::remote_error;
  bool error_timed_out_ = false;
  std::mutex ready_mu_;    // join completion, for operations enqueued during a non-blocking init
  std::condition_variable ready_cv_;
};

// Unique ids of the engine: a magic, 16 random bytes (the segment's name), the maker's pid.
nccl::UniqueId make_engine_id();
// The segment name of an id; NcclError(invalid_argument) for bytes the engine did not make.
std::string segment_name(const nccl::UniqueId& id);

// comm_init_all: one anonymous segment, every rank registered.
std::vector<std::shared_ptr<BackendComm>> init_all(EmulatedBackend& backend,
                                                   const std::vector<int>& devices,
                                                   std::chrono::milliseconds timeout);

// The calling thread's group (comm_group_start / comm_group_end).
void group_start();
void group_end(EmulatedBackend& backend);
// True (and the operation queued) when the calling thread is inside a group.
bool group_defer(const std::shared_ptr<EmulatedComm>& comm, CommArgs& args, NativeStream s);

}  // namespace cudakit::detail::emulated
