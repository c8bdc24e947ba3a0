// Chrome / Perfetto output in Kineto's layout (chrome_trace.hpp).
#include "profiler/chrome_trace.hpp"

#include <cxxabi.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "cudakit/error.hpp"
#include "profiler/occupancy.hpp"

namespace cudakit::profiler::detail {
namespace {

using cudakit::detail::kNoStream;
using cudakit::detail::SyncKind;

// Kineto's row offset for "Stream Sync" events (kSyncStreamTidOffset), so waits do not
// overlap the stream's kernels.
constexpr std::int64_t kSyncRowOffset = 1000000;
// Kineto sorts device processes after the host's (kExceedMaxPid-style offset).
constexpr std::int64_t kDeviceSortOffset = 5000000;
constexpr std::uint8_t kFlowStart = TraceData::kFlowStart, kFlowEnd = TraceData::kFlowEnd;

const char* sync_name(std::uint8_t kind) {
  switch (static_cast<SyncKind>(kind)) {
    case SyncKind::event_synchronize: return "Event Sync";
    case SyncKind::stream_wait_event: return "Stream Wait Event";
    case SyncKind::stream_synchronize: return "Stream Sync";
    case SyncKind::context_synchronize: return "Context Sync";
    default: return "Unknown Sync";
  }
}

const char* copy_kind_name(std::uint8_t k) {  // CUpti_ActivityMemcpyKind
  static const char* names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  return k < std::size(names) ? names[k] : "Unknown";
}

const char* memory_kind_name(std::uint8_t k) {  // CUpti_ActivityMemoryKind
  static const char* names[] = {"Unknown", "Pageable",      "Pinned",        "Device",
                                "Array",   "Managed",       "Device Static", "Managed Static"};
  return k < std::size(names) ? names[k] : "Unknown";
}

std::int64_t host_tid(const ActivityRecord& r) { return static_cast<std::int64_t>(r.stream); }

std::int64_t device_tid(const ActivityRecord& r) {
  return r.stream == kNoStream ? 0 : static_cast<std::int64_t>(r.stream);
}

// ---------------------------------------------------------------------------------------
// Sinks: the JSON writer and the TraceEvent builder share this interface.

// Append-only byte buffer: the export appends ~20 small pieces per event, and
// std::string::append's out-of-line growth path for each piece was measurable; here an append
// is a capacity check and a memcpy the compiler sizes for literals. The appends are forced
// inline: as out-of-line calls each literal went through libc's memmove, and those calls were
// ~25% of the export's time (perf, 1M-event trace).
class Buf {
 public:
  void reserve(std::size_t n) {
    if (n > cap_) grow(n - len_);
  }
  [[gnu::always_inline]] void append(const char* s, std::size_t n) {
    std::memcpy(room(n), s, n);
    len_ += n;
  }
  [[gnu::always_inline]] void append(std::string_view s) { append(s.data(), s.size()); }
  template <std::size_t N>
  [[gnu::always_inline]] void append(const char (&lit)[N]) {
    append(lit, N - 1);
  }
  void append(const char* s, const char* end) { append(s, static_cast<std::size_t>(end - s)); }
  [[gnu::always_inline]] void push_back(char c) {
    *room(1) = c;
    ++len_;
  }
  // At least `n` writable bytes at the end; the caller writes some of them and then
  // commit()s how far it got (numbers are formatted in place, not through a temporary).
  [[gnu::always_inline]] char* room(std::size_t n) {
    if (n > cap_ - len_) [[unlikely]] grow(n);
    return data_.get() + len_;
  }
  void commit(const char* end) { len_ = static_cast<std::size_t>(end - data_.get()); }
  const char* data() const { return data_.get(); }
  std::size_t size() const { return len_; }
  bool empty() const { return len_ == 0; }
  void clear() { len_ = 0; }

 private:
  [[gnu::noinline]] void grow(std::size_t need) {
    const std::size_t cap = std::max(cap_ * 2, len_ + need + 4096);
    auto next = std::make_unique<char[]>(cap);
    if (len_) std::memcpy(next.get(), data_.get(), len_);
    data_ = std::move(next);
    cap_ = cap;
  }
  std::unique_ptr<char[]> data_;
  std::size_t len_ = 0, cap_ = 0;
};

class JsonOut {
 public:
  using Flush = void (*)(void* ctx, const char* data, std::size_t n);
  JsonOut(Flush flush, void* ctx) : flush_(flush), ctx_(ctx) { buf_.reserve(kFlushAt + 4096); }

  void raw(std::string_view s) { buf_.append(s); }

  void begin(char ph, std::string_view cat, std::string_view name, std::int64_t pid,
             std::int64_t tid, std::int64_t ts, std::int64_t dur) {
    if (events_++) buf_.append(",\n");
    head(ph, cat, name, pid, tid);
    us(ts);
    if (ph == 'X') {
      buf_.append(",\"dur\":");
      us(dur);
    }
    args_open_ = false;
  }
  void flow(char ph, std::uint64_t id, std::int64_t pid, std::int64_t tid, std::int64_t ts) {
    if (events_++) buf_.append(",\n");
    buf_.append("{\"ph\":\"");
    buf_.push_back(ph);
    buf_.append("\",\"id\":");
    num(id);
    flow_row(ph == 'f', pid, tid);
    us(ts);
    if (ph == 'f') {
      buf_.append(",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}");
    } else {
      buf_.append(",\"cat\":\"ac2g\",\"name\":\"ac2g\"}");
    }
    maybe_flush();
  }
  // Keys are cudakit's literals (written as they are) except annotation keys, which come
  // through ann(). Escaping every literal key cost ~15% of the export. Taking the key as a
  // literal array lets the compiler write it and its quotes as fixed-size stores.
  template <std::size_t N>
  void arg(const char (&k)[N], std::int64_t v) {
    key(k), num(v);
  }
  template <std::size_t N>
  void arg_u(const char (&k)[N], std::uint64_t v) {
    key(k), num(v);
  }
  template <std::size_t N>
  void arg_d(const char (&k)[N], double v) {
    key(k), dbl(v);
  }
  template <std::size_t N>
  void arg_f(const char (&k)[N], float v) {
    key(k), dbl(v);
  }
  template <std::size_t N>
  void arg_s(const char (&k)[N], std::string_view v) {
    key(k), str(v);
  }
  template <std::size_t N>
  void arg_b(const char (&k)[N], bool v) {
    key(k);
    if (v) {
      buf_.append("true");
    } else {
      buf_.append("false");
    }
  }
  // An annotation entry: user text, so the key is escaped.
  void ann(std::string_view k, const graph_annotations::AnnotationValue& v) {
    if (args_open_) {
      buf_.push_back(',');
    } else {
      buf_.append(",\"args\":{");
      args_open_ = true;
    }
    str(k);
    buf_.push_back(':');
    std::visit([&](const auto& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::nullptr_t>) {
        buf_.append("null");
      } else if constexpr (std::is_same_v<T, bool>) {
        buf_.append(std::string_view(x ? "true" : "false"));
      } else if constexpr (std::is_same_v<T, std::int64_t>) {
        num(x);
      } else if constexpr (std::is_same_v<T, double>) {
        dbl(x);
      } else {
        str(x);
      }
    }, v);
  }
  template <std::size_t N>
  void arg_dims(const char (&k)[N], const std::uint32_t (&v)[3]) {
    key(k);
    buf_.push_back('[');
    num(v[0]);
    buf_.push_back(',');
    num(v[1]);
    buf_.push_back(',');
    num(v[2]);
    buf_.push_back(']');
  }
  // Copies `saved` when it holds bytes; else runs `write` (which must write some) and saves
  // what it wrote there: for args that repeat from event to event.
  template <class F>
  void memo(std::string& saved, F&& write) {
    if (!saved.empty()) {
      buf_.append(saved);
      return;
    }
    const std::size_t start = buf_.size();
    write();
    saved.assign(buf_.data() + start, buf_.size() - start);
  }
  void end() {
    if (args_open_) {
      buf_.append("}}");
    } else {
      buf_.push_back('}');
    }
    maybe_flush();
  }
  void finish() {
    if (!buf_.empty()) flush_(ctx_, buf_.data(), buf_.size());
    buf_.clear();
  }

  // JSON string with escapes (names can hold quotes: templates, user text).
  void str(std::string_view s) {
    buf_.push_back('"');
    std::size_t start = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c != '"' && c != '\\') [[likely]] continue;
      buf_.append(s.data() + start, i - start);
      start = i + 1;
      if (c == '"') {
        buf_.append("\\\"");
      } else if (c == '\\') {
        buf_.append("\\\\");
      } else if (c == '\n') {
        buf_.append("\\n");
      } else if (c == '\t') {
        buf_.append("\\t");
      } else {
        // \u00XX, six bytes (appending the char[8] array as a literal wrote its NUL too)
        static constexpr char kHex[] = "0123456789abcdef";
        const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        buf_.append(esc, sizeof esc);
      }
    }
    buf_.append(s.data() + start, s.size() - start);
    buf_.push_back('"');
  }
  template <class T>
  void num(T v) {
    char* p = buf_.room(24);
    buf_.commit(std::to_chars(p, p + 24, v).ptr);
  }
  template <class F>
  void dbl(F v) {
    if (!std::isfinite(v)) v = 0;  // JSON has no inf / nan
    char tmp[32];
    auto res = std::to_chars(tmp, tmp + sizeof tmp, v);
    buf_.append(tmp, res.ptr);
  }
  // Relative nanoseconds as microseconds with 3 decimals, exactly (Kineto's fmtTs).
  void us(std::int64_t ns) {
    if (ns < 0) ns = 0;
    char* p = buf_.room(28);
    p = std::to_chars(p, p + 24, ns / 1000).ptr;
    const int frac = static_cast<int>(ns % 1000);
    p[0] = '.';
    p[1] = static_cast<char>('0' + frac / 100);
    p[2] = static_cast<char>('0' + frac / 10 % 10);
    p[3] = static_cast<char>('0' + frac % 10);
    buf_.commit(p + 4);
  }

 private:
  static constexpr std::size_t kFlushAt = 1 << 20;

  // An event's start up to its timestamp, {"ph":..,"cat":..,"name":..,"pid":..,"tid":..,"ts":
  // repeats: a loop's launches and kernels share name, process and row. Each distinct head is
  // formatted (name escaped, ids converted) once and copied after that (measured, 1M-event
  // trace: -12%). A small table indexed by the name's address and the row; an entry is used
  // only when its content matches (some names are temporaries), else replaced.
  struct Head {
    char ph = 0;
    std::int64_t pid = 0, tid = 0;
    std::string cat, name, text;
  };
  static std::size_t head_slot(char ph, const char* name, std::int64_t pid, std::int64_t tid) {
    std::uint64_t h = reinterpret_cast<std::uintptr_t>(name) ^ static_cast<std::uint64_t>(ph);
    h = (h ^ static_cast<std::uint64_t>(pid)) * 0x9E3779B97F4A7C15ull;
    h = (h ^ static_cast<std::uint64_t>(tid)) * 0x9E3779B97F4A7C15ull;
    return static_cast<std::size_t>(h >> 58);  // 64 slots
  }
  void head(char ph, std::string_view cat, std::string_view name, std::int64_t pid,
            std::int64_t tid) {
    Head& h = heads_[head_slot(ph, name.data(), pid, tid)];
    if (h.ph != ph || h.pid != pid || h.tid != tid || h.name != name || h.cat != cat) {
      h.ph = ph;
      h.pid = pid;
      h.tid = tid;
      h.cat.assign(cat);
      h.name.assign(name);
      h.text.clear();  // memo() formats it again
    }
    memo(h.text, [&] {
      buf_.append("{\"ph\":\"");
      buf_.push_back(ph);
      buf_.push_back('"');
      if (!cat.empty()) {  // categories are cudakit's literals
        buf_.append(",\"cat\":\"");
        buf_.append(cat);
        buf_.push_back('"');
      }
      if (ph == 'i') buf_.append(",\"s\":\"t\"");
      buf_.append(",\"name\":");
      str(name);
      pid_tid_ts(pid, tid);
    });
  }
  void pid_tid_ts(std::int64_t pid, std::int64_t tid) {
    buf_.append(",\"pid\":");
    num(pid);
    buf_.append(",\"tid\":");
    num(tid);
    buf_.append(",\"ts\":");
  }
  // A flow event's ,"pid":..,"tid":..,"ts": for the last row of its kind (host launches for
  // 's', device rows for 'f'; a loop stays on one of each).
  struct Row {
    std::int64_t pid = -1, tid = -1;
    std::string text;
  };
  void flow_row(bool end, std::int64_t pid, std::int64_t tid) {
    Row& r = rows_[end];
    if (r.pid != pid || r.tid != tid) {
      r.pid = pid;
      r.tid = tid;
      r.text.clear();
    }
    memo(r.text, [&] { pid_tid_ts(pid, tid); });
  }
  template <std::size_t N>
  void key(const char (&k)[N]) {
    if (args_open_) {
      buf_.append(",\"");
    } else {
      buf_.append(",\"args\":{\"");
      args_open_ = true;
    }
    buf_.append(k);
    buf_.append("\":");
  }
  void maybe_flush() {
    if (buf_.size() >= kFlushAt) {
      flush_(ctx_, buf_.data(), buf_.size());
      buf_.clear();
    }
  }
  Flush flush_;
  void* ctx_;
  Buf buf_;
  std::array<Head, 64> heads_;
  Row rows_[2];
  std::size_t events_ = 0;
  bool args_open_ = false;
};

class EventsOut {
 public:
  std::vector<TraceEvent> events;

  void begin(char ph, std::string_view cat, std::string_view name, std::int64_t pid,
             std::int64_t tid, std::int64_t ts, std::int64_t dur) {
    TraceEvent& e = events.emplace_back();
    e.phase = ph;
    e.category = cat;
    e.name = name;
    e.pid = pid;
    e.tid = tid;
    e.ts_ns = ts < 0 ? 0 : ts;
    e.dur_ns = ph == 'X' ? (dur < 0 ? 0 : dur) : 0;
  }
  void flow(char ph, std::uint64_t id, std::int64_t pid, std::int64_t tid, std::int64_t ts) {
    begin(ph, "ac2g", "ac2g", pid, tid, ts, 0);
    events.back().flow_id = id;
  }
  void arg(std::string_view k, std::int64_t v) { add(k, v); }
  void arg_u(std::string_view k, std::uint64_t v) { add(k, v); }
  void arg_d(std::string_view k, double v) { add(k, std::isfinite(v) ? v : 0.0); }
  void arg_f(std::string_view k, float v) { arg_d(k, v); }
  void ann(std::string_view k, const graph_annotations::AnnotationValue& v) {
    std::visit([&](const auto& x) { add(k, x); }, v);
  }
  void arg_s(std::string_view k, std::string_view v) { add(k, std::string(v)); }
  void arg_b(std::string_view k, bool v) { add(k, v); }
  void arg_dims(std::string_view k, const std::uint32_t (&v)[3]) {
    add(k, std::vector<std::int64_t>{v[0], v[1], v[2]});
  }
  template <class F>
  void memo(std::string&, F&& write) {
    write();
  }
  void end() {}

 private:
  void add(std::string_view k, TraceArgValue v) {
    events.back().args.emplace_back(std::string(k), std::move(v));
  }
};

// ---------------------------------------------------------------------------------------

template <class Out>
class Emitter {
 public:
  Emitter(const TraceData& d, Out& out) : d_(d), out_(out) {}

  void run() {
    metadata();
    for (std::size_t i = 0; i < d_.records.size(); ++i) {
      flow_ = d_.flow.empty() ? 0 : d_.flow[i];
      record(*d_.records[i]);
    }
    for (const GpuSpan& s : d_.gpu_spans) {
      out_.begin('X', "gpu_user_annotation", s.range->name ? s.range->name : "", s.device,
                 s.stream == kNoStream ? 0 : s.stream, rel(s.start_ns), s.end_ns - s.start_ns);
      out_.end();
    }
  }

 private:
  std::int64_t rel(std::int64_t t) const { return t - d_.base_ns; }

  template <std::size_t N>
  void meta(const char* name, std::int64_t pid, std::int64_t tid, const char (&key)[N],
            std::string_view value) {
    out_.begin('M', "", name, pid, tid, 0, 0);
    out_.arg_s(key, value);
    out_.end();
  }
  template <std::size_t N>
  void meta_n(const char* name, std::int64_t pid, std::int64_t tid, const char (&key)[N],
              std::int64_t value) {
    out_.begin('M', "", name, pid, tid, 0, 0);
    out_.arg(key, value);
    out_.end();
  }

  void metadata() {
    const std::int64_t pid = d_.pid;
    meta("process_name", pid, 0, "name", d_.process_name);
    meta("process_labels", pid, 0, "labels", "CPU");
    meta_n("process_sort_index", pid, 0, "sort_index", pid);
    for (const auto& [tid, comm] : d_.thread_names) {
      meta("thread_name", pid, tid, "name",
           "thread " + std::to_string(tid) + (comm.empty() ? "" : " (" + comm + ")"));
      meta_n("thread_sort_index", pid, tid, "sort_index", tid);
    }
    std::set<std::pair<int, std::int64_t>> rows;  // (device, tid) rows the trace uses
    std::set<int> devices;
    for (const ActivityRecord* r : d_.records) {
      switch (r->kind) {
        case ActivityKind::kernel:
        case ActivityKind::memcpy:
        case ActivityKind::memset:
        case ActivityKind::stream_created:
        case ActivityKind::stream_destroyed:
          rows.emplace(r->device, device_tid(*r));
          devices.insert(r->device);
          break;
        case ActivityKind::sync:
          rows.emplace(r->device, sync_tid(*r));
          devices.insert(r->device);
          break;
        case ActivityKind::memory:
          if (r->device >= 0) devices.insert(r->device);
          break;
        default:
          break;
      }
    }
    for (const GpuSpan& s : d_.gpu_spans) rows.emplace(s.device, s.stream);
    for (const auto& [dev, props] : d_.devices) devices.insert(dev);
    for (int dev : devices) {
      if (dev < 0) continue;
      meta("process_name", dev, 0, "name", d_.process_name);
      auto it = d_.devices.find(dev);
      meta("process_labels", dev, 0, "labels",
           "GPU " + std::to_string(dev) +
               (it != d_.devices.end() && !it->second.name.empty() ? " (" + it->second.name + ")"
                                                                   : ""));
      meta_n("process_sort_index", dev, 0, "sort_index", kDeviceSortOffset + dev);
    }
    for (const auto& [dev, tid] : rows) {
      if (dev < 0) continue;
      std::string name;
      if (tid == 0) {
        name = "device sync";
      } else if (tid >= kSyncRowOffset) {
        name = "stream " + std::to_string(tid - kSyncRowOffset) + " (sync)";
      } else {
        name = "stream " + std::to_string(tid);
      }
      meta("thread_name", dev, tid, "name", name);
      meta_n("thread_sort_index", dev, tid, "sort_index", tid);
    }
  }

  static std::int64_t sync_tid(const ActivityRecord& r) {
    if (r.stream == kNoStream) return 0;
    if (static_cast<SyncKind>(r.detail) == SyncKind::stream_synchronize) {
      return kSyncRowOffset + r.stream;
    }
    return r.stream;
  }

  const std::string& kernel_name(const char* raw) {
    if (raw == last_kernel_ && last_kernel_name_) return *last_kernel_name_;  // loops repeat
    last_kernel_ = raw;
    last_kernel_name_ = &demangled(raw);
    return *last_kernel_name_;
  }
  const std::string& demangled(const char* raw) {
    auto it = demangled_.find(raw);
    if (it != demangled_.end()) return it->second;
    std::string name = raw ? raw : "kernel";
    if (raw && raw[0] == '_' && raw[1] == 'Z') {
      int status = 0;
      char* dm = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
      if (status == 0 && dm) name = dm;
      std::free(dm);
    }
    return demangled_.emplace(raw, std::move(name)).first->second;
  }

  const std::string& copy_name(const ActivityRecord& r) {
    const unsigned key = (unsigned(r.kind) << 24) | (unsigned(r.detail) << 16) |
                         (unsigned(r.u.copy.src_kind) << 8) | r.u.copy.dst_kind;
    auto it = copy_names_.find(key);
    if (it != copy_names_.end()) return it->second;
    std::string name =
        r.kind == ActivityKind::memcpy
            ? std::string("Memcpy ") + copy_kind_name(r.detail) + " (" +
                  memory_kind_name(r.u.copy.src_kind) + " -> " +
                  memory_kind_name(r.u.copy.dst_kind) + ")"
            : std::string("Memset (") + memory_kind_name(r.u.copy.src_kind) + ")";
    return copy_names_.emplace(key, std::move(name)).first->second;
  }

  const DeviceProperties* props(int device) const {
    auto it = d_.devices.find(device);
    return it == d_.devices.end() ? nullptr : &it->second;
  }

  // Per kernel shape (device + launch configuration): its launch statistics and, once
  // written, its args as JSON. A model's step cycles through a few dozen shapes, a loop
  // repeats one (checked first, without hashing).
  struct Shape {
    Occupancy occ;
    std::string json;  // JsonOut::memo's bytes; "" until written
  };
  using ShapeKey = std::array<char, sizeof(std::int32_t) + sizeof(ActivityRecord::Kernel)>;
  struct ShapeHash {
    std::size_t operator()(const ShapeKey& k) const noexcept {
      return std::hash<std::string_view>{}(std::string_view(k.data(), k.size()));
    }
  };
  Shape& shape(const ActivityRecord& r) {
    ShapeKey key;
    const std::int32_t device = r.device;
    std::memcpy(key.data(), &device, sizeof device);
    std::memcpy(key.data() + sizeof device, &r.u.kernel, sizeof r.u.kernel);
    if (last_shape_ && *last_shape_key_ == key) return *last_shape_;
    auto [it, inserted] = shapes_.try_emplace(key);
    if (inserted) {
      const auto& k = r.u.kernel;
      const DeviceProperties* p = props(r.device);
      const KernelShape ks{{k.grid[0], k.grid[1], k.grid[2]},
                           {k.block[0], k.block[1], k.block[2]},
                           k.shared_bytes,
                           k.registers};
      it->second.occ = p ? kernel_occupancy(*p, ks) : Occupancy{};
    }
    last_shape_key_ = &it->first;  // map nodes do not move
    last_shape_ = &it->second;
    return it->second;
  }

  // Annotation of a graph node (null when none): its keys replace the event's own args of
  // the same name (args.update(annotation), the seed's join).
  const graph_annotations::Annotation* annotation(std::uint64_t node_id) const {
    if (node_id == 0 || d_.annotations.empty()) return nullptr;
    auto it = d_.annotations.find(node_id);
    return it == d_.annotations.end() ? nullptr : &it->second;
  }
  static bool overridden(const graph_annotations::Annotation* a, std::string_view key) {
    if (!a) return false;
    for (const auto& kv : *a) {
      if (kv.first == key) return true;
    }
    return false;
  }
  void annotation_args(const graph_annotations::Annotation* a) {
    if (!a) return;
    for (const auto& [k, v] : *a) out_.ann(k, v);
  }

  void shape_args(const ActivityRecord& r, const Occupancy& occ,
                  const graph_annotations::Annotation* ann) {
    auto a = [&](std::string_view k) { return !overridden(ann, k); };
    if (a("registers per thread")) out_.arg_u("registers per thread", r.u.kernel.registers);
    if (a("shared memory")) out_.arg("shared memory", r.u.kernel.shared_bytes);
    // floats, as Kineto writes them (shorter than doubles, same information)
    if (a("blocks per SM")) out_.arg_f("blocks per SM", static_cast<float>(occ.blocks_per_sm));
    if (a("warps per SM")) out_.arg_f("warps per SM", static_cast<float>(occ.warps_per_sm));
    if (a("grid")) out_.arg_dims("grid", r.u.kernel.grid);
    if (a("block")) out_.arg_dims("block", r.u.kernel.block);
    if (a("est. achieved occupancy %")) {
      out_.arg("est. achieved occupancy %", occ.achieved_percent);
    }
  }

  void device_work(const ActivityRecord& r) {
    const graph_annotations::Annotation* ann = annotation(r.id);
    auto a = [&](std::string_view k) { return !overridden(ann, k); };
    const std::int64_t pid = r.device, tid = device_tid(r), ts = rel(r.start_ns);
    const std::int64_t dur = r.end_ns - r.start_ns;
    if (r.kind == ActivityKind::kernel) {
      out_.begin('X', "kernel", kernel_name(r.name), pid, tid, ts, dur);
      if (a("device")) out_.arg("device", r.device);
      if (a("stream")) out_.arg("stream", tid);
      if (a("correlation")) out_.arg_u("correlation", r.correlation);
      Shape& sh = shape(r);
      // The shape's args are the same for every kernel of that shape: without an annotation
      // (which may drop some) they are written once per shape and copied after that (two
      // float conversions and seven keys per kernel: -25% on the 1M-event trace).
      if (ann) {
        shape_args(r, sh.occ, ann);
      } else {
        out_.memo(sh.json, [&] { shape_args(r, sh.occ, nullptr); });
      }
    } else {
      const bool copy = r.kind == ActivityKind::memcpy;
      out_.begin('X', copy ? "gpu_memcpy" : "gpu_memset", copy_name(r), pid, tid, ts, dur);
      if (a("device")) out_.arg("device", r.device);
      if (a("stream")) out_.arg("stream", tid);
      if (a("correlation")) out_.arg_u("correlation", r.correlation);
      if (a("bytes")) out_.arg_u("bytes", r.value);
      // bytes per ns == GB/s (Kineto's unit); omitted for a zero duration, as Kineto does
      if (dur > 0 && a("memory bandwidth (GB/s)")) {
        out_.arg_d("memory bandwidth (GB/s)", double(r.value) / double(dur));
      }
    }
    if (a("graph id")) out_.arg_u("graph id", r.graph_id);
    if (a("graph node id")) out_.arg_u("graph node id", r.id);
    annotation_args(ann);
    out_.end();
    if (flow_ & kFlowEnd) out_.flow('f', r.correlation, pid, tid, ts);
  }

  void record(const ActivityRecord& r) {
    switch (r.kind) {
      case ActivityKind::kernel:
      case ActivityKind::memcpy:
      case ActivityKind::memset:
        device_work(r);
        return;
      case ActivityKind::sync: {
        out_.begin('X', "cuda_sync", sync_name(r.detail), r.device, sync_tid(r),
                   rel(r.start_ns), r.end_ns - r.start_ns);
        out_.arg_s("cuda_sync_kind", sync_name(r.detail));
        out_.arg("stream", r.stream == kNoStream ? -1 : std::int64_t{r.stream});
        out_.arg_u("correlation", r.correlation);
        out_.arg("device", r.device);
        out_.end();
        return;
      }
      case ActivityKind::runtime_api:
      case ActivityKind::driver_api: {
        const std::int64_t pid = r.u.api.process_id ? r.u.api.process_id : d_.pid;
        const std::int64_t ts = rel(r.start_ns);
        out_.begin('X', r.kind == ActivityKind::runtime_api ? "cuda_runtime" : "cuda_driver",
                   r.name ? r.name : "unknown API", pid, host_tid(r), ts, r.end_ns - r.start_ns);
        out_.arg_u("cbid", r.u.api.cbid);
        out_.arg_u("correlation", r.correlation);
        out_.end();
        if (flow_ & kFlowStart) out_.flow('s', r.correlation, pid, host_tid(r), ts);
        return;
      }
      case ActivityKind::user_range:
      case ActivityKind::marker:
        out_.begin('X', "user_annotation", r.name ? r.name : "", d_.pid, host_tid(r),
                   rel(r.start_ns), r.end_ns - r.start_ns);
        if (r.u.range.domain) out_.arg_s("domain", r.u.range.domain);
        if (r.kind == ActivityKind::marker) out_.arg_s("source", "CUPTI NVTX");
        out_.end();
        return;
      case ActivityKind::user_mark:
        out_.begin('i', "user_annotation", r.name ? r.name : "", d_.pid, host_tid(r),
                   rel(r.start_ns), 0);
        if (r.u.range.domain) out_.arg_s("domain", r.u.range.domain);
        out_.end();
        return;
      case ActivityKind::memory:
        memory(r);
        return;
      case ActivityKind::graph:
        graph(r);
        return;
      case ActivityKind::stream_created:
      case ActivityKind::stream_destroyed:
        out_.begin('i', "cuda_stream",
                   r.kind == ActivityKind::stream_created ? "stream created" : "stream destroyed",
                   r.device, device_tid(r), rel(r.start_ns), 0);
        out_.arg_u("stream", r.stream);
        out_.arg_b("non_blocking", r.detail != 0);
        out_.arg_u("thread", r.id);
        out_.end();
        return;
      default:
        return;
    }
  }

  // Kineto's memory events: "[memory]" instants with signed Bytes for allocations and frees
  // (what torch's memory timeline sums), cudakit's segment events under their own name so
  // they are not summed twice, and a per-device counter track of the totals.
  void memory(const ActivityRecord& r) {
    const auto action = static_cast<MemoryAction>(r.detail);
    if (action == MemoryAction::free_completed) return;  // the free was reported at request
    const bool counted = action == MemoryAction::alloc || action == MemoryAction::free_requested;
    const std::string name =
        counted ? std::string("[memory]") : std::string("[memory] ") + memory_action_name(action);
    const std::int64_t bytes = action == MemoryAction::free_requested ||
                                       action == MemoryAction::segment_free ||
                                       action == MemoryAction::segment_unmap
                                   ? -static_cast<std::int64_t>(r.value)
                                   : static_cast<std::int64_t>(r.value);
    out_.begin('i', "cpu_instant_event", name, d_.pid, host_tid(r), rel(r.start_ns), 0);
    out_.arg("Device Type", 1);  // c10::DeviceType::CUDA
    out_.arg("Device Id", r.device);
    out_.arg_u("Addr", r.id);
    out_.arg("Bytes", bytes);
    out_.arg("Total Allocated", r.u.memory.allocated);
    out_.arg("Total Reserved", r.u.memory.reserved);
    out_.arg_s("Action", memory_action_name(action));
    out_.end();
    if (r.device >= 0) {
      out_.begin('C', "cpu_instant_event", "Memory", r.device, 0, rel(r.start_ns), 0);
      out_.arg("Allocated", r.u.memory.allocated);
      out_.arg("Reserved", r.u.memory.reserved);
      out_.end();
    }
  }

  void graph(const ActivityRecord& r) {
    static const char* names[] = {"graph capture", "graph instantiate", "graph replay",
                                  "graph destroy"};
    const auto phase = static_cast<GraphPhase>(r.detail);
    const bool span = phase == GraphPhase::capture || phase == GraphPhase::replay;
    out_.begin(span ? 'X' : 'i', "cuda_graph", names[r.detail < 4 ? r.detail : 0], d_.pid,
               host_tid(r), rel(r.start_ns), r.end_ns - r.start_ns);
    out_.arg_u("graph id", r.value);
    out_.arg_u("capture id", r.id);
    out_.arg("device", r.device);
    out_.end();
  }

  const TraceData& d_;
  Out& out_;
  std::uint8_t flow_ = 0;  // TraceData::flow of the record being written
  const char* last_kernel_ = nullptr;
  const std::string* last_kernel_name_ = nullptr;
  std::unordered_map<ShapeKey, Shape, ShapeHash> shapes_;
  const ShapeKey* last_shape_key_ = nullptr;
  Shape* last_shape_ = nullptr;
  std::unordered_map<const char*, std::string> demangled_;
  std::unordered_map<unsigned, std::string> copy_names_;
};

void write_header(JsonOut& out, const TraceData& d) {
  out.raw("{\n\"schemaVersion\":1,\n\"deviceProperties\":[");
  bool first = true;
  for (const auto& [dev, p] : d.devices) {
    if (!first) out.raw(",");
    first = false;
    out.raw("\n{\"id\":");
    out.num(dev);
    out.raw(",\"name\":");
    out.str(p.name);
    out.raw(",\"totalGlobalMem\":");
    out.num(p.total_memory);
    out.raw(",\"computeMajor\":");
    out.num(p.major);
    out.raw(",\"computeMinor\":");
    out.num(p.minor);
    out.raw(",\"maxThreadsPerBlock\":");
    out.num(p.max_threads_per_block);
    out.raw(",\"maxThreadsPerMultiprocessor\":");
    out.num(p.max_threads_per_multi_processor);
    out.raw(",\"regsPerMultiprocessor\":");
    out.num(p.regs_per_multiprocessor);
    out.raw(",\"warpSize\":");
    out.num(p.warp_size);
    out.raw(",\"sharedMemPerBlock\":");
    out.num(p.shared_memory_per_block);
    out.raw(",\"numSms\":");
    out.num(p.multi_processor_count);
    out.raw(",\"sharedMemPerBlockOptin\":");
    out.num(p.shared_memory_per_block_optin);
    out.raw(",\"sharedMemPerMultiprocessor\":");
    out.num(p.shared_memory_per_multiprocessor);
    out.raw("}");
  }
  out.raw("],\n\"cudakit\":{\"backend\":");
  out.str(d.backend);
  out.raw(",\"device_source\":");
  out.str(d.device_source);
  out.raw(",\"warnings\":[");
  for (std::size_t i = 0; i < d.warnings.size(); ++i) {
    if (i) out.raw(",");
    out.str(d.warnings[i]);
  }
  out.raw("]},\n\"displayTimeUnit\":\"ms\",\n\"baseTimeNanoseconds\":");
  out.num(d.base_ns);
  out.raw(",\n\"traceEvents\":[\n");
}

void write_all(JsonOut& out, const TraceData& d, const std::string& trace_name) {
  write_header(out, d);
  Emitter<JsonOut> em(d, out);
  em.run();
  out.raw("\n],\n\"traceName\":");
  out.str(trace_name);
  out.raw("\n}\n");
  out.finish();
}

struct FileCtx {
  std::FILE* f;
  bool failed = false;
  int err = 0;
};

}  // namespace

void write_chrome_trace(const TraceData& d, std::FILE* f, const std::string& path) {
  FileCtx ctx{f};
  JsonOut out(
      [](void* c, const char* data, std::size_t n) {
        auto* fc = static_cast<FileCtx*>(c);
        if (fc->failed) return;
        if (std::fwrite(data, 1, n, fc->f) != n) {
          fc->failed = true;
          fc->err = errno;
        }
      },
      &ctx);
  write_all(out, d, path);
  if (ctx.failed) {
    throw Error("export_chrome_trace: writing '" + path + "' failed: " +
                std::strerror(ctx.err ? ctx.err : EIO));
  }
}

std::string chrome_trace_json(const TraceData& d, const std::string& trace_name) {
  std::string s;
  s.reserve(d.records.size() * 200 + 4096);
  JsonOut out([](void* c, const char* data, std::size_t n) {
    static_cast<std::string*>(c)->append(data, n);
  }, &s);
  write_all(out, d, trace_name);
  return s;
}

std::vector<TraceEvent> trace_events(const TraceData& d) {
  EventsOut out;
  Emitter<EventsOut> em(d, out);
  em.run();
  return std::move(out.events);
}

}  // namespace cudakit::profiler::detail
