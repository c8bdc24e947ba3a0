// CudaBackend::activity_start/flush/stop: CUPTI activity records converted to the tracer's
// records (backend/activity.hpp).
//
// Session: subscribe through the one cudakit subscriber (cupti_subscriber.hpp; another tool
// holding CUPTI -> a clear reason, nothing enabled), register the buffer callbacks, enable
// CONCURRENT_KERNEL (keeps kernels concurrent, unlike KIND_KERNEL), MEMCPY, MEMSET,
// SYNCHRONIZATION, the API records of the calls that launch, copy, set or wait
// (cupti_api_calls.hpp: activity records or callbacks), and MARKER (NVTX, when CUPTI is the
// NVTX tool). Stream and context creation come from resource callbacks.
//
// Records arrive in buffers CUPTI fills and hands back (CUPTI's thread, or the flushing
// thread); each is converted to one ActivityRecord and handed to the sink: kernel names are
// interned for the process (CUPTI's pointers are only valid while CUPTI keeps the module),
// callback names are CUPTI's static strings without their "_vNNNN" suffix, NVTX start/end
// markers are paired by id, and a sync record's context is mapped to its device from the
// kernel / copy / context records seen (sync records carry only the context id).
//
// Versions: the record structs are compiled from this toolkit's cupti_activity.h
// (CUpti_ActivityKernel10, Memcpy6, Memset4, Synchronization2, Marker2); CUPTI hands out the
// newest struct of its own version, so the loaded CUPTI must have this build's major.minor API
// version (checked at start; otherwise a clear reason and no device part).
//
// Timestamps: CUPTI's default clock on Linux is CLOCK_REALTIME, the tracer's clock; the offset
// between cuptiGetTimestamp and trace_clock_ns is measured at start and applied if it is not
// ~0 (another tool may have registered a different timestamp callback).
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cupti.hpp"
#include "backend/cuda/cupti_subscriber.hpp"
#include "backend/cuda/driver_api.hpp"

#if __has_include(<cupti_activity.h>) && __has_include(<cupti_callbacks.h>)
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>
#include <cupti_version.h>
#define CUDAKIT_HAVE_CUPTI_ACTIVITY 1
#include "backend/cuda/cupti_api_calls.hpp"
#else
#define CUDAKIT_HAVE_CUPTI_ACTIVITY 0
#endif

namespace cudakit::detail::cuda {

#if CUDAKIT_HAVE_CUPTI_ACTIVITY

// The emulated backend numbers its records like these driver calls.
static_assert(cbid::cuCtxSynchronize == CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
static_assert(cbid::cuEventSynchronize == CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize);
static_assert(cbid::cuStreamSynchronize == CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize);
static_assert(cbid::cuMemsetD8Async == CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async);
static_assert(cbid::cuStreamWaitEvent == CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent);
static_assert(cbid::cuMemcpyAsync == CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync);
static_assert(cbid::cuLaunchKernel == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
static_assert(cbid::cuGraphLaunch == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch);
static_assert(cbid::cuLaunchHostFunc == CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc);
// ... and the tracer's enums use CUPTI's values.
static_assert(static_cast<int>(SyncKind::stream_synchronize) ==
              CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE);
static_assert(static_cast<int>(SyncKind::context_synchronize) ==
              CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE);
static_assert(static_cast<int>(SyncKind::event_synchronize) ==
              CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE);
static_assert(static_cast<int>(SyncKind::stream_wait_event) ==
              CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT);
static_assert(kCopyHtoD == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD && kCopyDtoH == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH &&
              kCopyDtoD == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD && kCopyHtoH == CUPTI_ACTIVITY_MEMCPY_KIND_HTOH);
static_assert(kMemPageable == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE &&
              kMemPinned == CUPTI_ACTIVITY_MEMORY_KIND_PINNED &&
              kMemDevice == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);

namespace {

constexpr std::size_t kBufferBytes = 8 << 20;

// CUPTI functions beyond the graph-id ones, resolved from the library cupti.hpp loaded.
struct Fns {
  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityEnableDriverApi) enable_driver_api = nullptr;    // optional
  decltype(&cuptiActivityEnableRuntimeApi) enable_runtime_api = nullptr;  // optional
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
  decltype(&cuptiSetThreadIdType) set_thread_id_type = nullptr;
  decltype(&cuptiGetStreamIdEx) stream_id = nullptr;
  decltype(&cuptiGetDeviceId) device_id = nullptr;
  decltype(&cuptiGetContextId) context_id = nullptr;
  decltype(&cuptiGetCallbackName) callback_name = nullptr;
  std::string missing;  // required functions not found
};

const Fns& fns() {
  static const Fns f = [] {
    Fns r;
    const CuptiApi& api = cupti();
    if (!api.loaded) return r;
    auto get = [&](auto& slot, const char* name, bool required) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(api.symbol(name));
      if (!slot && required) r.missing += (r.missing.empty() ? "" : ", ") + std::string(name);
    };
    get(r.get_version, "cuptiGetVersion", true);
    get(r.result_string, "cuptiGetResultString", true);
    get(r.register_callbacks, "cuptiActivityRegisterCallbacks", true);
    get(r.enable, "cuptiActivityEnable", true);
    get(r.disable, "cuptiActivityDisable", true);
    get(r.enable_driver_api, "cuptiActivityEnableDriverApi", false);
    get(r.enable_runtime_api, "cuptiActivityEnableRuntimeApi", false);
    get(r.flush_all, "cuptiActivityFlushAll", true);
    get(r.next_record, "cuptiActivityGetNextRecord", true);
    get(r.dropped, "cuptiActivityGetNumDroppedRecords", true);
    get(r.timestamp, "cuptiGetTimestamp", true);
    get(r.set_thread_id_type, "cuptiSetThreadIdType", false);
    get(r.stream_id, "cuptiGetStreamIdEx", false);
    get(r.device_id, "cuptiGetDeviceId", false);
    get(r.context_id, "cuptiGetContextId", false);
    get(r.callback_name, "cuptiGetCallbackName", true);
    return r;
  }();
  return f;
}

std::string result_text(CUptiResult rc) {
  const char* s = nullptr;
  if (fns().result_string && fns().result_string(rc, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(rc));
}

std::uint32_t this_thread_id() noexcept {
  thread_local const auto tid = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return tid;
}

// Process-wide state of the CUPTI activity session (one tracer at a time).
class Session {
 public:
  static Session& get() noexcept {
    static Session* s = new Session();  // leaked: CUPTI may hand back buffers until exit
    return *s;
  }

  ActivityStatus start(ActivitySink* sink, const ActivityConfig& cfg);
  void flush() noexcept;
  void stop() noexcept;
  // Contexts CUPTI reported created while tracing that are still alive (other libraries'
  // contexts: cudakit's primary contexts are synchronized from the backend's own slots).
  std::vector<CUcontext> created_contexts();

  static void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size,
                                        std::size_t* max_records);
  static void CUPTIAPI buffer_completed(CUcontext ctx, std::uint32_t stream_id,
                                        std::uint8_t* buffer, std::size_t size,
                                        std::size_t valid);

 private:
  static void on_callback(void* user, std::uint32_t domain, std::uint32_t cbid,
                          const void* data) noexcept;
  // CUDAKIT_CUPTI_API=callbacks: a recorded driver / runtime call's enter and exit.
  void on_api_callback(std::uint32_t domain, std::uint32_t cbid, const CUpti_CallbackData* cb) noexcept;
  // api_name() without the lock once a call was named (the launching thread's hot path).
  const char* cached_api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) noexcept;
  void convert(const CUpti_Activity* a) noexcept;
  void deliver(ActivityRecord& r) noexcept {
    if (ActivitySink* s = sink_.load(std::memory_order_acquire)) s->record(r);
  }
  std::int64_t ts(std::uint64_t cupti_ns) const noexcept {
    return static_cast<std::int64_t>(cupti_ns) + offset_ns_;
  }
  const char* intern(const char* name);
  const char* api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
  void learn_context(std::uint32_t context_id, std::uint32_t device);
  int device_of_context(std::uint32_t context_id);
  void enable_kinds(const ActivityConfig& cfg, bool on, std::string* error);

  // Waits until CUPTI has handed back every buffer it asked for (see flush()).
  void wait_for_buffers() noexcept;

  std::atomic<ActivitySink*> sink_{nullptr};
  // Buffers handed to CUPTI / handed back: a forced flush returns every buffer, but the
  // completion callbacks may run on CUPTI's own thread after cuptiActivityFlushAll returns
  // (seen with some CUPTI versions), so flush() waits until the counts match.
  std::atomic<std::uint64_t> requested_{0}, completed_{0};
  std::mutex buffers_mu_;
  std::condition_variable buffers_cv_;
  // Records CUPTI handed back with start == 0 (not completed when flushed): dropped here,
  // reported once per flush.
  std::atomic<std::uint64_t> untimed_{0};
  std::mutex contexts_mu_;
  std::vector<CUcontext> contexts_;  // created_contexts()
  std::int64_t offset_ns_ = 0;
  bool subscribed_ = false;
  ActivityConfig cfg_;
  ApiRecording api_recording_ = ApiRecording::activity;
  std::atomic<bool> api_callbacks_on_{false};  // API callbacks on, since (set before enabling):
  std::int64_t api_callbacks_since_ns_ = 0;
  static constexpr CUpti_CallbackId kNamedIds = 1024;  // above both domains' id counts
  std::atomic<const char*> api_name_cache_[2][kNamedIds] = {};
  std::vector<CUpti_ActivityKind> enabled_;

  std::mutex mu_;  // the maps below (buffer processing, callbacks)
  std::unordered_map<const char*, const char*> names_;
  std::unordered_map<std::string, const char*> names_by_text_;
  std::deque<std::string> name_storage_;  // never shrinks: names live for the process
  std::unordered_map<std::uint64_t, const char*> api_names_;
  std::unordered_map<std::uint32_t, int> context_device_;
  struct OpenMarker {
    std::uint64_t start;
    const char* name;
    const char* domain;
    std::uint32_t tid;
  };
  std::unordered_map<std::uint32_t, OpenMarker> markers_;
};

const char* Session::intern(const char* name) {
  if (!name) return nullptr;
  auto it = names_.find(name);
  if (it != names_.end()) return it->second;
  auto jt = names_by_text_.find(name);
  const char* stable;
  if (jt != names_by_text_.end()) {
    stable = jt->second;
  } else {
    stable = name_storage_.emplace_back(name).c_str();
    names_by_text_.emplace(stable, stable);
  }
  names_.emplace(name, stable);
  return stable;
}

const char* Session::api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const std::uint64_t key = (std::uint64_t{static_cast<std::uint32_t>(domain)} << 32) | cbid;
  auto it = api_names_.find(key);
  if (it != api_names_.end()) return it->second;
  const char* raw = nullptr;
  std::string name;
  if (fns().callback_name(domain, cbid, &raw) == CUPTI_SUCCESS && raw) {
    name = raw;
    // "cudaLaunchKernel_v7000" -> "cudaLaunchKernel", as Kineto names runtime calls
    if (auto v = name.rfind("_v"); v != std::string::npos && v + 2 < name.size() &&
                                   name.find_first_not_of("0123456789", v + 2) == std::string::npos) {
      name.resize(v);
    }
  } else {
    name = (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "cuda runtime call " : "cuda driver call ") +
           std::to_string(cbid);
  }
  const char* stable = name_storage_.emplace_back(std::move(name)).c_str();
  api_names_.emplace(key, stable);
  return stable;
}

void Session::learn_context(std::uint32_t context_id, std::uint32_t device) {
  context_device_[context_id] = static_cast<int>(device);
}

int Session::device_of_context(std::uint32_t context_id) {
  auto it = context_device_.find(context_id);
  if (it != context_device_.end()) return it->second;
  if (context_device_.size() == 1) return context_device_.begin()->second;
  return -1;
}

void CUPTIAPI Session::buffer_requested(std::uint8_t** buffer, std::size_t* size,
                                        std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
  if (*buffer) get().requested_.fetch_add(1, std::memory_order_acq_rel);
}

void CUPTIAPI Session::buffer_completed(CUcontext ctx, std::uint32_t stream_id,
                                        std::uint8_t* buffer, std::size_t size,
                                        std::size_t valid) {
  (void)size;
  Session& s = get();
  if (buffer && valid > 0) {
    std::lock_guard lock(s.mu_);
    CUpti_Activity* rec = nullptr;
    while (fns().next_record(buffer, valid, &rec) == CUPTI_SUCCESS && rec) s.convert(rec);
  }
  std::size_t dropped = 0;
  if (fns().dropped && fns().dropped(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped) {
    if (ActivitySink* sink = s.sink_.load(std::memory_order_acquire)) {
      sink->message("CUPTI dropped " + std::to_string(dropped) +
                    " activity records (its buffers were full): the trace is incomplete");
    }
  }
  std::free(buffer);
  if (buffer) {
    // Notified under the mutex so flush()'s wait cannot miss it between its check and sleep.
    std::lock_guard lock(s.buffers_mu_);
    s.completed_.fetch_add(1, std::memory_order_acq_rel);
    s.buffers_cv_.notify_all();
  }
}

void Session::convert(const CUpti_Activity* a) noexcept {
  try {
    ActivityRecord r;
    // The fields that kernel, copy and memset records carry alike.
    auto device_work = [&](const auto& m, ActivityKind kind) {
      learn_context(m.contextId, m.deviceId);
      if (m.start == 0) untimed_.fetch_add(1, std::memory_order_relaxed);
      r.kind = kind;
      r.start_ns = ts(m.start);
      r.end_ns = ts(m.end);
      r.id = m.graphNodeId;
      r.graph_id = m.graphId;
      r.correlation = m.correlationId;
      r.stream = m.streamId;
      r.device = static_cast<std::int16_t>(m.deviceId);
    };
    switch (a->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
        device_work(*k, ActivityKind::kernel);
        r.name = intern(k->name);
        r.u.kernel = ActivityRecord::Kernel{
            {static_cast<std::uint32_t>(k->gridX), static_cast<std::uint32_t>(k->gridY),
             static_cast<std::uint32_t>(k->gridZ)},
            {static_cast<std::uint32_t>(k->blockX), static_cast<std::uint32_t>(k->blockY),
             static_cast<std::uint32_t>(k->blockZ)},
            static_cast<std::uint32_t>(k->staticSharedMemory + k->dynamicSharedMemory),
            k->registersPerThread, 0};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
        device_work(*m, ActivityKind::memcpy);
        r.value = m->bytes;
        r.detail = m->copyKind;
        r.u.copy = ActivityRecord::Copy{m->srcKind, m->dstKind};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
        device_work(*m, ActivityKind::memset);
        r.value = m->bytes;
        const auto kind = static_cast<std::uint8_t>(m->memoryKind);
        r.u.copy = ActivityRecord::Copy{kind, kind};
        break;
      }
      case CUPTI_ACTIVITY_KIND_DRIVER:
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(a);
        const bool runtime = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
        using Ids = std::span<const CUpti_CallbackId>;
        if (!listed(runtime ? Ids(kRuntimeCalls) : Ids(kDriverCalls), api->cbid)) return;
        r.kind = runtime ? ActivityKind::runtime_api : ActivityKind::driver_api;
        r.start_ns = ts(api->start);
        r.end_ns = ts(api->end);
        r.name = api_name(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API,
                          api->cbid);
        r.correlation = api->correlationId;
        r.stream = api->threadId;
        r.u.api = ActivityRecord::Api{api->cbid, api->processId};
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const auto* sy = reinterpret_cast<const CUpti_ActivitySynchronization2*>(a);
        r.kind = ActivityKind::sync;
        r.start_ns = ts(sy->start);
        r.end_ns = ts(sy->end);
        r.detail = static_cast<std::uint8_t>(sy->type);
        r.correlation = sy->correlationId;
        r.stream = sy->streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? kNoStream : sy->streamId;
        r.device = static_cast<std::int16_t>(device_of_context(sy->contextId));
        break;
      }
      case CUPTI_ACTIVITY_KIND_CONTEXT: {
        const auto* c = reinterpret_cast<const CUpti_ActivityContext3*>(a);
        learn_context(c->contextId, c->deviceId);
        return;
      }
      case CUPTI_ACTIVITY_KIND_MARKER: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(a);
        const std::uint32_t tid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD
                                      ? m->objectId.pt.threadId
                                      : 0;
        if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
          markers_[m->id] = OpenMarker{m->timestamp, intern(m->name), intern(m->domain), tid};
          return;
        }
        if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
          auto it = markers_.find(m->id);
          if (it == markers_.end()) return;  // started before the trace
          r.kind = ActivityKind::marker;
          r.start_ns = ts(it->second.start);
          r.end_ns = ts(m->timestamp);
          r.name = it->second.name;
          r.u.range.domain = it->second.domain;
          r.stream = it->second.tid;
          r.id = m->id;
          markers_.erase(it);
          break;
        }
        if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) {
          r.kind = ActivityKind::user_mark;
          r.start_ns = r.end_ns = ts(m->timestamp);
          r.name = intern(m->name);
          r.u.range.domain = intern(m->domain);
          r.stream = tid;
          break;
        }
        return;
      }
      default:
        return;
    }
    deliver(r);
  } catch (...) {  // allocation failure while interning: the record is lost
  }
}

const char* Session::cached_api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) noexcept {
  const int d = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 1 : 0;
  std::atomic<const char*>* slot = cbid < kNamedIds ? &api_name_cache_[d][cbid] : nullptr;
  if (slot) {
    if (const char* name = slot->load(std::memory_order_acquire)) return name;
  }
  try {
    std::lock_guard lock(mu_);
    const char* name = api_name(domain, cbid);
    if (slot) slot->store(name, std::memory_order_release);
    return name;
  } catch (...) {  // allocation failure: an unnamed call
    return domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "cuda runtime call" : "cuda driver call";
  }
}

void Session::on_api_callback(std::uint32_t domain, std::uint32_t cbid,
                              const CUpti_CallbackData* cb) noexcept {
  if (!api_callbacks_on_.load(std::memory_order_acquire)) return;  // racing stop()
  if (cb->callbackSite == CUPTI_API_ENTER) {
    *cb->correlationData = static_cast<std::uint64_t>(trace_clock_ns());
    return;
  }
  ActivityRecord r;
  r.kind = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? ActivityKind::runtime_api : ActivityKind::driver_api;
  r.start_ns = static_cast<std::int64_t>(*cb->correlationData);
  r.end_ns = trace_clock_ns();
  // Entered before the callbacks were on: the correlation data holds no start of ours.
  if (r.start_ns < api_callbacks_since_ns_ || r.start_ns > r.end_ns) return;
  r.name = cached_api_name(static_cast<CUpti_CallbackDomain>(domain), cbid);
  r.correlation = cb->correlationId;
  r.stream = this_thread_id();
  static const auto pid = static_cast<std::uint32_t>(::getpid());
  r.u.api = ActivityRecord::Api{cbid, pid};
  deliver(r);
}

void Session::on_callback(void* user, std::uint32_t domain, std::uint32_t cbid,
                          const void* data) noexcept {
  auto* s = static_cast<Session*>(user);
  if (data == nullptr) return;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API || domain == CUPTI_CB_DOMAIN_RUNTIME_API)
    return s->on_api_callback(domain, cbid, static_cast<const CUpti_CallbackData*>(data));
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  const auto* rd = static_cast<const CUpti_ResourceData*>(data);
  const Fns& f = fns();
  std::uint32_t device = 0, context = 0;
  const bool have_device = f.device_id && f.device_id(rd->context, &device) == CUPTI_SUCCESS;
  if (have_device && f.context_id && f.context_id(rd->context, &context) == CUPTI_SUCCESS) {
    std::lock_guard lock(s->mu_);
    s->learn_context(context, device);
  }
  if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED ||
      cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    try {
      std::lock_guard lock(s->contexts_mu_);
      std::erase(s->contexts_, rd->context);
      if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) s->contexts_.push_back(rd->context);
    } catch (...) {  // allocation failure: that context is not synchronized at stop
    }
    return;
  }
  if (cbid != CUPTI_CBID_RESOURCE_STREAM_CREATED &&
      cbid != CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING) {
    return;
  }
  std::uint32_t stream = 0;
  if (!f.stream_id || f.stream_id(rd->context, rd->resourceHandle.stream, 0, &stream) !=
                          CUPTI_SUCCESS) {
    return;
  }
  ActivityRecord r;
  r.kind = cbid == CUPTI_CBID_RESOURCE_STREAM_CREATED ? ActivityKind::stream_created
                                                      : ActivityKind::stream_destroyed;
  r.start_ns = r.end_ns = trace_clock_ns();
  r.stream = stream;
  r.device = have_device ? static_cast<std::int16_t>(device) : -1;
  r.id = this_thread_id();
  s->deliver(r);
}

void Session::enable_kinds(const ActivityConfig& cfg, bool on, std::string* error) {
  const Fns& f = fns();
  auto kind = [&](CUpti_ActivityKind k) {
    if (!on) {
      f.disable(k);
      return;
    }
    const CUptiResult rc = f.enable(k);
    if (rc == CUPTI_SUCCESS) {
      enabled_.push_back(k);
    } else if (error && error->empty()) {
      *error = "cuptiActivityEnable(" + std::to_string(static_cast<int>(k)) + ") failed: " +
               result_text(rc);
    }
  };
  auto api_callbacks = [&](bool enable) {  // the flag first: no enter callback before it
    if (enable) api_callbacks_since_ns_ = trace_clock_ns();
    api_callbacks_on_.store(enable, std::memory_order_release);
    auto& sub = CuptiSubscriber::instance();
    for (CUpti_CallbackId id : kDriverCalls) sub.enable(CUPTI_CB_DOMAIN_DRIVER_API, id, enable);
    for (CUpti_CallbackId id : kRuntimeCalls) sub.enable(CUPTI_CB_DOMAIN_RUNTIME_API, id, enable);
  };
  if (!on) {
    for (CUpti_ActivityKind k : enabled_) f.disable(k);
    enabled_.clear();
    if (api_callbacks_on_.load(std::memory_order_relaxed)) api_callbacks(false);
  } else {
    if (cfg.device) {
      kind(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
      kind(CUPTI_ACTIVITY_KIND_MEMCPY);
      kind(CUPTI_ACTIVITY_KIND_MEMSET);
      kind(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
      kind(CUPTI_ACTIVITY_KIND_CONTEXT);
    }
    if (cfg.nvtx) kind(CUPTI_ACTIVITY_KIND_MARKER);
  }
  if (cfg.api && on && api_recording_ == ApiRecording::callbacks) {
    api_callbacks(true);
  } else if (cfg.api && on) {
    // Kineto's order: enable the whole kind, then switch off every other callback id.
    // Enabling single ids without the kind (as cupti_activity.h documents) delivered no API
    // record on the H200 (CUPTI 13.0, driver 580), 2026-12-01: no launch -> kernel flows, no
    // cuGraphLaunch, no GPU spans of NVTX ranges. convert() filters too, so a CUPTI without
    // the per-id switches costs records, not correctness.
    auto keep_only = [&](CUpti_ActivityKind k, auto* per_id, CUpti_CallbackId size,
                         std::span<const CUpti_CallbackId> wanted) {
      kind(k);
      if (!per_id) return;
      for (CUpti_CallbackId id = 1; id < size; ++id)
        if (!listed(wanted, id)) per_id(id, 0);
    };
    keep_only(CUPTI_ACTIVITY_KIND_DRIVER, f.enable_driver_api, CUPTI_DRIVER_TRACE_CBID_SIZE,
              kDriverCalls);
    keep_only(CUPTI_ACTIVITY_KIND_RUNTIME, f.enable_runtime_api, CUPTI_RUNTIME_TRACE_CBID_SIZE,
              kRuntimeCalls);
  }
}

ActivityStatus Session::start(ActivitySink* sink, const ActivityConfig& cfg) {
  ActivityStatus st;
  const CuptiApi& api = cupti();
  if (!api.loaded) {
    st.reason = "no device activity: " + api.reason;
    return st;
  }
  const DriverState& drv = driver();
  if (!drv.available || drv.device_count == 0) {
    st.reason = "no device activity: the CUDA driver is unusable (" +
                (drv.reason.empty() ? std::string("no device") : drv.reason) + ")";
    return st;
  }
  const Fns& f = fns();
  if (!f.missing.empty()) {
    st.reason = "no device activity: " + api.path + " lacks " + f.missing;
    return st;
  }
  std::uint32_t version = 0;
  f.get_version(&version);
  if (version / 100 != CUPTI_API_VERSION / 100) {
    st.reason = "no device activity: the loaded CUPTI (" + api.path + ") has API version " +
                std::to_string(version) + ", but cudakit reads the activity records of CUPTI " +
                std::to_string(CUPTI_API_VERSION / 10000) + "." +
                std::to_string(CUPTI_API_VERSION / 100 % 100) +
                "; set CUDAKIT_CUPTI_PATH to that libcupti (or rebuild cudakit against the "
                "loaded one)";
    return st;
  }
  if (std::string why = CuptiSubscriber::instance().add(&Session::on_callback, this); !why.empty()) {
    st.reason = why;
    return st;
  }
  subscribed_ = true;
  auto& sub = CuptiSubscriber::instance();
  sub.enable(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, true);
  sub.enable(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, true);
  sub.enable(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_STREAM_CREATED, true);
  sub.enable(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, true);
  // Registered every session: another tool (torch.profiler) may have replaced ours since.
  CUptiResult rc = f.register_callbacks(&Session::buffer_requested, &Session::buffer_completed);
  if (rc != CUPTI_SUCCESS) {
    stop();
    st.reason = "no device activity: cuptiActivityRegisterCallbacks failed: " + result_text(rc);
    return st;
  }
  if (f.set_thread_id_type) f.set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);  // gettid
  std::uint64_t cupti_now = 0;
  const std::int64_t before = trace_clock_ns();
  f.timestamp(&cupti_now);
  const std::int64_t after = trace_clock_ns();
  const std::int64_t delta = (before + after) / 2 - static_cast<std::int64_t>(cupti_now);
  offset_ns_ = (delta > 1000000 || delta < -1000000) ? delta : 0;  // ~0: same clock
  cfg_ = cfg;
  sink_.store(sink, std::memory_order_release);
  std::string error;
  api_recording_ = api_recording_from_env(&error);
  enable_kinds(cfg, true, &error);
  if (cfg.device && (enabled_.empty() || enabled_.front() != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) {
    stop();
    st.reason = "no device activity: " + error;
    return st;
  }
  st.device = cfg.device;
  st.api = cfg.api;
  st.nvtx = cfg.nvtx;
  st.source = "CUPTI " + std::to_string(version / 10000) + "." +
              std::to_string(version / 100 % 100) + " (" + api.path + ")";
  if (!error.empty()) st.reason = "partial device activity: " + error;
  return st;
}

// Forced: every buffer comes back, full or not (an unforced flush returns only full buffers
// whose records are all complete, so the last records of a trace would wait for the next
// one). The caller synchronized first, so no record is incomplete; one that is anyway
// (synchronize=false, work still running) has start == 0 and is counted in convert().
void Session::flush() noexcept {
  if (!subscribed_ || !fns().flush_all) return;
  fns().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  wait_for_buffers();
  if (const std::uint64_t n = untimed_.exchange(0, std::memory_order_relaxed)) {
    if (ActivitySink* sink = sink_.load(std::memory_order_acquire)) {
      sink->message("CUPTI returned " + std::to_string(n) +
                    " device records without timestamps (their work had not completed when "
                    "the trace stopped): they are left out");
    }
  }
}

void Session::wait_for_buffers() noexcept {
  // Until every requested buffer is back. Two bounds, so stop() cannot hang: a CUPTI that
  // keeps an empty buffer it is still filling after a forced flush would never match, so
  // the wait also ends after 250 ms without any buffer arriving (far above the callback
  // latency: converting a buffer takes ~1 ms per 10k records), and after 5 s in all; only
  // the 5 s bound is reported (buffers were still arriving: records may be missing).
  constexpr auto kQuiet = std::chrono::milliseconds(250);
  constexpr auto kLimit = std::chrono::seconds(5);
  const auto deadline = std::chrono::steady_clock::now() + kLimit;
  std::unique_lock lock(buffers_mu_);
  auto all_back = [&] {
    return completed_.load(std::memory_order_acquire) >= requested_.load(std::memory_order_acquire);
  };
  while (!all_back()) {
    const std::uint64_t before = completed_.load(std::memory_order_acquire);
    const auto until = std::min(deadline, std::chrono::steady_clock::now() + kQuiet);
    buffers_cv_.wait_until(lock, until, [&] {
      return all_back() || completed_.load(std::memory_order_acquire) != before;
    });
    if (all_back()) return;
    if (completed_.load(std::memory_order_acquire) == before) return;  // quiet: none coming
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::uint64_t missing = requested_.load() - completed_.load();
      lock.unlock();
      if (ActivitySink* sink = sink_.load(std::memory_order_acquire)) {
        sink->message("CUPTI was still handing back activity buffers 5 s after a forced flush (" +
                      std::to_string(missing) + " outstanding): records in them are missing "
                      "from the trace");
      }
      return;
    }
  }
}

std::vector<CUcontext> Session::created_contexts() {
  std::lock_guard lock(contexts_mu_);
  return contexts_;
}

void Session::stop() noexcept {
  if (!subscribed_) return;
  enable_kinds(cfg_, false, nullptr);
  fns().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  wait_for_buffers();  // what arrives after this would belong to no trace
  sink_.store(nullptr, std::memory_order_release);
  untimed_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard lock(contexts_mu_);
    contexts_.clear();
  }
  {
    std::lock_guard lock(mu_);
    markers_.clear();
  }
  auto& sub = CuptiSubscriber::instance();
  sub.enable(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, false);
  sub.enable(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, false);
  sub.enable(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_STREAM_CREATED, false);
  sub.enable(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING, false);
  sub.remove(&Session::on_callback, this);
  subscribed_ = false;
}

}  // namespace

ActivityStatus CudaBackend::activity_start(ActivitySink* sink, const ActivityConfig& config) {
  return Session::get().start(sink, config);
}

void CudaBackend::activity_synchronize() {
  // cudakit's primary contexts, without retaining any it does not hold already.
  cu_device(0, "activity_synchronize");  // builds the device slots (throws without a driver)
  const EntryPoints& t = api("activity_synchronize");
  // Another library's context, made current for the synchronize only (errors ignored: one may
  // be in teardown); each one once.
  std::vector<CUcontext> synced;
  auto sync_foreign = [&](CUcontext c) {
    if (std::find(synced.begin(), synced.end(), c) != synced.end()) return;
    synced.push_back(c);
    CUcontext previous = nullptr;
    if (t.cuCtxGetCurrent(&previous) != CUDA_SUCCESS) return;
    if (t.cuCtxSetCurrent(c) == CUDA_SUCCESS) t.cuCtxSynchronize();
    t.cuCtxSetCurrent(previous);
  };
  for (int i = 0; i < slot_count_; ++i) {
    if (CUcontext ours = slots_[i].ctx.load(std::memory_order_acquire)) {
      device_synchronize(i);
      synced.push_back(ours);
      continue;
    }
    // A primary context another library made active (torch's work traced by cudakit, which
    // never touched the device itself): synchronized too, or its kernels' records come back
    // without timestamps (the H200's gpt2 trace-size run left 617 of them out). Retained only
    // for the synchronize, and only when already active: no context is created here.
    unsigned flags = 0;
    int active = 0;
    if (!t.cuDevicePrimaryCtxGetState || !t.cuDevicePrimaryCtxRelease) continue;
    const CUdevice dev = cu_device(i, "activity_synchronize");
    if (t.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active) continue;
    CUcontext c = nullptr;
    if (t.cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS) continue;
    sync_foreign(c);
    t.cuDevicePrimaryCtxRelease(dev);
  }
  // Contexts other libraries created while tracing.
  for (CUcontext c : Session::get().created_contexts()) sync_foreign(c);
}

void CudaBackend::activity_flush() { Session::get().flush(); }

void CudaBackend::activity_stop() noexcept {
  if (is_shutting_down()) return;  // no CUDA / CUPTI calls during process exit
  Session::get().stop();
}

#else  // built without the CUPTI headers

ActivityStatus CudaBackend::activity_start(ActivitySink*, const ActivityConfig&) {
  ActivityStatus st;
  st.reason = "no device activity: cudakit was built without the CUPTI headers "
              "(cupti_activity.h)";
  return st;
}
void CudaBackend::activity_synchronize() {
  cu_device(0, "activity_synchronize");
  for (int i = 0; i < slot_count_; ++i) {
    if (slots_[i].ctx.load(std::memory_order_acquire) != nullptr) device_synchronize(i);
  }
}
void CudaBackend::activity_flush() {}
void CudaBackend::activity_stop() noexcept {}

#endif

}  // namespace cudakit::detail::cuda
