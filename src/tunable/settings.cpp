#include "tunable/settings.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>

#include "cudakit/error.hpp"

namespace cudakit::tunable::detail {
namespace {

// CUDAKIT_TUNABLEOP_<name> wins over PYTORCH_TUNABLEOP_<name>; `used` receives the name read.
std::optional<std::string> env(const char* name, std::string& used) {
  for (const char* prefix : {"CUDAKIT_TUNABLEOP_", "PYTORCH_TUNABLEOP_"}) {
    std::string var = std::string(prefix) + name;
    if (const char* v = std::getenv(var.c_str())) {
      used = std::move(var);
      return std::string(v);
    }
  }
  return std::nullopt;
}

[[noreturn]] void bad_env(const std::string& var, const std::string& value, const char* accepted) {
  throw ValueError("environment variable " + var + "='" + value + "' is not valid: expected " +
                   accepted);
}

// Whole-string integer (torch reads these with stoi; a typo should not silently mean 0).
int parse_int(const std::string& var, const std::string& v, const char* accepted) {
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || x < INT32_MIN ||
      x > INT32_MAX) {
    bad_env(var, v, accepted);
  }
  return static_cast<int>(x);
}

bool parse_flag(const std::string& var, const std::string& v) {
  if (v == "1") return true;
  if (v == "0") return false;
  bad_env(var, v, "0 or 1");
}

double parse_tolerance(const std::string& var, const std::string& full, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || !(x > 0)) {
    bad_env(var, full, "0, 1 or '<atol>_<rtol>' with positive tolerances (e.g. 1e-3_1e-3)");
  }
  return x;
}

std::mutex& handler_mutex() {
  static std::mutex mu;
  return mu;
}
std::shared_ptr<std::function<void(const std::string&)>>& handler_slot() {
  static auto* slot = new std::shared_ptr<std::function<void(const std::string&)>>();
  return *slot;
}

}  // namespace

Settings::Settings() {
  try {
    read_environment();
  } catch (const ValueError& e) {
    env_error_ = e.what();
  }
}

void Settings::read_environment() {
  env_enabled_ = env_tuning_off_ = env_record_untuned_ = false;
  backend_candidates_ = true;
  env_max_tuning_ms_.reset();
  env_max_tuning_iters_.reset();
  env_max_warmup_ms_.reset();
  env_max_warmup_iters_.reset();
  env_rotating_mb_.reset();
  env_numerical_.reset();
  env_filename_.clear();
  env_untuned_filename_.clear();
  verbose_ = 0;
  verbose_filename_ = "err";
  std::string var;
  // torch: only "1" forces ENABLED / RECORD_UNTUNED on and only "0" forces TUNING off; other
  // values of these flags are rejected here rather than silently ignored.
  if (auto v = env("ENABLED", var)) env_enabled_ = parse_flag(var, *v);
  if (auto v = env("TUNING", var)) env_tuning_off_ = !parse_flag(var, *v);
  if (auto v = env("RECORD_UNTUNED", var)) env_record_untuned_ = parse_flag(var, *v);
  if (auto v = env("CUBLASLT_ENABLED", var)) backend_candidates_ = parse_flag(var, *v);
  const char* ms = "a whole number of milliseconds (negative means 0)";
  const char* count = "a whole number (negative means 0)";
  auto clamp0 = [](int x) { return x < 0 ? 0 : x; };
  if (auto v = env("MAX_TUNING_DURATION_MS", var)) env_max_tuning_ms_ = clamp0(parse_int(var, *v, ms));
  if (auto v = env("MAX_TUNING_ITERATIONS", var)) env_max_tuning_iters_ = clamp0(parse_int(var, *v, count));
  if (auto v = env("MAX_WARMUP_DURATION_MS", var)) env_max_warmup_ms_ = clamp0(parse_int(var, *v, ms));
  if (auto v = env("MAX_WARMUP_ITERATIONS", var)) env_max_warmup_iters_ = clamp0(parse_int(var, *v, count));
  if (auto v = env("ROTATING_BUFFER_SIZE", var)) {
    env_rotating_mb_ = parse_int(var, *v, "a whole number of MiB (0: off, negative: the L2 size)");
  }
  if (auto v = env("NUMERICAL_CHECK", var)) {
    NumericalCheck c;
    if (*v == "0") {
      c.enabled = false;
    } else if (*v == "1") {
      c.enabled = true;
    } else {
      const std::size_t us = v->find('_');
      if (us == std::string::npos) {
        bad_env(var, *v, "0, 1 or '<atol>_<rtol>' with positive tolerances (e.g. 1e-3_1e-3)");
      }
      c.enabled = true;
      c.atol = parse_tolerance(var, *v, v->substr(0, us));
      c.rtol = parse_tolerance(var, *v, v->substr(us + 1));
    }
    env_numerical_ = c;
  }
  if (auto v = env("FILENAME", var)) env_filename_ = *v;
  if (auto v = env("UNTUNED_FILENAME", var)) env_untuned_filename_ = *v;
  if (auto v = env("VERBOSE", var)) verbose_ = parse_int(var, *v, "0, 1, 2 or 3");
  if (auto v = env("VERBOSE_FILENAME", var)) verbose_filename_ = *v;
}

void Settings::reload_environment() {
  env_error_.clear();
  try {
    read_environment();
  } catch (const ValueError& e) {
    env_error_ = e.what();
  }
  bump_generation();
}

void Settings::reset_for_testing() {
  enabled_ = false;
  tuning_ = true;
  record_untuned_ = false;
  write_on_exit_ = true;
  max_tuning_ms_ = 30;
  max_tuning_iters_ = 100;
  max_warmup_ms_ = 0;
  max_warmup_iters_ = 0;
  rotating_mb_ = -1;
  set_numerical_check(NumericalCheck{});
  clear_filename();
  reload_environment();
}

void Settings::set_enabled(bool v) {
  enabled_.store(v, std::memory_order_relaxed);
  bump_generation();
}
void Settings::set_tuning(bool v) {
  tuning_.store(v, std::memory_order_relaxed);
  bump_generation();
}
void Settings::set_record_untuned(bool v) {
  record_untuned_.store(v, std::memory_order_relaxed);
  bump_generation();
}

NumericalCheck Settings::numerical_check() const {
  if (env_numerical_) return *env_numerical_;
  std::lock_guard<std::mutex> l(mu_);
  return numerical_;
}

void Settings::set_numerical_check(NumericalCheck c) {
  std::lock_guard<std::mutex> l(mu_);
  numerical_ = c;
}

std::string Settings::filename() const {
  std::lock_guard<std::mutex> l(mu_);
  return filename_;
}

void Settings::set_filename(const std::string& name, bool insert_device_ordinal, int device) {
  std::string resolved = insert_device_ordinal && !name.empty() ? insert_ordinal(name, device) : name;
  std::lock_guard<std::mutex> l(mu_);
  filename_ = std::move(resolved);
  filename_template_ = name;
  filename_set_ = true;
}

std::string Settings::filename_template() const {
  std::lock_guard<std::mutex> l(mu_);
  if (filename_set_) return filename_template_;
  return env_filename_.empty() ? "tunableop_results.csv" : env_filename_;
}

void Settings::clear_filename() {
  std::lock_guard<std::mutex> l(mu_);
  filename_.clear();
  filename_template_.clear();
  filename_set_ = false;
}

bool Settings::filename_was_set() const {
  std::lock_guard<std::mutex> l(mu_);
  return filename_set_;
}

std::string Settings::untuned_filename(int device) const {
  std::string name = env_untuned_filename_.empty() ? "tunableop_untuned.csv" : env_untuned_filename_;
  // torch inserts before the extension only (no "%d" here).
  const std::size_t slash = name.rfind('/'), dot = name.rfind('.');
  const std::string d = std::to_string(device);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return name + d;
  return name.insert(dot, d);
}

Settings& settings_unchecked() noexcept {
  static Settings* s = new Settings();  // leaked: the exit hook may still read it
  return *s;
}

Settings& settings() {
  Settings* s = &settings_unchecked();
  if (!s->env_error().empty()) [[unlikely]] throw ValueError("TunableOp: " + s->env_error());
  return *s;
}

std::string insert_ordinal(const std::string& name, int device) {
  const std::string d = std::to_string(device);
  std::string out = name;
  if (const std::size_t at = out.find("%d"); at != std::string::npos) return out.replace(at, 2, d);
  // Before the extension: the last '.' of the file name itself (torch takes the last '.' of
  // the whole path, which puts the ordinal into a directory name like "run.3/results").
  const std::size_t slash = out.rfind('/');
  const std::size_t dot = out.rfind('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) return out.insert(dot, d);
  return out + d;
}

void log(int level, const std::string& message) {
  Settings* s = nullptr;
  try {
    s = &settings();
  } catch (...) {  // a malformed environment is reported by the call that needs it
    return;
  }
  if (s->verbose() < level) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  const std::string& target = s->verbose_filename();
  if (target == "out") {
    std::cout << "TunableOp: " << message << std::endl;
  } else if (target == "err") {
    std::cerr << "TunableOp: " << message << std::endl;
  } else {
    static std::ofstream* file = new std::ofstream(target, std::ios::app);
    *file << "TunableOp: " << message << std::endl;
  }
}

void warn(const std::string& message) {
  std::shared_ptr<std::function<void(const std::string&)>> h;
  {
    std::lock_guard<std::mutex> l(handler_mutex());
    h = handler_slot();
  }
  if (h && *h) {
    (*h)(message);
  } else {
    std::fprintf(stderr, "cudakit: TunableOp warning: %s\n", message.c_str());
  }
  log(1, "warning: " + message);
}

}  // namespace cudakit::tunable::detail

namespace cudakit::tunable {

void set_warning_handler(std::function<void(const std::string& message)> handler) {
  auto h = handler ? std::make_shared<std::function<void(const std::string&)>>(std::move(handler))
                   : nullptr;
  std::lock_guard<std::mutex> l(detail::handler_mutex());
  detail::handler_slot() = std::move(h);
}

}  // namespace cudakit::tunable
