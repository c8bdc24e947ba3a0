// Allocation history (torch's _record_memory_history): a bounded ring of trace entries per
// device plus optional per-block allocation contexts (raw return addresses captured with
// a frame-pointer walk, symbolised only when a snapshot is taken).
//
// Thread-safety: record_trace is called with the device allocator's mutex held and takes
// the history's own mutex; enable/disable and snapshot reads are thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace cudakit::memory {

struct HistoryContext {
  std::vector<void*> frames;            // raw C++ return addresses
  std::vector<std::string> py_frames;   // "file:line:function" from the Python hook
  double time_us = 0;
};

struct TraceEntry {
  const char* action = "";  // a string literal
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  detail::StreamHandle stream = nullptr;
  double time_us = 0;
  std::shared_ptr<HistoryContext> context;
};

extern std::atomic<bool> g_history_enabled;
inline bool history_enabled() noexcept {
  return g_history_enabled.load(std::memory_order_relaxed);
}

// `ctx` (when non-null) is the block's context slot: "alloc" fills it, later actions reuse it.
void record_trace(int device, const char* action, std::uintptr_t addr, std::size_t size,
                  detail::StreamHandle stream, std::shared_ptr<HistoryContext>* ctx);

// enabled: None/"state"/"all" as torch (nullptr = off); context: "state"|"alloc"|"all";
// stacks: "python"|"cpp"|"all"; max_entries: ring size per device.
void record_memory_history(const char* enabled, const char* context, const char* stacks,
                           std::size_t max_entries);
std::vector<TraceEntry> device_traces(int device);
std::vector<std::string> symbolize(const HistoryContext& ctx);
// Python frame capture hook (set by the Python bindings): appends the current Python stack.
using PyStackHook = void (*)(std::vector<std::string>& out);
void set_python_stack_hook(PyStackHook hook);

}  // namespace cudakit::memory
