// Everything cudakit's C++ API offers, in one include: #include <cudakit/cudakit.hpp>.
//
// Each header below also stands alone (tests/layout/test_headers.py compiles each by itself
// with g++ and clang++), so code that cares about compile time can include only what it uses.
//
// Language: C++20 for this header. A .cu file compiled with nvcc's default dialect (C++17)
// can include the headers a kernel launcher needs one by one: device.hpp, error.hpp,
// stream.hpp, memory.hpp, allocation.hpp, graphs.hpp, graph_annotations.hpp, nvtx.hpp,
// profiler.hpp (and every other header except sanitizer.hpp, whose API uses std::span).
#pragma once

#if __cplusplus < 202002L
#error "cudakit/cudakit.hpp needs C++20 (compile with -std=c++20; nvcc: -std=c++20). Under C++17 include the headers you need one by one: every cudakit header but sanitizer.hpp works there"
#endif

#include "cudakit/allocation.hpp"
#include "cudakit/comm.hpp"
#include "cudakit/device.hpp"
#include "cudakit/dlpack.hpp"
#include "cudakit/error.hpp"
#include "cudakit/export.hpp"
#include "cudakit/gds.hpp"
#include "cudakit/graph_annotations.hpp"
#include "cudakit/graphs.hpp"
#include "cudakit/green_context.hpp"
#include "cudakit/jiterator.hpp"
#include "cudakit/libraries.hpp"
#include "cudakit/memory.hpp"
#include "cudakit/nccl.hpp"
#include "cudakit/nccl_types.hpp"
#include "cudakit/nvtx.hpp"
#include "cudakit/ops.hpp"
#include "cudakit/plugin.hpp"
#include "cudakit/profiler.hpp"
#include "cudakit/python_stacks.hpp"
#include "cudakit/random.hpp"
#include "cudakit/sanitizer.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"
#include "cudakit/tunable.hpp"
