// The process's tuning results: the in-memory table, its validators, and the files (the
// results file, read at first use and appended to as results are found; the untuned file).
// Internal header.
//
// First use (ensure_initialized: the first tuned product, or any results call) resolves the
// results filename for the current device if none was set (PYTORCH_TUNABLEOP_FILENAME, else
// "tunableop_results.csv", with the ordinal inserted, as torch) and reads it, unless
// record_untuned is on (torch: recording runs start from nothing). A missing file is normal;
// a rejected or malformed one is a warning there (read_file raises for malformed ones).
//
// Appending: a result found by tuning is appended to the results file at once (torch 2.9+
// does the same), after our Validator lines when the file is new or empty. A file that holds
// another configuration's results (its validators differ, or it is malformed) is never
// appended to; those results are written at exit instead (write_file_on_exit), as torch's
// older versions wrote every result at exit.
//
// Thread-safety: all methods are thread-safe: one mutex guards the table and another the
// files (taken in that order, never the other); warnings are issued after both are released.
#pragma once

#include <cstdint>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cudakit/tunable.hpp"
#include "tunable/results_file.hpp"

namespace cudakit::tunable::detail {

class ResultsStore {
 public:
  void ensure_initialized();

  std::optional<ResultEntry> lookup(const std::string& op, const std::string& params);
  // Records a tuned result (an existing entry wins) and appends it to the results file.
  void add(const std::string& op, const std::string& params, ResultEntry e);
  // Appends an unknown problem to the untuned file of `device` once per process.
  void record_untuned(const std::string& op, const std::string& params, int device);

  std::vector<Result> results();
  ValidatorMap validators();

  // strict: a malformed file raises ValueError (else it is a warning and false).
  bool read_file(const std::string& filename, bool strict);
  bool write_file(const std::string& filename);
  // torch's flavour: only "Validator,PT_VERSION,<pt_version>" and the results whose solutions
  // torch builds know (Default and cuBLASLt configurations), so torch.cuda.tunable.read_file
  // accepts it. Returns false (warning) when it cannot write.
  bool write_file_for_torch(const std::string& filename, const std::string& pt_version);

  // Test support: forget everything (results, validators, files, first use).
  void reset_for_testing();

 private:
  void initialize_locked_out();  // first use; called without locks held
  bool write_text(const std::string& filename, const std::string& text);
  void append(const std::string& op, const std::string& params, const ResultEntry& e);
  void at_exit();
  friend void results_at_exit();

  std::mutex mu_;  // table
  ResultsMap results_;
  ValidatorMap validators_;
  bool initialized_ = false;
  bool pending_ = false;  // results not in the file (append refused or failed)
  std::set<std::pair<std::string, std::string>> untuned_seen_;

  std::mutex file_mu_;  // append streams
  std::string append_name_;
  std::ofstream append_;
  bool append_refused_ = false;
  std::string untuned_name_;
  std::ofstream untuned_;
  std::once_flag exit_hook_;
};

ResultsStore& store();

// The device whose ordinal names files: the current device, or 0 when there is none.
int current_device_or_zero() noexcept;

}  // namespace cudakit::tunable::detail
