#include "jiterator/kernel_cache.hpp"

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/kernel_ops.hpp"
#include "cudakit/device.hpp"
#include "jiterator/codegen.hpp"
#include "jiterator/disk_cache.hpp"
#include "jiterator/parse.hpp"

namespace cudakit::jit {
namespace {

// Bump when the entry semantics change (generated-code ABI, key composition).
constexpr const char* kFormat = "cudakit-jiterator-1";

struct Counters {
  std::atomic<std::uint64_t> memory_hits{0}, disk_hits{0}, compiles{0}, disk_writes{0},
      disk_rejected{0}, compile_ns{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

struct Image {
  // One mutex for the build and the per-device loads, not a std::once_flag for the build: a
  // compile error throws out of it, and libstdc++'s call_once over pthread_once then leaves
  // the flag taken under ThreadSanitizer (the retry waited forever in the TSan CI stage).
  std::mutex mu;
  bool built = false;  // under mu
  std::vector<char> bytes;
  std::array<std::atomic<detail::FunctionHandle>, kMaxDevices> fns{};
};

std::shared_ptr<Image> image_for(const std::string& key) {
  static std::mutex mu;
  static auto* images = new std::unordered_map<std::string, std::shared_ptr<Image>>();  // leaked
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*images)[key];
  if (!slot) slot = std::make_shared<Image>();
  return slot;
}

const std::string& compiler_id(int device) {
  struct Slot {
    std::once_flag once;
    std::string id;
  };
  static std::array<Slot, kMaxDevices> slots;
  Slot& s = slots[static_cast<std::size_t>(device)];
  std::call_once(s.once, [&] {
    s.id = detail::kernel_ops().runtime_compiler_id(device, DiskCache::instance().dir());
  });
  return s.id;
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string entry_file(const std::string& name, const std::string& key) {
  std::string safe;
  for (char c : name.substr(0, 40)) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return safe + "-" + hex64(fnv1a64(key)) + hex64(fnv1a64(key, 0x9e3779b97f4a7c15ull)) + ".ckjit";
}

// "<file>(12)" (NVRTC) or "<file>:12:" (GCC, Clang): the first line number a log gives for
// `file`, or 0.
int first_line_in(const std::string& log, const char* file) {
  const std::string f = file;
  for (std::size_t pos = log.find(f); pos != std::string::npos; pos = log.find(f, pos + 1)) {
    std::size_t i = pos + f.size();
    if (i >= log.size() || (log[i] != '(' && log[i] != ':')) continue;
    const char close = log[i] == '(' ? ')' : ':';
    std::size_t j = ++i;
    while (j < log.size() && std::isdigit(static_cast<unsigned char>(log[j]))) ++j;
    if (j > i && j < log.size() && log[j] == close) return std::atoi(log.substr(i, j - i).c_str());
  }
  return 0;
}

// The first `max_lines` lines of the compiler's output.
std::string head_of(const std::string& log, int max_lines) {
  std::size_t pos = 0;
  for (int n = 0; n < max_lines && pos != std::string::npos; ++n) {
    pos = log.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  if (pos == std::string::npos || pos >= log.size()) return log;
  return log.substr(0, pos) + "... (" + std::to_string(log.size() - pos) + " more bytes)\n";
}

[[noreturn]] void throw_compile_error(int device, const KernelRequest& r, const std::string& log) {
  const int user_line = first_line_in(log, kUserFile);
  std::string compiler = compiler_id(device);
  compiler = compiler.substr(0, compiler.find(" size="));
  std::string msg = "jiterator: '" + r.name + "' failed to compile (" + compiler + "):\n" +
                    head_of(log, 40);
  if (!msg.empty() && msg.back() != '\n') msg += '\n';
  if (user_line > 0) {
    msg += "line " + std::to_string(user_line) + " of the code string: " +
           text_line(r.user_code, user_line);
  } else if (const int gen = first_line_in(log, kGeneratedFile); gen > 0) {
    msg += "in the code generated around '" + r.name + "' (line " + std::to_string(gen) +
           "): " + text_line(r.source, gen) +
           "\n(the call passes the tensors first, then the scalar parameters in declaration "
           "order, then the T& outputs of a multi-output function)";
  }
  throw jiterator::CompileError(msg, log, user_line);
}

void build(Image& img, int device, const KernelRequest& r, const std::string& key) {
  Counters& c = counters();
  const DiskCache& disk = DiskCache::instance();
  const std::string file = entry_file(r.name, key);
  std::vector<char> bytes;
  const DiskCache::Lookup found = disk.read(file, key, bytes);
  if (found == DiskCache::Lookup::hit) {
    c.disk_hits.fetch_add(1, std::memory_order_relaxed);
    img.bytes = std::move(bytes);
    return;
  }
  if (found == DiskCache::Lookup::rejected) c.disk_rejected.fetch_add(1, std::memory_order_relaxed);
  const auto t0 = std::chrono::steady_clock::now();
  detail::KernelOps::RuntimeCompileResult out =
      detail::kernel_ops().compile_runtime_module(device, r.source, r.name);
  c.compile_ns.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - t0).count()),
                         std::memory_order_relaxed);
  c.compiles.fetch_add(1, std::memory_order_relaxed);
  if (!out.ok) throw_compile_error(device, r, out.log);
  if (disk.write(file, key, out.image)) c.disk_writes.fetch_add(1, std::memory_order_relaxed);
  img.bytes = std::move(out.image);
}

}  // namespace

detail::FunctionHandle get_kernel(int device, const KernelRequest& r) {
  const std::string key = std::string(kFormat) + "\n" + compiler_id(device) + "\n" + r.source;
  std::shared_ptr<Image> img = image_for(key);
  auto& slot = img->fns[static_cast<std::size_t>(device)];
  if (detail::FunctionHandle f = slot.load(std::memory_order_acquire)) {
    counters().memory_hits.fetch_add(1, std::memory_order_relaxed);
    return f;
  }
  std::lock_guard<std::mutex> lock(img->mu);
  if (detail::FunctionHandle f = slot.load(std::memory_order_acquire)) return f;
  if (!img->built) {
    build(*img, device, r, key);  // a compile error throws: the next call tries again
    img->built = true;
  }
  detail::KernelOps& b = detail::kernel_ops();
  detail::ModuleHandle m = b.load_runtime_module(device, img->bytes.data(), img->bytes.size());
  detail::FunctionHandle f = b.module_get_function(m, r.symbol.c_str());
  slot.store(f, std::memory_order_release);
  return f;
}

jiterator::CacheStats stats() noexcept {
  const Counters& c = counters();
  jiterator::CacheStats s;
  s.memory_hits = c.memory_hits.load(std::memory_order_relaxed);
  s.disk_hits = c.disk_hits.load(std::memory_order_relaxed);
  s.compiles = c.compiles.load(std::memory_order_relaxed);
  s.disk_writes = c.disk_writes.load(std::memory_order_relaxed);
  s.disk_rejected = c.disk_rejected.load(std::memory_order_relaxed);
  s.compile_ms = static_cast<double>(c.compile_ns.load(std::memory_order_relaxed)) / 1e6;
  return s;
}

}  // namespace cudakit::jit
