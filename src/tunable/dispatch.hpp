// The GEMM entry point every product in cudakit goes through (ops::blas_gemm for matmul,
// tunable::gemm for raw pointers). Internal header.
//
// TunableOp off: Backend::gemm, after one relaxed atomic load. On: the problem's key
// (signature.hpp: shape, type, transposes, leading dimensions, pointer alignment, device) is
// looked up in a per-thread direct-mapped cache of resolved plans, valid while the settings'
// generation is unchanged; a hit runs the plan (no lock, no allocation beyond a cuBLASLt
// workspace from the caching allocator when the plan needs one). A miss takes the slow path:
// the recorded solution (rebuilt for this problem; Default when it cannot run here), or
// tuning (not while the stream is capturing a graph: Default runs and nothing is recorded), or
// recording in the untuned file, then fills the cache. Resolved plans live for the process
// (a registry that never frees them), so cached raw pointers stay valid.
//
// Thread-safety: thread-safe; see above for what locks.
#pragma once

#include "backend/math_ops.hpp"

namespace cudakit::tunable::detail {

void gemm(int device, cudakit::detail::StreamHandle s, cudakit::detail::GemmArgs g);

// Test support: empties the calling thread's cache, invalidates every other thread's (the
// generation moves on) and forgets which unusable solutions were already reported. The plan
// registry keeps its plans (other threads' caches may still point at them).
void reset_dispatch_for_testing();

}  // namespace cudakit::tunable::detail
