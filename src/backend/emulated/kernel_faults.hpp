// Faults in host-compiled kernels (runtime modules: the jiterator on the emulated backend).
//
// On a GPU, a kernel that dereferences a bad pointer or executes a trap ends with
// CUDA_ERROR_ILLEGAL_ADDRESS / CUDA_ERROR_ILLEGAL_INSTRUCTION, a sticky error of the context:
// the process lives and every later synchronization reports it. On the emulated backend the
// same user code runs on a stream's worker thread, where the fault is a SIGSEGV / SIGBUS /
// SIGILL / SIGFPE that would kill the interpreter. run_catching_faults() turns it into the
// GPU's outcome: while (and only while) the calling thread runs a host-compiled kernel, a
// handler for those four signals jumps back out of the kernel (siglongjmp) on an alternate
// signal stack (so a stack overflow in the kernel is caught too), and the caller raises
// KernelFaultError, which the stream worker records as the device's sticky error.
//
// Signals outside kernel execution — on any thread, including workers between kernels — go
// to the handler that was installed before ours (chained: a function is called, SIG_DFL
// crashes as before with the same signal, SIG_IGN ignores a sent signal). The handlers are
// installed once, at the first host-compiled kernel, and stay: a handler installed later by
// someone else takes precedence, and must chain to ours (Python's faulthandler re-raises).
//
// What a caught fault leaves behind is what a GPU fault leaves: the kernel stopped half-way
// (its outputs are undefined) and its frames were abandoned without unwinding. If the kernel
// faulted while holding a lock of the C library (malloc inside user code), later use of that
// lock may hang; as on a GPU, the device is unusable afterwards (the error is sticky) and the
// process should be restarted.
#pragma once

#include <string>

#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {

struct KernelFault {
  int signo = 0;
  int code = 0;             // siginfo's si_code
  void* address = nullptr;  // siginfo's si_addr (faulting address or instruction)
};

// Calls fn(arg); true when it returned, false (and *fault filled) when it faulted. An
// exception thrown by fn propagates.
bool run_catching_faults(void (*fn)(const void*), const void* arg, KernelFault* fault);

// A fault of a host-compiled kernel, as the AcceleratorError a GPU gives for it (CUresult
// code and name: 700 CUDA_ERROR_ILLEGAL_ADDRESS for SIGSEGV/SIGBUS, 716
// CUDA_ERROR_MISALIGNED_ADDRESS for an alignment fault, 715 CUDA_ERROR_ILLEGAL_INSTRUCTION for
// SIGILL, 719 CUDA_ERROR_LAUNCH_FAILED for SIGFPE). The worker that catches it makes it the
// device's sticky error.
class KernelFaultError : public AcceleratorError {
 public:
  using AcceleratorError::AcceleratorError;
};

// Builds the error for `fault` in the kernel at `fn` (named through dladdr when it can be).
KernelFaultError kernel_fault_error(const KernelFault& fault, const void* fn);

}  // namespace cudakit::detail::emulated
