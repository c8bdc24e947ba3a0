// The results file format (torch's TunableOp CSV), parsed and written as plain text so every
// rule is testable without a device. Internal header.
//
//   Validator,<key>,<value>                       what the solutions depend on
//   <op signature>,<params signature>,<solution>[,<milliseconds>[,BLAS_PARAMS: ...]]
//
// Reading is strict where torch is silent: a line that is neither (too few fields, an empty
// field, a time that is not a number, a GemmTunableOp or GemmStridedBatchedTunableOp line
// whose signatures do not parse, an untuned line without a solution, two values for one
// validator) is a ValueError naming the file and line, instead of being skipped unnoticed.
// Blank lines and CR line ends are accepted. Entries whose op cudakit does not run (scaled,
// complex, GemmAndBias GEMMs from a torch file) are kept verbatim, so reading and writing a
// file loses nothing.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>

namespace cudakit::tunable::detail {

struct ResultEntry {
  std::string solution;
  double time_ms = 0;
};
// op signature -> params signature -> entry; ordered, so written files are deterministic.
using ResultsMap = std::map<std::string, std::map<std::string, ResultEntry>>;
using ValidatorMap = std::map<std::string, std::string>;

struct ResultsFile {
  ValidatorMap validators;
  ResultsMap results;
};

// Parses a results file's text; `name` is the file name for messages.
ResultsFile parse_results(const std::string& text, const std::string& name);

// Why `line` is not text — "byte 0xff at column 1 is not UTF-8 text" — or nullopt. Results
// and untuned files are ASCII CSV; a binary file must be named as such, not quoted raw into
// an error message (invalid UTF-8 there became Python's ValueError('')).
std::optional<std::string> not_text(const std::string& line);
// `line` safe to quote in a message: bytes that are not printable ASCII as \xHH, cut after
// `limit` characters.
std::string quoted_line(const std::string& line, std::size_t limit = 200);

// The validator key torch writes; a file carrying it comes from torch.
inline constexpr const char* kTorchVersionKey = "PT_VERSION";

// Why a file with `file` validators must not be used by a process whose own are `ours`, or
// nullopt when it may: every key of ours must be present with the same value, except that a
// torch file (PT_VERSION, which cudakit does not check: its solutions are rebuilt and fall
// back to Default when they cannot run) may lack them; any other key is another platform's
// (ROCm's HIPBLASLT_VERSION, ...) and rejects the file.
std::optional<std::string> validators_mismatch(const ValidatorMap& file, const ValidatorMap& ours);

// One result line (no newline) and the whole file.
std::string format_result(const std::string& op, const std::string& params, const ResultEntry& e);
std::string format_results(const ValidatorMap& validators, const ResultsMap& results);
// A validator value made safe for the format (commas and line breaks replaced).
std::string sanitize_field(std::string value);
// torch's PT_VERSION validator for a torch.__version__: torch writes and checks its C++
// TORCH_VERSION, which is "major.minor.patch" only, so "2.11.0+cu130" or "2.11.0a0+git1234"
// become "2.11.0" (torch 2.11 on the H200 rejected a file that carried "+cu130"). A value
// that does not start with three numbers is kept as given.
std::string torch_validator_version(const std::string& torch_version);

}  // namespace cudakit::tunable::detail
