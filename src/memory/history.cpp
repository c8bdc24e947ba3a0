// Allocation history: per-device ring buffers of trace entries. Stacks are captured as raw
// return addresses (frame-pointer walk) and symbolised only when a snapshot asks.
#include "memory/history.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <pthread.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "cudakit/error.hpp"

namespace cudakit::memory {

std::atomic<bool> g_history_enabled{false};

namespace {
struct HistoryState {
  std::mutex mutex;
  // Read on the allocation path without the mutex: atomics (relaxed; they change only on
  // enable/disable).
  std::atomic<bool> record_context{false};  // per-block contexts
  std::atomic<bool> record_trace{false};    // device_traces ("all")
  std::atomic<bool> cpp_stacks{false}, py_stacks{false};
  std::size_t max_entries = SIZE_MAX;
  // Per-device ring buffers (no allocation per entry once full).
  struct Ring {
    std::vector<TraceEntry> entries;
    std::size_t next = 0;  // slot to overwrite when full
  };
  std::unordered_map<int, Ring> traces;
};
HistoryState& state() {
  static HistoryState* s = new HistoryState();
  return *s;
}
std::atomic<PyStackHook> g_py_hook{nullptr};
constexpr int kMaxFrames = 32;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// Bounds of the calling thread's stack (cached per thread): frame pointers outside it are
// not frames, so the walk stops there instead of reading wild memory.
struct StackBounds {
  std::uintptr_t lo = 0, hi = 0;
};
const StackBounds& stack_bounds() {
  thread_local StackBounds b = [] {
    StackBounds r;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      std::size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        r.lo = reinterpret_cast<std::uintptr_t>(addr);
        r.hi = r.lo + size;
      }
      pthread_attr_destroy(&attr);
    }
    return r;
  }();
  return b;
}

// Walks the frame-pointer chain (libcudakit is built with -fno-omit-frame-pointer): each
// frame is {saved frame pointer, return address}. Stops at the first frame pointer that is
// outside this thread's stack, misaligned or not increasing — code built without frame
// pointers ends the walk early instead of producing garbage. ~20 ns for 16 frames, vs
// ~1-4 µs for glibc backtrace() (which unwinds with DWARF tables).
__attribute__((noinline)) int walk_frames(void** out, int max) {
  const StackBounds& sb = stack_bounds();
  auto fp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  int n = 0;
  while (n < max) {
    if (fp < sb.lo || fp + 2 * sizeof(void*) > sb.hi || (fp & (sizeof(void*) - 1))) break;
    const auto* frame = reinterpret_cast<void* const*>(fp);
    void* ret = frame[1];
    if (!ret) break;
    out[n++] = ret;
    const auto next = reinterpret_cast<std::uintptr_t>(frame[0]);
    if (next <= fp) break;
    fp = next;
  }
  return n;
}

std::shared_ptr<HistoryContext> capture(const HistoryState& s) {
  auto ctx = std::make_shared<HistoryContext>();
  ctx->time_us = now_us();
  if (s.cpp_stacks) {
    void* buf[kMaxFrames + 3];
    const int n = walk_frames(buf, kMaxFrames + 3);
    // Skip the allocator's own frames (capture, record_trace, DeviceAllocator::trace).
    const int skip = n > 3 ? 3 : 0;
    ctx->frames.assign(buf + skip, buf + n);
  }
  if (s.py_stacks) {
    if (PyStackHook h = g_py_hook.load()) h(ctx->py_frames);
  }
  return ctx;
}
}  // namespace

void set_python_stack_hook(PyStackHook hook) { g_py_hook.store(hook); }

void record_memory_history(const char* enabled, const char* context, const char* stacks,
                           std::size_t max_entries) {
  HistoryState& s = state();
  std::lock_guard lock(s.mutex);
  if (!enabled) {
    g_history_enabled.store(false);
    s.record_context = false;
    s.record_trace = false;
    return;
  }
  std::string en = enabled, ctx = context ? context : "all", st = stacks ? stacks : "all";
  if (en != "state" && en != "all")
    throw ValueError("_record_memory_history: enabled must be None, 'state' or 'all', got '" +
                     en + "'");
  if (ctx != "state" && ctx != "alloc" && ctx != "all" && !ctx.empty())
    throw ValueError("_record_memory_history: context must be None, 'state', 'alloc' or 'all', "
                     "got '" + ctx + "'");
  if (st != "python" && st != "cpp" && st != "all")
    throw ValueError("_record_memory_history: stacks must be 'python', 'cpp' or 'all', got '" +
                     st + "'");
  s.record_trace = en == "all";
  s.record_context = !ctx.empty();
  s.cpp_stacks = st == "cpp" || st == "all";
  s.py_stacks = st == "python" || st == "all";
  s.max_entries = max_entries ? max_entries : SIZE_MAX;
  s.traces.clear();
  g_history_enabled.store(true);
}

void record_trace(int device, const char* action, std::uintptr_t addr, std::size_t size,
                  detail::StreamHandle stream, std::shared_ptr<HistoryContext>* slot) {
  HistoryState& s = state();
  // Settings are read racily on purpose (they only change on enable/disable); the stack is
  // captured outside the history mutex so threads of different devices do not serialise.
  std::shared_ptr<HistoryContext> ctx;
  if (slot) {
    if (action[0] == 'a' && s.record_context) *slot = capture(s);  // "alloc"
    ctx = *slot;
  } else if (action[0] == 'o' || action[0] == 's') {  // "oom", "segment_*"
    if (s.record_context) ctx = capture(s);
  }
  if (!s.record_trace) return;
  const double t = ctx ? ctx->time_us : now_us();
  std::lock_guard lock(s.mutex);
  auto& ring = s.traces[device];
  TraceEntry e{action, addr, size, stream, t, std::move(ctx)};
  if (ring.entries.size() < s.max_entries) {
    ring.entries.push_back(std::move(e));
  } else {
    ring.entries[ring.next] = std::move(e);
    ring.next = (ring.next + 1) % ring.entries.size();
  }
}

std::vector<TraceEntry> device_traces(int device) {
  HistoryState& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.traces.find(device);
  if (it == s.traces.end()) return {};
  const auto& r = it->second;
  std::vector<TraceEntry> out(r.entries.begin() + static_cast<std::ptrdiff_t>(r.next), r.entries.end());
  out.insert(out.end(), r.entries.begin(), r.entries.begin() + static_cast<std::ptrdiff_t>(r.next));
  return out;
}

std::vector<std::string> symbolize(const HistoryContext& ctx) {
  std::vector<std::string> out;
  for (void* f : ctx.frames) {
    Dl_info info{};
    std::string name;
    if (dladdr(f, &info) && info.dli_sname) {
      int status = 0;
      char* dem = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      name = (status == 0 && dem) ? dem : info.dli_sname;
      std::free(dem);
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%p", f);
      name = buf;
    }
    std::string file = info.dli_fname ? info.dli_fname : "??";
    out.push_back(name + "\t" + file);
  }
  return out;
}

}  // namespace cudakit::memory
