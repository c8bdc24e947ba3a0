// The JSON writer of the Chrome / Perfetto trace export (chrome_trace.hpp): an append-only
// byte buffer and the event writer the trace layout (trace_layout.hpp) feeds. Split from
// chrome_trace.cpp so the layout can feed other writers (perfetto_trace.cpp) too.
//
// Non-finite numbers: JSON has none, and writing 0 for them (as this writer once did) made a
// NaN annotation indistinguishable from a real zero (issue 28). They are written as the
// strings "NaN", "Infinity" and "-Infinity": valid JSON, and Perfetto and chrome://tracing
// show them as what they are.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "cudakit/graph_annotations.hpp"

namespace cudakit::profiler::detail {

// The name a non-finite double is written as (JSON has no NaN / Infinity); null if finite.
inline const char* non_finite_name(double v) noexcept {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return nullptr;
}

// ---------------------------------------------------------------------------------------
// Sinks: the JSON writer, the TraceEvent builder and the Perfetto writer share this
// interface (see trace_layout.hpp).

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
    if (const char* s = non_finite_name(static_cast<double>(v))) {  // see the file comment
      buf_.push_back('"');
      buf_.append(std::string_view(s));
      buf_.push_back('"');
      return;
    }
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

}  // namespace cudakit::profiler::detail
