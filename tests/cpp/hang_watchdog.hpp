// Turns a hang into a test failure that shows where every thread is.
//
// HangWatchdog arms a timer thread. If the scope it guards has not finished when the time is
// up, it prints every thread's stack to stderr and aborts the process, so ctest reports a
// failure with the evidence instead of waiting for its own timeout and killing the process
// silently. Stacks come from two sources:
//  * gdb, when installed and allowed to attach (`thread apply all bt`: demangled, inlined
//    frames, arguments);
//  * always, from the process itself: each thread listed in /proc/self/task is sent a signal
//    whose handler writes backtrace_symbols_fd() (works without gdb or ptrace rights, e.g.
//    in containers; names only exported symbols, which the test executables export).
//
// Thread-safety: one watchdog per scope; its destructor disarms it.
#pragma once

#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace cudakit::testing {

// Seconds a stress test runs: CUDAKIT_STRESS_SECONDS (default `fallback`; the GPU run sets
// it higher).
inline double stress_seconds(double fallback = 3.0) {
  if (const char* e = std::getenv("CUDAKIT_STRESS_SECONDS")) {
    const double v = std::strtod(e, nullptr);
    if (v > 0) return v;
  }
  return fallback;
}

class HangWatchdog {
 public:
  HangWatchdog(double seconds, std::string what) : what_(std::move(what)) {
    void* warm[1];
    backtrace(warm, 1);  // loads libgcc's unwinder now, not inside a signal handler
    struct sigaction sa {};
    sa.sa_handler = &HangWatchdog::dump_this_thread;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGURG, &sa, nullptr);
    timer_ = std::thread([this, seconds] {
      std::unique_lock lk(mu_);
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(seconds));
      if (cv_.wait_until(lk, deadline, [this] { return done_; })) return;
      lk.unlock();
      fire(seconds);
    });
  }
  ~HangWatchdog() {
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    timer_.join();
  }
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;

 private:
  static void dump_this_thread(int) {
    char head[64];
    const int n = std::snprintf(head, sizeof head, "\n--- thread %ld ---\n",
                                static_cast<long>(syscall(SYS_gettid)));
    if (n > 0) (void)!write(STDERR_FILENO, head, static_cast<std::size_t>(n));
    void* frames[64];
    const int depth = backtrace(frames, 64);
    backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  }

  void fire(double seconds) {
    std::fprintf(stderr, "\nHANG: %s did not finish within %.0f s; stacks of all threads follow\n",
                 what_.c_str(), seconds);
    std::fflush(stderr);
    gdb_dump();
    const pid_t pid = getpid();
    const long self = syscall(SYS_gettid);
    if (DIR* d = opendir("/proc/self/task")) {
      while (dirent* e = readdir(d)) {
        const long tid = std::strtol(e->d_name, nullptr, 10);
        if (tid <= 0 || tid == self) continue;
        syscall(SYS_tgkill, pid, tid, SIGURG);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // keeps dumps apart
      }
      closedir(d);
    }
    std::fprintf(stderr, "\nHANG: aborting (%s)\n", what_.c_str());
    std::fflush(stderr);
    std::abort();
  }

  // `gdb -p <this process>` in a child, when gdb exists; bounded to 60 s.
  static void gdb_dump() {
    if (access("/usr/bin/gdb", X_OK) != 0) return;
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // Yama: let the child attach
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child < 0) return;
    if (child == 0) {
      char pid_arg[32];
      std::snprintf(pid_arg, sizeof pid_arg, "%d", static_cast<int>(parent));
      dup2(STDERR_FILENO, STDOUT_FILENO);
      execl("/usr/bin/gdb", "gdb", "-q", "-batch", "-nx", "-p", pid_arg, "-ex",
            "thread apply all bt", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 600; ++i) {
      int status = 0;
      if (waitpid(child, &status, WNOHANG) == child) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }

  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread timer_;
};

}  // namespace cudakit::testing
