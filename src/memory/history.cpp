// Allocation history: settings, stack capture, the per-device recorder and its conversion to
// the snapshot form. See history.hpp for the cost model.
#include "memory/history.hpp"

#include <pthread.h>
#include <unwind.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <span>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "cudakit/error.hpp"
#include "instrument/symbolizer.hpp"

namespace cudakit::memory {

std::atomic<bool> g_history_enabled{false};
constinit HotSettings g_hot;
std::atomic<AllocatorObserver> g_allocator_observer{nullptr};  // [profiler tracer]

namespace {

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}
double wall_us() noexcept {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Settings {
  std::mutex mutex;  // serialises record_memory_history
  // The settings read on the allocation path are g_hot (history.hpp).
  // Clock pair sampled at enable (ticks -> wall-clock µs at snapshot time).
  std::atomic<std::uint64_t> ticks0{0};
  std::atomic<std::int64_t> steady0{0};
  std::atomic<double> wall0{0};
};
Settings& settings() {
  static Settings* s = new Settings();  // never destroyed: used until process exit
  return *s;
}
std::atomic<PyStackHook> g_py_hook{nullptr};
std::atomic<PySymbolizeHook> g_py_symbolize{nullptr};

// Wall-clock µs of a tick count, from the enable-time pair and a pair sampled now.
struct TickClock {
  double wall0, ticks0, us_per_tick;
  TickClock() {
    Settings& s = settings();
    wall0 = s.wall0.load();
    ticks0 = static_cast<double>(s.ticks0.load());
    const double dt = static_cast<double>(now_ticks()) - ticks0;
    const double dns = static_cast<double>(steady_ns() - s.steady0.load());
#if defined(__x86_64__) || defined(__i386__)
    us_per_tick = dt > 0 && dns > 0 ? dns / dt / 1000.0 : 1e-3 / 2.0;
#else
    (void)dt;
    (void)dns;
    us_per_tick = 1e-3;  // ticks are steady-clock ns
#endif
  }
  double us(std::uint64_t t) const { return wall0 + (static_cast<double>(t) - ticks0) * us_per_tick; }
};

// Bounds of the calling thread's stack (cached per thread): frame pointers outside it are
// not frames, so the walk stops there instead of reading wild memory.
struct StackBounds {
  std::uintptr_t lo = 0, hi = 0;
};
__attribute__((noinline, cold)) StackBounds query_stack_bounds() noexcept {
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
}
const StackBounds& stack_bounds() {
  thread_local StackBounds b = query_stack_bounds();
  return b;
}

// The walk (walk_frames' doc), inlined into capture_stack: a call and its register saves
// were ~15 instructions of a ~100-instruction walk.
inline int walk_from(void** out, int max, std::uintptr_t entry) noexcept {
  const StackBounds& sb = stack_bounds();
  if (sb.hi - sb.lo < 2 * sizeof(void*)) return 0;  // bounds unknown: no stack
  // fp - lo > span: below lo (wraps around) or too close to hi, in one comparison.
  const std::uintptr_t lo = sb.lo, span = sb.hi - sb.lo - 2 * sizeof(void*);
  std::uintptr_t fp = entry;
  int n = 0;
  while (n < max) {
    if (fp - lo > span || (fp & (sizeof(void*) - 1))) break;
    const auto* frame = reinterpret_cast<void* const*>(fp);
    void* ret = frame[1];  // entry's own record holds the return into its caller
    if (!ret) break;
    out[n++] = ret;
    const auto next = reinterpret_cast<std::uintptr_t>(frame[0]);
    if (next <= fp) break;
    fp = next;
  }
  return n;
}

}  // namespace

// Walks the frame-pointer chain: each frame is {saved frame pointer, return address}. The walk
// starts at `entry`, the allocator's (or the sanitizer's) entry frame, which is live below
// us: the frames between it and here are the allocator's own, and walking them only to drop
// them cost ~4 frames of work per call. Stops at the first frame pointer that is outside this
// thread's stack, misaligned or not increasing, so code built without frame pointers ends
// the walk early instead of producing garbage. ~20 ns for 16 frames, vs ~1-4 µs for glibc
// backtrace() (which unwinds with DWARF tables).
int walk_frames(void** out, int max, std::uintptr_t entry) { return walk_from(out, max, entry); }

thread_local bool t_foreign_caller = false;

namespace {
struct UnwindWalk {
  void** out;
  int max;
  int n;
  std::uintptr_t entry_cfa;  // the entry function's own canonical frame address
};

_Unwind_Reason_Code unwind_step(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<UnwindWalk*>(arg);
  // Frames at or below the entry's (the allocator's own, and this walk's) are skipped: the
  // first frame kept is the entry's caller, at its return address, as walk_from's first.
  if (_Unwind_GetCFA(ctx) <= w->entry_cfa) return _URC_NO_REASON;
  const auto ip = static_cast<std::uintptr_t>(_Unwind_GetIP(ctx));
  if (ip == 0) return _URC_END_OF_STACK;
  w->out[w->n++] = reinterpret_cast<void*>(ip);
  return w->n == w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

// ForeignCallerScope's walk: the caller chain from the DWARF unwind tables (.eh_frame, in
// every x86-64 object whatever its frame-pointer setting). The entry function keeps a frame
// pointer (libcudakit is built with -fno-omit-frame-pointer), so its CFA is entry + 16.
int unwind_from(void** out, int max, std::uintptr_t entry) noexcept {
  UnwindWalk w{out, max, 0, entry + 2 * sizeof(void*)};
  _Unwind_Backtrace(&unwind_step, &w);
  return w.n;
}
}  // namespace

const char* action_name(TraceAction a) noexcept {
  switch (a) {
    case kActionAlloc: return "alloc";
    case kActionFreeRequested: return "free_requested";
    case kActionFreeCompleted: return "free_completed";
    case kActionFreePair: return "free_requested";  // the first of the pair's two entries
    case kActionSegmentAlloc: return "segment_alloc";
    case kActionSegmentFree: return "segment_free";
    case kActionSegmentMap: return "segment_map";
    case kActionSegmentUnmap: return "segment_unmap";
    case kActionOom: return "oom";
  }
  return "?";
}

void set_python_stack_hook(PyStackHook capture, PySymbolizeHook symbolize) {
  g_py_symbolize.store(symbolize);
  g_py_hook.store(capture);
}

void symbolize_python_frame(const PyFrameRef& frame, std::string& file, int& line,
                            std::string& name) {
  if (PySymbolizeHook h = g_py_symbolize.load()) {
    h(frame, file, line, name);
    return;
  }
  file = "??";
  line = 0;
  name = "??";
}

void record_memory_history(const char* enabled, const char* context, const char* stacks,
                           std::size_t max_entries, bool clear_history) {
  Settings& s = settings();
  std::lock_guard lock(s.mutex);
  if (!enabled) {
    // torch clears its trace when history goes off: the next recording starts empty.
    if (g_history_enabled.load()) g_hot.generation.fetch_add(1);
    g_history_enabled.store(false);
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
  HotSettings& h = g_hot;
  h.trace = en == "all";
  h.context = ctx.empty() ? kContextNone : ctx == "state" ? kContextState
                                         : ctx == "alloc" ? kContextAlloc : kContextAll;
  h.cpp_stacks = st == "cpp" || st == "all";
  h.py_stacks = st == "python" || st == "all";
  h.max_entries = max_entries ? max_entries : SIZE_MAX;
  // Changing the settings while on keeps the trace recorded so far (torch's
  // test_memory_plots_history_context switches context off and on between allocations and
  // expects the first allocation's stack in the snapshot), and its time base with it.
  const bool fresh = !g_history_enabled.load();
  if (fresh || clear_history) {
    s.steady0 = steady_ns();
    s.wall0 = wall_us();
    s.ticks0 = now_ticks();
  }
  if (clear_history) h.generation.fetch_add(1);
  g_history_enabled.store(true);
}

void capture_stack_slow(CapturedStack& out, const void* entry_frame, bool is_free) {
  HotSettings& s = g_hot;
  out.is_free = is_free;
  const auto entry = reinterpret_cast<std::uintptr_t>(entry_frame);
  out.depth = !s.cpp_stacks.load(std::memory_order_relaxed) ? 0
              : t_foreign_caller ? unwind_from(out.pc, kMaxStackFrames, entry)
                                 : walk_from(out.pc, kMaxStackFrames, entry);
  out.py_depth = 0;
  out.py_key = 0;
  if (s.py_stacks.load(std::memory_order_relaxed)) {
    if (PyStackHook h = g_py_hook.load(std::memory_order_acquire))
      out.py_depth = std::clamp(h(out.py.f, kMaxPythonFrames, &out.py_key), 0, kMaxPythonFrames);
  }
}

// ---- HistoryRecorder ----

HistoryRecorder::~HistoryRecorder() { clear_ring(); }

StackRecord* HistoryRecorder::new_record() {
  if (!free_) {
    // Records come in chunks: one allocation per 256 live stacks, never per event.
    constexpr std::size_t kChunk = 256;
    chunks_.push_back(std::make_unique<StackRecord[]>(kChunk));
    for (std::size_t i = 0; i < kChunk; ++i) {
      chunks_.back()[i].next = free_;
      free_ = &chunks_.back()[i];
    }
  }
  StackRecord* r = free_;
  free_ = r->next;
  r->next = nullptr;
  r->refs = 0;
  r->interned = false;
  return r;
}

StackRecord* HistoryRecorder::adopt_slow(CapturedStack& cap) {
  StackRecord* found = intern(cap);
  mru_[cap.is_free] = found;
  return found;
}

StackRecord* HistoryRecorder::intern(CapturedStack& cap) {
  const auto depth = static_cast<std::size_t>(cap.depth);
  auto mix = [](std::uint64_t h, std::uint64_t v) {
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 31);
  };
  const PyFrameRef* py = cap.py.f;
  const auto py_depth = static_cast<std::size_t>(cap.py_depth);
  std::uint64_t h = depth ^ (py_depth << 32);
  for (std::size_t i = 0; i < depth; ++i) h = mix(h, reinterpret_cast<std::uintptr_t>(cap.pc[i]));
  for (const PyFrameRef& f : std::span(py, py_depth)) {
    h = mix(h, reinterpret_cast<std::uintptr_t>(f.code));
    h = mix(h, static_cast<std::uint64_t>(f.lasti));
  }
  if (!buckets_.empty()) {
    for (StackRecord* r = buckets_[h & (buckets_.size() - 1)]; r; r = r->next) {
      if (r->hash == h && same_stack(r, cap)) {
        r->py_key = cap.py_key;
        return r;
      }
    }
  }
  if (interned_ >= buckets_.size()) {  // grow (and rehash) at load factor 1
    std::vector<StackRecord*> grown(std::max<std::size_t>(64, buckets_.size() * 2), nullptr);
    for (StackRecord* head : buckets_) {
      while (head) {
        StackRecord* nx = head->next;
        StackRecord*& b = grown[head->hash & (grown.size() - 1)];
        head->next = b;
        b = head;
        head = nx;
      }
    }
    buckets_.swap(grown);
  }
  StackRecord* r = new_record();
  r->depth = cap.depth;
  r->hash = h;
  std::memcpy(r->pc, cap.pc, sizeof(void*) * depth);
  // Copied, not swapped: a later event of the same allocator call may adopt the capture again
  // (when a record went back to the pool in between) and must still see its Python frames
  // (a swap left them empty: Python-less duplicates in snapshots). Pooled records keep their
  // vectors' capacity, so the copy allocates nothing in the steady state.
  r->py.assign(py, py + py_depth);
  r->py_key = cap.py_key;
  r->interned = true;
  StackRecord*& b = buckets_[h & (buckets_.size() - 1)];
  r->next = b;
  b = r;
  ++interned_;
  return r;
}

void HistoryRecorder::unintern(StackRecord* r) noexcept {
  for (StackRecord** link = &buckets_[r->hash & (buckets_.size() - 1)]; *link; link = &(*link)->next) {
    if (*link == r) {
      *link = r->next;
      --interned_;
      return;
    }
  }
}

void HistoryRecorder::pool(StackRecord* r) noexcept {
  if (r->interned) unintern(r);
  if (mru_[0] == r) mru_[0] = nullptr;
  if (mru_[1] == r) mru_[1] = nullptr;
  r->py.clear();
  r->py_key = 0;
  r->next = free_;
  free_ = r;
  ++pooled_;
}

void HistoryRecorder::clear_ring() noexcept {
  for (Slot& sl : ring_) release(sl.stack());
  ring_.clear();
  next_ = 0;
  last_ = nullptr;
}

void HistoryRecorder::restart(std::uint64_t gen) noexcept {
  clear_ring();
  generation_ = gen;
}

std::shared_ptr<HistoryContext> HistoryRecorder::context_of(const StackRecord* r,
                                                            ContextCache& contexts) const {
  if (!r) return nullptr;
  auto [it, fresh] = contexts.try_emplace(r);
  if (fresh) {
    auto ctx = std::make_shared<HistoryContext>();
    ctx->frames.assign(r->pc, r->pc + r->depth);
    ctx->py_frames = r->py;
    it->second = std::move(ctx);
  }
  return it->second;
}

std::vector<TraceEntry> HistoryRecorder::traces(ContextCache& contexts) const {
  if (generation_ != g_hot.generation.load(std::memory_order_relaxed)) return {};
  const TickClock clock;
  // The ring holds max_entries slots, a pair slot being two entries: the oldest entries
  // beyond max_entries are left out, as a ring of single entries would have dropped them.
  std::size_t entries = 0;
  for (const Slot& sl : ring_) entries += sl.action() == kActionFreePair ? 2 : 1;
  const std::size_t cap = g_hot.max_entries.load(std::memory_order_relaxed);
  std::size_t skip = entries > cap ? entries - cap : 0;
  std::vector<TraceEntry> out;
  out.reserve(entries - skip);
  for (std::size_t i = 0; i < ring_.size(); ++i) {
    const Slot& sl = ring_[(next_ + i) % ring_.size()];
    const double t = clock.us(sl.ticks);
    const TraceAction a = sl.action();
    if (a == kActionFreePair) {
      if (skip >= 2) {
        skip -= 2;
        continue;
      }
      auto ctx = context_of(sl.stack(), contexts);
      if (skip) {
        skip = 0;  // the oldest entry kept is the pair's free_completed
      } else {
        out.push_back(TraceEntry{action_name(kActionFreeRequested), sl.addr, sl.size, sl.stream,
                                 t, ctx});
      }
      out.push_back(TraceEntry{action_name(kActionFreeCompleted), sl.addr, sl.size, sl.stream, t,
                               std::move(ctx)});
      continue;
    }
    if (skip) {
      --skip;
      continue;
    }
    out.push_back(TraceEntry{action_name(a), sl.addr, sl.size, sl.stream, t,
                             context_of(sl.stack(), contexts)});
  }
  return out;
}

// ---- symbolisation (snapshot time) ----

void symbolize_cpp_frame(void* pc, std::string& file, std::string& name) {
  instrument::CppFrameSymbol sym = instrument::cpp_frame_name(pc);  // instrument/symbolizer.hpp (no line lookup)
  file = std::move(sym.file);
  name = std::move(sym.name);
}

}  // namespace cudakit::memory
