#include <cctype>
#include "tunable/results_file.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <locale>
#include <sstream>
#include <vector>

#include "cudakit/error.hpp"
#include "tunable/signature.hpp"

namespace cudakit::tunable::detail {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = s.find(',', start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t") == std::string::npos;
}

// torch writes times with ostream's default format (0.0105563, 1.262, inf).
bool parse_time(const std::string& s, double& out) {
  if (s.empty() || s.find_first_of(" \t") != std::string::npos) return false;
  std::istringstream in(s);
  in.imbue(std::locale::classic());
  if (s == "inf" || s == "+inf") {
    out = HUGE_VAL;
    return true;
  }
  in >> out;
  return !in.fail() && in.peek() == std::char_traits<char>::eof() && out >= 0;
}

}  // namespace

std::optional<std::string> not_text(const std::string& line) {
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  const std::size_t n = line.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x7f) {
      ++i;
      continue;
    }
    auto bad = [&](const char* what) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "byte 0x%02x at column %zu is %s", c, i + 1, what);
      return std::optional<std::string>(buf);
    };
    if (c == '\t') {
      ++i;
      continue;
    }
    if (c < 0x80) return bad("a control character, not text");
    // A UTF-8 sequence (a validator may carry a non-ASCII name): lead byte, continuations.
    std::size_t len = 0;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) len = 3;
    else if (c >= 0xf0 && c <= 0xf4) len = 4;
    if (len == 0) return bad("not UTF-8 text");
    if (i + len > n) return bad("not UTF-8 text (a truncated sequence)");
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return bad("not UTF-8 text");
    }
    i += len;
  }
  return std::nullopt;
}

std::string quoted_line(const std::string& line, std::size_t limit) {
  std::string out;
  for (unsigned char c : line) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

ResultsFile parse_results(const std::string& text, const std::string& name) {
  ResultsFile out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  auto fail = [&](const std::string& what) {
    throw ValueError("TunableOp results file '" + name + "', line " + std::to_string(number) +
                     ": " + what + " (the line: '" + quoted_line(line) + "')");
  };
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (std::optional<std::string> why = not_text(line)) {
      fail(*why + ": a results file is TunableOp's CSV text (is this the right file?)");
    }
    if (blank(line)) continue;
    std::vector<std::string> f = split_commas(line);
    if (f[0] == "Validator") {
      if (f.size() < 3 || f[1].empty()) fail("a Validator line is 'Validator,<key>,<value>'");
      std::string value = f[2];
      for (std::size_t i = 3; i < f.size(); ++i) value += "," + f[i];
      auto [it, fresh] = out.validators.emplace(f[1], value);
      if (!fresh && it->second != value) {
        fail("validator " + f[1] + " is given twice ('" + it->second + "' and '" + value + "')");
      }
      continue;
    }
    if (f.size() < 3) {
      fail("a result line is '<op signature>,<params signature>,<solution>[,<milliseconds>]'" +
           std::string(f.size() == 2 ? "; this looks like an untuned line (no solution): tune "
                                       "it with tune_gemm_in_file"
                                     : ""));
    }
    if (f[0].empty() || f[1].empty() || f[2].empty()) fail("a field is empty");
    if (f[2].rfind("BLAS_PARAMS:", 0) == 0) {
      fail("an untuned line (no solution): tune it with tune_gemm_in_file");
    }
    ResultEntry e;
    e.solution = f[2];
    if (f.size() >= 4 && !parse_time(f[3], e.time_ms)) {
      fail("the time '" + f[3] + "' is not a non-negative number of milliseconds");
    }
    if (f.size() >= 5 && f[4].rfind("BLAS_PARAMS:", 0) != 0) {
      fail("unexpected fields after the time (only torch's BLAS_PARAMS log may follow)");
    }
    if (is_gemm_op(f[0])) {  // plain and strided batched GEMMs: their params must parse
      std::string why;
      if (std::optional<ParsedGemm> p = parse_op(f[0], why)) {
        if (!parse_params(f[1], *p, why)) fail(why);
      }
      // Other element types (complex, Float8): kept verbatim, never run by cudakit.
    }
    out.results[f[0]].emplace(f[1], std::move(e));  // the first entry for a problem wins
  }
  return out;
}

std::optional<std::string> validators_mismatch(const ValidatorMap& file, const ValidatorMap& ours) {
  if (file.empty()) return std::string("the file has no Validator lines");
  const bool from_torch = file.count(kTorchVersionKey) != 0;
  for (const auto& [key, value] : file) {
    if (key == kTorchVersionKey) continue;
    auto it = ours.find(key);
    if (it == ours.end()) {
      return "validator " + key + "=" + value +
             " is not one this process checks (the file was written for another platform or "
             "backend)";
    }
    if (it->second != value) {
      return "validator " + key + " is '" + value + "' in the file but '" + it->second +
             "' here (tuned with another library, GPU or cudakit version)";
    }
  }
  if (!from_torch) {
    for (const auto& [key, value] : ours) {
      if (!file.count(key)) return "the file lacks validator " + key + " (" + value + " here)";
    }
  }
  return std::nullopt;
}

std::string format_result(const std::string& op, const std::string& params, const ResultEntry& e) {
  std::ostringstream s;
  s.imbue(std::locale::classic());
  s << op << ',' << params << ',' << e.solution << ',' << e.time_ms;
  return s.str();
}

std::string format_results(const ValidatorMap& validators, const ResultsMap& results) {
  std::string out;
  for (const auto& [key, value] : validators) out += "Validator," + key + "," + value + "\n";
  for (const auto& [op, entries] : results)
    for (const auto& [params, e] : entries) out += format_result(op, params, e) + "\n";
  return out;
}

std::string sanitize_field(std::string value) {
  for (char& c : value) {
    if (c == ',') c = ';';
    if (c == '\n' || c == '\r') c = ' ';
  }
  return value;
}

std::string torch_validator_version(const std::string& torch_version) {
  std::size_t end = 0;
  for (int part = 0; part < 3; ++part) {
    const std::size_t digits = end;
    while (end < torch_version.size() && std::isdigit(static_cast<unsigned char>(torch_version[end])))
      ++end;
    if (end == digits) return torch_version;  // not "N.N.N...": kept as given
    if (part < 2) {
      if (end == torch_version.size() || torch_version[end] != '.') return torch_version;
      ++end;
    }
  }
  return torch_version.substr(0, end);
}

}  // namespace cudakit::tunable::detail
