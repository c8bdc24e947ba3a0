// Streams: each created stream (and each device's legacy default stream) is an in-order
// queue drained by its own detached worker thread, started on first use. Different streams
// run truly concurrently.
//
// Legacy default stream (null handle) semantics, as CUDA's: an op enqueued on it waits for
// all work already enqueued on the device's blocking streams, and an op enqueued on a
// blocking stream waits for all work already enqueued on the legacy stream. Non-blocking
// streams (kStreamNonBlocking) never synchronize with it. Synchronizing/querying the legacy
// stream also covers the blocking streams' work enqueued before the call.
// The two directions are decided under Device::mu so the "already enqueued" snapshots are
// consistent (no cycles); non-blocking streams never take it.
//
// Process exit: workers are detached and never joined; once exit() begins they start no new
// task, and the exit waits (bounded) for the tasks already running: a task may be inside a
// library whose own exit-time destructor frees what the task uses (OpenBLAS frees its GEMM
// buffers in one: a GEMM still running crashed the process after the script had finished).
//
// Task failures: an exception thrown by a task is caught on the worker, the stream keeps
// running later work (so events and waits still complete), and the first failure becomes a
// sticky error reported by every later sync/query of that stream (and once by
// device_synchronize): CUDA_ERROR_LAUNCH_FAILED, or the code of an AcceleratorError the task
// threw. A fault of a host-compiled kernel (KernelFaultError, kernel_faults.hpp) is the
// context's sticky error instead, as a GPU's illegal address: every later sync/query of any
// stream of the device, event_synchronize and device_synchronize report it, every time.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/emulated/kernel_faults.hpp"
#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {
constexpr int kLaunchFailed = 719;

// Tasks executing right now, and whether exit() has begun (set by the exit handler below,
// before detail::is_shutting_down(): handlers run in reverse order of registration).
std::atomic<int> g_running_tasks{0};
std::atomic<bool> g_exiting{false};
thread_local bool t_is_worker = false;

// Runs at exit() (registered when the first worker starts): atexit handlers run before the
// ELF destructors of loaded libraries (_dl_fini was registered first). A task that calls
// exit() itself is not waited for; a task that never ends is given up on after 10 s.
void wait_for_running_tasks_at_exit() {
  g_exiting.store(true, std::memory_order_release);
  const int self = t_is_worker ? 1 : 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (g_running_tasks.load(std::memory_order_acquire) > self &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void register_exit_wait_once() {
  static const bool registered = [] { return std::atexit(wait_for_running_tasks_at_exit) == 0; }();
  (void)registered;
}
}  // namespace

Stream& EmulatedBackend::legacy_stream(Device& d) {
  if (d.legacy_used.load(std::memory_order_acquire)) return *d.legacy;
  std::lock_guard lock(d.mu);
  if (!d.legacy) {
    auto s = std::make_shared<Stream>();
    s->device = &d;
    s->legacy = true;
    s->id = next_stream_id_.fetch_add(1, std::memory_order_relaxed);
    s->trace_id = 7;  // CUPTI's id for a context's legacy default stream
    d.legacy = std::move(s);
    d.legacy_used.store(true, std::memory_order_release);
  }
  return *d.legacy;
}

Stream* EmulatedBackend::resolve(StreamHandle h) {
  // nullptr and CU_STREAM_LEGACY ((void*)1) both name the legacy default stream.
  if (h == nullptr || h == reinterpret_cast<StreamHandle>(1)) {
    return &legacy_stream(dev(thread_current_device()));
  }
  {
    std::shared_lock lock(stream_handles_mu_);
    if (!stream_handles_.count(h)) {
      fail(errc::invalid_handle,
           "not a live stream handle of the emulated backend (foreign, destroyed or made up)");
    }
  }
  auto* s = static_cast<Stream*>(h);
  if (s->magic != Stream::kMagic) {
    fail(errc::invalid_handle, "not a stream handle created by the emulated backend");
  }
  return s;
}

bool on_stream_worker() noexcept { return t_is_worker; }

void EmulatedBackend::start_worker(Stream& s) {
  s.worker_started = true;
  register_exit_wait_once();
  // Detached: a worker must never block process exit; it owns a reference to its stream.
  std::thread(&EmulatedBackend::worker_loop, this, s.shared_from_this()).detach();
}

void EmulatedBackend::worker_loop(std::shared_ptr<Stream> sp) {
  t_is_worker = true;
  Stream& s = *sp;
  Device& d = *s.device;
  std::unique_lock lk(s.mu);
  for (;;) {
    s.cv_work.wait(lk, [&] { return !s.queue.empty() || s.destroyed; });
    if (s.queue.empty()) break;  // destroyed and drained
    Op op = std::move(s.queue.front());
    s.queue.pop_front();
    lk.unlock();
    for (const Dep& dep : op.deps) wait_reached(*dep.stream, dep.seq);
    std::string err;
    int err_code = kLaunchFailed;
    // After exit() began, statics the task may touch are being destroyed: skip the work
    // (ops still complete so nothing waits forever).
    g_running_tasks.fetch_add(1, std::memory_order_acq_rel);
    if (op.fn && !g_exiting.load(std::memory_order_acquire) && !is_shutting_down()) {
      d.compute.note(true);
      const bool traced = op.trace.kind != ActivityKind::none;
      const std::int64_t t0 = traced ? trace_clock_ns() : 0;
      try {
        op.fn();
      } catch (const KernelFaultError& e) {
        err = e.what();
        err_code = e.code();
        std::lock_guard fl(d.fault_mu);
        if (!d.faulted.load(std::memory_order_relaxed)) {
          d.fault_code = e.code();
          d.fault_name = e.code_name();
          d.fault_error = err;
          d.faulted.store(true, std::memory_order_release);
        }
      } catch (const AcceleratorError& e) {
        err = e.what();
        err_code = e.code();
      } catch (const std::exception& e) {
        err = e.what();
        if (err.empty()) err = "exception without message";
      } catch (...) {
        err = "unknown exception";
      }
      if (traced) emit_op(s, op.trace, t0, trace_clock_ns());
      d.compute.note(false);
    } else if (op.trace.pending != nullptr) {
      cancel_record(op.trace.pending);  // skipped work: its record must not wait forever
    }
    op = Op{};  // drop captured state before signalling completion
    g_running_tasks.fetch_sub(1, std::memory_order_acq_rel);
    lk.lock();
    if (!err.empty() && s.error.empty()) {
      s.error = std::move(err);
      s.error_code = err_code;
    }
    ++s.completed;
    s.cv_done.notify_all();
    if (frees_pending_.load(std::memory_order_relaxed)) {  // device memory waiting for this
      lk.unlock();
      reap_freed();
      lk.lock();
    }
  }
  lk.unlock();
  std::lock_guard dl(d.mu);
  std::erase(d.streams, sp);
}

std::uint64_t EmulatedBackend::submit(Stream& s, HostTask fn, std::vector<Dep> deps,
                                      const OpTrace& trace) {
  Device& d = *s.device;
  auto push = [&]() {
    std::lock_guard sl(s.mu);
    if (s.destroyed) fail(errc::invalid_handle, "work enqueued on a destroyed stream");
    OpTrace t = trace;
    // Reserved in enqueue order under the stream's lock: the buffer holds a stream's records
    // in the order its work runs (as CUPTI's per-stream buffers do).
    if (t.kind != ActivityKind::none && device_sink() != nullptr) {
      t.pending = reserve_record(s, t, 0, 0);
    }
    s.queue.push_back(Op{std::move(fn), std::move(deps), t});
    std::uint64_t seq = ++s.enqueued;
    if (!s.worker_started) start_worker(s);
    s.cv_work.notify_one();
    return seq;
  };
  if (s.legacy) {
    check_legacy_implicit(d, "enqueue on the legacy default stream");
    std::lock_guard dl(d.mu);
    for (auto& o : d.streams) {
      if (!o->blocking()) continue;
      std::lock_guard ol(o->mu);
      if (o->enqueued > o->completed) deps.push_back(Dep{o, o->enqueued});
    }
    return push();
  }
  if (s.blocking() && d.legacy_used.load(std::memory_order_acquire)) {
    std::lock_guard dl(d.mu);
    {
      std::lock_guard ll(d.legacy->mu);
      if (d.legacy->enqueued > d.legacy->completed) {
        deps.push_back(Dep{d.legacy, d.legacy->enqueued});
      }
    }
    return push();
  }
  return push();
}

void EmulatedBackend::wait_reached(Stream& s, std::uint64_t seq) {
  std::unique_lock lk(s.mu);
  s.cv_done.wait(lk, [&] { return s.completed >= seq; });
}

bool EmulatedBackend::reached(Stream& s, std::uint64_t seq) {
  std::lock_guard lk(s.mu);
  return s.completed >= seq;
}

void EmulatedBackend::throw_if_faulted(Device& d) {
  if (!d.faulted.load(std::memory_order_acquire)) return;
  int code = 0;
  std::string name, err;
  {
    std::lock_guard fl(d.fault_mu);
    code = d.fault_code;
    name = d.fault_name;
    err = d.fault_error;
  }
  throw KernelFaultError(code, name, err);
}

void EmulatedBackend::throw_if_failed(Stream& s) {
  throw_if_faulted(*s.device);
  std::string err;
  int code = kLaunchFailed;
  {
    std::lock_guard lk(s.mu);
    if (s.error.empty()) return;
    err = s.error;
    code = s.error_code;
  }
  if (code == kLaunchFailed) {
    fail(kLaunchFailed, "a task on this stream failed earlier (sticky, like a CUDA launch "
                        "failure): " + err);
  }
  fail(code, "a task on this stream failed earlier (sticky): " + err);
}

void EmulatedBackend::sync_stream(Stream& s) {
  std::vector<Dep> targets;
  {
    std::lock_guard lk(s.mu);
    targets.push_back(Dep{s.shared_from_this(), s.enqueued});
  }
  if (s.legacy) {
    Device& d = *s.device;
    std::lock_guard dl(d.mu);
    for (auto& o : d.streams) {
      if (!o->blocking()) continue;
      std::lock_guard ol(o->mu);
      targets.push_back(Dep{o, o->enqueued});
    }
  }
  for (const Dep& t : targets) wait_reached(*t.stream, t.seq);
  throw_if_failed(s);
}

// ---- Backend API ----

StreamHandle EmulatedBackend::stream_create(int device, int priority, unsigned flags) {
  Device& d = dev(device);
  if (flags & ~kStreamNonBlocking) {
    fail(errc::invalid_value, "stream_create: unknown flags " + std::to_string(flags));
  }
  auto s = std::make_shared<Stream>();
  s->device = &d;
  s->id = next_stream_id_.fetch_add(1, std::memory_order_relaxed);
  s->priority = priority > 0 ? 0 : (priority < -5 ? -5 : priority);  // clamp as CUDA does
  s->flags = flags;
  s->trace_id = next_trace_stream_id_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(d.mu);
    d.streams.push_back(s);
  }
  emit_stream(ActivityKind::stream_created, *s);
  std::lock_guard reg(stream_handles_mu_);
  stream_handles_.insert(s.get());
  return s.get();
}

void EmulatedBackend::stream_destroy(StreamHandle h) {
  if (h == nullptr || h == reinterpret_cast<StreamHandle>(1)) {
    fail(errc::invalid_handle, "stream_destroy: the legacy default stream cannot be destroyed");
  }
  Stream* s = resolve(h);
  if (s->legacy) fail(errc::invalid_handle, "stream_destroy: legacy default stream");
  if (s->capturing.load()) {
    std::lock_guard cl(capture_mu_);
    if (s->cap) invalidate_locked(*s->cap);
  }
  Device& d = *s->device;
  std::shared_ptr<Stream> keep = s->shared_from_this();
  emit_stream(ActivityKind::stream_destroyed, *s);
  std::lock_guard dl(d.mu);
  std::lock_guard sl(s->mu);
  if (s->destroyed) fail(errc::invalid_handle, "stream_destroy: stream already destroyed");
  s->destroyed = true;
  {
    std::lock_guard reg(stream_handles_mu_);
    stream_handles_.erase(h);
  }
  if (s->worker_started) {
    s->cv_work.notify_one();  // the worker drains pending work, then retires the stream
  } else {
    std::erase(d.streams, keep);
  }
}

bool EmulatedBackend::stream_query(StreamHandle h) {
  Stream* s = resolve(h);
  check_sync_during_capture(*s, "stream_query");
  check_unsafe_call("stream_query");
  throw_if_failed(*s);
  {
    std::lock_guard lk(s->mu);
    if (s->completed < s->enqueued) return false;
  }
  if (s->legacy) {
    Device& d = *s->device;
    std::lock_guard dl(d.mu);
    for (auto& o : d.streams) {
      if (!o->blocking()) continue;
      std::lock_guard ol(o->mu);
      if (o->completed < o->enqueued) return false;
    }
  }
  return true;
}

void EmulatedBackend::stream_synchronize(StreamHandle h) {
  ApiCall api(*this, "cuStreamSynchronize", cbid::cuStreamSynchronize);
  Stream* s = resolve(h);
  check_sync_during_capture(*s, "stream_synchronize");
  SyncWait wait(*this, SyncKind::stream_synchronize, s, s->device->index, api.correlation());
  sync_stream(*s);
}

void EmulatedBackend::device_synchronize(int device) {
  ApiCall api(*this, "cuCtxSynchronize", cbid::cuCtxSynchronize);
  Device& d = dev(device);
  {
    std::lock_guard cl(capture_mu_);
    for (CaptureSession* c : sessions_) {
      bool here = false;
      for (auto& st : c->streams) here = here || st->device == &d;
      // Whatever the capture's mode and whichever thread: on the H200 (driver 580) a
      // cuCtxSynchronize from a thread that captures nothing returned CAPTURE_UNSUPPORTED and
      // invalidated other threads' thread_local-mode captures ("Capture was invalidated by a
      // prior API call"), since it would have to wait for the capturing streams.
      if (here) {
        invalidate_locked(*c);
        fail(errc::stream_capture_unsupported,
             "device_synchronize: not permitted while a stream of this device is capturing "
             "(the capture is now invalidated)");
      }
    }
  }
  std::vector<Dep> targets;
  {
    std::lock_guard dl(d.mu);
    auto add = [&](const std::shared_ptr<Stream>& o) {
      std::lock_guard ol(o->mu);
      targets.push_back(Dep{o, o->enqueued});
    };
    for (auto& o : d.streams) add(o);
    if (d.legacy) add(d.legacy);
  }
  std::string err;
  int code = kLaunchFailed;
  SyncWait wait(*this, SyncKind::context_synchronize, nullptr, device, api.correlation());
  for (const Dep& t : targets) {
    wait_reached(*t.stream, t.seq);
    std::lock_guard ol(t.stream->mu);
    if (!t.stream->error.empty() && !t.stream->error_seen_by_device && err.empty()) {
      t.stream->error_seen_by_device = true;
      err = t.stream->error;
      code = t.stream->error_code;
    }
  }
  throw_if_faulted(d);
  if (!err.empty()) {
    fail(code, "device_synchronize: a task on one of the device's streams failed: " + err);
  }
}

void EmulatedBackend::stream_wait_event(StreamHandle h, EventHandle e) {
  ApiCall api(*this, "cuStreamWaitEvent", cbid::cuStreamWaitEvent);
  Stream* s = resolve(h);
  Event* ev = event_ptr(e);
  if (capture_wait(*s, *ev)) return;
  SyncWait wait(*this, SyncKind::stream_wait_event, s, s->device->index, api.correlation());
  std::shared_ptr<Stream> es;
  std::uint64_t seq = 0;
  {
    std::lock_guard lk(ev->mu);
    es = ev->stream;
    seq = ev->seq;
  }
  if (!es || es.get() == s || reached(*es, seq)) return;  // nothing to wait for
  submit(*s, {}, {Dep{std::move(es), seq}});
}

int EmulatedBackend::stream_priority(StreamHandle h) { return resolve(h)->priority; }

int EmulatedBackend::stream_device(StreamHandle h) { return resolve(h)->device->index; }

std::uint64_t EmulatedBackend::stream_id(StreamHandle h) { return resolve(h)->id; }

void EmulatedBackend::launch_host_task(StreamHandle h, HostTask task) {
  ApiCall api(*this, "cuLaunchHostFunc", cbid::cuLaunchHostFunc);
  if (!task) fail(errc::invalid_value, "launch_host_task: empty task");
  Stream* s = resolve(h);
  // As on cuda (cuda_streams.cpp), a host function runs with in_host_function() set, so what
  // it frees is deferred (memory/deferred_free.hpp) and CI covers that path. A captured node
  // replays, so only an eager task drops its captures inside the scope.
  auto shared = std::make_shared<HostTask>(std::move(task));
  {
    HostTask node = [shared] {
      HostFunctionScope host_function;
      (*shared)();
    };
    if (capture_node(*s, GraphNodeType::host, "host", std::move(node))) return;
  }
  submit(*s, [shared]() mutable {  // host functions are not device work: no device record
    HostFunctionScope host_function;
    (*shared)();
    shared.reset();
  });
}

void EmulatedBackend::launch_host_kernel(StreamHandle h, const char* kernel_name,
                                         HostTask task) {
  ApiCall api(*this, "cuLaunchKernel", cbid::cuLaunchKernel);
  if (!task) fail(errc::invalid_value, "launch_host_kernel: empty task");
  Stream* s = resolve(h);
  OpTrace t;
  t.kind = ActivityKind::kernel;
  t.name = kernel_name ? kernel_name : "kernel";
  t.correlation = api.correlation();
  if (capture_node(*s, GraphNodeType::kernel, t.name, std::move(task), t)) return;
  if (device_sink() == nullptr) t.kind = ActivityKind::none;
  submit(*s, std::move(task), {}, t);
}

void EmulatedBackend::memcpy_async(void* dst, const void* src, std::size_t bytes,
                                   StreamHandle h) {
  ApiCall api(*this, "cuMemcpyAsync", cbid::cuMemcpyAsync);
  Stream* s = resolve(h);
  if (bytes == 0) return;
  if (dst == nullptr || src == nullptr) {
    fail(errc::invalid_value, "memcpy_async: null pointer with a non-zero size");
  }
  Device* d = s->device;
  HostTask fn = [d, dst, src, bytes] {
    d->memory.note(true);
    std::memmove(dst, src, bytes);
    d->memory.note(false);
  };
  // Kinds are looked up only when they can be reported (a capture may be replayed traced).
  OpTrace t;
  if (device_sink() != nullptr || s->capturing.load(std::memory_order_acquire)) {
    t = copy_trace(dst, src, bytes);
    t.correlation = api.correlation();
  }
  if (capture_node(*s, GraphNodeType::memcpy, "memcpy " + std::to_string(bytes) + " B",
                   std::move(fn), t)) {
    return;
  }
  if (device_sink() == nullptr) t.kind = ActivityKind::none;
  submit(*s, std::move(fn), {}, t);
}

void EmulatedBackend::memset_d8_async(void* dst, unsigned char value, std::size_t bytes,
                                      StreamHandle h) {
  ApiCall api(*this, "cuMemsetD8Async", cbid::cuMemsetD8Async);
  Stream* s = resolve(h);
  if (bytes == 0) return;
  if (dst == nullptr) fail(errc::invalid_value, "memset_d8_async: null pointer");
  Device* d = s->device;
  HostTask fn = [d, dst, value, bytes] {
    d->memory.note(true);
    std::memset(dst, value, bytes);
    d->memory.note(false);
  };
  OpTrace t;
  if (device_sink() != nullptr || s->capturing.load(std::memory_order_acquire)) {
    t = memset_trace(dst, bytes);
    t.correlation = api.correlation();
  }
  if (capture_node(*s, GraphNodeType::memset, "memset " + std::to_string(bytes) + " B",
                   std::move(fn), t)) {
    return;
  }
  if (device_sink() == nullptr) t.kind = ActivityKind::none;
  submit(*s, std::move(fn), {}, t);
}

}  // namespace cudakit::detail::emulated
