// Internal: how cudakit.nvtx reports its ranges and marks to the profiler's tracer
// (cudakit::profiler::Trace), which records them as Kineto's user_annotation events on both
// backends, whether or not an NVTX tool is attached.
//
// The nvtx module does not depend on the profiler (src/nvtx also builds alone, see the
// test_nvtx_noop target): the tracer installs a table of functions here while it records.
// Each range/mark call then costs one acquire load when no trace runs.
//
// Thread-safety: set_trace_hook may race with the calls; a call sees the old or the new
// table, and tables are never freed (static objects of the tracer).
#pragma once

#include <atomic>
#include <cstdint>

namespace cudakit::nvtx::detail {

struct TraceHook {
  // `domain`: the domain's name ("" for NVTX's default domain); `slot`: its index
  // (Domain::slot(), 0 for the default domain); `message` may be null.
  void (*push)(int slot, const char* domain, const char* message) noexcept;
  void (*pop)(int slot) noexcept;
  void (*start)(std::uint64_t id, const char* domain, const char* message) noexcept;
  void (*end)(std::uint64_t id) noexcept;
  void (*mark)(const char* domain, const char* message) noexcept;
};

extern std::atomic<const TraceHook*> g_trace_hook;

inline const TraceHook* trace_hook() noexcept {
  return g_trace_hook.load(std::memory_order_acquire);
}
inline void set_trace_hook(const TraceHook* hook) noexcept {
  g_trace_hook.store(hook, std::memory_order_release);
}

}  // namespace cudakit::nvtx::detail
