// CudaBackend: collective communication through NCCL (collectives.hpp, nccl_api.hpp).
//
// Multi-process ranks are always created with a non-blocking NCCL config: a blocking
// ncclCommInitRank cannot be interrupted when a peer never arrives, while a non-blocking one
// can be polled up to a deadline and aborted. A blocking request just polls here. The cost is
// NCCL's rule for non-blocking communicators — a call may return ncclInProgress, and the
// communicator must be polled with ncclCommGetAsyncError until it settles — paid in enqueue().
// comm_init_all (single process, torch.cuda.nccl's cached communicators) uses ncclCommInitAll,
// which is blocking and cannot hang on a missing peer.
//
// Aborting: ncclCommAbort frees the communicator, so after abort() no NCCL call touches it;
// NCCL allows the abort while another thread is blocked in a call on it (torch's watchdog
// relies on the same).
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/nccl_api.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

namespace res = nccl::result;

const Nccl& nccl_or_throw(const char* what) {
  const Nccl& n = nccl();
  if (!n.lib.available()) throw_library_unavailable(n.lib, what);
  return n;
}

std::string nccl_message(const Nccl& n, int rc, void* comm, const char* what) {
  std::string msg = std::string(what) + " failed: " + nccl::result_name(rc);
  if (const char* s = n.api.ncclGetErrorString ? n.api.ncclGetErrorString(rc) : nullptr) {
    msg += std::string(" (") + s + ")";
  }
  if (n.api.ncclGetLastError) {
    if (const char* last = n.api.ncclGetLastError(comm); last && *last) msg += ": " + std::string(last);
  }
  return msg;
}

class CudaComm;

// Communicators used inside the calling thread's open group, polled at group_end when NCCL
// answers ncclInProgress.
struct GroupState {
  int depth = 0;
  std::vector<std::shared_ptr<CudaComm>> comms;
};
GroupState& group_state() {
  thread_local GroupState g;
  return g;
}

class CudaComm final : public BackendComm, public std::enable_shared_from_this<CudaComm> {
 public:
  CudaComm(CudaBackend& backend, void* comm, int nranks, int rank, int device,
           std::chrono::milliseconds timeout)
      : backend_(backend), comm_(comm), nranks_(nranks), rank_(rank), device_(device),
        timeout_(timeout) {}

  ~CudaComm() override {
    if (is_shutting_down() || aborted_.load()) return;  // no NCCL / CUDA during exit
    const Nccl& n = nccl();
    try {
      CudaBackend::ContextScope scope(backend_, device_, "ncclCommDestroy");
      // A failed communicator may have peers that will never answer: abort, do not destroy.
      if (state(nullptr) == CommState::ready) n.api.ncclCommDestroy(comm_);
      else n.api.ncclCommAbort(comm_);
    } catch (...) {
    }
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return nranks_; }
  int device() const noexcept override { return device_; }

  CommState state(CommError* error) noexcept override {
    if (aborted_.load(std::memory_order_acquire)) {
      if (error) {
        error->code = res::remote_error;
        try {
          error->message = "the communicator was aborted";
        } catch (...) {
        }
      }
      return CommState::failed;
    }
    const Nccl& n = nccl();
    int async = 0;
    int rc = n.api.ncclCommGetAsyncError(comm_, &async);
    if (rc != kNcclSuccess) async = rc;
    if (async == kNcclSuccess) return CommState::ready;
    if (async == kNcclInProgress) return CommState::initializing;
    if (error) {
      error->code = async;
      try {
        error->message = nccl_message(n, async, comm_, "the communicator");
      } catch (...) {
      }
    }
    return CommState::failed;
  }

  void abort() noexcept override {
    std::lock_guard lock(abort_mu_);
    if (aborted_.exchange(true)) return;
    if (is_shutting_down()) return;
    try {
      CudaBackend::ContextScope scope(backend_, device_, "ncclCommAbort");
      nccl().api.ncclCommAbort(comm_);
    } catch (...) {
    }
  }

  // Polls until the communicator is no longer in progress (init, or an operation NCCL is
  // still enqueueing); NcclError on failure or when `timeout_` passes.
  void settle(const char* what) {
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      CommError why;
      CommState s = state(&why);
      if (s == CommState::ready) return;
      if (s == CommState::failed) throw nccl::NcclError(why.code, std::string(what) + ": " + why.message);
      if (timeout_.count() > 0 && std::chrono::steady_clock::now() - start >= timeout_) {
        abort();
        throw nccl::NcclError(res::remote_error,
                              std::string(what) + ": timed out after " +
                                  std::to_string(timeout_.count()) + " ms; the communicator "
                                  "was aborted",
                              /*timed_out=*/true);
      }
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::milliseconds(1)) pause *= 2;
    }
  }

  void enqueue(CommArgs a, NativeStream s) override {
    const char* what = comm_kind_name(a.kind);
    if (aborted_.load(std::memory_order_acquire)) {
      throw nccl::NcclError(res::remote_error, std::string(what) + ": the communicator was aborted");
    }
    a.keep_alive.reset();  // the caching allocator orders reuse of the buffers on the stream
    const Nccl& n = nccl();
    CudaBackend::ContextScope scope(backend_, device_, what);
    const int type = static_cast<int>(a.type), op = static_cast<int>(a.op);
    int rc = kNcclSuccess;
    switch (a.kind) {
      case CommKind::all_reduce:
        rc = n.api.ncclAllReduce(a.send, a.recv, a.count, type, op, comm_, s);
        break;
      case CommKind::broadcast:
        rc = n.api.ncclBroadcast(a.send, a.recv, a.count, type, a.root, comm_, s);
        break;
      case CommKind::reduce:
        rc = n.api.ncclReduce(a.send, a.recv, a.count, type, op, a.root, comm_, s);
        break;
      case CommKind::all_gather:
        rc = n.api.ncclAllGather(a.send, a.recv, a.count, type, comm_, s);
        break;
      case CommKind::reduce_scatter:
        rc = n.api.ncclReduceScatter(a.send, a.recv, a.count, type, op, comm_, s);
        break;
      case CommKind::send: rc = n.api.ncclSend(a.send, a.count, type, a.root, comm_, s); break;
      case CommKind::recv: rc = n.api.ncclRecv(a.recv, a.count, type, a.root, comm_, s); break;
    }
    GroupState& g = group_state();
    if (g.depth > 0) {
      bool known = false;
      for (const auto& c : g.comms) known = known || c.get() == this;
      if (!known) g.comms.push_back(shared_from_this());
    }
    if (rc == kNcclInProgress) {
      if (g.depth == 0) settle(what);
      return;
    }
    if (rc != kNcclSuccess) {
      throw nccl::NcclError(rc, nccl_message(n, rc, comm_, what));
    }
  }

 private:
  CudaBackend& backend_;
  void* comm_;
  const int nranks_, rank_, device_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
};

}  // namespace

CommEngineInfo CudaBackend::comm_engine() noexcept {
  CommEngineInfo info;
  const Nccl& n = nccl();
  info.available = n.lib.available();
  info.version_code = n.version_code;
  try {
    info.reason = n.lib.reason();
  } catch (...) {
  }
  return info;
}

nccl::UniqueId CudaBackend::comm_unique_id() {
  const Nccl& n = nccl_or_throw("unique_id");
  NcclUniqueIdRaw raw{};
  if (int rc = n.api.ncclGetUniqueId(&raw); rc != kNcclSuccess) {
    throw nccl::NcclError(rc, nccl_message(n, rc, nullptr, "ncclGetUniqueId"));
  }
  nccl::UniqueId id;
  std::memcpy(id.bytes.data(), raw.internal, sizeof raw.internal);
  return id;
}

std::shared_ptr<BackendComm> CudaBackend::comm_init_rank(int nranks, const nccl::UniqueId& id,
                                                         int rank, int device,
                                                         const CommInitOptions& options) {
  const Nccl& n = nccl_or_throw("Communicator");
  ContextScope scope(*this, device, "comm_init_rank");  // NCCL binds the rank to the current device
  NcclUniqueIdRaw raw{};
  std::memcpy(raw.internal, id.bytes.data(), sizeof raw.internal);
  NcclConfig config = nccl_config(/*blocking=*/false);
  void* comm = nullptr;
  int rc = n.api.ncclCommInitRankConfig(&comm, nranks, raw, rank, &config);
  if (rc != kNcclSuccess && rc != kNcclInProgress) {
    std::string msg = nccl_message(n, rc, comm, "ncclCommInitRankConfig");
    if (comm) n.api.ncclCommAbort(comm);
    throw nccl::NcclError(rc, msg);
  }
  auto c = std::make_shared<CudaComm>(*this, comm, nranks, rank, device, options.timeout);
  if (options.blocking) c->settle("ncclCommInitRankConfig");
  return c;
}

std::vector<std::shared_ptr<BackendComm>> CudaBackend::comm_init_all(const std::vector<int>& devices) {
  const Nccl& n = nccl_or_throw("comm_init_all");
  if (devices.empty()) throw ValueError("comm_init_all: the device list is empty");
  for (int d : devices) cu_device(d, "comm_init_all");  // validates each index
  std::vector<void*> comms(devices.size(), nullptr);
  {
    // NCCL switches devices itself and restores the caller's; keep our cache truthful.
    ContextScope scope(*this, devices.front(), "comm_init_all");
    int rc = n.api.ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data());
    if (rc != kNcclSuccess) throw nccl::NcclError(rc, nccl_message(n, rc, nullptr, "ncclCommInitAll"));
  }
  std::vector<std::shared_ptr<BackendComm>> out;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    out.push_back(std::make_shared<CudaComm>(*this, comms[i], static_cast<int>(devices.size()),
                                             static_cast<int>(i), devices[i],
                                             std::chrono::milliseconds(0)));
  }
  return out;
}

void CudaBackend::comm_group_start() {
  const Nccl& n = nccl_or_throw("group_start");
  if (int rc = n.api.ncclGroupStart(); rc != kNcclSuccess) {
    throw nccl::NcclError(rc, nccl_message(n, rc, nullptr, "ncclGroupStart"));
  }
  ++group_state().depth;
}

void CudaBackend::comm_group_end() {
  GroupState& g = group_state();
  if (g.depth == 0) {
    throw ValueError("group_end(): no group is open on this thread (call group_start() first)");
  }
  const Nccl& n = nccl_or_throw("group_end");
  const int rc = n.api.ncclGroupEnd();
  if (--g.depth > 0) {
    if (rc != kNcclSuccess && rc != kNcclInProgress) {
      throw nccl::NcclError(rc, nccl_message(n, rc, nullptr, "ncclGroupEnd"));
    }
    return;
  }
  std::vector<std::shared_ptr<CudaComm>> comms = std::move(g.comms);
  g.comms.clear();
  if (rc == kNcclInProgress) {
    for (auto& c : comms) c->settle("ncclGroupEnd");
    return;
  }
  if (rc != kNcclSuccess) throw nccl::NcclError(rc, nccl_message(n, rc, nullptr, "ncclGroupEnd"));
}

}  // namespace cudakit::detail::cuda
