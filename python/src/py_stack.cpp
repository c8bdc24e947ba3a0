// python/src/py_stack.hpp. Costs (issue 31): a recorded alloc+free pair captures two stacks,
// so the walk is on the allocation path of every history-recording program.
#include "py_stack.hpp"

#include <Python.h>
#include <frameobject.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_set>

// 3.11 and 3.12: the interpreter's own frame records are walked directly. The public walk
// (PyEval_GetFrame / PyFrame_GetBack) creates a frame object for every frame that has none
// yet, and a frame called just for the allocation (cudakit.memory.caching_allocator_alloc,
// a tensor factory) never has one: ~300 instructions to make and destroy it per captured
// stack, most of the cost of Python stacks in history. 3.12 keeps 3.11's record layout and
// the same skip rule (PyFrame_GetBack skips incomplete records, the C-stack shim frames
// among them); the GPU machine runs 3.12, where the public walk measured 1.83-2.69x history
// off (issue 31). 3.13 renames the fields (f_executable, no cframe): public walk there.
// (Only where the interpreter's internal headers are installed; a -dev package without
// them gets the public walk.)
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && \
    __has_include(<internal/pycore_frame.h>)
#define CUDAKIT_PY_WALK_RECORDS 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#endif

namespace cudakit::python {
namespace {

// Code objects handed out are kept alive for the life of the process: one reference, taken
// the first time one is seen (guarded by the GIL). A direct-mapped cache in front of the set:
// a loop's few code objects skip the hash lookup. Namespace-scope state, not function-local
// statics: their guard check was 3 instructions per frame (issue 31).
std::unordered_set<const void*>* g_kept = nullptr;  // never destroyed
const void* g_seen[1024] = {};

__attribute__((noinline)) void keep_alive_slow(PyCodeObject* code, const void*& slot) {
  if (!g_kept) g_kept = new std::unordered_set<const void*>();
  if (g_kept->insert(code).second) Py_INCREF(code);
  slot = code;
}
inline void keep_alive(PyCodeObject* code) {
  const void*& slot = g_seen[(reinterpret_cast<std::uintptr_t>(code) >> 4) & 1023];
  if (slot != code) [[unlikely]] keep_alive_slow(code, slot);
}

#ifdef CUDAKIT_PY_WALK_RECORDS
// One frame record: false for a frame not yet started (incomplete; PyFrame_GetBack skips
// those: _PyFrame_IsIncomplete), else its code object and PyFrame_GetLasti's value. The byte
// offset of the current instruction from the code's first is lasti * sizeof(_Py_CODEUNIT)
// already: no division and multiplication back (_PyInterpreterFrame_LASTI's).
inline bool frame_at(_PyInterpreterFrame* fr, PyFrameRef& out) {
  PyCodeObject* code = fr->f_code;
  const auto off = reinterpret_cast<const char*>(fr->prev_instr) -
                   reinterpret_cast<const char*>(_PyCode_CODE(code));
  if (fr->owner != FRAME_OWNED_BY_GENERATOR &&
      off < static_cast<std::ptrdiff_t>(code->_co_firsttraceable * sizeof(_Py_CODEUNIT)))
    return false;
  out = {code, off < 0 ? -1 : static_cast<int>(off)};
  return true;
}

// Stacks seen recently, each with a key that names its frames (PyStackHook's key). A loop
// allocating from the same call path finds its stack here: the walk compares each frame
// record's raw (code, current instruction) with the entry's and copies the entry's frame out
// instead of computing it; the history then compares one key instead of every frame; and the
// frames' code objects are known to be kept alive already (keep_alive runs on a miss only).
// frame_at depends on the record's (code, current instruction) and, for a record in its
// code's prologue, on its owner, which only a generator's or coroutine's code changes: a stack
// with such a record (a generator starting, say) is walked in full each time, and has no key;
// for any other stack equal raw records mean equal frames. The records of frames not started
// (3.12's shim frames at each entry from C, among them) are kept too, marked with lasti
// kIncomplete, and skipped on the copy without a branch.
// Measured (callgrind, 5-frame stacks, Python 3.11): the walk with frame_at 30 instructions
// per frame; comparing the computed frames with the entry's after the walk cost as much
// again; this comparison with the copy ~20 per record.
// A key is never reused for other frames: an entry that changes gets a new one. Direct-mapped
// by the innermost record: two call paths through one wrapper (a tensor factory called from
// two places) share an entry and miss in turn; a miss walks twice (~45 instructions a frame),
// and the history compares frames then.
// Guarded by the GIL: the hook walks only with it held. (Per-interpreter GILs, 3.12: a
// single-phase module like this one cannot be imported into a subinterpreter with a GIL of
// its own, so every caller holds the one GIL.)
constexpr int kIncomplete = INT_MIN;
constexpr int kMaxRecords = 2 * kMaxPythonFrames;  // a deeper walk is not kept
// A record with its frame laid out as a PyFrameRef followed by the step to the next frame of
// `out` (the PyFrameRef's padding), so that the copy is one 16-byte move and the step one add.
struct KnownRecord {
  const void* code;
  int lasti;          // kIncomplete: a frame not started, not handed out
  int step;           // 1, or 0 for an incomplete record
  const void* instr;  // prev_instr
};
static_assert(sizeof(PyFrameRef) == 16 && offsetof(PyFrameRef, code) == 0 &&
              offsetof(PyFrameRef, lasti) == offsetof(KnownRecord, lasti));
struct KnownStack {
  std::uint64_t key = 0;  // 0: empty
  int records = 0;
  int n = 0;            // frames (complete records)
  int max = 0;          // the capture's max (the walk stops at max frames)
  bool to_end = false;  // the walk ended at the outermost record, not at max frames
  KnownRecord rec[kMaxRecords];
};
constexpr unsigned kKnownStacks = 256;  // ~800 KB of zero pages, touched as used
KnownStack g_known[kKnownStacks];
std::uint64_t g_last_key = 0;

// The walk of a stack not in the table: fills `out` and, where the stack can have a key, the
// entry.
__attribute__((noinline)) int capture_unknown(_PyInterpreterFrame* fr, KnownStack& k,
                                              PyFrameRef* out, int max, std::uint64_t* key) {
  int n = 0, records = 0;
  bool keep = true;
  for (; fr && n < max; fr = fr->previous) {
    PyCodeObject* code = fr->f_code;
    const bool complete = frame_at(fr, out[n]);
    const bool prologue = reinterpret_cast<const char*>(fr->prev_instr) <
                          reinterpret_cast<const char*>(_PyCode_CODE(code) + code->_co_firsttraceable);
    if (prologue && (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)))
      keep = false;  // frame_at depends on the owner here
    if (records < kMaxRecords) {
      k.rec[records++] = {code, complete ? out[n].lasti : kIncomplete, complete ? 1 : 0,
                          fr->prev_instr};
    } else {
      keep = false;
    }
    // Every code object of the entry, an incomplete record's too: one freed could leave its
    // address to another, and the entry would then match records it never saw.
    keep_alive(code);
    n += complete;
  }
  if (!keep) {
    k.key = 0;
    return n;
  }
  k.records = records;
  k.n = n;
  k.max = max;
  k.to_end = fr == nullptr;
  k.key = ++g_last_key;
  *key = k.key;
  return n;
}

int capture_keyed(PyThreadState* ts, PyFrameRef* out, int max, std::uint64_t* key) {
  _PyInterpreterFrame* const top = ts->cframe->current_frame;
  if (!top || max <= 0) return 0;
  const auto h = (reinterpret_cast<std::uintptr_t>(top->f_code) >> 4) ^
                 reinterpret_cast<std::uintptr_t>(top->prev_instr);
  KnownStack& k = g_known[(h ^ (h >> 8)) & (kKnownStacks - 1)];
  if (k.key && k.max == max) {
    // Compared and copied in one pass, without an early exit on a difference (a mispredicted
    // exit costs more than the records left; a miss overwrites `out` anyway). An incomplete
    // record's frame is written and then overwritten by the next one: *o exists, since
    // o < out + k.n <= out + max wherever a record follows.
    std::uintptr_t diff = 0;
    _PyInterpreterFrame* fr = top;
    PyFrameRef* o = out;
    for (const KnownRecord *r = k.rec, *end = k.rec + k.records; r != end; ++r) {
      if (!fr) [[unlikely]] {  // fewer records than the entry's
        diff = 1;
        break;
      }
      diff |= (reinterpret_cast<std::uintptr_t>(fr->f_code) ^
               reinterpret_cast<std::uintptr_t>(r->code)) |
              (reinterpret_cast<std::uintptr_t>(fr->prev_instr) ^
               reinterpret_cast<std::uintptr_t>(r->instr));
      std::memcpy(static_cast<void*>(o), r, sizeof(PyFrameRef));  // code, lasti (step: padding)
      o += r->step;
      fr = fr->previous;
    }
    if (k.to_end && fr) diff = 1;  // more records than the entry's
    if (!diff) {
      *key = k.key;
      return k.n;
    }
  }
  return capture_unknown(top, k, out, max, key);
}
#endif

}  // namespace

int capture_python_frames(PyFrameRef* out, int max, std::uint64_t* key) {
  max = std::min(max, kMaxPythonFrames);
#ifdef CUDAKIT_PY_WALK_RECORDS
  return capture_keyed(_PyThreadState_UncheckedGet(), out, max, key);
#else
  (void)key;
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  int n = 0;
  while (f && n < max) {
    PyCodeObject* code = PyFrame_GetCode(f);
    keep_alive(code);
#if PY_VERSION_HEX >= 0x030B0000
    out[n++] = {code, PyFrame_GetLasti(f)};
#else
    out[n++] = {code, -2 - PyFrame_GetLineNumber(f)};  // no lasti before 3.11: the line
#endif
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
  return n;
#endif
}

namespace {
// A thread that does not hold the GIL: torch's ops release it around native work and allocate
// through the plug-in from there. Their Python frames are still wanted, so the GIL is taken
// back for the walk, as torch's own allocator does for its tracebacks. Threads that never
// ran Python (no thread state) have no Python stack and pay nothing.
__attribute__((noinline)) int capture_without_gil(PyFrameRef* out, int max, std::uint64_t* key) {
  if (!Py_IsInitialized()) return 0;
#if PY_VERSION_HEX >= 0x030D0000
  if (!PyGILState_GetThisThreadState() || Py_IsFinalizing()) return 0;
#else
  if (!PyGILState_GetThisThreadState() || _Py_IsFinalizing()) return 0;
#endif
  PyGILState_STATE g = PyGILState_Ensure();
  const int n = capture_python_frames(out, max, key);
  PyGILState_Release(g);
  return n;
}
}  // namespace

int capture_python_stack(PyFrameRef* out, int max, std::uint64_t* key) {
#if defined(CUDAKIT_PY_WALK_RECORDS) && PY_VERSION_HEX >= 0x030C0000
  // 3.12 keeps the current thread state in a thread_local that is set only while this thread
  // holds the GIL: one read instead of Py_IsInitialized + PyGILState_Check (two TSS look-ups,
  // ~40 instructions). One function from the allocator's hook call to the walk: each call
  // level between them cost ~15 instructions per captured stack (issue 31).
  if (PyThreadState* ts = _PyThreadState_UncheckedGet())
    return capture_keyed(ts, out, std::min(max, kMaxPythonFrames), key);
#else
  // 3.11's current thread state is the GIL holder's, whichever thread that is.
  if (Py_IsInitialized() && PyGILState_Check()) return capture_python_frames(out, max, key);
#endif
  return capture_without_gil(out, max, key);
}

void capture_python_frames(std::vector<PyFrameRef>& out) {
  PyFrameRef buf[kMaxPythonFrames];
  std::uint64_t key = 0;
  const int n = capture_python_frames(buf, kMaxPythonFrames, &key);
  out.insert(out.end(), buf, buf + n);
}

void python_frame_location(const PyFrameRef& fr, std::string& file, int& line,
                           std::string& name) {
  auto* code = static_cast<PyCodeObject*>(const_cast<void*>(fr.code));
  if (const char* s = PyUnicode_AsUTF8(code->co_filename)) file = s;
  if (const char* s = PyUnicode_AsUTF8(code->co_name)) name = s;
  line = fr.lasti <= -2 ? -2 - fr.lasti : PyCode_Addr2Line(code, fr.lasti);
  if (PyErr_Occurred()) PyErr_Clear();
}

}  // namespace cudakit::python
