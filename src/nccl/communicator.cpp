// Communicator: construction, the watchdog, groups, and the multi-process operations.
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "backend/comm_ops.hpp"
#include "backend/graph_ops.hpp"
#include "backend/lifetime.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "nccl/communicator_impl.hpp"
#include "nccl/wire.hpp"

namespace cudakit::nccl {

using std::chrono::steady_clock;
using detail::CommArgs;
using detail::CommKind;

namespace {

std::string seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// ---- the watchdog thread ----
class Watchdog {
 public:
  static Watchdog& instance() {
    static auto* w = new Watchdog();  // leaked: the thread may outlive static destruction
    return *w;
  }
  void add(const std::shared_ptr<Communicator::Impl>& impl) {
    std::lock_guard lock(mu_);
    watched_.push_back(impl);
    if (!started_) {
      started_ = true;
      std::thread([this] { loop(); }).detach();  // never joined: it must not block exit
    }
  }

 private:
  void loop() {
    std::vector<std::shared_ptr<Communicator::Impl>> live;
    for (;;) {
      std::this_thread::sleep_for(kWatchdogPeriod);
      if (detail::is_shutting_down()) return;  // no device calls during exit
      live.clear();
      {
        std::lock_guard lock(mu_);
        std::erase_if(watched_, [&](const std::weak_ptr<Communicator::Impl>& w) {
          auto s = w.lock();
          if (s) live.push_back(std::move(s));
          return !s;
        });
      }
      for (auto& impl : live) impl->tick();
      live.clear();  // the last reference may go here, off the user's thread: fine
    }
  }
  std::mutex mu_;
  std::vector<std::weak_ptr<Communicator::Impl>> watched_;
  bool started_ = false;
};

// ---- groups: operations tracked when the outermost group ends ----
struct DeferredTrack {
  std::weak_ptr<Communicator::Impl> impl;
  StreamRef stream;
  std::string what;
};
struct FrontGroup {
  int depth = 0;
  std::vector<DeferredTrack> tracks;
};
FrontGroup& front_group() {
  thread_local FrontGroup g;
  return g;
}

[[noreturn]] void empty_handle(const char* fn) {
  throw ValueError(std::string("Communicator.") + fn +
                   "(): this Communicator is empty (default-constructed or reset)");
}

}  // namespace

bool in_group() noexcept { return front_group().depth > 0; }

void defer_tracking(const std::shared_ptr<Communicator::Impl>& impl, StreamRef s, std::string what) {
  front_group().tracks.push_back(DeferredTrack{impl, s, std::move(what)});
}

void group_start() {
  detail::comm_ops().comm_group_start();
  ++front_group().depth;
}

void group_end() {
  FrontGroup& g = front_group();
  if (g.depth == 0) {
    throw ValueError("group_end(): no group is open on this thread (call group_start() first)");
  }
  --g.depth;
  std::vector<DeferredTrack> tracks;
  if (g.depth == 0) tracks = std::move(g.tracks), g.tracks.clear();
  detail::comm_ops().comm_group_end();
  for (auto& t : tracks) {
    if (auto impl = t.impl.lock()) impl->track(t.stream, t.what);
  }
}

Group::~Group() {
  try {
    group_end();
  } catch (...) {  // destructors never throw
  }
}

// ---------------------------------------------------------------- Impl

Communicator::Impl::Impl(std::shared_ptr<detail::BackendComm> comm, CommOptions options)
    : comm_(std::move(comm)), options_(options), created_(steady_clock::now()) {}

Communicator::Impl::~Impl() {
  if (!owned_file_.empty()) {
    std::error_code ec;
    std::filesystem::remove(owned_file_, ec);
  }
}

std::string Communicator::Impl::label() const {
  return "rank " + std::to_string(comm_->rank()) + "/" + std::to_string(comm_->size()) +
         " (cuda:" + std::to_string(comm_->device()) + ")";
}

void Communicator::Impl::remove_when_ready(std::string path) {
  {
    std::lock_guard lock(mu_);
    owned_file_ = std::move(path);
  }
  if (ready_.load()) ready_reached();
}

void Communicator::Impl::ready_reached() {
  ready_.store(true, std::memory_order_release);
  std::string file;
  {
    std::lock_guard lock(mu_);
    file.swap(owned_file_);
  }
  if (!file.empty()) {
    std::error_code ec;
    std::filesystem::remove(file, ec);
  }
}

void Communicator::Impl::fail(int code, const std::string& message, bool timed_out) noexcept {
  try {
    std::lock_guard lock(mu_);
    if (failed_.load()) return;
    code_ = code;
    timed_out_ = timed_out;
    message_ = label() + ": " + message;
    failed_.store(true, std::memory_order_release);
  } catch (...) {
    failed_.store(true, std::memory_order_release);
  }
  comm_->abort();  // outside mu_: ncclCommAbort can take a while
}

std::optional<NcclError> Communicator::Impl::failure() {
  if (!failed_.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard lock(mu_);
  return NcclError(code_, message_, timed_out_);
}

void Communicator::Impl::throw_if_failed() {
  if (auto e = failure()) throw *e;
}

bool Communicator::Impl::is_ready() {
  if (ready_.load(std::memory_order_acquire)) return true;
  if (failed_.load()) return false;
  detail::CommError why;
  switch (comm_->state(&why)) {
    case detail::CommState::ready: ready_reached(); return true;
    case detail::CommState::failed: fail(why.code, why.message, why.timed_out); return false;
    case detail::CommState::initializing: return false;
  }
  return false;
}

void Communicator::Impl::wait_ready() {
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    if (is_ready()) return;
    throw_if_failed();
    if (options_.timeout.count() > 0 && steady_clock::now() - created_ >= options_.timeout) {
      fail(result::remote_error,
           "joining did not finish within " + seconds(options_.timeout) +
               " (a rank never started, or could not reach the others); the communicator was "
               "aborted",
           true);
      throw_if_failed();
    }
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(5)) pause *= 2;
  }
}

void Communicator::Impl::tick() noexcept {
  if (failed_.load(std::memory_order_acquire)) return;
  try {
    // Operations first, the communicator's state after them. An operation that a failure
    // ended (an abort, a dead peer) completes only after the backend recorded the failure, so
    // a state read made after seeing it complete also sees why; read before, it could miss a
    // failure that arrived in between, and the operation would be dropped here as finished
    // (the "all_reduce finished without its peer" flake under TSan).
    std::string late;
    {
      std::lock_guard lock(mu_);
      const auto now = steady_clock::now();
      std::erase_if(pending_, [&](Pending& p) {
        bool done = true;
        try {
          done = p.done.is_done();
        } catch (...) {  // a failed stream: the communicator's state says why
        }
        if (!done && late.empty() && options_.timeout.count() > 0 && now >= p.deadline) {
          late = p.what;
        }
        return done;
      });
    }
    detail::CommError why;
    const detail::CommState s = comm_->state(&why);
    if (s == detail::CommState::failed) {
      fail(why.code, why.message, why.timed_out);
      return;
    }
    if (s == detail::CommState::ready && !ready_.load()) ready_reached();
    if (s == detail::CommState::initializing && options_.timeout.count() > 0 &&
        steady_clock::now() - created_ >= options_.timeout) {
      fail(result::remote_error,
           "joining did not finish within " + seconds(options_.timeout) + "; the communicator was aborted",
           true);
      return;
    }
    if (!late.empty()) {
      fail(result::remote_error,
           late + " did not finish within " + seconds(options_.timeout) +
               " (a peer is dead, stuck, or never issued the matching operation); the "
               "communicator was aborted",
           true);
    }
  } catch (...) {
  }
}

void Communicator::Impl::synchronize() {
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    // Emptiness is read before tick(): the watchdog's tick may retire a failed operation at
    // any moment, and only a state read after that (this tick's) is sure to see the failure.
    bool idle = false;
    {
      std::lock_guard lock(mu_);
      idle = pending_.empty();
    }
    tick();
    throw_if_failed();
    if (idle) return;
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(2)) pause *= 2;
  }
}

void Communicator::Impl::track(StreamRef s, const std::string& what) {
  DeviceGuard guard(device());
  if (detail::graph_ops().stream_capture_status(s.handle(), nullptr) != detail::CaptureStatus::none) {
    return;  // captured into a graph: replays are not operations of this handle
  }
  Event done;
  done.record(s);
  std::lock_guard lock(mu_);
  pending_.push_back(Pending{std::move(done), steady_clock::now() + options_.timeout, what});
}

void Communicator::Impl::enqueue(CommArgs args, std::optional<StreamRef> stream,
                                 const std::vector<Tensor>& tensors, const char* what) {
  throw_if_failed();
  wait_ready();
  const int dev = device();
  StreamRef s = stream ? *stream : current_stream(dev);
  if (s.device() != dev) {
    throw ValueError(std::string("Communicator.") + what + "(): the stream is on cuda:" +
                     std::to_string(s.device()) + " but this rank uses cuda:" +
                     std::to_string(dev) + "; pass a stream of cuda:" + std::to_string(dev));
  }
  bool capturing = false;
  {
    DeviceGuard guard(dev);
    capturing = detail::graph_ops().stream_capture_status(s.handle(), nullptr) != detail::CaptureStatus::none;
  }
  // Inside a capture the graph's users keep its tensors alive (as with torch); outside, the
  // caching allocator learns that `s` uses them.
  if (!capturing) {
    for (const Tensor& t : tensors) detail::note_stream_use(t, s);
  }
  args.keep_alive = detail::keep_alive(tensors);
  const std::uint64_t number = [&] {
    std::lock_guard lock(mu_);
    return ++ops_;
  }();
  const std::string desc = std::string(what) + " #" + std::to_string(number) + " (" +
                           std::to_string(args.count) + " x " + detail::comm_type_name(args.type) + ")";
  try {
    DeviceGuard guard(dev);
    comm_->enqueue(std::move(args), s.handle());
  } catch (const NcclError& e) {
    fail(e.code(), e.what(), e.timed_out());
    throw_if_failed();
  }
  if (capturing) return;  // replays are not operations of this handle
  if (in_group()) {
    defer_tracking(shared_from_this(), s, desc);
  } else {
    track(s, desc);
  }
}

// ---------------------------------------------------------------- Communicator

Communicator::Communicator(int world_size, const UniqueId& id, int rank, CommOptions options) {
  if (world_size < 1) {
    throw ValueError("Communicator(): argument 'world_size' must be at least 1, got " +
                     std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw ValueError("Communicator(): argument 'rank' must be in [0, " + std::to_string(world_size) +
                     "), got " + std::to_string(rank));
  }
  if (options.timeout.count() < 0) {
    throw ValueError("Communicator(): the timeout must not be negative, got " +
                     std::to_string(options.timeout.count()) + " ms");
  }
  options.device = resolve_device(options.device);
  detail::CommInitOptions init;
  init.blocking = options.blocking;
  init.timeout = options.timeout;
  auto comm = detail::comm_ops().comm_init_rank(world_size, id, rank, options.device, init);
  impl_ = std::make_shared<Impl>(std::move(comm), options);
  if (options.blocking) impl_->wait_ready();
  Watchdog::instance().add(impl_);
}

Communicator init_rank(int num_ranks, const UniqueId& id, int rank) {
  return Communicator(num_ranks, id, rank, CommOptions{});
}

int Communicator::rank() const {
  if (!impl_) empty_handle("rank");
  return impl_->comm().rank();
}
int Communicator::size() const {
  if (!impl_) empty_handle("size");
  return impl_->comm().size();
}
int Communicator::device() const {
  if (!impl_) empty_handle("device");
  return impl_->device();
}
const CommOptions& Communicator::options() const {
  if (!impl_) empty_handle("options");
  return impl_->options();
}
bool Communicator::is_ready() const {
  if (!impl_) empty_handle("is_ready");
  return impl_->is_ready();
}
void Communicator::wait_ready() const {
  if (!impl_) empty_handle("wait_ready");
  impl_->wait_ready();
}
std::optional<std::string> Communicator::error() const {
  if (!impl_) empty_handle("error");
  impl_->tick();
  if (auto e = impl_->failure()) return std::string(e->what());
  return std::nullopt;
}
void Communicator::check() const {
  if (!impl_) empty_handle("check");
  impl_->tick();
  impl_->throw_if_failed();
}
void Communicator::synchronize() const {
  if (!impl_) empty_handle("synchronize");
  impl_->synchronize();
}
void Communicator::abort() noexcept {
  if (impl_) impl_->fail(result::remote_error, "aborted by abort()", false);
}

// ---- operations ----

namespace {

// "Communicator.all_reduce(): argument 'output' ..."
std::string where(const char* fn, const char* arg) {
  return std::string("Communicator.") + fn + "(): argument '" + arg + "'";
}

void check_tensor(const Tensor& t, const char* fn, const char* arg, int device) {
  if (!t.defined()) throw ValueError(where(fn, arg) + " is an undefined tensor");
  if (!t.is_cuda() || t.device().index != device) {
    throw ValueError(where(fn, arg) + " must be on cuda:" + std::to_string(device) +
                     " (this rank's device), got a tensor on " + t.device().str());
  }
  if (!t.is_contiguous()) {
    throw ValueError(where(fn, arg) + " must be contiguous (call .contiguous() first)");
  }
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* fn) {
  if (a.dtype() != b.dtype()) {
    throw ValueError(std::string("Communicator.") + fn + "(): input and output dtypes differ (" +
                     dtype_name(a.dtype()) + " vs " + dtype_name(b.dtype()) + ")");
  }
}

void check_numel(const Tensor& t, std::int64_t want, const char* fn, const char* arg,
                 const std::string& rule) {
  if (t.numel() != want) {
    throw ValueError(where(fn, arg) + " has " + std::to_string(t.numel()) + " elements but " +
                     rule + " requires " + std::to_string(want));
  }
}

void check_rank(int r, int size, const char* fn, const char* arg) {
  if (r < 0 || r >= size) {
    throw ValueError(where(fn, arg) + " must be a rank in [0, " + std::to_string(size) +
                     "), got " + std::to_string(r));
  }
}

}  // namespace

void Communicator::all_reduce(const Tensor& input, const Tensor& output, ReduceOp op,
                              std::optional<StreamRef> stream) {
  if (!impl_) empty_handle("all_reduce");
  const int dev = impl_->device();
  check_tensor(input, "all_reduce", "input", dev);
  check_tensor(output, "all_reduce", "output", dev);
  check_same_dtype(input, output, "all_reduce");
  check_numel(output, input.numel(), "all_reduce", "output", "all_reduce");
  auto w = detail::wire_type(input.dtype(), input.numel(), op, true, "Communicator.all_reduce()");
  CommArgs a;
  a.kind = CommKind::all_reduce;
  a.send = input.data_ptr();
  a.recv = output.data_ptr();
  a.count = w.count;
  a.type = w.type;
  a.op = w.op;
  impl_->enqueue(std::move(a), stream, {input, output}, "all_reduce");
}

void Communicator::broadcast(const Tensor& tensor, int root, std::optional<StreamRef> stream) {
  broadcast(tensor, tensor, root, stream);
}

void Communicator::broadcast(const Tensor& input, const Tensor& output, int root,
                             std::optional<StreamRef> stream) {
  if (!impl_) empty_handle("broadcast");
  const int dev = impl_->device();
  check_rank(root, size(), "broadcast", "root");
  check_tensor(output, "broadcast", "output", dev);
  const bool is_root = root == rank();
  if (is_root) {
    check_tensor(input, "broadcast", "input", dev);
    check_same_dtype(input, output, "broadcast");
    check_numel(output, input.numel(), "broadcast", "output", "broadcast");
  }
  auto w = detail::wire_type(output.dtype(), output.numel(), ReduceOp::sum, false, "Communicator.broadcast()");
  CommArgs a;
  a.kind = CommKind::broadcast;
  a.send = is_root ? input.data_ptr() : nullptr;
  a.recv = output.data_ptr();
  a.count = w.count;
  a.type = w.type;
  a.root = root;
  impl_->enqueue(std::move(a), stream, {input, output}, "broadcast");
}

void Communicator::reduce(const Tensor& input, const Tensor& output, int root, ReduceOp op,
                          std::optional<StreamRef> stream) {
  if (!impl_) empty_handle("reduce");
  const int dev = impl_->device();
  check_rank(root, size(), "reduce", "root");
  check_tensor(input, "reduce", "input", dev);
  const bool is_root = root == rank();
  if (is_root || output.defined()) {
    check_tensor(output, "reduce", "output", dev);
    check_same_dtype(input, output, "reduce");
    check_numel(output, input.numel(), "reduce", "output", "reduce");
  }
  auto w = detail::wire_type(input.dtype(), input.numel(), op, true, "Communicator.reduce()");
  CommArgs a;
  a.kind = CommKind::reduce;
  a.send = input.data_ptr();
  a.recv = is_root ? output.data_ptr() : nullptr;
  a.count = w.count;
  a.type = w.type;
  a.op = w.op;
  a.root = root;
  impl_->enqueue(std::move(a), stream, {input, output}, "reduce");
}

void Communicator::all_gather(const Tensor& input, const Tensor& output,
                              std::optional<StreamRef> stream) {
  if (!impl_) empty_handle("all_gather");
  const int dev = impl_->device();
  check_tensor(input, "all_gather", "input", dev);
  check_tensor(output, "all_gather", "output", dev);
  check_same_dtype(input, output, "all_gather");
  check_numel(output, input.numel() * size(), "all_gather", "output",
              "all_gather over " + std::to_string(size()) + " ranks");
  auto w = detail::wire_type(input.dtype(), input.numel(), ReduceOp::sum, false, "Communicator.all_gather()");
  CommArgs a;
  a.kind = CommKind::all_gather;
  a.send = input.data_ptr();
  a.recv = output.data_ptr();
  a.count = w.count;
  a.type = w.type;
  impl_->enqueue(std::move(a), stream, {input, output}, "all_gather");
}

void Communicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                  std::optional<StreamRef> stream) {
  if (!impl_) empty_handle("reduce_scatter");
  const int dev = impl_->device();
  check_tensor(input, "reduce_scatter", "input", dev);
  check_tensor(output, "reduce_scatter", "output", dev);
  check_same_dtype(input, output, "reduce_scatter");
  check_numel(input, output.numel() * size(), "reduce_scatter", "input",
              "reduce_scatter over " + std::to_string(size()) + " ranks");
  auto w = detail::wire_type(output.dtype(), output.numel(), op, true, "Communicator.reduce_scatter()");
  CommArgs a;
  a.kind = CommKind::reduce_scatter;
  a.send = input.data_ptr();
  a.recv = output.data_ptr();
  a.count = w.count;
  a.type = w.type;
  a.op = w.op;
  impl_->enqueue(std::move(a), stream, {input, output}, "reduce_scatter");
}

void Communicator::send(const Tensor& tensor, int peer, std::optional<StreamRef> stream) {
  if (!impl_) empty_handle("send");
  check_rank(peer, size(), "send", "peer");
  check_tensor(tensor, "send", "tensor", impl_->device());
  auto w = detail::wire_type(tensor.dtype(), tensor.numel(), ReduceOp::sum, false, "Communicator.send()");
  CommArgs a;
  a.kind = CommKind::send;
  a.send = tensor.data_ptr();
  a.count = w.count;
  a.type = w.type;
  a.root = peer;
  impl_->enqueue(std::move(a), stream, {tensor}, "send");
}

void Communicator::recv(const Tensor& tensor, int peer, std::optional<StreamRef> stream) {
  if (!impl_) empty_handle("recv");
  check_rank(peer, size(), "recv", "peer");
  check_tensor(tensor, "recv", "tensor", impl_->device());
  auto w = detail::wire_type(tensor.dtype(), tensor.numel(), ReduceOp::sum, false, "Communicator.recv()");
  CommArgs a;
  a.kind = CommKind::recv;
  a.recv = tensor.data_ptr();
  a.count = w.count;
  a.type = w.type;
  a.root = peer;
  impl_->enqueue(std::move(a), stream, {tensor}, "recv");
}

}  // namespace cudakit::nccl
