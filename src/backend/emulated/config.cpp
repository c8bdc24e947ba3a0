// Environment parsing for the emulated backend (see config.hpp).
#include "backend/emulated/config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/backend.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {

std::string trim_lower(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string out = s.substr(b, e - b);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

[[noreturn]] void bad_memory(const std::string& text, const char* variable, const char* why) {
  throw ValueError(std::string(variable) + "='" + text + "' is not a valid memory size (" +
                   why + "): give bytes or a number with a unit, e.g. " + variable +
                   "=8GiB (also 512MiB, 1.5GB, 1073741824)");
}

}  // namespace

std::size_t parse_memory_size(const std::string& text, const char* variable) {
  std::string s = trim_lower(text);
  if (s.empty()) bad_memory(text, variable, "empty");
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string number = s.substr(0, i);
  std::string unit = trim_lower(s.substr(i));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) {
    bad_memory(text, variable, "no number");
  }
  double multiplier = 0;
  if (unit.empty() || unit == "b") multiplier = 1;
  else if (unit == "k" || unit == "kib") multiplier = 1024.0;
  else if (unit == "m" || unit == "mib") multiplier = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") multiplier = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") multiplier = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") multiplier = 1e3;
  else if (unit == "mb") multiplier = 1e6;
  else if (unit == "gb") multiplier = 1e9;
  else if (unit == "tb") multiplier = 1e12;
  else bad_memory(text, variable, "unknown unit");
  double value = std::strtod(number.c_str(), nullptr) * multiplier;
  if (!(value >= 1)) bad_memory(text, variable, "must be at least 1 byte");
  if (value > 1e18) bad_memory(text, variable, "too large");
  return static_cast<std::size_t>(std::llround(value));
}

std::string device_uuid(int ordinal) {
  // A splitmix-style hash of the ordinal, marked as a version-4 UUID so tools print it as one.
  std::uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(ordinal + 1);
  unsigned char raw[16];
  for (int i = 0; i < 16; ++i) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    raw[i] = static_cast<unsigned char>(x >> 56);
  }
  raw[6] = static_cast<unsigned char>((raw[6] & 0x0F) | 0x40);
  raw[8] = static_cast<unsigned char>((raw[8] & 0x3F) | 0x80);
  return uuid_string(raw);
}

std::vector<int> parse_visible_devices(const char* text, int machine_devices) {
  std::vector<int> out;
  if (text == nullptr) {
    for (int i = 0; i < machine_devices; ++i) out.push_back(i);
    return out;
  }
  auto trim = [](std::string s) {
    std::size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
  };
  std::vector<std::string> entries;
  std::string all = text;
  for (std::size_t pos = 0;;) {
    std::size_t comma = all.find(',', pos);
    const std::size_t len = comma == std::string::npos ? std::string::npos : comma - pos;
    entries.push_back(trim(all.substr(pos, len)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const bool by_uuid = entries.front().rfind("GPU-", 0) == 0;
  for (const std::string& e : entries) {
    int ordinal = -1;
    if (by_uuid) {
      if (e.rfind("GPU-", 0) != 0 || e.size() == 4) break;
      const std::string prefix = trim_lower(e.substr(4));
      for (int i = 0; i < machine_devices; ++i) {
        if (device_uuid(i).rfind(prefix, 0) != 0) continue;
        ordinal = ordinal == -1 ? i : -2;  // -2: ambiguous
      }
    } else {
      // strtoul-like: an optional sign, then the leading digits ("1gpu" reads as 1).
      std::size_t i = (!e.empty() && (e[0] == '+' || e[0] == '-')) ? 1 : 0;
      std::size_t digits = i;
      while (digits < e.size() && std::isdigit(static_cast<unsigned char>(e[digits]))) ++digits;
      if (digits > i && digits - i <= 9) {
        ordinal = std::atoi(e.substr(i, digits - i).c_str());
        if (e[0] == '-') ordinal = -ordinal - (ordinal == 0 ? 1 : 0);  // "-0" also stops
      }
      if (ordinal >= machine_devices) ordinal = -1;
    }
    if (ordinal < 0) break;
    if (std::find(out.begin(), out.end(), ordinal) != out.end()) return {};
    out.push_back(ordinal);
  }
  return out;
}

Config parse_config(const char* devices, const char* memory, const char* capability,
                    const char* visible_devices, const char* gds) {
  Config c;
  if (devices && *devices) {
    std::string s = trim_lower(devices);
    char* end = nullptr;
    long n = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || n < 0 || n > 64) {
      throw ValueError(std::string("CUDAKIT_EMULATED_DEVICES='") + devices +
                       "' is not a device count: give an integer from 0 to 64, e.g. "
                       "CUDAKIT_EMULATED_DEVICES=2");
    }
    c.devices = static_cast<int>(n);
  }
  if (memory && *memory) c.memory_per_device = parse_memory_size(memory);
  if (capability && *capability) {
    std::string s = trim_lower(capability);
    int major = -1, minor = -1;
    std::size_t dot = s.find('.');
    auto digits = [](const std::string& t) {
      if (t.empty() || t.size() > 3) return false;
      for (char ch : t) if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
      return true;
    };
    if (dot != std::string::npos && digits(s.substr(0, dot)) && digits(s.substr(dot + 1))) {
      major = std::atoi(s.substr(0, dot).c_str());
      minor = std::atoi(s.substr(dot + 1).c_str());
    }
    if (major < 1 || minor < 0) {
      throw ValueError(std::string("CUDAKIT_EMULATED_CAPABILITY='") + capability +
                       "' is not a compute capability: use MAJOR.MINOR, e.g. "
                       "CUDAKIT_EMULATED_CAPABILITY=9.0");
    }
    c.major = major;
    c.minor = minor;
  }
  if (visible_devices) c.visible = parse_visible_devices(visible_devices, c.devices);
  if (gds && *gds) {
    std::string s = trim_lower(gds);
    if (s != "0" && s != "1") {
      throw ValueError(std::string("CUDAKIT_EMULATED_GDS='") + gds +
                       "' is not 0 or 1 (1: the emulated machine has GPUDirect Storage)");
    }
    c.gds = s == "1";
  }
  return c;
}

Config config_from_env() {
  return parse_config(std::getenv("CUDAKIT_EMULATED_DEVICES"),
                      std::getenv("CUDAKIT_EMULATED_MEMORY"),
                      std::getenv("CUDAKIT_EMULATED_CAPABILITY"),
                      std::getenv("CUDA_VISIBLE_DEVICES"),
                      std::getenv("CUDAKIT_EMULATED_GDS"));
}

}  // namespace cudakit::detail::emulated
