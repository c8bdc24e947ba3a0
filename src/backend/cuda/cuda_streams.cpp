// CudaBackend: streams, host tasks, events and IPC handles.
//
// A null StreamHandle is the legacy default stream of the calling thread's current context,
// so every stream-taking call first makes sure the thread has a current context.
#include <cstdio>
#include <cstring>
#include <exception>

#include "backend/cuda/cuda_backend.hpp"

namespace cudakit::detail::cuda {
namespace {

CUstream cu(StreamHandle s) { return static_cast<CUstream>(s); }
CUevent ev(EventHandle e) { return static_cast<CUevent>(e); }
CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }
bool ignorable_at_release(CUresult rc) { return rc == CUDA_ERROR_DEINITIALIZED; }

static_assert(kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(kEventBlockingSync == CU_EVENT_BLOCKING_SYNC);
static_assert(kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(kEventInterprocess == CU_EVENT_INTERPROCESS);
static_assert(sizeof(IpcHandle) == sizeof(CUipcEventHandle));
static_assert(sizeof(IpcHandle) == sizeof(CUipcMemHandle));

// Runs on a driver thread. Exceptions must never unwind into the driver.
void invoke(HostTask* task) noexcept {
  HostFunctionScope host_function;  // frees in here are deferred (backend.hpp)
  try {
    (*task)();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cudakit: exception escaped a stream host task (ignored): %s\n",
                 e.what());
  } catch (...) {
    std::fprintf(stderr, "cudakit: unknown exception escaped a stream host task (ignored)\n");
  }
}

// Eager launch: runs once, then frees itself.
void run_host_task_once(void* user_data) {
  auto* task = static_cast<HostTask*>(user_data);
  invoke(task);
  // Still the driver's thread: what the task captured (a tensor's storage, a transfer's state)
  // may be freed here, and that free must be deferred like one inside the task.
  HostFunctionScope host_function;
  delete task;
}

// Captured launch: a graph may replay the node any number of times, so the task is owned by
// a CUDA user object retained by the graph and freed when the graph and its executables die.
void run_host_task_captured(void* user_data) { invoke(static_cast<HostTask*>(user_data)); }
void delete_host_task(void* user_data) {
  HostFunctionScope host_function;  // a driver thread: what the task owned is freed later
  delete static_cast<HostTask*>(user_data);
}

}  // namespace

// ---- streams ----

StreamHandle CudaBackend::stream_create(int device, int priority, unsigned flags) {
  ContextScope scope(*this, device, "stream_create");
  CUstream s = nullptr;
  check(api("stream_create").cuStreamCreateWithPriority(&s, flags, priority),
        "cuStreamCreateWithPriority");
  return s;
}

void CudaBackend::stream_destroy(StreamHandle s) {
  if (!s || is_shutting_down()) return;
  CUresult rc = api("stream_destroy").cuStreamDestroy(cu(s));
  if (!ignorable_at_release(rc)) check(rc, "cuStreamDestroy");
}

bool CudaBackend::stream_query(StreamHandle s) {
  ensure_context(s, "stream_query");
  CUresult rc = api("stream_query").cuStreamQuery(cu(s));
  if (rc == CUDA_ERROR_NOT_READY) return false;
  check(rc, "cuStreamQuery");
  return true;
}

void CudaBackend::stream_synchronize(StreamHandle s) {
  ensure_context(s, "stream_synchronize");
  check(api("stream_synchronize").cuStreamSynchronize(cu(s)), "cuStreamSynchronize");
}

void CudaBackend::stream_wait_event(StreamHandle s, EventHandle e) {
  ensure_context(s, "stream_wait_event");
  check(api("stream_wait_event").cuStreamWaitEvent(cu(s), ev(e), 0), "cuStreamWaitEvent");
}

int CudaBackend::stream_priority(StreamHandle s) {
  ensure_context(s, "stream_priority");
  int p = 0;
  check(api("stream_priority").cuStreamGetPriority(cu(s), &p), "cuStreamGetPriority");
  return p;
}

int CudaBackend::stream_device(StreamHandle s) {
  const EntryPoints& t = api("stream_device");
  if (!s) {  // the legacy stream of the current context
    ensure_current_context("stream_device");
    return current_device();
  }
  if (t.cuStreamGetDevice) {
    CUdevice dev = 0;
    check(t.cuStreamGetDevice(cu(s), &dev), "cuStreamGetDevice");
    return ordinal_of(dev);
  }
  // Pre-12.8 driver: stream -> context -> device.
  cu_device(0, "stream_device");  // builds the device slots
  CUcontext ctx = nullptr;
  check(t.cuStreamGetCtx(cu(s), &ctx), "cuStreamGetCtx");
  for (int i = 0; i < slot_count_; ++i) {  // primary contexts we hold: no driver call
    if (slots_[i].ctx.load(std::memory_order_acquire) == ctx) return i;
  }
  // A foreign (non-primary) context: ask the driver with it briefly current.
  CUcontext previous = nullptr;
  check(t.cuCtxGetCurrent(&previous), "cuCtxGetCurrent");
  check(t.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUdevice dev = 0;
  CUresult rc = t.cuCtxGetDevice(&dev);
  t.cuCtxSetCurrent(previous);
  check(rc, "cuCtxGetDevice");
  return ordinal_of(dev);
}

std::uint64_t CudaBackend::stream_id(StreamHandle s) {
  // The null handle resolves to the legacy stream of the current context, as in CUDA.
  ensure_context(s, "stream_id");
  unsigned long long id = 0;
  check(api("stream_id").cuStreamGetId(cu(s), &id), "cuStreamGetId");
  return id;
}

void CudaBackend::launch_host_task(StreamHandle s, HostTask task) {
  ensure_context(s, "launch_host_task");
  const EntryPoints& t = api("launch_host_task");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph capturing = nullptr;
  // A failed query (e.g. the legacy stream during another stream's global capture) falls
  // through to the eager path, whose launch then reports the real error.
  if (t.cuStreamGetCaptureInfo &&
      t.cuStreamGetCaptureInfo(cu(s), &status, nullptr, &capturing, nullptr, nullptr,
                               nullptr) != CUDA_SUCCESS) {
    status = CU_STREAM_CAPTURE_STATUS_NONE;
  }
  auto* owned = new HostTask(std::move(task));
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    CUresult rc = t.cuLaunchHostFunc(cu(s), &run_host_task_once, owned);
    if (rc != CUDA_SUCCESS) {
      delete owned;  // never enqueued, so never run
      throw_cu(rc, "cuLaunchHostFunc");
    }
    return;
  }
  if (t.cuUserObjectCreate && t.cuGraphRetainUserObject && capturing) {
    CUuserObject obj = nullptr;
    CUresult rc = t.cuUserObjectCreate(&obj, owned, &delete_host_task, 1,
                                       CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
    if (rc != CUDA_SUCCESS) {
      delete owned;
      throw_cu(rc, "cuUserObjectCreate");
    }
    // Moves our single reference to the graph: the task now lives exactly as long as it.
    rc = t.cuGraphRetainUserObject(capturing, obj, 1, CU_GRAPH_USER_OBJECT_MOVE);
    if (rc != CUDA_SUCCESS) {
      if (t.cuUserObjectRelease) t.cuUserObjectRelease(obj, 1);  // runs delete_host_task
      throw_cu(rc, "cuGraphRetainUserObject");
    }
  }
  // else: no user objects in this driver; the task is leaked rather than freed under a graph
  // that may replay it.
  check(t.cuLaunchHostFunc(cu(s), &run_host_task_captured, owned), "cuLaunchHostFunc");
}

// ---- events ----

EventHandle CudaBackend::event_create(int device, unsigned flags) {
  ContextScope scope(*this, device, "event_create");
  CUevent e = nullptr;
  check(api("event_create").cuEventCreate(&e, flags), "cuEventCreate");
  return e;
}

void CudaBackend::event_destroy(EventHandle e) {
  if (!e || is_shutting_down()) return;
  CUresult rc = api("event_destroy").cuEventDestroy(ev(e));
  if (!ignorable_at_release(rc)) check(rc, "cuEventDestroy");
}

void CudaBackend::event_record(EventHandle e, StreamHandle s) {
  ensure_context(s, "event_record");
  check(api("event_record").cuEventRecord(ev(e), cu(s)), "cuEventRecord");
}

bool CudaBackend::event_query(EventHandle e) {
  CUresult rc = api("event_query").cuEventQuery(ev(e));
  if (rc == CUDA_ERROR_NOT_READY) return false;
  check(rc, "cuEventQuery");
  return true;
}

void CudaBackend::event_synchronize(EventHandle e) {
  check(api("event_synchronize").cuEventSynchronize(ev(e)), "cuEventSynchronize");
}

float CudaBackend::event_elapsed_ms(EventHandle start, EventHandle end) {
  const EntryPoints& t = api("event_elapsed_ms");
  float ms = 0.f;
  check(CUDAKIT_CU_OPTIONAL(t, cuEventElapsedTime)(&ms, ev(start), ev(end)),
        "cuEventElapsedTime");
  return ms;
}

IpcHandle CudaBackend::event_ipc_handle(EventHandle e) {
  const EntryPoints& t = api("event_ipc_handle");
  CUipcEventHandle h{};
  check(CUDAKIT_CU_OPTIONAL(t, cuIpcGetEventHandle)(&h, ev(e)), "cuIpcGetEventHandle");
  IpcHandle out;
  std::memcpy(out.bytes, h.reserved, sizeof(out.bytes));
  return out;
}

EventHandle CudaBackend::event_open_ipc(const IpcHandle& h) {
  ensure_current_context("event_open_ipc");
  const EntryPoints& t = api("event_open_ipc");
  CUipcEventHandle in{};
  std::memcpy(in.reserved, h.bytes, sizeof(in.reserved));
  CUevent e = nullptr;
  check(CUDAKIT_CU_OPTIONAL(t, cuIpcOpenEventHandle)(&e, in), "cuIpcOpenEventHandle");
  return e;
}

IpcHandle CudaBackend::mem_ipc_handle(void* ptr) {
  const EntryPoints& t = api("mem_ipc_handle");
  auto fn = CUDAKIT_CU_OPTIONAL(t, cuIpcGetMemHandle);
  CUipcMemHandle h{};
  check(with_context_retry("mem_ipc_handle", [&] { return fn(&h, dptr(ptr)); }),
        "cuIpcGetMemHandle");
  IpcHandle out;
  std::memcpy(out.bytes, h.reserved, sizeof(out.bytes));
  return out;
}

void* CudaBackend::mem_open_ipc(const IpcHandle& h) {
  // Opened into the calling thread's current device (the layer above selects it).
  ensure_current_context("mem_open_ipc");
  const EntryPoints& t = api("mem_open_ipc");
  CUipcMemHandle in{};
  std::memcpy(in.reserved, h.bytes, sizeof(in.reserved));
  CUdeviceptr p = 0;
  check(CUDAKIT_CU_OPTIONAL(t, cuIpcOpenMemHandle)(&p, in, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
        "cuIpcOpenMemHandle");
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

void CudaBackend::mem_close_ipc(void* ptr) {
  if (!ptr || is_shutting_down()) return;
  const EntryPoints& t = api("mem_close_ipc");
  auto fn = CUDAKIT_CU_OPTIONAL(t, cuIpcCloseMemHandle);
  CUresult rc = with_context_retry("mem_close_ipc", [&] { return fn(dptr(ptr)); });
  if (!ignorable_at_release(rc)) check(rc, "cuIpcCloseMemHandle");
}

}  // namespace cudakit::detail::cuda
