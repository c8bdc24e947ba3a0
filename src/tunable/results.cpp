#include "tunable/results.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <sstream>

#include "backend/device_ops.hpp"
#include "backend/math_ops.hpp"
#include "core/files.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "tunable/settings.hpp"

#ifndef CUDAKIT_VERSION_STRING
#define CUDAKIT_VERSION_STRING "unknown"
#endif

namespace cudakit::tunable::detail {
namespace {

std::atomic<bool> g_initialized{false};
std::mutex g_init_mu;

// The file's bytes, or nullopt with *why (strerror) when it cannot be opened or read.
std::optional<std::string> read_text(const std::string& filename, std::string* why = nullptr) {
  errno = 0;
  std::ifstream in(filename, std::ios::binary);
  if (!in) {
    if (why) *why = errno != 0 ? std::strerror(errno) : "cannot be opened";
    return std::nullopt;
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) {
    if (why) *why = errno != 0 ? std::strerror(errno) : "cannot be read";
    return std::nullopt;
  }
  return s.str();
}

bool nonempty_file(const std::string& filename) {
  std::ifstream in(filename, std::ios::binary);
  return in && in.peek() != std::ifstream::traits_type::eof();
}

// Solutions torch's cuBLASLt TunableOp can rebuild: Default and cuBLASLt configurations.
bool torch_knows(const std::string& solution) {
  return solution == "Default" || solution.rfind("Gemm_Cublaslt_", 0) == 0;
}

}  // namespace

void results_at_exit() { store().at_exit(); }

int current_device_or_zero() noexcept {
  try {
    return cudakit::detail::device_ops().current_device();
  } catch (...) {
    return 0;
  }
}

ResultsStore& store() {
  static ResultsStore* s = new ResultsStore();  // leaked: the exit hook uses it
  return *s;
}

void ResultsStore::ensure_initialized() {
  if (g_initialized.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> g(g_init_mu);
  if (g_initialized.load(std::memory_order_relaxed)) return;
  initialize_locked_out();
  g_initialized.store(true, std::memory_order_release);
}

void ResultsStore::initialize_locked_out() {
  Settings& s = settings();
  const int device = current_device_or_zero();
  ValidatorMap v;
  v["CUDAKIT_VERSION"] = CUDAKIT_VERSION_STRING;
  for (auto& [key, value] : cudakit::detail::math_ops().gemm_tuning_validators(device)) {
    v[sanitize_field(key)] = sanitize_field(value);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    validators_ = std::move(v);
    initialized_ = true;
  }
  if (s.filename().empty() && !s.filename_was_set()) {
    s.set_filename(s.filename_template(), true, device);
  }
  std::call_once(exit_hook_, [] { std::atexit(&results_at_exit); });
  const std::string name = s.filename();
  if (!name.empty() && !s.record_untuned()) read_file(name, false);
  log(1, "results file " + (name.empty() ? std::string("(none)") : name));
}

std::optional<ResultEntry> ResultsStore::lookup(const std::string& op, const std::string& params) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = results_.find(op);
  if (it == results_.end()) return std::nullopt;
  auto jt = it->second.find(params);
  if (jt == it->second.end()) return std::nullopt;
  return jt->second;
}

void ResultsStore::add(const std::string& op, const std::string& params, ResultEntry e) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!results_[op].emplace(params, e).second) return;
  }
  settings().bump_generation();
  log(2, op + "(" + params + ") -> " + e.solution + " " + std::to_string(e.time_ms) + " ms");
  append(op, params, e);
}

void ResultsStore::append(const std::string& op, const std::string& params, const ResultEntry& e) {
  Settings& s = settings();
  const std::string name = s.filename();
  std::string warning;
  bool written = false;
  if (!name.empty() && !s.record_untuned()) {
    ValidatorMap ours = validators();
    std::lock_guard<std::mutex> fl(file_mu_);
    if (append_name_ != name) {
      append_.close();
      append_name_ = name;
      append_refused_ = false;
      if (nonempty_file(name)) {
        // Only a file of this configuration is extended (never mix two configurations).
        std::optional<std::string> why;
        try {
          ResultsFile f = parse_results(read_text(name).value_or(""), name);
          why = validators_mismatch(f.validators, ours);
        } catch (const ValueError& err) {
          why = err.what();
        }
        if (why) {
          append_refused_ = true;
          warning = "results are not appended to '" + name + "': " + *why +
                    "; they are written at exit (write_file_on_exit) or by write_file()";
        } else {
          append_.open(name, std::ios::app);
        }
      } else {
        append_.open(name, std::ios::trunc);
        for (const auto& [key, value] : ours) append_ << "Validator," << key << "," << value << "\n";
      }
    }
    if (!append_refused_ && append_.is_open()) {
      append_ << format_result(op, params, e) << "\n";
      append_.flush();
      written = append_.good();
      if (!written && warning.empty()) warning = "could not append to '" + name + "'";
    }
  }
  if (!written) {
    std::lock_guard<std::mutex> l(mu_);
    pending_ = true;
  }
  if (!warning.empty()) warn(warning);
}

void ResultsStore::record_untuned(const std::string& op, const std::string& params, int device) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!untuned_seen_.emplace(op, params).second) return;
  }
  const std::string name = settings().untuned_filename(device);
  std::string warning;
  {
    std::lock_guard<std::mutex> fl(file_mu_);
    if (untuned_name_ != name) {
      untuned_.close();
      untuned_.open(name, std::ios::app);
      untuned_name_ = name;
    }
    untuned_ << op << "," << params << "\n";
    untuned_.flush();
    if (!untuned_.good()) warning = "could not write the untuned GEMM to '" + name + "'";
  }
  log(3, "untuned " + op + "," + params);
  if (!warning.empty()) warn(warning);
}

std::vector<Result> ResultsStore::results() {
  std::vector<Result> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [op, entries] : results_)
    for (const auto& [params, e] : entries) out.push_back(Result{op, params, e.solution, e.time_ms});
  return out;
}

ValidatorMap ResultsStore::validators() {
  std::lock_guard<std::mutex> l(mu_);
  return validators_;
}

bool ResultsStore::read_file(const std::string& filename, bool strict) {
  std::string why;
  std::optional<std::string> text = read_text(filename, &why);
  if (!text) {
    // torch only logs this (at verbosity 1) and returns False; an explicit read_file() that
    // read nothing says so. Reading at enable time (strict false) stays quiet: the file of a
    // first run does not exist yet.
    const std::string message = "could not read tuning results from '" + filename + "': " + why;
    if (strict) warn(message + "; nothing was read (read_file returns False)");
    else log(1, message);
    return false;
  }
  ResultsFile f;
  try {
    f = parse_results(*text, filename);
  } catch (const ValueError& e) {
    if (strict) throw;
    warn(std::string(e.what()) + "; the file is ignored");
    return false;
  }
  if (std::optional<std::string> why = validators_mismatch(f.validators, validators())) {
    warn("results file '" + filename + "' is rejected: " + *why);
    return false;
  }
  std::size_t added = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [op, entries] : f.results)
      for (auto& [params, e] : entries) added += results_[op].emplace(params, e).second ? 1 : 0;
  }
  settings().bump_generation();
  log(1, "read " + std::to_string(added) + " new results from '" + filename + "'");
  return true;
}

bool ResultsStore::write_text(const std::string& filename, const std::string& text) {
  // Through a sibling renamed over the file (core/files.hpp): a reader (or a crash) never sees
  // half a file. Under file_mu_, so the append stream is reset with the rename that replaced
  // its file.
  int err = 0;
  {
    std::lock_guard<std::mutex> fl(file_mu_);
    err = cudakit::detail::write_file_atomically(filename, {text});
    if (err == 0 && append_name_ == filename) {  // the append stream points at the replaced file
      append_.close();
      append_name_.clear();
    }
  }
  if (err != 0) {
    warn("could not write tuning results to '" + filename + "': " + std::strerror(err));
    return false;
  }
  return true;
}

bool ResultsStore::write_file(const std::string& filename) {
  std::string text;
  {
    std::lock_guard<std::mutex> l(mu_);
    text = format_results(validators_, results_);
  }
  if (!write_text(filename, text)) return false;
  if (filename == settings().filename()) {
    std::lock_guard<std::mutex> l(mu_);
    pending_ = false;
  }
  log(1, "wrote tuning results to '" + filename + "'");
  return true;
}

bool ResultsStore::write_file_for_torch(const std::string& filename, const std::string& pt_version) {
  ValidatorMap v{{kTorchVersionKey, sanitize_field(torch_validator_version(pt_version))}};
  ResultsMap r;
  std::size_t skipped = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [op, entries] : results_)
      for (const auto& [params, e] : entries) {
        if (torch_knows(e.solution)) r[op][params] = e;
        else ++skipped;
      }
  }
  if (skipped) {
    warn(std::to_string(skipped) + " results whose solutions torch cannot build are left out of '" +
         filename + "'");
  }
  return write_text(filename, format_results(v, r));
}

void ResultsStore::at_exit() {
  try {
    Settings& s = settings();
    bool pending = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      pending = pending_;
    }
    const std::string name = s.filename();
    if (!pending || !s.write_on_exit() || !s.enabled() || !s.tuning() || name.empty()) return;
    write_file(name);
  } catch (...) {  // nothing can be reported at exit
  }
}

void ResultsStore::reset_for_testing() {
  std::lock_guard<std::mutex> g(g_init_mu);
  {
    std::lock_guard<std::mutex> l(mu_);
    results_.clear();
    validators_.clear();
    initialized_ = false;
    pending_ = false;
    untuned_seen_.clear();
  }
  {
    std::lock_guard<std::mutex> fl(file_mu_);
    append_.close();
    append_name_.clear();
    append_refused_ = false;
    untuned_.close();
    untuned_name_.clear();
  }
  g_initialized.store(false, std::memory_order_release);
  settings().bump_generation();
}

}  // namespace cudakit::tunable::detail
