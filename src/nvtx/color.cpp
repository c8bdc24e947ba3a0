// Color::parse: colour names and hex notations accepted wherever a colour is given as text
// (C++ and the Python keyword color=).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

#include "cudakit/error.hpp"
#include "cudakit/nvtx.hpp"

namespace cudakit::nvtx {
namespace {

// X11/CSS values of the common names: a short list people type, not the full CSS table.
constexpr std::array<std::pair<std::string_view, std::uint32_t>, 20> kNamed{{
    {"black", 0x000000}, {"white", 0xFFFFFF}, {"red", 0xFF0000},    {"green", 0x008000},
    {"blue", 0x0000FF},  {"yellow", 0xFFFF00}, {"cyan", 0x00FFFF},  {"magenta", 0xFF00FF},
    {"orange", 0xFFA500}, {"purple", 0x800080}, {"pink", 0xFFC0CB}, {"brown", 0xA52A2A},
    {"gray", 0x808080},  {"grey", 0x808080},  {"lime", 0x00FF00},   {"navy", 0x000080},
    {"teal", 0x008080},  {"olive", 0x808000}, {"maroon", 0x800000}, {"gold", 0xFFD700},
}};

bool parse_hex(std::string_view digits, std::uint32_t* out) {
  std::uint32_t v = 0;
  for (char c : digits) {
    int x;
    if (c >= '0' && c <= '9') {
      x = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      x = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      x = c - 'A' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<std::uint32_t>(x);
  }
  *out = v;
  return true;
}

[[noreturn]] void bad_color(std::string_view text) {
  std::string names;
  for (const auto& [name, value] : kNamed) {
    if (!names.empty()) names += ", ";
    names += name;
  }
  throw ValueError("invalid NVTX color '" + std::string(text) + "': expected a name (" + names +
                   "), '#RRGGBB' or '#AARRGGBB'");
}

}  // namespace

Color Color::parse(std::string_view text) {
  if (!text.empty() && text.front() == '#') {
    std::string_view digits = text.substr(1);
    std::uint32_t v = 0;
    if ((digits.size() == 6 || digits.size() == 8) && parse_hex(digits, &v)) {
      return Color{digits.size() == 6 ? 0xFF000000u | v : v};
    }
    bad_color(text);
  }
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& [name, value] : kNamed) {
    if (name == lower) return Color{0xFF000000u | value};
  }
  bad_color(text);
}

}  // namespace cudakit::nvtx
