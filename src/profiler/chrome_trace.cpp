// Chrome / Perfetto output in Kineto's layout (chrome_trace.hpp).
#include "profiler/chrome_trace.hpp"

#include <cxxabi.h>

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
// is a capacity check and a memcpy the compiler sizes for literals.
class Buf {
 public:
  void reserve(std::size_t n) {
    if (n > cap_) grow(n - len_);
  }
  void append(const char* s, std::size_t n) {
    if (n > cap_ - len_) [[unlikely]] grow(n);
    std::memcpy(data_.get() + len_, s, n);
    len_ += n;
  }
  void append(std::string_view s) { append(s.data(), s.size()); }
  template <std::size_t N>
  void append(const char (&lit)[N]) {
    append(lit, N - 1);
  }
  void append(const char* s, const char* end) { append(s, static_cast<std::size_t>(end - s)); }
  void push_back(char c) {
    if (len_ == cap_) [[unlikely]] grow(1);
    data_[len_++] = c;
  }
  const char* data() const { return data_.get(); }
  std::size_t size() const { return len_; }
  bool empty() const { return len_ == 0; }
  void clear() { len_ = 0; }

 private:
  void grow(std::size_t need) {
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
    buf_.append("{\"ph\":\"");
    buf_.push_back(ph);
    buf_.append("\"");
    if (!cat.empty()) {  // categories are cudakit's literals
      buf_.append(",\"cat\":\"");
      buf_.append(cat);
      buf_.push_back('"');
    }
    if (ph == 'i') buf_.append(",\"s\":\"t\"");
    buf_.append(",\"name\":");
    str(name);
    buf_.append(",\"pid\":");
    num(pid);
    buf_.append(",\"tid\":");
    num(tid);
    buf_.append(",\"ts\":");
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
    buf_.append(",\"pid\":");
    num(pid);
    buf_.append(",\"tid\":");
    num(tid);
    buf_.append(",\"ts\":");
    us(ts);
    buf_.append(std::string_view(ph == 'f' ? ",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}"
                                           : ",\"cat\":\"ac2g\",\"name\":\"ac2g\"}"));
    maybe_flush();
  }
  // Keys are cudakit's literals (written as they are) except annotation keys, which come
  // through the *_esc forms. Escaping every literal key cost ~15% of the export.
  void arg(std::string_view k, std::int64_t v) { key(k), num(v); }
  void arg_u(std::string_view k, std::uint64_t v) { key(k), num(v); }
  void arg_d(std::string_view k, double v) { key(k), dbl(v); }
  void arg_f(std::string_view k, float v) { key(k), dbl(v); }
  void arg_s(std::string_view k, std::string_view v) { key(k), str(v); }
  void arg_b(std::string_view k, bool v) {
    key(k), buf_.append(std::string_view(v ? "true" : "false"));
  }
  void arg_null(std::string_view k) { key(k), buf_.append("null"); }
  // An annotation entry: user text, so the key is escaped.
  void ann(std::string_view k, const graph_annotations::AnnotationValue& v) {
    buf_.append(std::string_view(args_open_ ? "," : ",\"args\":{"));
    args_open_ = true;
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
  void arg_dims(std::string_view k, const std::uint32_t (&v)[3]) {
    key(k);
    buf_.push_back('[');
    num(v[0]);
    buf_.push_back(',');
    num(v[1]);
    buf_.push_back(',');
    num(v[2]);
    buf_.push_back(']');
  }
  void end() {
    buf_.append(std::string_view(args_open_ ? "}}" : "}"));
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
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", c);
        buf_.append(esc);
      }
    }
    buf_.append(s.data() + start, s.size() - start);
    buf_.push_back('"');
  }
  template <class T>
  void num(T v) {
    char tmp[24];
    auto res = std::to_chars(tmp, tmp + sizeof tmp, v);
    buf_.append(tmp, res.ptr);
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
    num(ns / 1000);
    const int frac = static_cast<int>(ns % 1000);
    char f[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                 static_cast<char>('0' + frac % 10)};
    buf_.append(f, 4);
  }

 private:
  static constexpr std::size_t kFlushAt = 1 << 20;
  void key(std::string_view k) {
    buf_.append(std::string_view(args_open_ ? ",\"" : ",\"args\":{\""));
    args_open_ = true;
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
  void arg_null(std::string_view k) { add(k, nullptr); }
  void arg_dims(std::string_view k, const std::uint32_t (&v)[3]) {
    add(k, std::vector<std::int64_t>{v[0], v[1], v[2]});
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

  void meta(const char* name, std::int64_t pid, std::int64_t tid, const char* key,
            std::string_view value) {
    out_.begin('M', "", name, pid, tid, 0, 0);
    out_.arg_s(key, value);
    out_.end();
  }
  void meta_n(const char* name, std::int64_t pid, std::int64_t tid, const char* key,
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

  // Kernel launch statistics, cached for the last shape (a loop launches the same one).
  const Occupancy& occupancy(const ActivityRecord& r) {
    const auto& k = r.u.kernel;
    const bool same = have_occ_ && occ_device_ == r.device &&
                      std::memcmp(&occ_shape_, &k, sizeof k) == 0;
    if (!same) {
      const DeviceProperties* p = props(r.device);
      const KernelShape shape{{k.grid[0], k.grid[1], k.grid[2]},
                              {k.block[0], k.block[1], k.block[2]},
                              k.shared_bytes,
                              k.registers};
      occ_ = p ? kernel_occupancy(*p, shape) : Occupancy{};
      std::memcpy(&occ_shape_, &k, sizeof k);
      occ_device_ = r.device;
      have_occ_ = true;
    }
    return occ_;
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
      if (a("registers per thread")) out_.arg_u("registers per thread", r.u.kernel.registers);
      if (a("shared memory")) out_.arg("shared memory", r.u.kernel.shared_bytes);
      const Occupancy& occ = occupancy(r);
      // floats, as Kineto writes them (shorter than doubles, same information)
      if (a("blocks per SM")) out_.arg_f("blocks per SM", static_cast<float>(occ.blocks_per_sm));
      if (a("warps per SM")) out_.arg_f("warps per SM", static_cast<float>(occ.warps_per_sm));
      if (a("grid")) out_.arg_dims("grid", r.u.kernel.grid);
      if (a("block")) out_.arg_dims("block", r.u.kernel.block);
      if (a("est. achieved occupancy %")) {
        out_.arg("est. achieved occupancy %", occ.achieved_percent);
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
  bool have_occ_ = false;
  int occ_device_ = -1;
  ActivityRecord::Kernel occ_shape_{};
  Occupancy occ_;
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
