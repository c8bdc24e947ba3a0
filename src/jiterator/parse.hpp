// Reading a jiterator code string: which function is the entry, what it returns, how many
// parameters it takes; and the text of a line, for compile errors.
//
// The entry is the last `template <...> R name(...) {` definition of the string, which is
// what torch's regular expression (greedy, DOTALL) selects. We scan instead of using
// std::regex: libstdc++'s regex recurses per character and overflows the stack on long
// code strings.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace cudakit::jit {

struct ParsedCode {
  std::string name;         // the entry function
  std::string return_type;  // as written: "T", "void", "float"
  int num_params = 0;       // its top-level parameters
  int num_defaulted = 0;    // ... of which have a default argument
  std::vector<std::string> params;  // each top-level parameter as written, trimmed
};

// ValueError naming the expected form (and quoting the start of `code`) when no entry
// function can be found.
ParsedCode parse_code(const std::string& code);

// Line `line` (1-based) of `text` without its newline; "" when out of range.
std::string text_line(const std::string& text, int line);

}  // namespace cudakit::jit
