// include/cudakit/plugin.hpp: the hook table torch's pluggable allocator calls. Compiled into
// libcudakit.so (cudakit.memory.use_with_torch takes the addresses from there);
// alloc_plugin.cpp exports the same functions by name in libcudakit_alloc.so.
#include "cudakit/plugin.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/lifetime.hpp"
#include "backend/memory_ops.hpp"
#include "cudakit/error.hpp"
#include "memory/device_allocator.hpp"
#include "memory/history.hpp"
#include "memory/pluggable.hpp"
#include "memory/raw.hpp"

struct _object;  // CPython's PyObject: a pointer cudakit's core only stores and hands back

// torch::PyTorchError's interface (torch/csrc/Exceptions.h): torch's Python layer catches this
// type around every call into C++ (HANDLE_TH_ERRORS, its pybind11 translator) and raises
// python_type() with what() as the message. An allocation failure thrown as it reaches the
// user as torch.cuda.OutOfMemoryError, which torch's own allocator raises; any other
// exception becomes a RuntimeError. Only the two virtual calls cross into torch, so what must
// match is the vtable order (std::exception's, then python_type) and the type's name:
// libstdc++ matches a catch clause by the mangled name ("N5torch12PyTorchErrorE") across
// shared libraries. Hidden here and kept out of libcudakit's exports (libcudakit.map), so
// it never binds to torch's own copy. Rejected: throwing c10::OutOfMemoryError (needs
// libc10's headers and its constructor's ABI), returning nullptr (torch does not check
// alloc_fn's result: a null tensor).
namespace torch {
struct __attribute__((visibility("hidden"))) PyTorchError : std::exception {
  explicit PyTorchError(std::string m) : msg(std::move(m)) {}
  virtual _object* python_type() = 0;
  const char* what() const noexcept override { return msg.c_str(); }
  std::string msg;
};
}  // namespace torch

namespace cudakit {
namespace {

std::atomic<_object*> g_torch_oom_type{nullptr};  // torch.OutOfMemoryError once registered

// set_torch_caching_enabled(false): allocations straight from the device (plugin.hpp). The
// map is leaked on purpose: torch may free such memory during process exit, after statics.
std::atomic<bool> g_torch_uncached{false};
std::mutex g_uncached_mu;
std::unordered_map<void*, int>& uncached_blocks() {
  static auto* blocks = new std::unordered_map<void*, int>();
  return *blocks;
}

void* uncached_alloc(std::size_t size, int device) {
  void* p = detail::memory_ops().mem_alloc(device, size);
  if (!p) {
    throw OutOfMemoryError("CUDA out of memory. Tried to allocate " + std::to_string(size) +
                           " bytes on device " + std::to_string(device) + " with the caching "
                           "allocator disabled (torch.cuda.caching_allocator_enable(False)): "
                           "the device has no room for it", device, size);
  }
  std::lock_guard lock(g_uncached_mu);
  uncached_blocks().emplace(p, device);
  return p;
}

bool uncached_free(void* p) {
  int device = 0;
  {
    std::lock_guard lock(g_uncached_mu);
    auto& blocks = uncached_blocks();
    auto it = blocks.find(p);
    if (it == blocks.end()) return false;
    device = it->second;
    blocks.erase(it);
  }
  detail::memory_ops().mem_free(device, p);
  return true;
}

struct __attribute__((visibility("hidden"))) TorchOutOfMemory final : torch::PyTorchError {
  using PyTorchError::PyTorchError;
  _object* python_type() override { return g_torch_oom_type.load(std::memory_order_acquire); }
};

std::mutex g_observers_mu;
std::vector<TorchOomObserver>& oom_observers() {
  static auto* v = new std::vector<TorchOomObserver>();  // leaked: observers may run at exit
  return *v;
}

// torch's OutOfMemoryObserver arguments: device, bytes asked for, the most this process may
// use (the fraction's limit, else the device's total), bytes free on the device.
void notify_oom_observers(const OutOfMemoryError& e) noexcept {
  std::vector<TorchOomObserver> observers;
  {
    std::lock_guard lock(g_observers_mu);
    observers = oom_observers();
  }
  if (observers.empty()) return;
  std::size_t allowed = e.total_bytes();
  try {
    const double f = get_per_process_memory_fraction(e.device());
    if (f < 1.0) allowed = static_cast<std::size_t>(f * static_cast<double>(allowed));
  } catch (...) {
  }
  for (const TorchOomObserver& fn : observers) {
    try {
      fn(e.device(), e.requested_bytes(), allowed, e.free_bytes());
    } catch (const std::exception& x) {
      std::fprintf(stderr, "cudakit: out-of-memory observer failed: %s\n", x.what());
    } catch (...) {
    }
  }
}

// Torch's pool ids are counters ((n, 0) for capture pools, (0, n) for user pools): the top
// bit of the first half is never theirs, so it marks the torch space without a table.
constexpr unsigned long long kTorchPoolBit = 1ull << 63;

// torch's profiler (set_torch_memory_reporter); both null, or both set.
std::atomic<bool (*)()> g_profiler_enabled{nullptr};
std::atomic<void (*)(void*, std::int64_t, std::size_t, std::size_t, TorchDeviceArg)>
    g_profiler_report{nullptr};

// The profiler, if it wants this thread's allocations (one relaxed load when no reporter is set).
auto profiler_reporter() noexcept {
  auto report = g_profiler_report.load(std::memory_order_acquire);
  if (report) {
    bool (*enabled)() = g_profiler_enabled.load(std::memory_order_acquire);
    if (!enabled || !enabled()) report = nullptr;
  }
  return report;
}

// As torch's allocator reports: the block's size, and the device's totals after the change.
template <class Report>
void report_to_profiler(Report report, void* ptr, std::int64_t signed_size, int dev) noexcept {
  try {
    const MemoryStats st = memory_stats_of(dev);
    report(ptr, signed_size, static_cast<std::size_t>(st.allocated_bytes[0].current),
           static_cast<std::size_t>(st.reserved_bytes[0].current),
           TorchDeviceArg{1, static_cast<std::int8_t>(dev)});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cudakit: reporting to torch's profiler failed: %s\n", e.what());
  } catch (...) {
  }
}

thread_local char g_last_error[512];
std::atomic<bool> g_used{false};

constexpr auto kTorch = static_cast<std::uint8_t>(MemoryClient::torch);

void note_failure(const char* fn, const char* what, bool print) noexcept {
  // cudakit's messages usually start with the function's name already: no second prefix
  const bool named = std::strncmp(what, fn, std::strlen(fn)) == 0;
  std::snprintf(g_last_error, sizeof g_last_error, "%s%s%s", named ? "" : fn, named ? "" : ": ",
                what);
  if (print) std::fprintf(stderr, "cudakit: %s\n", g_last_error);
}

void mark_used() noexcept {
  if (!g_used.load(std::memory_order_relaxed)) g_used.store(true, std::memory_order_relaxed);
}

// Torch's pluggable allocator does not check alloc_fn's result for null (a null data pointer
// would become a tensor), and has no error channel: failures are thrown, and torch's Python
// layer turns them into RuntimeError with cudakit's message. The throw happens before torch
// records the allocation, so its bookkeeping stays consistent.
void* hook_malloc(std::size_t size, int device, CUstream_st* stream) {
  mark_used();
  if (size == 0) return nullptr;  // torch frees a null pointer of a 0-byte allocation again
  if (memory::refuse_reentry_from_plugged_allocator()) {  // memory/pluggable.hpp: a deadlock
    note_failure("malloc", "called from a MemPool's allocator (cudakit's allocator inside "
                 "itself)", false);
    throw ValueError("cudakit's allocator was called from a MemPool's own allocator function");
  }
  memory::ForeignCallerScope foreign;  // C++ stacks through libtorch's frames (history.hpp)
  try {
    // Some torch versions declare alloc_fn's device as c10::DeviceIndex (int8_t) and call
    // through that type: only the low byte is then defined. Device indices fit in it.
    const int index = static_cast<std::int8_t>(device);
    const int dev = memory::resolve_alloc_device(index < 0 ? kCurrentDevice : index);
    if (g_torch_uncached.load(std::memory_order_relaxed)) [[unlikely]] return uncached_alloc(size, dev);
    void* p = memory::native_alloc(size, dev, stream, kTorch);
    if (auto report = profiler_reporter()) [[unlikely]] {
      const auto info = allocation_info(p);
      report_to_profiler(report, p, static_cast<std::int64_t>(info ? info->size : size), dev);
    }
    return p;
  } catch (const OutOfMemoryError& e) {
    note_failure("malloc", e.what(), false);
    notify_oom_observers(e);
    if (g_torch_oom_type.load(std::memory_order_acquire)) throw TorchOutOfMemory(e.what());
    throw;
  } catch (const std::exception& e) {
    note_failure("malloc", e.what(), false);
    throw;
  }
}

void hook_free(void* ptr, std::size_t, int device, CUstream_st*) {
  if (!ptr || detail::is_shutting_down()) return;
  memory::ForeignCallerScope foreign;
  try {
    if (auto report = profiler_reporter()) [[unlikely]] {
      if (const auto info = allocation_info(ptr)) {
        void* const p = ptr;
        const int dev = info->device;
        const auto size = static_cast<std::int64_t>(info->size);
        (void)memory::native_free(ptr, static_cast<std::int8_t>(device));
        report_to_profiler(report, p, -size, dev);  // totals after the free, as torch
        return;
      }
    }
    if (!memory::native_free(ptr, static_cast<std::int8_t>(device))) {  // hook_malloc: why
      if (uncached_free(ptr)) return;  // allocated with caching disabled
      std::fprintf(stderr, "cudakit: torch freed %p, which is not a live cudakit allocation "
                   "(ignored)\n", ptr);
    }
  } catch (const std::exception& e) {
    note_failure("free", e.what(), true);
  }
}

void hook_init(int) { mark_used(); }  // allocators are created on first use

void hook_reset() {
  try {
    empty_cache();
  } catch (const std::exception& e) {
    note_failure("empty_cache", e.what(), true);
  }
}

void hook_memory_fraction(double fraction, int device) {
  try {
    set_per_process_memory_fraction(fraction, device);
  } catch (const std::exception& e) {
    note_failure("set_per_process_memory_fraction", e.what(), true);
  }
}

// torch.cuda's getBaseAllocation: the segment holding `ptr` (torch's default when a plug-in
// has no such hook is `ptr` itself, which is what memory of an expandable segment gets).
void* hook_base_alloc(void* ptr, std::size_t* size) {
  try {
    if (memory::DeviceAllocator* a = memory::find_allocator_of(ptr)) {
      std::size_t n = 0;
      if (std::uintptr_t base = a->segment_base(ptr, &n)) {
        if (size) *size = n;
        return reinterpret_cast<void*>(base);
      }
    }
  } catch (const NotSupportedError&) {
    // expandable segment: no fixed base; fall through to the allocation itself
  } catch (const std::exception& e) {
    note_failure("base_alloc", e.what(), true);
  }
  if (size) {
    if (auto info = allocation_info(ptr)) *size = info->size;
  }
  return ptr;
}

void hook_record_stream(void* ptr, CUstream_st* stream) {
  try {
    if (!memory::native_record_stream(ptr, stream)) {
      std::fprintf(stderr, "cudakit: record_stream on %p, which is not a live cudakit "
                   "allocation (ignored)\n", ptr);
    }
  } catch (const std::exception& e) {
    note_failure("record_stream", e.what(), true);
  }
}

void hook_begin_allocate_to_pool(int device, TorchMempoolId pool, TorchStreamFilter filter) {
  try {
    // The filter is torch's (capture id or thread id test): it runs on the allocation path
    // and makes no waiting driver call (cudaStreamGetCaptureInfo at most).
    begin_allocate_to_pool(device, torch_pool_id(pool),
                           [f = std::move(filter)](NativeStream s) {
                             return f(static_cast<CUstream_st*>(s));
                           });
  } catch (const std::exception& e) {
    note_failure("begin_allocate_to_pool", e.what(), true);
  }
}

void hook_end_allocate_to_pool(int device, TorchMempoolId pool) {
  try {
    end_allocate_to_pool(device, torch_pool_id(pool));
  } catch (const std::exception& e) {
    note_failure("end_allocate_to_pool", e.what(), true);
  }
}

void hook_release_pool(int device, TorchMempoolId pool) {
  if (detail::is_shutting_down()) return;
  try {
    release_pool(device, torch_pool_id(pool));
  } catch (const std::exception& e) {
    note_failure("release_pool", e.what(), true);
  }
}

constexpr TorchAllocatorHooks kHooks{
    &hook_malloc,        &hook_free,          &hook_init,
    &hook_reset,         &hook_memory_fraction, &hook_base_alloc,
    &hook_record_stream, &hook_begin_allocate_to_pool, &hook_end_allocate_to_pool,
    &hook_release_pool};

}  // namespace

const TorchAllocatorHooks& torch_allocator_hooks() noexcept { return kHooks; }

MempoolId torch_pool_id(TorchMempoolId id) noexcept { return {id.first | kTorchPoolBit, id.second}; }
TorchMempoolId torch_pool_id_of(MempoolId id) noexcept {
  return {id.first & ~kTorchPoolBit, id.second};
}
bool is_torch_pool_id(MempoolId id) noexcept { return (id.first & kTorchPoolBit) != 0; }

void create_torch_pool(int device, TorchMempoolId id, bool use_on_oom, bool no_split,
                       const PluggableAllocator* source) {
  memory::device_allocator(memory::resolve_alloc_device(device))
      .create_pool(torch_pool_id(id), no_split, use_on_oom,
                   source ? std::static_pointer_cast<memory::PluggedAllocator>(source->impl())
                          : nullptr);
}

int torch_pool_use_count(int device, TorchMempoolId id) {
  return memory::device_allocator(memory::resolve_alloc_device(device))
      .pool_use_count(torch_pool_id(id));
}

void set_torch_out_of_memory_type(void* python_type) noexcept {
  g_torch_oom_type.store(static_cast<_object*>(python_type), std::memory_order_release);
}

void add_torch_oom_observer(TorchOomObserver observer) {
  if (!observer) throw ValueError("add_torch_oom_observer: the observer is empty");
  std::lock_guard lock(g_observers_mu);
  oom_observers().push_back(std::move(observer));
}

void set_torch_memory_reporter(TorchMemoryReporter reporter) noexcept {
  const bool on = reporter.enabled && reporter.report;
  g_profiler_report.store(nullptr, std::memory_order_release);  // never one without the other
  g_profiler_enabled.store(on ? reporter.enabled : nullptr, std::memory_order_release);
  if (on) g_profiler_report.store(reporter.report, std::memory_order_release);
}

void set_torch_caching_enabled(bool enabled) noexcept {
  g_torch_uncached.store(!enabled, std::memory_order_relaxed);
}
bool torch_caching_enabled() noexcept { return !g_torch_uncached.load(std::memory_order_relaxed); }

bool torch_hooks_used() noexcept { return g_used.load(std::memory_order_relaxed); }
std::string last_plugin_error() { return g_last_error; }

}  // namespace cudakit
