#include "jiterator/parse.hpp"

#include <cctype>
#include <optional>
#include <utility>

#include "cudakit/error.hpp"

namespace cudakit::jit {
namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// Comments and the contents of string / character literals become spaces (newlines kept),
// so structure scanning never looks inside them.
std::string blank_comments_and_literals(const std::string& s) {
  std::string out = s;
  const std::size_t n = s.size();
  std::size_t i = 0;
  auto blank = [&](std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < to && k < n; ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  while (i < n) {
    if (s.compare(i, 2, "//") == 0) {
      std::size_t j = s.find('\n', i);
      j = j == std::string::npos ? n : j;
      blank(i, j);
      i = j;
    } else if (s.compare(i, 2, "/*") == 0) {
      std::size_t j = s.find("*/", i + 2);
      j = j == std::string::npos ? n : j + 2;
      blank(i, j);
      i = j;
    } else if (s[i] == '"' || s[i] == '\'') {
      const char q = s[i];
      std::size_t j = i + 1;
      while (j < n && s[j] != q && s[j] != '\n') j += s[j] == '\\' ? 2 : 1;
      blank(i + 1, j);
      i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

std::size_t skip_space(const std::string& s, std::size_t i) {
  while (i < s.size() && space(s[i])) ++i;
  return i;
}

// Identifier starting at i (empty if none); i moves past it.
std::string identifier(const std::string& s, std::size_t& i) {
  if (i >= s.size() || !ident_start(s[i])) return {};
  const std::size_t b = i;
  while (i < s.size() && ident_char(s[i])) ++i;
  return s.substr(b, i - b);
}

// Index of the ')' matching the '(' at `open`, or npos.
std::size_t matching_paren(const std::string& s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')' && --depth == 0) return i;
  }
  return std::string::npos;
}

// {parameters, parameters with a default argument} of a parameter list.
std::pair<int, int> count_params(const std::string& list) {
  std::string trimmed;
  for (char c : list)
    if (!space(c)) trimmed += c;
  if (trimmed.empty() || trimmed == "void") return {0, 0};
  int depth = 0, commas = 0, defaults = 0;
  bool has_default = false;
  for (char c : list) {
    if (c == '(' || c == '[' || c == '{' || c == '<') ++depth;
    if (c == ')' || c == ']' || c == '}' || c == '>') --depth;
    if (c == '=' && depth == 0) has_default = true;
    if (c == ',' && depth == 0) {
      ++commas;
      defaults += has_default;
      has_default = false;
    }
  }
  return {commas + 1, defaults + has_default};
}

struct Candidate {
  std::string return_type, name;
  std::size_t open, close;
};

// `> R name (...) {` with `>` at position p.
std::optional<Candidate> candidate_at(const std::string& s, std::size_t p) {
  std::size_t i = skip_space(s, p + 1);
  std::string ret = identifier(s, i);
  if (ret.empty() || i >= s.size() || !space(s[i])) return std::nullopt;
  i = skip_space(s, i);
  std::string name = identifier(s, i);
  if (name.empty()) return std::nullopt;
  i = skip_space(s, i);
  if (i >= s.size() || s[i] != '(') return std::nullopt;
  const std::size_t close = matching_paren(s, i);
  if (close == std::string::npos) return std::nullopt;
  const std::size_t body = skip_space(s, close + 1);
  if (body >= s.size() || s[body] != '{' || s.find('}', body) == std::string::npos)
    return std::nullopt;
  return Candidate{ret, name, i, close};
}

[[noreturn]] void bad_code(const std::string& code, const std::string& why) {
  std::string head = code.substr(0, 200);
  if (code.size() > 200) head += "...";
  throw ValueError("jiterator: couldn't parse the code string (" + why +
                   "); expected one or more function templates, the last one being the entry, "
                   "e.g. \"template <typename T> T my_fn(T x, T y) { return x + y; }\". Got:\n" +
                   head);
}

}  // namespace

ParsedCode parse_code(const std::string& code) {
  const std::string s = blank_comments_and_literals(code);
  std::size_t i = skip_space(s, 0);
  if (s.compare(i, 8, "template") != 0) bad_code(code, "it must start with 'template'");
  i = skip_space(s, i + 8);
  if (i >= s.size() || s[i] != '<') bad_code(code, "'template' must be followed by '<'");
  std::optional<Candidate> last;
  for (std::size_t p = s.find('>', i); p != std::string::npos; p = s.find('>', p + 1)) {
    if (auto c = candidate_at(s, p)) last = c;
  }
  if (!last) bad_code(code, "no 'template <...> R name(...) { ... }' definition found");
  ParsedCode out;
  out.name = last->name;
  out.return_type = last->return_type;
  const auto [params, defaulted] =
      count_params(s.substr(last->open + 1, last->close - last->open - 1));
  out.num_params = params;
  out.num_defaulted = defaulted;
  if (params > 0) {  // the parameters' text, from the original code (comments blanked)
    const std::string list = s.substr(last->open + 1, last->close - last->open - 1);
    int depth = 0;
    std::string cur;
    auto push = [&] {
      const std::size_t b = cur.find_first_not_of(" \t\r\n");
      const std::size_t e = cur.find_last_not_of(" \t\r\n");
      out.params.push_back(b == std::string::npos ? std::string() : cur.substr(b, e - b + 1));
      cur.clear();
    };
    for (char c : list) {
      if (c == '(' || c == '[' || c == '{' || c == '<') ++depth;
      if (c == ')' || c == ']' || c == '}' || c == '>') --depth;
      if (c == ',' && depth == 0) {
        push();
        continue;
      }
      cur += c;
    }
    push();
  }
  return out;
}

std::string text_line(const std::string& text, int line) {
  if (line < 1) return {};
  std::size_t pos = 0;
  for (int l = 1; l < line; ++l) {
    pos = text.find('\n', pos);
    if (pos == std::string::npos) return {};
    ++pos;
  }
  std::size_t end = text.find('\n', pos);
  return text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

}  // namespace cudakit::jit
