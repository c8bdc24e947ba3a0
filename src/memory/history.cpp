// Allocation history: per-device ring buffers of trace entries. Stacks are captured as raw
// return addresses (glibc backtrace, ~1 µs) and symbolised only when a snapshot asks.
#include "memory/history.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

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

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

std::shared_ptr<HistoryContext> capture(const HistoryState& s) {
  auto ctx = std::make_shared<HistoryContext>();
  ctx->time_us = now_us();
  if (s.cpp_stacks) {
    void* buf[32];
    int n = backtrace(buf, 32);
    ctx->frames.assign(buf + (n > 3 ? 3 : 0), buf + n);  // skip the allocator's own frames
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
