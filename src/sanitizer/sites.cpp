// Sanitizer call sites: stack capture (C++ frame-pointer walk + the interpreter's hook),
// per-thread interning, and formatting for reports.
//
// Cost (emulated, one op from a shallow Python loop): the C++ walk ~20 ns, the Python hook
// ~20 ns per frame, the intern lookup ~15 ns (a hash of the frames and one probe of a
// thread-local table). Nothing is symbolised until a race is reported.
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_set>

#include "memory/history.hpp"
#include "sanitizer/tracker.hpp"

namespace cudakit::sanitizer::detail {

namespace {
std::atomic<cudakit::sanitizer::PyCaptureHook> g_py_capture{nullptr};

// Executable segments of the loaded objects, sorted: a return address outside them ends the
// C++ stack. The frame-pointer walk stops at frames without a frame pointer only when the chain
// leaves the stack; inside code built without frame pointers (libpython) it can follow a
// register that happens to point into the stack and read data as return addresses. Such data
// differs from call to call, so every op would intern a new site (found: a tiny-op loop
// interning one site per op, the table's probes dominating the sanitizer's cost).
struct TextRanges {
  std::shared_mutex mu;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;  // [begin, end), sorted
  std::atomic<std::int64_t> next_refresh_ns{0};
};
TextRanges& text_ranges() {
  static auto* t = new TextRanges();  // never destroyed
  return *t;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

void refresh_text_ranges() {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        auto& v = *static_cast<std::vector<std::pair<std::uintptr_t, std::uintptr_t>>*>(out);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
            v.emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        return 0;
      },
      &found);
  std::sort(found.begin(), found.end());
  TextRanges& t = text_ranges();
  std::unique_lock lock(t.mu);
  t.ranges = std::move(found);
}

// `known`: the calling thread's direct-mapped cache of addresses already found in code (the
// same few return addresses come back op after op: no lock, no search for them).
bool in_text(std::uintptr_t pc, std::uintptr_t (&known)[64]) {
  std::uintptr_t& slot = known[(pc >> 4) & 63];
  if (slot == pc) return true;
  TextRanges& t = text_ranges();
  {
    std::shared_lock lock(t.mu);
    auto it = std::upper_bound(t.ranges.begin(), t.ranges.end(),
                               std::make_pair(pc, ~std::uintptr_t{0}));
    if (it != t.ranges.begin() && pc < std::prev(it)->second) {
      slot = pc;
      return true;
    }
  }
  // Not in a known object: garbage, or code loaded since the last scan. Rescan at most every
  // 100 ms (garbage is the common case).
  const std::int64_t now = now_ns();
  std::int64_t due = t.next_refresh_ns.load(std::memory_order_relaxed);
  if (now < due || !t.next_refresh_ns.compare_exchange_strong(due, now + 100'000'000)) return false;
  refresh_text_ranges();
  std::shared_lock lock(t.mu);
  auto it = std::upper_bound(t.ranges.begin(), t.ranges.end(),
                             std::make_pair(pc, ~std::uintptr_t{0}));
  return it != t.ranges.begin() && pc < std::prev(it)->second;
}
std::atomic<cudakit::sanitizer::PySourceHook> g_py_symbolize{nullptr};

std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

// This thread's sites: an open-addressing table (power-of-two size, linear probing), plus the
// code-address cache and the name cache. On the heap behind one thread_local pointer:
// libcudakit has static TLS (memory/alloc_trace.hpp), so every byte of its thread_local data
// comes out of the surplus glibc reserves for libraries loaded by dlopen (Python loads it
// so), which is small.
struct SiteTable {
  std::vector<const Site*> slots = std::vector<const Site*>(256, nullptr);
  std::size_t used = 0;
  Site scratch;  // the site being looked up (capacity reused)
  std::uintptr_t known_text[64] = {};
  std::unordered_map<std::string, const char*> names;
};
thread_local std::unique_ptr<SiteTable> tls_sites;
SiteTable& sites() {
  if (!tls_sites) [[unlikely]] tls_sites = std::make_unique<SiteTable>();
  return *tls_sites;
}

bool same(const Site& a, const Site& b) {
  return a.hash == b.hash && a.kernel == b.kernel && a.depth == b.depth &&
         std::memcmp(a.pc, b.pc, sizeof(void*) * static_cast<std::size_t>(a.depth)) == 0 &&
         a.py == b.py;
}

void grow(SiteTable& t) {
  std::vector<const Site*> old(t.slots.size() * 2, nullptr);
  old.swap(t.slots);
  const std::size_t mask = t.slots.size() - 1;
  for (const Site* s : old) {
    if (!s) continue;
    std::size_t i = s->hash & mask;
    while (t.slots[i]) i = (i + 1) & mask;
    t.slots[i] = s;
  }
}
}  // namespace

void set_python_hooks(cudakit::sanitizer::PyCaptureHook capture,
                      cudakit::sanitizer::PySourceHook symbolize) noexcept {
  g_py_symbolize.store(symbolize);
  g_py_capture.store(capture);
}

const Site* capture_site(const char* kernel, const void* entry, bool may_block) {
  SiteTable& t = sites();
  Site& s = t.scratch;
  s.kernel = kernel;
  const int walked = memory::walk_frames(s.pc, kMaxFrames, reinterpret_cast<std::uintptr_t>(entry));
  s.depth = 0;
  while (s.depth < walked && in_text(reinterpret_cast<std::uintptr_t>(s.pc[s.depth]), t.known_text))
    ++s.depth;
  // Safety valve: a thread whose stacks keep differing stops growing its table past 64 Ki
  // sites by keeping only the innermost frames.
  if (t.used > (std::size_t{1} << 16) && s.depth > 4) s.depth = 4;
  s.py.clear();
  if (auto h = g_py_capture.load(std::memory_order_acquire)) h(s.py, may_block);
  std::uint64_t hash = mix(0, reinterpret_cast<std::uintptr_t>(kernel));
  for (int i = 0; i < s.depth; ++i) hash = mix(hash, reinterpret_cast<std::uintptr_t>(s.pc[i]));
  for (const PyFrameRef& f : s.py)
    hash = mix(mix(hash, reinterpret_cast<std::uintptr_t>(f.code)), static_cast<std::uint64_t>(f.lasti));
  s.hash = hash;
  const std::size_t mask = t.slots.size() - 1;
  std::size_t i = hash & mask;
  while (const Site* c = t.slots[i]) {
    if (same(*c, s)) return c;
    i = (i + 1) & mask;
  }
  // New site: immortal (accesses anywhere may point at it).
  auto* fresh = new Site(s);
  t.slots[i] = fresh;
  if (++t.used * 2 > t.slots.size()) grow(t);
  return fresh;
}

const char* intern(std::string_view name) {
  // Per-thread cache in front of the process-wide set: declared kernels repeat their names.
  auto& cache = sites().names;
  if (auto it = cache.find(std::string(name)); it != cache.end()) return it->second;
  static std::mutex mu;
  static auto* names = new std::unordered_set<std::string>();  // never freed
  const char* out;
  {
    std::lock_guard lock(mu);
    out = names->emplace(name).first->c_str();
  }
  cache.emplace(std::string(name), out);
  return out;
}

std::string format_site(const Site* s, bool may_block) {
  if (!s) return "  (stack not recorded: the sanitizer was off when this happened)\n";
  std::string out;
  // Python frames, outermost first as a traceback prints them.
  auto sym = g_py_symbolize.load(std::memory_order_acquire);
  for (auto it = s->py.rbegin(); it != s->py.rend(); ++it) {
    std::string file = "??", name = "??", source;
    int line = 0;
    if (sym) sym(*it, file, line, name, source, may_block);
    out += "  File \"" + file + "\", line " + std::to_string(line) + ", in " + name + "\n";
    if (!source.empty()) out += "    " + source + "\n";
  }
  std::string cpp;
  int shown = 0;
  for (int i = 0; i < s->depth; ++i) {
    // Hidden functions have no dynamic symbol: library+offset, for addr2line. An address in
    // no loaded object ends the walk (a frame of code built without frame pointers).
    Dl_info info{};
    if (!dladdr(static_cast<char*>(s->pc[i]) - 1, &info) || !info.dli_fname) break;
    std::string file, name;
    memory::symbolize_cpp_frame(s->pc[i], file, name);
    if (const auto slash = file.rfind('/'); slash != std::string::npos) file.erase(0, slash + 1);
    if (!info.dli_sname && name.rfind("0x", 0) == 0) {  // no symbol in either table
      char off[32];
      std::snprintf(off, sizeof off, "+%#zx",
                    static_cast<std::size_t>(static_cast<char*>(s->pc[i]) -
                                             static_cast<char*>(info.dli_fbase)));
      cpp += "    #" + std::to_string(shown++) + " " + file + off + "\n";
    } else {
      cpp += "    #" + std::to_string(shown++) + " " + name + " in " + file + "\n";
    }
  }
  if (!cpp.empty()) out += "  C++ frames (innermost first):\n" + cpp;
  if (s->py.empty() && s->depth == 0) out += "  (no frames)\n";
  return out;
}

}  // namespace cudakit::sanitizer::detail
