// Faults in host-compiled kernels (see kernel_faults.hpp for the design).
#include "backend/emulated/kernel_faults.hpp"

#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <mutex>

namespace cudakit::detail::emulated {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
constexpr std::size_t kAltStackBytes = std::size_t{64} << 10;

// The handlers in place before ours, by index in kSignals. Written once before ours are
// installed, read-only afterwards (the handler reads them without a lock).
struct sigaction g_previous[4];

// The kernel the calling thread runs now (null: none). A plain pointer with constant
// initialization, so the handler reads it without running any TLS constructor.
struct Scope {
  sigjmp_buf jump;
  KernelFault fault;
};
thread_local Scope* t_scope = nullptr;

int slot_of(int sig) {
  for (int i = 0; i < 4; ++i)
    if (kSignals[i] == sig) return i;
  return -1;
}

// What would have happened without us. Runs in the signal handler: async-signal-safe calls
// only.
void chain(int sig, siginfo_t* info, void* context) {
  const int i = slot_of(sig);
  const struct sigaction& prev = g_previous[i < 0 ? 0 : i];
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  const bool sent = info == nullptr || info->si_code <= 0;  // kill()/raise(), not a fault
  if (prev.sa_handler == SIG_IGN && sent) return;
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // SIG_DFL (or SIG_IGN for a real fault, which the kernel would not ignore either): restore
  // the default action. A fault re-executes the faulting instruction on return and ends the
  // process with this signal as before; a sent signal is raised again and delivered as soon
  // as the handler returns (it is blocked while the handler runs).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (sent) raise(sig);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  Scope* s = t_scope;
  if (s == nullptr) {
    chain(sig, info, context);
    return;
  }
  t_scope = nullptr;  // a second fault before the jump lands is not ours to catch
  s->fault.signo = sig;
  s->fault.code = info ? info->si_code : 0;
  s->fault.address = info ? info->si_addr : nullptr;
  siglongjmp(s->jump, 1);
}

void install_handlers() {
  for (int i = 0; i < 4; ++i) sigaction(kSignals[i], nullptr, &g_previous[i]);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) sigaddset(&sa.sa_mask, sig);
  for (int sig : kSignals) sigaction(sig, &sa, nullptr);
}

// An alternate signal stack for this thread (unless it has one): the handler must run even
// when the kernel overflowed its stack. Freed when the thread exits.
struct AltStack {
  void* base = nullptr;
  AltStack() {
    stack_t old{};
    if (sigaltstack(nullptr, &old) == 0 && (old.ss_flags & SS_DISABLE) == 0) return;
    void* p = mmap(nullptr, kAltStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;  // no alternate stack: every fault but a stack overflow is caught
    stack_t ss{};
    ss.ss_sp = p;
    ss.ss_size = kAltStackBytes;
    if (sigaltstack(&ss, nullptr) != 0) {
      munmap(p, kAltStackBytes);
      return;
    }
    base = p;
  }
  ~AltStack() {
    if (!base) return;
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
    munmap(base, kAltStackBytes);
  }
  AltStack(const AltStack&) = delete;
  AltStack& operator=(const AltStack&) = delete;
};

// No object with a destructor lives in this frame: a fault leaves it through siglongjmp. An
// exception thrown by user code leaves it too, and must not leave t_scope pointing here.
__attribute__((noinline)) bool guarded_call(Scope* scope, void (*fn)(const void*), const void* arg) {
  if (sigsetjmp(scope->jump, 1) != 0) return false;  // 1: the signal mask comes back too
  t_scope = scope;
  try {
    fn(arg);
  } catch (...) {
    t_scope = nullptr;
    throw;
  }
  t_scope = nullptr;
  return true;
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return buf;
}

}  // namespace

bool run_catching_faults(void (*fn)(const void*), const void* arg, KernelFault* fault) {
  static std::once_flag once;
  std::call_once(once, install_handlers);
  thread_local AltStack alt;
  (void)alt;
  Scope scope{};
  if (guarded_call(&scope, fn, arg)) return true;
  *fault = scope.fault;
  return false;
}

KernelFaultError kernel_fault_error(const KernelFault& f, const void* fn) {
  std::string kernel = "a runtime-compiled kernel";
  Dl_info info{};
  if (dladdr(fn, &info) != 0 && info.dli_sname) kernel = std::string("kernel ") + info.dli_sname;
  int code = 700;
  const char* name = "CUDA_ERROR_ILLEGAL_ADDRESS";
  std::string what;
  switch (f.signo) {
    case SIGILL:
      code = 715;
      name = "CUDA_ERROR_ILLEGAL_INSTRUCTION";
      what = "SIGILL (an illegal or trap instruction at " + hex(f.address) + ")";
      break;
    case SIGFPE:
      code = 719;
      name = "CUDA_ERROR_LAUNCH_FAILED";
      what = "SIGFPE (an arithmetic exception, such as an integer division by zero, at " +
             hex(f.address) + ")";
      break;
    case SIGBUS:
      if (f.code == BUS_ADRALN) {
        code = 716;
        name = "CUDA_ERROR_MISALIGNED_ADDRESS";
      }
      what = "SIGBUS (a bad access to address " + hex(f.address) + ")";
      break;
    default:
      what = "SIGSEGV (an access to address " + hex(f.address) +
             (f.code == SEGV_MAPERR ? ", which is not mapped)" : ", which is not permitted)");
      break;
  }
  return KernelFaultError(code, name,
                          "emulated backend: " + kernel + " faulted with " + what + ": " + name +
                              " (code " + std::to_string(code) +
                              "). As on a GPU this error is sticky: every later synchronization "
                              "of this device reports it; restart the process to use the "
                              "device again");
}

}  // namespace cudakit::detail::emulated
