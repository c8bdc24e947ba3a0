// TunableOp's process-wide settings: what the setters of include/cudakit/tunable.hpp store,
// overridden by the environment as torch does (PYTORCH_TUNABLEOP_<X>, or CUDAKIT_TUNABLEOP_<X>
// which wins), plus the verbose log and the warning channel. Internal header.
//
// The environment is read once, when settings() is first called (torch caches it the same
// way); reload_environment() re-reads it for tests. A malformed variable is a ValueError
// naming it, raised from that first call and from every later call until it is fixed and
// reloaded (so the error is never lost).
//
// Thread-safety: the flags and numbers are atomics (the dispatch hot path reads `enabled` with
// one relaxed load); the filename and the tolerances are guarded by a mutex. Every change that
// can alter which solution a product runs bumps generation(), which invalidates the per-thread
// dispatch caches (dispatch.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "cudakit/tunable.hpp"

namespace cudakit::tunable::detail {

class Settings {
 public:
  Settings();

  // ---- switches (effective values: environment first) ----
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed) || env_enabled_; }
  bool tuning() const noexcept { return !env_tuning_off_ && tuning_.load(std::memory_order_relaxed); }
  bool record_untuned() const noexcept {
    return env_record_untuned_ || record_untuned_.load(std::memory_order_relaxed);
  }
  bool backend_candidates() const noexcept { return backend_candidates_; }
  void set_enabled(bool v);
  void set_tuning(bool v);
  void set_record_untuned(bool v);

  // ---- budgets ----
  int max_tuning_ms() const noexcept { return env_or(env_max_tuning_ms_, max_tuning_ms_); }
  int max_tuning_iterations() const noexcept { return env_or(env_max_tuning_iters_, max_tuning_iters_); }
  int max_warmup_ms() const noexcept { return env_or(env_max_warmup_ms_, max_warmup_ms_); }
  int max_warmup_iterations() const noexcept { return env_or(env_max_warmup_iters_, max_warmup_iters_); }
  void set_max_tuning_ms(int v) { max_tuning_ms_.store(v, std::memory_order_relaxed); }
  void set_max_tuning_iterations(int v) { max_tuning_iters_.store(v, std::memory_order_relaxed); }
  void set_max_warmup_ms(int v) { max_warmup_ms_.store(v, std::memory_order_relaxed); }
  void set_max_warmup_iterations(int v) { max_warmup_iters_.store(v, std::memory_order_relaxed); }

  // Rotating buffer in MiB as set (negative: the L2 size; 0: off).
  int rotating_mb() const noexcept { return env_or(env_rotating_mb_, rotating_mb_); }
  void set_rotating_mb(int v) { rotating_mb_.store(v, std::memory_order_relaxed); }

  NumericalCheck numerical_check() const;
  void set_numerical_check(NumericalCheck c);

  bool write_on_exit() const noexcept { return write_on_exit_.load(std::memory_order_relaxed); }
  void set_write_on_exit(bool v) { write_on_exit_.store(v, std::memory_order_relaxed); }

  // ---- files ----
  // The results filename as resolved (ordinal inserted); "" when not set yet.
  std::string filename() const;
  // Stores `name` (ordinal inserted for `device` when insert is true). Also remembers the
  // unresolved template, for multi-GPU tuning.
  void set_filename(const std::string& name, bool insert_device_ordinal, int device);
  // The template a per-device filename is made from: what set_filename received, else the
  // environment's PYTORCH_TUNABLEOP_FILENAME, else "tunableop_results.csv".
  std::string filename_template() const;
  bool filename_was_set() const;
  // Forgets the filename (tests: the next first use resolves the default again).
  void clear_filename();
  // The untuned-GEMM file for `device` (ordinal inserted before the last '.').
  std::string untuned_filename(int device) const;

  // ---- diagnostics ----
  int verbose() const noexcept { return verbose_; }
  const std::string& verbose_filename() const noexcept { return verbose_filename_; }

  // Bumped by every change that may change which solution a product runs.
  std::uint64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }
  void bump_generation() noexcept { generation_.fetch_add(1, std::memory_order_acq_rel); }

  // Re-reads the environment (tests).
  void reload_environment();
  // Back to the defaults of a fresh process, environment re-read (tests).
  void reset_for_testing();
  // The malformed environment variable's message, "" when none.
  const std::string& env_error() const noexcept { return env_error_; }

 private:
  static int env_or(const std::optional<int>& env, const std::atomic<int>& value) noexcept {
    return env ? *env : value.load(std::memory_order_relaxed);
  }
  void read_environment();

  std::atomic<bool> enabled_{false}, tuning_{true}, record_untuned_{false}, write_on_exit_{true};
  std::atomic<int> max_tuning_ms_{30}, max_tuning_iters_{100}, max_warmup_ms_{0},
      max_warmup_iters_{0}, rotating_mb_{-1};
  std::atomic<std::uint64_t> generation_{1};

  mutable std::mutex mu_;
  NumericalCheck numerical_{};
  std::string filename_, filename_template_;
  bool filename_set_ = false;

  // Environment (fixed after read_environment).
  bool env_enabled_ = false, env_tuning_off_ = false, env_record_untuned_ = false;
  bool backend_candidates_ = true;
  std::optional<int> env_max_tuning_ms_, env_max_tuning_iters_, env_max_warmup_ms_,
      env_max_warmup_iters_, env_rotating_mb_;
  std::optional<NumericalCheck> env_numerical_;
  std::string env_filename_, env_untuned_filename_;
  int verbose_ = 0;
  std::string verbose_filename_ = "err";
  std::string env_error_;  // a malformed variable, raised by settings()
};

// The process's settings, created on first use (reads the environment). Throws ValueError
// while an environment variable is malformed.
Settings& settings();
// The same object without that check (to reload the environment, and in tests).
Settings& settings_unchecked() noexcept;

// "name" with `device`'s ordinal at "%d", else before the last '.', else appended (torch).
std::string insert_ordinal(const std::string& name, int device);

// Verbose log (PYTORCH_TUNABLEOP_VERBOSE >= level) to stderr, stdout or a file.
void log(int level, const std::string& message);
// A warning through the handler of set_warning_handler (stderr by default).
void warn(const std::string& message);

}  // namespace cudakit::tunable::detail
