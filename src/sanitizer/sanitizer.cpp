// Sanitizer: switches (enable / disable / environment), reporting, the error type.
#include "cudakit/sanitizer.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "sanitizer/hooks.hpp"
#include "sanitizer/tracker.hpp"

namespace cudakit::sanitizer::detail {

std::atomic<bool> g_on{false};

namespace {
std::atomic<bool> g_raise{true};
std::mutex g_switch_mu;  // serialises enable / disable

struct Handler {
  std::mutex mu;
  std::shared_ptr<const cudakit::sanitizer::WarningHandler> fn;  // copy-on-write
};
Handler& handler() {
  static auto* h = new Handler();  // never destroyed: warnings may come during exit
  return *h;
}

// CUDAKIT_CUDA_SANITIZER=1|raise|warn (0 or empty: off); TORCH_CUDA_SANITIZER as torch: set
// and not empty / "0" enables raise mode. Read when libcudakit is loaded, so C++ programs
// need no call; it touches no device.
struct EnvSwitch {
  EnvSwitch() {
    const char* ours = std::getenv("CUDAKIT_CUDA_SANITIZER");
    const char* torch = std::getenv("TORCH_CUDA_SANITIZER");
    const char* v = ours && *ours ? ours : torch;
    if (!v || !*v || std::strcmp(v, "0") == 0) return;
    using cudakit::sanitizer::OnRace;
    if (std::strcmp(v, "warn") == 0) {
      cudakit::sanitizer::enable(OnRace::warn);
    } else {
      if (std::strcmp(v, "1") != 0 && std::strcmp(v, "raise") != 0 && v == ours)
        std::fprintf(stderr,
                     "cudakit: CUDAKIT_CUDA_SANITIZER='%s' is not 0, 1, raise or warn; "
                     "enabling the sanitizer in raise mode\n", v);
      cudakit::sanitizer::enable(OnRace::raise);
    }
  }
} g_env_switch;
// What the modules report reaches the sanitizer through this table (instrument/observers.hpp),
// installed while it is enabled.
constexpr instrument::StreamObserver kObserver{
    .op = op,
    .raw_access = raw_access,
    .allocated = allocated,
    .freeing = freeing,
    .stream_recorded = stream_recorded,
    .event_recorded = event_recorded,
    .stream_waited = stream_waited,
    .host_waited_event = host_waited_event,
    .host_waited_stream = host_waited_stream,
    .host_waited_device = host_waited_device,
    .stream_destroyed = stream_destroyed,
    .event_destroyed = event_destroyed,
    .capture_begin = capture_begin,
    .capture_end = capture_end,
    .graph_replayed = graph_replayed,
};
}  // namespace

void raw_access(const char* what, const void* src, void* dst, std::size_t bytes,
                StreamRef stream) {
  if (!on()) return;
  const cudakit::sanitizer::Buffer w(dst, bytes, "dst");
  if (src != nullptr) {
    const cudakit::sanitizer::Buffer r(src, bytes, "src");
    cudakit::sanitizer::declare_access({r}, {w}, stream, what);
  } else {
    cudakit::sanitizer::declare_access({}, {w}, stream, what);
  }
}

bool raise_mode() noexcept { return g_raise.load(std::memory_order_relaxed); }

namespace {
void report(const std::string& message, bool from_free) {
  std::shared_ptr<const cudakit::sanitizer::WarningHandler> fn;
  {
    std::lock_guard lock(handler().mu);
    fn = handler().fn;
  }
  if (fn && *fn) {
    (*fn)(message, from_free);
    return;
  }
  std::fprintf(stderr, "%s\n", message.c_str());
}
}  // namespace

void warn(const std::string& message) { report(message, false); }

void warn_from_free(const std::string& message) noexcept {
  try {
    report(message, true);
  } catch (...) {  // a handler that raises (warnings as errors) cannot fail a free
  }
}

}  // namespace cudakit::sanitizer::detail

namespace cudakit::sanitizer {

namespace ds = cudakit::sanitizer::detail;

void enable(OnRace mode) {
  std::lock_guard lock(ds::g_switch_mu);
  ds::g_raise.store(mode == OnRace::raise);
  if (ds::g_on.load()) return;
  ds::Tracker::get().clear();
  ds::g_on.store(true);
  instrument::set_stream_observer(&ds::kObserver);
}

void disable() noexcept {
  std::lock_guard lock(ds::g_switch_mu);
  if (!ds::g_on.load()) return;
  instrument::set_stream_observer(nullptr);
  ds::g_on.store(false);
  ds::Tracker::get().clear();
}

bool is_enabled() noexcept { return ds::g_on.load(std::memory_order_relaxed); }
OnRace on_race() noexcept { return ds::raise_mode() ? OnRace::raise : OnRace::warn; }

void set_warning_handler(WarningHandler fn) {
  auto p = fn ? std::make_shared<const WarningHandler>(std::move(fn)) : nullptr;
  std::lock_guard lock(ds::handler().mu);
  ds::handler().fn = std::move(p);
}

Stats stats() noexcept {
  ds::Tracker& t = ds::Tracker::get();
  Stats s;
  s.accesses = t.n_accesses.load();
  s.races = t.n_races.load();
  s.allocations = t.n_allocs.load();
  try {
    s.streams = t.stream_count();
  } catch (...) {
  }
  s.captured = t.n_captured.load();
  return s;
}

void set_python_hooks(PyCaptureHook capture, PySourceHook symbolize) {
  ds::set_python_hooks(capture, symbolize);
}

namespace {
std::string describe_access(const Access& a) {
  std::string out = a.kernel + "\n";
  if (a.kernel == "allocation") {
    out += "handed out by the caching allocator, ordered on this stream only\n";
  } else {
    out += a.write ? "writing to" : "reading from";
    if (!a.aliases.empty()) {
      out += " argument(s) ";
      for (std::size_t i = 0; i < a.aliases.size(); ++i) out += (i ? ", " : "") + a.aliases[i];
      if (a.is_output) out += ", and to";
    }
    if (a.is_output) out += " the output";
    out += "\n";
  }
  out += "With stack trace:\n" + a.stack;
  return out;
}

std::string stream_name(const Access& a) {
  return std::to_string(reinterpret_cast<std::uintptr_t>(a.stream)) + " (cuda:" +
         std::to_string(a.device) + ")";
}

std::string join_messages(const std::vector<UnsynchronizedAccess>& errors) {
  std::string out = "CUDA sanitizer: detected " + std::to_string(errors.size()) +
                    (errors.size() == 1 ? " error" : " errors") + "\n";
  for (const auto& e : errors) out += e.message();
  return out;
}
}  // namespace

std::string UnsynchronizedAccess::message() const {
  char range[96];
  std::snprintf(range, sizeof range, "bytes [%#llx, %#llx)",
                static_cast<unsigned long long>(overlap_begin),
                static_cast<unsigned long long>(overlap_end));
  std::string out =
      "============================\n"
      "CSAN detected a possible data race on tensor with data pointer " +
      std::to_string(data_ptr) + "\n";
  char alloc[96];
  std::snprintf(alloc, sizeof alloc, "%#llx", static_cast<unsigned long long>(allocation));
  out += "(allocation " + std::string(alloc) + " of " +
         (allocation_size ? std::to_string(allocation_size) + " bytes" : std::string("unknown size")) +
         "; both accesses touch " + range + ")\n";
  out += "Access by stream " + stream_name(current) + " during kernel:\n" + describe_access(current);
  out += "Previous access by stream " + stream_name(previous) + " during kernel:\n" +
         describe_access(previous);
  if (!allocation_stack.empty()) {
    out += "Tensor was allocated with stack trace:\n" + allocation_stack;
  } else {
    out += "Trace for tensor allocation not found.\n";
  }
  return out;
}

CUDASanitizerErrors::CUDASanitizerErrors(std::vector<UnsynchronizedAccess> errors)
    : Error(join_messages(errors)), errors_(std::move(errors)) {}

}  // namespace cudakit::sanitizer
