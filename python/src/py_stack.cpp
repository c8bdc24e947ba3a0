// python/src/py_stack.hpp. Costs (issue 31): a recorded alloc+free pair captures two stacks,
// so the walk is on the allocation path of every history-recording program.
#include "py_stack.hpp"

#include <Python.h>
#include <frameobject.h>

#include <cstdint>
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

// Takes one reference to `code` the first time it is seen (guarded by the GIL). A
// direct-mapped cache in front of the set: a loop's few code objects skip the hash lookup.
inline void keep_alive(PyCodeObject* code) {
  static auto* kept = new std::unordered_set<const void*>();  // never destroyed
  static const void* seen[1024] = {};
  const void*& slot = seen[(reinterpret_cast<std::uintptr_t>(code) >> 4) & 1023];
  if (slot != code) {
    if (kept->insert(code).second) Py_INCREF(code);
    slot = code;
  }
}

constexpr int kMaxPythonFrames = 64;

}  // namespace

void capture_python_frames(std::vector<PyFrameRef>& out) {
#ifdef CUDAKIT_PY_WALK_RECORDS
  PyThreadState* ts = PyThreadState_Get();
  int depth = 0;
  // Frames not yet started (incomplete) are skipped, as PyFrame_GetBack does.
  for (_PyInterpreterFrame* fr = ts->cframe->current_frame; fr && depth < kMaxPythonFrames;
       fr = fr->previous) {
    if (_PyFrame_IsIncomplete(fr)) continue;
    ++depth;
    PyCodeObject* code = fr->f_code;
    keep_alive(code);
    const int lasti = _PyInterpreterFrame_LASTI(fr);  // PyFrame_GetLasti's value
    out.push_back({code, lasti < 0 ? -1 : lasti * static_cast<int>(sizeof(_Py_CODEUNIT))});
  }
#else
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  int depth = 0;
  while (f && depth++ < kMaxPythonFrames) {
    PyCodeObject* code = PyFrame_GetCode(f);
    keep_alive(code);
#if PY_VERSION_HEX >= 0x030B0000
    out.push_back({code, PyFrame_GetLasti(f)});
#else
    out.push_back({code, -2 - PyFrame_GetLineNumber(f)});  // no lasti before 3.11: the line
#endif
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
#endif
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
