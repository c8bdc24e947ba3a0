// Parser for CUDAKIT_ALLOC_CONF. Accepts torch's syntax exactly so an existing
// PYTORCH_CUDA_ALLOC_CONF works unchanged; rejects anything it does not understand (a typo
// silently ignored would be a fragmentation bug that nobody can find).
#include "memory/config.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "cudakit/error.hpp"

namespace cudakit::memory {
namespace {

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

[[noreturn]] void bad(const std::string& var, const std::string& key, const std::string& value,
                      const std::string& expected) {
  throw ValueError(var + ": invalid value '" + value + "' for key '" + key + "': expected " +
                   expected);
}

double parse_number(const std::string& var, const std::string& key, const std::string& v,
                    const std::string& expected) {
  if (v.empty()) bad(var, key, v, expected);
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size() || !std::isfinite(d)) bad(var, key, v, expected);
  return d;
}

bool parse_bool(const std::string& var, const std::string& key, const std::string& v) {
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  bad(var, key, v, "True or False");
}

bool is_pow2(std::size_t v) { return v && !(v & (v - 1)); }

// Sizes in MiB are at most 2^42 (2^62 bytes): converting them to bytes, and adding them to a
// request, cannot overflow.
constexpr double kMaxMiB = 4398046511104.0;

// A size in MiB in [lo, 2^42] (lo itself excluded when `open_lo`), in bytes.
std::size_t parse_mib(const std::string& var, const std::string& key, const std::string& v,
                      double lo, bool open_lo, const std::string& expected) {
  const double mb = parse_number(var, key, v, expected);
  if (mb < lo || (open_lo && mb == lo) || mb > kMaxMiB) bad(var, key, v, expected);
  return static_cast<std::size_t>(mb) * kMiB;
}

// Splits "a:b,c:[x:1,y:2],d:e" at top-level commas.
std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!trim(cur).empty() || !out.empty()) out.push_back(cur);
  return out;
}

std::size_t bucket_of_mb(std::size_t mb) {  // log2 bucket of a MiB size (1 → 0)
  std::size_t b = 0;
  while ((std::size_t(1) << (b + 1)) <= mb && b < 63) ++b;
  return b;
}

void parse_roundup(AllocatorConfig& c, const std::string& var, const std::string& v) {
  const std::string key = "roundup_power2_divisions";
  const std::string expected =
      "a power of two (e.g. 4) or a list like [256:1,512:2,1024:4,>:8] of "
      "<size in MiB, a power of two>:<divisions, a power of two or 0>";
  auto check_div = [&](const std::string& s) {
    double d = parse_number(var, key, trim(s), expected);
    if (d < 0 || d != std::floor(d) || (d != 0 && !is_pow2(std::size_t(d))))
      bad(var, key, v, expected);
    return unsigned(d);
  };
  c.roundup_power2_divisions.fill(0);  // the key replaces the whole table
  if (!v.empty() && v.front() == '[') {
    if (v.back() != ']') bad(var, key, v, expected);
    std::string inner = v.substr(1, v.size() - 2);
    std::size_t last_bucket = 0;
    bool first = true;
    for (const std::string& item : split_top(inner)) {
      auto colon = item.find(':');
      if (colon == std::string::npos) bad(var, key, v, expected);
      std::string sz = trim(item.substr(0, colon));
      unsigned div = check_div(item.substr(colon + 1));
      if (sz == ">") {
        for (std::size_t i = first ? 0 : last_bucket + 1; i < c.roundup_power2_divisions.size(); ++i)
          c.roundup_power2_divisions[i] = div;
        continue;
      }
      double mb = parse_number(var, key, sz, expected);
      if (mb <= 0 || mb > kMaxMiB || mb != std::floor(mb) || !is_pow2(std::size_t(mb)))
        bad(var, key, v, expected);
      std::size_t bucket = bucket_of_mb(std::size_t(mb));
      // Like torch: earlier entries fill the buckets below them.
      for (std::size_t i = first ? 0 : last_bucket + 1; i <= bucket; ++i)
        c.roundup_power2_divisions[i] = div;
      last_bucket = bucket;
      first = false;
    }
  } else {
    unsigned div = check_div(v);
    c.roundup_power2_divisions.fill(div);
  }
}

}  // namespace

unsigned AllocatorConfig::divisions_for(std::size_t size) const noexcept {
  std::size_t mb = size / kMiB;
  return roundup_power2_divisions[mb == 0 ? 0 : bucket_of_mb(mb)];
}

KeyScope key_scope(const std::string& key) {
  if (key == "backend" || key == "expandable_segments_chunk_pages" || key == "device_mutex_spin")
    return KeyScope::init;
  if (key == "release_lock_on_cudamalloc") return KeyScope::inert;
  return KeyScope::live;
}

AllocatorConfig AllocatorConfig::parse(const std::string& text, const std::string& var) {
  return parse_over(AllocatorConfig{}, text, var);
}

AllocatorConfig AllocatorConfig::parse_over(const AllocatorConfig& base, const std::string& text,
                                            const std::string& var) {
  AllocatorConfig c = base;
  c.keys.clear();
  c.warnings.clear();
  if (!trim(text).empty())
    c.source = (base.source.empty() ? "" : base.source + ", then ") + var + "=" + text;
  for (const std::string& raw : split_top(text)) {
    std::string item = trim(raw);
    if (item.empty()) continue;
    auto colon = item.find(':');
    if (colon == std::string::npos)
      throw ValueError(var + ": entry '" + item + "' has no value: write key:value (entries are "
                       "separated by commas)");
    std::string key = trim(item.substr(0, colon));
    std::string v = trim(item.substr(colon + 1));
    if (key == "max_split_size_mb") {
      c.max_split_size = parse_mib(var, key, v, 20, true, "a size in MiB greater than 20 (at most 2^42)");
    } else if (key == "max_non_split_rounding_mb") {
      c.max_non_split_rounding = parse_mib(var, key, v, 1, false, "a size in MiB >= 1 (at most 2^42)");
    } else if (key == "garbage_collection_threshold") {
      double t = parse_number(var, key, v, "a number in (0, 1)");
      if (t <= 0 || t >= 1) bad(var, key, v, "a number in (0, 1)");
      c.garbage_collection_threshold = t;
    } else if (key == "roundup_power2_divisions") {
      parse_roundup(c, var, v);
    } else if (key == "expandable_segments") {
      c.expandable_segments = parse_bool(var, key, v);
      c.expandable_small = c.expandable_segments;  // torch's meaning: every segment (config.hpp)
    } else if (key == "expandable_segments_small") {
      c.expandable_small = parse_bool(var, key, v);
    } else if (key == "backend") {
      if (v == "native") c.backend = Backend::native;
      else if (v == "cudaMallocAsync") c.backend = Backend::driver_async;
      else bad(var, key, v, "native or cudaMallocAsync");
    } else if (key == "release_lock_on_cudamalloc") {
      c.release_lock_on_device_malloc = parse_bool(var, key, v);
      c.warnings.push_back(var + ": '" + key + "' is accepted for torch compatibility and has "
                           "no effect in cudakit (the allocator never waits while it holds its "
                           "locks, and its device allocation call is short)");
    } else if (key == "per_process_memory_fraction") {
      double f = parse_number(var, key, v, "a number in [0, 1]");
      if (f < 0 || f > 1) bad(var, key, v, "a number in [0, 1]");
      c.per_process_memory_fraction = f;
    } else if (key == "quick_cache") {
      c.quick_cache = parse_bool(var, key, v);
    } else if (key == "device_mutex_spin") {
      c.device_mutex_spin = parse_bool(var, key, v);
    } else if (key == "expandable_segments_chunk_pages") {
      double n = parse_number(var, key, v, "a whole number of pages between 1 and 4096");
      if (n < 1 || n > 4096 || n != std::floor(n))
        bad(var, key, v, "a whole number of pages between 1 and 4096");
      c.expandable_chunk_pages = static_cast<std::size_t>(n);
    } else if (key == "expandable_segments_slack_div") {
      double n = parse_number(var, key, v, "a whole number between 1 and 65536");
      if (n < 1 || n > 65536 || n != std::floor(n))
        bad(var, key, v, "a whole number between 1 and 65536");
      c.expandable_slack_div = static_cast<std::size_t>(n);
    } else if (key == "expandable_segments_max_chunk_mb") {
      double n = parse_number(var, key, v, "a power of two between 2 and 1024");
      if (n < 2 || n > 1024 || n != std::floor(n) || !is_pow2(std::size_t(n)))
        bad(var, key, v, "a power of two between 2 and 1024");
      c.expandable_max_chunk_mb = static_cast<std::size_t>(n);
    } else if (key == "pinned_use_cuda_host_register" || key == "pinned_use_host_register") {
      key = "pinned_use_cuda_host_register";
      c.pinned_use_host_register = parse_bool(var, key, v);
    } else if (key == "pinned_num_register_threads") {
      double n = parse_number(var, key, v, "a power of two between 1 and 128");
      if (n < 1 || n > 128 || n != std::floor(n) || !is_pow2(std::size_t(n)))
        bad(var, key, v, "a power of two between 1 and 128");
      c.pinned_num_register_threads = unsigned(n);
    } else if (key == "pinned_use_background_threads") {
      c.pinned_use_background_threads = parse_bool(var, key, v);
    } else if (key == "graph_capture_record_stream_reuse") {
      c.graph_capture_record_stream_reuse = parse_bool(var, key, v);
    } else {
      throw ValueError(var + ": unknown key '" + key +
                       "'. Known keys: backend, expandable_segments, garbage_collection_threshold, "
                       "max_split_size_mb, max_non_split_rounding_mb, per_process_memory_fraction, "
                       "roundup_power2_divisions, release_lock_on_cudamalloc, "
                       "pinned_use_cuda_host_register, pinned_num_register_threads, "
                       "pinned_use_background_threads, graph_capture_record_stream_reuse, "
                       "quick_cache, expandable_segments_chunk_pages, "
                       "expandable_segments_slack_div, expandable_segments_max_chunk_mb, "
                       "expandable_segments_small, device_mutex_spin");
    }
    c.keys.push_back(key);
  }
  // Expandable segments are the default (config.hpp); backend:cudaMallocAsync given alone
  // turns them off (the driver's pool has its own address space), given together they clash.
  const bool expandable_given =
      std::find(c.keys.begin(), c.keys.end(), "expandable_segments") != c.keys.end();
  if (c.backend == Backend::driver_async && !expandable_given) c.expandable_segments = false;
  if (c.expandable_segments && c.backend == Backend::driver_async)
    throw ValueError(var + ": expandable_segments:True needs backend:native (the driver's "
                     "stream-ordered pool manages its own address space)");
  if (!c.expandable_segments && c.expandable_small) {
    if (std::find(c.keys.begin(), c.keys.end(), "expandable_segments_small") != c.keys.end())
      throw ValueError(var + ": expandable_segments_small:True needs expandable_segments:True "
                       "(small blocks cannot be expandable while the large ones are not): "
                       "write expandable_segments:True, which makes both expandable");
    c.expandable_small = false;  // expandable segments turned off by the backend
  }
  return c;
}

AllocatorConfig AllocatorConfig::from_env() {
  for (const char* var : {"CUDAKIT_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    if (const char* v = std::getenv(var)) return parse(v, var);
  }
  return AllocatorConfig{};
}

namespace {
std::mutex g_config_mutex;
AllocatorConfig* g_config = nullptr;  // leaked: read until process exit
std::atomic<bool> g_env_warned{false};
std::mutex g_warn_mutex;
std::function<void(const std::string&)>* g_warn_handler = nullptr;  // leaked, like g_config
}  // namespace

AllocatorConfig config() {
  std::lock_guard lock(g_config_mutex);
  if (!g_config) g_config = new AllocatorConfig(AllocatorConfig::from_env());
  return *g_config;
}

void store_config(const AllocatorConfig& c) {
  std::lock_guard lock(g_config_mutex);
  if (!g_config) g_config = new AllocatorConfig(c);
  else *g_config = c;
}

void warn_about_env_config_once() {
  if (g_env_warned.load(std::memory_order_acquire)) return;
  std::vector<std::string> warnings;
  {
    std::lock_guard lock(g_config_mutex);
    if (g_env_warned.exchange(true)) return;
    if (!g_config) g_config = new AllocatorConfig(AllocatorConfig::from_env());
    warnings = g_config->warnings;
  }
  for (const std::string& w : warnings) warn(w);
}

void set_warning_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard lock(g_warn_mutex);
  if (!g_warn_handler) g_warn_handler = new std::function<void(const std::string&)>();
  *g_warn_handler = std::move(handler);
}

void warn(const std::string& message) {
  std::function<void(const std::string&)> h;
  {
    std::lock_guard lock(g_warn_mutex);
    if (g_warn_handler) h = *g_warn_handler;
  }
  if (h) {
    h(message);
  } else {
    std::fprintf(stderr, "cudakit: warning: %s\n", message.c_str());
  }
}

}  // namespace cudakit::memory
