// Allocation history (torch's _record_memory_history).
//
// Cost model (the goal is a few tens of ns per recorded alloc/free, not microseconds):
//  * The stack is captured once per allocator call, before any allocator lock is taken, as raw
//    return addresses from a frame-pointer walk (libcudakit is built with
//    -fno-omit-frame-pointer) into a buffer on the caller's stack. Python frames, when asked
//    for, are captured there too, as raw (code object, instruction offset) pairs: the Python
//    hook may run the garbage collector, which may free memory into this allocator, so it
//    must never run under the allocator's locks.
//  * Each device allocator owns a HistoryRecorder, used only under that allocator's fast
//    lock: a ring of fixed-size entries (no allocation once the ring is full) and a pool of
//    reference-counted StackRecords shared by the trace entries and the live blocks that
//    point at them. No extra lock, no shared_ptr, no heap allocation per event.
//  * Timestamps are TSC ticks (x86) converted to wall-clock microseconds when a snapshot is
//    taken, from a (ticks, clock) pair sampled at enable time and another at snapshot time.
//  * C++ and Python frames are symbolised only when a snapshot is taken (snapshot.cpp, with a
//    cache), outside the allocator's locks.
//  * Issue 15 item 4 (2 shared emulated cores, bench_memory_alloc, alternating runs): the
//    hot settings became constant-initialised globals (no function-local-static guard, and
//    history_context_level() inline), adopt() compares a stack with the two most recently
//    adopted ones (innermost frame first) before hashing it, and Python frames go into a
//    per-thread buffer instead of a fresh vector per call. PairWithHistory 92-98 -> 81-86 ns,
//    PairWithHistoryNoStacks 68-75 -> 66-69 ns (Pair 44-46 ns); callgrind before: 2137
//    instructions per recorded pair
//    against 956 without history (frame walks 276, ring writes 235, interning 204+36 memcmp,
//    AllocTrace::record 190); after: ~2070 (the time fell more than the count: the hash's
//    dependent multiplies are gone). The ≤ 1.3x goal is still missed in C++. Python
//    (bench_history.py, 512 B): Python stacks 0.67-0.72 ->
//    0.58-0.61 µs, C++ stacks 0.37-0.40 -> 0.33-0.36 µs (history off 0.26-0.30).
//  * Branch histcost (callgrind, history_pair_loop; numbers in docs/performance.md): the walk
//    starts at the allocator's entry frame instead of walking the allocator's own frames and
//    dropping them; a free's free_requested and free_completed share one ring slot (the
//    snapshot expands it into two entries); slots are 40 bytes (the action is a 4-bit code
//    in the stack pointer's alignment bits); AllocTrace::record does only what the event
//    needs, with the recorder's record() inlined into it; one most-recent stack per kind
//    (alloc, free) instead of a shared pair. Instructions per 512 B pair: C++ stacks
//    2100 -> 1599, no stacks 1516 -> 1266, history off 1004 -> 1006 (1.59x and 1.26x of
//    off: the ≤ 1.3x goal is met without stacks, still missed with C++ stacks, where the
//    walk (~100 per call), the stack comparison (~45) and the trace rules are what is left).
//  * Issue 31, Python stacks (bench/python/history_pair_callgrind.py: bench_history.py's loop,
//    5 Python frames, Python 3.11, emulated): a capture's Python frames go into a buffer in
//    the CapturedStack (no thread_local vector swapped in and out: ~100 instructions and 3 TLS
//    look-ups per stack), and the capture hook names a stack it has seen with a key, so
//    adopt() compares one key instead of every frame (the bindings' known-stack table,
//    python/src/py_stack.cpp, also makes the walk ~2x cheaper). Instructions per 512 B pair:
//    Python stacks 6356 -> 5936, Python + C++ 6614 -> 6194, history off 5069 -> 5063, no
//    stacks 5383 -> 5362 (Python stacks: 1.25x -> 1.17x off in instructions; +1287 -> +873).
//    Left per pair (vs no stacks, +574): the two walks ~300 (~17 per frame record and ~45 per
//    stack), the GIL check ~80 (3.11; one thread_local read on 3.12), capture_stack_slow
//    ~76, the hook call ~40, AllocTrace::record's stack rules and key comparison ~63.
//
// Thread-safety: record_memory_history() and history_settings() are thread-safe (settings are
// atomics, read racily on the allocation path: they only change when history is switched).
// HistoryRecorder is not thread-safe: its owner serialises every call.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#if !defined(__x86_64__) && !defined(__i386__)
#include <chrono>
#endif

#include "backend/types.hpp"
#include "cudakit/python_stacks.hpp"

namespace cudakit::memory {

inline constexpr int kMaxStackFrames = 32;

extern std::atomic<bool> g_history_enabled;
inline bool history_enabled() noexcept {
  return g_history_enabled.load(std::memory_order_relaxed);
}

// ---- [profiler tracer] allocator events for cudakit::profiler::Trace (src/profiler) ----
// One observer at a time, called from DeviceAllocator::trace() for every event history would
// record (alloc, free_requested, free_completed, segment_alloc/free/map/unmap, oom), under the
// allocator's lock: it must be quick and must not call into the allocator. Costs one more
// relaxed load per allocator call while unset.
struct AllocatorEvent {
  const char* action;   // history's action name (a literal)
  int device;
  std::uintptr_t addr;
  std::size_t size;
  std::int64_t allocated;  // device totals after the event (stats "all" pool)
  std::int64_t reserved;
};
using AllocatorObserver = void (*)(const AllocatorEvent&) noexcept;
extern std::atomic<AllocatorObserver> g_allocator_observer;
inline bool allocator_events_wanted() noexcept {
  return history_enabled() ||
         g_allocator_observer.load(std::memory_order_relaxed) != nullptr;
}

// A trace entry's action as a small code (a ring slot keeps it in 4 spare bits). The names
// are torch's; kActionFreePair is one slot standing for a free_requested entry followed by
// a free_completed entry of the same call (same address, size, stream, stack and time).
enum TraceAction : std::uint8_t {
  kActionAlloc,
  kActionFreeRequested,
  kActionFreeCompleted,
  kActionFreePair,
  kActionSegmentAlloc,
  kActionSegmentFree,
  kActionSegmentMap,
  kActionSegmentUnmap,
  kActionOom,
};
// Folds to a constant for the literals at the allocator's call sites (note_event is inline).
constexpr TraceAction action_code(const char* a) noexcept {
  if (a[0] == 'a') return kActionAlloc;
  if (a[0] == 'o') return kActionOom;
  if (a[0] == 'f') return a[5] == 'r' ? kActionFreeRequested : kActionFreeCompleted;
  switch (a[8]) {  // "segment_" + alloc / free / map / unmap
    case 'a': return kActionSegmentAlloc;
    case 'f': return kActionSegmentFree;
    case 'm': return kActionSegmentMap;
    default: return kActionSegmentUnmap;
  }
}
// The name of a single-entry action (a literal); kActionFreePair has none.
const char* action_name(TraceAction a) noexcept;

// enabled: None/"state"/"all" as torch (nullptr = off); context: "state"|"alloc"|"all"|"";
// stacks: "python"|"cpp"|"all"; max_entries: ring size per device (0 = unbounded).
// Off drops the trace (the rings clear at their next event, and snapshots show none); on
// keeps it unless clear_history (torch's recordHistory).
void record_memory_history(const char* enabled, const char* context, const char* stacks,
                           std::size_t max_entries, bool clear_history = false);

// Which stacks are kept (torch's `context`): 0 none, 1 "state" (live blocks only),
// 2 "alloc" (also alloc trace entries), 3 "all" (also free entries, with the free's stack).
enum ContextLevel : int { kContextNone = 0, kContextState = 1, kContextAlloc = 2, kContextAll = 3 };
// The settings read on the allocation path, without a lock (relaxed: they change only when
// history is switched, under record_memory_history's mutex). Constant-initialised, so reading
// them costs no guard check (they were behind a function-local static before).
struct HotSettings {
  std::atomic<bool> trace{false};
  std::atomic<int> context{kContextNone};
  std::atomic<bool> cpp_stacks{false}, py_stacks{false};
  std::atomic<std::size_t> max_entries{SIZE_MAX};
  std::atomic<std::uint64_t> generation{0};  // bumped on off / clear: recorders clear their rings
};
extern constinit HotSettings g_hot;
inline int history_context_level() noexcept {
  return history_enabled() ? g_hot.context.load(std::memory_order_relaxed) : kContextNone;
}

// History timestamps: TSC ticks, converted to wall-clock µs at snapshot time (history.cpp).
inline std::uint64_t now_ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  // __rdtsc() without <x86intrin.h> (a large header for every file including this one).
  // Invariant TSC on every x86 CPU a CUDA driver supports.
  return __builtin_ia32_rdtsc();
#else
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

// Raw Python frames and the hooks that capture / symbolize them: the public contract in
// include/cudakit/python_stacks.hpp (the bindings install them with set_python_stack_hooks).
using PyFrameRef = cudakit::PyFrameRef;
using PyStackHook = cudakit::PyStackHook;
using PySymbolizeHook = cudakit::PySymbolizeHook;
void set_python_stack_hook(PyStackHook capture, PySymbolizeHook symbolize);
void symbolize_python_frame(const PyFrameRef& frame, std::string& file, int& line,
                            std::string& name);

// A stack captured at the entry of an allocator call (on the caller's stack, before locking).
// The Python frames go into a buffer of the capture's own, left uninitialised (constructing
// 64 frames would cost every allocator call 128 stores, history off included): a vector here
// had to be swapped in from a thread_local spare buffer and back at every call, ~100
// instructions and 3 TLS look-ups per captured stack (issue 31).
struct CapturedStack {
  bool valid = false;  // false: this call records no stack (settings say so)
  bool is_free = false;  // a free's stack (the recorder caches one stack of each kind)
  int depth = 0;
  int py_depth = 0;
  std::uint64_t py_key = 0;  // the capture hook's name for the Python frames (0: none)
  void* pc[kMaxStackFrames];
  union PyBuffer {
    PyBuffer() noexcept {}  // leaves the frames uninitialised
    PyFrameRef f[kMaxPythonFrames];
  } py;
};
// Fills `out` for an allocator call whose public entry has frame address `entry_frame`
// (frames at and below it are the allocator's own). `is_free`: context "all" only.
// Inline, as far as the settings check: a call that keeps no stack costs no call (the walk,
// inlined into capture_stack_slow, makes that function save every register it uses).
void capture_stack_slow(CapturedStack& out, const void* entry_frame, bool is_free);
inline void capture_stack(CapturedStack& out, const void* entry_frame, bool is_free) {
  const int level = g_hot.context.load(std::memory_order_relaxed);
  out.valid = level >= (is_free ? kContextAll : kContextState);
  if (out.valid) capture_stack_slow(out, entry_frame, is_free);
}

// Entry points that code built without frame pointers calls (torch's and CuPy's plug-in hooks,
// the C plug-in cudakit_malloc) mark the call: a frame-pointer walk stops at the first such
// frame, so torch's C++ stacks (stacks="all": at::native::rand, the frames torch's own
// test_memory_plots looks for) would end at the hook. Marked calls unwind with the DWARF
// tables instead (_Unwind_Backtrace, a few µs for 32 frames: torch's own unwinder costs as
// much); cudakit's own callers keep the ~20 ns walk. Set only while history records (no
// thread_local access on the plug-in's hot path otherwise).
extern thread_local bool t_foreign_caller;
class ForeignCallerScope {
 public:
  ForeignCallerScope() noexcept {
    if (history_enabled()) [[unlikely]] {
      t_foreign_caller = true;
      set_ = true;
    }
  }
  ~ForeignCallerScope() {
    if (set_) [[unlikely]] t_foreign_caller = false;
  }
  ForeignCallerScope(const ForeignCallerScope&) = delete;
  ForeignCallerScope& operator=(const ForeignCallerScope&) = delete;

 private:
  bool set_ = false;
};

// The frame-pointer walk behind capture_stack: return addresses of the calling thread's
// frames at and above frame address `entry`, innermost first (also used by the stream
// sanitizer, src/sanitizer).
int walk_frames(void** out, int max, std::uintptr_t entry);

// Snapshot-time form of a stack (symbolised by snapshot.cpp).
struct HistoryContext {
  std::vector<void*> frames;           // raw C++ return addresses, innermost first
  std::vector<PyFrameRef> py_frames;   // raw Python frames, innermost first
};
struct TraceEntry {
  const char* action = "";  // a string literal
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  detail::StreamHandle stream = nullptr;
  double time_us = 0;
  std::shared_ptr<HistoryContext> context;
};
// File (the shared object) and demangled function name of a C++ return address: exported
// symbols, then the object's static symbol table (instrument/symbolizer.hpp; snapshots also get
// file and line from there).
void symbolize_cpp_frame(void* pc, std::string& file, std::string& name);

// Pooled, reference-counted stack (owned by one HistoryRecorder).
// Stacks are interned (one record per distinct stack): a loop allocating from one call site
// touches one hot record instead of a fresh one per event, whose release a full ring later
// would be a cache miss (measured: 17% of a recorded alloc/free pair).
// Aligned to 16 so that a ring slot can keep its TraceAction in the pointer's low 4 bits.
struct alignas(16) StackRecord {
  std::uint32_t refs = 0;
  int depth = 0;
  std::uint64_t hash = 0;
  bool interned = false;
  void* pc[kMaxStackFrames];
  std::vector<PyFrameRef> py;  // keeps its capacity across reuse
  std::uint64_t py_key = 0;  // the key of a capture with these frames (CapturedStack::py_key)
  StackRecord* next = nullptr;  // free list, or the intern table's bucket chain
};

class HistoryRecorder {
 public:
  HistoryRecorder() = default;
  ~HistoryRecorder();
  HistoryRecorder(const HistoryRecorder&) = delete;
  HistoryRecorder& operator=(const HistoryRecorder&) = delete;

  // Starts afresh if history was (re-)enabled since the last event: the ring is cleared (its
  // records released) BEFORE the event adopts or shows any stack. Adopting first handed out
  // a cached record that only the old ring held; the clear then pooled it while the new entry
  // kept it, and the next new stack overwrote it (wrong frames, and a free list cycle).
  void sync() noexcept {
    const std::uint64_t gen = g_hot.generation.load(std::memory_order_relaxed);
    if (gen != generation_) restart(gen);
  }
  // Counts records returned to the pool: a record adopted at an earlier count may have been
  // reused since (a caller caching one across events checks this, see AllocTrace).
  std::uint64_t pooled() const noexcept { return pooled_; }

  // A pooled copy of `cap` with no reference yet: every holder (a block, a trace entry)
  // retains it, and it returns to the pool when the last one releases it. nullptr when cap
  // holds no stack.
  // Inline as far as the comparison with the most recently adopted stack of the same kind
  // (a loop's alloc call site, its free call site), made without hashing: hashing a 16-frame
  // stack and probing the table cost ~100 instructions. One entry per kind, because a loop
  // alternates allocs and frees (one shared pair of entries meant a failed comparison and a
  // swap at every event).
  StackRecord* adopt(CapturedStack& cap) {
    if (!cap.valid) return nullptr;
    StackRecord* mru = mru_[cap.is_free];
    if (mru && same_stack(mru, cap)) {
      mru->py_key = cap.py_key;  // the same frames: the newest key hits next time
      return mru;
    }
    return adopt_slow(cap);
  }
  static void retain(StackRecord* r) noexcept {
    if (r) ++r->refs;
  }
  void release(StackRecord* r) noexcept {  // the last reference pools it (out of line)
    if (r && --r->refs == 0) pool(r);
  }
  // Returns a record that adopt() handed out and nobody retained to the pool.
  void discard_if_unkept(StackRecord* r) noexcept {
    if (r && r->refs == 0) {
      retain(r);
      release(r);
    }
  }

  // Appends a trace entry (when the settings record traces, which it returns); takes its
  // own reference. Call sync() first (before adopting the stack). `op_ticks`: the timestamp
  // shared by the events of one allocator call (0 = not read yet; filled here), since
  // reading the clock costs ~10-30 ns in a VM. A free_completed that follows its call's
  // free_requested (same block, stack and time) joins that entry's slot. Inline: it runs
  // once or twice per allocator call, and the call cost ~20 instructions of its ~45.
  __attribute__((always_inline)) bool record(TraceAction action, std::uintptr_t addr,
                                             std::size_t size, detail::StreamHandle stream,
                                             StackRecord* stack, std::uint64_t* op_ticks) {
    HotSettings& s = g_hot;
    if (!s.trace.load(std::memory_order_relaxed)) return false;
    std::uint64_t ticks;
    if (op_ticks) {
      if (!*op_ticks) *op_ticks = now_ticks();
      ticks = *op_ticks;
    } else {
      ticks = now_ticks();
    }
    if (ticks < last_ticks_) ticks = last_ticks_;  // a thread moved to a core whose TSC lags
    last_ticks_ = ticks;
    const auto tagged = reinterpret_cast<std::uintptr_t>(stack);
    // A free whose block completes at once (no other stream used it): the free_requested
    // slot just written becomes a pair. Same time means the same allocator call (ticks are
    // read once per call), and a merge of two calls' identical entries would read back the
    // same anyway.
    if (action == kActionFreeCompleted && last_ &&
        last_->stack_action == (tagged | kActionFreeRequested) && last_->addr == addr &&
        last_->ticks == ticks && last_->size == size && last_->stream == stream) {
      last_->stack_action = tagged | kActionFreePair;
      return true;
    }
    retain(stack);
    if (ring_.size() < s.max_entries.load(std::memory_order_relaxed)) {
      last_ = &ring_.emplace_back(Slot{addr, size, stream, ticks, tagged | action});
      return true;
    }
    // Full (the steady state). A smaller max_entries set while recording keeps the larger
    // ring (the trace is kept, as torch's) and traces() shows only the newest max_entries;
    // a racing entry in between overwrites in place, which is still correct.
    Slot& old = ring_[next_];
    StackRecord* dropped = old.stack();
    old = Slot{addr, size, stream, ticks, tagged | action};
    last_ = &old;
    if (++next_ == ring_.size()) next_ = 0;  // wrap without a division
    // Released after the new entry retained its stack: when both are the same record,
    // releasing first could pool it while the new entry still points at it.
    release(dropped);
    return true;
  }

  // Snapshot form. `contexts` dedupes records shared by several entries and blocks.
  using ContextCache = std::unordered_map<const StackRecord*, std::shared_ptr<HistoryContext>>;
  std::shared_ptr<HistoryContext> context_of(const StackRecord* r, ContextCache& contexts) const;
  // The newest max_entries entries, oldest first (a pair slot gives two).
  std::vector<TraceEntry> traces(ContextCache& contexts) const;

 private:
  // 40 bytes (48 with the action as a pointer of its own): a recorded pair writes two slots,
  // the alloc and the free pair, instead of three.
  struct Slot {
    std::uintptr_t addr;
    std::size_t size;
    detail::StreamHandle stream;
    std::uint64_t ticks;
    std::uintptr_t stack_action;  // StackRecord* | TraceAction
    StackRecord* stack() const noexcept {
      return reinterpret_cast<StackRecord*>(stack_action & ~std::uintptr_t{15});
    }
    TraceAction action() const noexcept { return static_cast<TraceAction>(stack_action & 15); }
  };
  static_assert(sizeof(Slot) == 40);
  void restart(std::uint64_t gen) noexcept;
  void pool(StackRecord* r) noexcept;
  void clear_ring() noexcept;
  StackRecord* new_record();
  StackRecord* adopt_slow(CapturedStack& cap);  // the intern table; updates mru_
  StackRecord* intern(CapturedStack& cap);  // adopt's hash-table path
  static bool same_stack(const StackRecord* r, const CapturedStack& cap) noexcept {
    if (r->depth != cap.depth) return false;
    // Word by word, innermost frame first (two call sites usually differ there): for the ~8
    // frames of a typical stack a loop costs less than the call to memcmp.
    for (int i = 0; i < cap.depth; ++i) {
      if (r->pc[i] != cap.pc[i]) return false;
    }
    // Equal nonzero keys mean equal frames (PyStackHook's contract): one comparison instead
    // of one per frame. Unequal keys may still name equal frames (the hook forgot the stack
    // and named it again), so those are compared.
    if (cap.py_key && r->py_key == cap.py_key) return true;
    if (r->py.size() != static_cast<std::size_t>(cap.py_depth)) return false;
    for (int i = 0; i < cap.py_depth; ++i) {
      if (r->py[i] != cap.py.f[i]) return false;
    }
    return true;
  }
  void unintern(StackRecord* r) noexcept;
  std::vector<Slot> ring_;
  std::size_t next_ = 0;  // oldest slot once the ring is full
  Slot* last_ = nullptr;  // the newest slot (a free_completed may join it)
  std::uint64_t generation_ = 0;
  std::uint64_t last_ticks_ = 0;  // entries never go back in time (TSCs of two cores may)
  std::uint64_t pooled_ = 0;
  StackRecord* free_ = nullptr;
  std::vector<std::unique_ptr<StackRecord[]>> chunks_;
  std::vector<StackRecord*> buckets_;  // intern table (power-of-two size, chained)
  std::size_t interned_ = 0;
  // The most recently adopted stack of an alloc [0] and of a free [1] (interned, in use).
  StackRecord* mru_[2] = {nullptr, nullptr};
};

}  // namespace cudakit::memory
