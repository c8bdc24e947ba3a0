// The emulated collectives engine (see comm_engine.hpp for the design): a communicator's
// life (state, failure, abort), enqueueing operations as host tasks, the collectives and the
// thread's groups. Segments: comm_segment.cpp; send/recv: comm_p2p.cpp.
#include "backend/emulated/comm_engine.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "backend/emulated/comm_segment.hpp"
#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"
#include "kernels/reduce.hpp"

namespace cudakit::detail::emulated {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
namespace res = nccl::result;

namespace {

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
