// The driver seam: the one narrow interface between cudakit and a device runtime.
//
// Everything above this file (devices, streams, memory, graphs, tensors, ...) is
// backend-agnostic and talks to the device only through `detail::Backend`'s topic interfaces
// (below). Two implementations exist:
//   * cuda     (src/backend/cuda)     — the CUDA driver API, resolved lazily with dlopen.
//   * emulated (src/backend/emulated) — host memory + host threads, for CI and GPU-less
//                                       development.
// The backend is chosen once, explicitly: CUDAKIT_BACKEND=cuda|emulated (default cuda), or
// cudakit::set_backend("emulated") before the first device call. Never a silent fallback.
//
// Code above the seam never asks which backend it runs on: it asks what the backend can do
// (capabilities()), and backends refuse what the other refuses with the same error, so
// callers need no branch. name() is for display and reports only. tests/layout/test_layout.py
// enforces this (docs/architecture.md lists the rules).
//
// The seam is split by topic, one interface per header, so that a module includes only what it
// calls (issue 25 item 7):
//   backend/types.hpp              handle aliases and the values several topics share
//   backend/lifetime.hpp           selection, backend_created, is_shutting_down, host functions
//   backend/device_ops.hpp         DeviceOps: identity, capabilities, devices, telemetry
//   backend/memory_ops.hpp         MemoryOps: allocation, pinned host, VM, memory IPC, copies
//   backend/stream_ops.hpp         StreamOps: streams, host tasks, events (and their IPC)
//   backend/graph_ops.hpp          GraphOps: capture, graphs, capture mode (+ its guard)
//   backend/kernel_ops.hpp         KernelOps: modules, launches, runtime-compiled modules
//   backend/math_ops.hpp           MathOps: GEMM, vendor handles, GEMM tuning plans
//   backend/comm_ops.hpp           CommOps: collectives (interfaces in collectives.hpp)
//   backend/green_context_ops.hpp  GreenContextOps: SM partitions
//   backend/gds_ops.hpp            GdsOps: GPUDirect Storage
//   backend/profiler_ops.hpp       ProfilerOps: capture range, activity tracing
// Each topic header declares an accessor (stream_ops(), memory_ops(), ...) returning the
// process's backend as that interface. The interfaces are plain (non-virtual) bases of Backend
// and declare disjoint method names, so the upcast is a constant offset computed at compile
// time: a call through a topic reference costs exactly what a call through Backend& cost (one
// virtual call; no virtual inheritance, no per-call lookup). Their destructors are protected:
// nothing is destroyed through a topic. Code above the seam includes the topic headers it uses
// and never this file (the layout test enforces it); backend selection and the backends
// themselves include this file, and tests may.
//
// Conventions for every method:
//   * Errors throw cudakit::AcceleratorError with a CUresult-numbered code (error.hpp).
//     Exception: allocation methods return nullptr / 0 on out-of-memory, so the caching
//     allocator can free cached blocks and retry before it reports.
//   * Device indices are the backend's visible ordinals (CUDA_VISIBLE_DEVICES applied).
//   * A null StreamHandle means "the legacy default stream of the calling thread's current
//     device" (as in CUDA). The layer above sets the current device before calling.
//   * Methods are thread-safe unless noted.
//   * Nothing here may be called during static destruction: handles owned by objects that
//     outlive main() must skip their destroy call when detail::is_shutting_down().
#pragma once

#include <memory>
#include <string>

#include "backend/comm_ops.hpp"
#include "backend/device_ops.hpp"
#include "backend/gds_ops.hpp"
#include "backend/graph_ops.hpp"
#include "backend/green_context_ops.hpp"
#include "backend/kernel_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/math_ops.hpp"
#include "backend/memory_ops.hpp"
#include "backend/profiler_ops.hpp"
#include "backend/stream_ops.hpp"
#include "backend/types.hpp"
#include "cudakit/export.hpp"

namespace cudakit::detail {

// The whole seam: what a backend implements. Implementations derive from Backend (never from a
// topic alone) and mark every method `override`.
struct Backend : DeviceOps,
                 MemoryOps,
                 StreamOps,
                 GraphOps,
                 KernelOps,
                 MathOps,
                 CommOps,
                 GreenContextOps,
                 GdsOps,
                 ProfilerOps {
  virtual ~Backend() = default;

  // ProfilerOps::activity_start's default: nothing is delivered (the reason names the backend,
  // so it lives here, where name() is).
  ActivityStatus activity_start(ActivitySink* sink, const ActivityConfig& config) override {
    (void)sink;
    (void)config;
    ActivityStatus s;
    s.reason = std::string("the ") + name() + " backend records no device activity";
    return s;
  }
};

// The process's backend, created on first use from CUDAKIT_BACKEND. Never throws for an
// unavailable cuda driver (device_count() is 0); throws ValueError for an unknown name.
CUDAKIT_INTERNAL_API Backend& backend();

// Factories implemented by each backend directory.
std::unique_ptr<Backend> make_cuda_backend();
std::unique_ptr<Backend> make_emulated_backend();

}  // namespace cudakit::detail
