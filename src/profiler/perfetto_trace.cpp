// Perfetto's native protobuf trace format (chrome_trace.hpp: write_perfetto), fed by the same
// layout as the JSON (trace_layout.hpp), so both files hold the same events and args.
//
// Why: a step's JSON trace reaches 1-2 GB (issue 28). The protobuf form interns every name,
// category and arg key (one varint per use), writes numbers as varints and timestamps
// relative to the trace's base time (a sequence-scoped clock mapped to CLOCK_REALTIME by a
// clock snapshot), so an event costs about a quarter of its JSON bytes before compression.
//
// Encoding: written by hand (a varint / length-delimited writer below): no protobuf library
// in cudakit. One packet sequence (trusted_packet_sequence_id 1):
//   * first packet: SEQ_INCREMENTAL_STATE_CLEARED, TracePacketDefaults (timestamp clock 64),
//     and a ClockSnapshot {64: 0, REALTIME: base_ns} with REALTIME as the trace's clock;
//   * a TrackDescriptor before the first event of each track: the host process
//     (ProcessDescriptor) and its threads (ThreadDescriptor); each device as a process of its
//     own ("GPU 0 (...)", pid 1e9 + device so it cannot collide with a real pid) with one
//     child track per stream / sync row; one counter track per device counter;
//   * events: 'X' -> TYPE_SLICE_BEGIN + TYPE_SLICE_END, 'i' -> TYPE_INSTANT, 'C' -> one
//     TYPE_COUNTER per value, flows -> flow_ids (launch) / terminating_flow_ids (kernel) on
//     their slices; args -> debug annotations (grid / block as arrays); names, categories and
//     annotation keys interned in the packet that first uses them.
// Perfetto's trace processor sorts packets by time on import (ties keep their order), so a
// slice's END packet is written right after its BEGIN; records starting together come longest
// first (index_trace), so an enclosing slice begins before what it encloses. The GPU spans of
// NVTX ranges get a track beside their stream's (they would nest with its kernels).
//
// Field numbers: from Perfetto's published protos (github.com/google/perfetto,
// protos/perfetto/trace/: trace.proto, trace_packet.proto, trace_packet_defaults.proto,
// clock_snapshot.proto, interned_data/interned_data.proto, track_event/{track_event,
// track_descriptor, process_descriptor, thread_descriptor, counter_descriptor,
// debug_annotation}.proto). tests/python/test_profiler_formats.py decodes the output against
// descriptors built from the same published numbers.
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "profiler/chrome_trace.hpp"
#include "profiler/trace_file.hpp"
#include "profiler/trace_layout.hpp"

namespace cudakit::profiler::detail {
namespace {

// ---- protobuf wire format ----
class Pb {
 public:
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      b_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    b_.push_back(static_cast<char>(v));
  }
  void tag(std::uint32_t field, int wire) { varint((std::uint64_t{field} << 3) | unsigned(wire)); }
  void u(std::uint32_t f, std::uint64_t v) {
    tag(f, 0);
    varint(v);
  }
  void i(std::uint32_t f, std::int64_t v) { u(f, static_cast<std::uint64_t>(v)); }  // int64/32
  void fixed64(std::uint32_t f, std::uint64_t v) {
    tag(f, 1);
    char bytes[8];
    for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>(v >> (8 * k));  // little endian
    b_.append(bytes, 8);
  }
  void dbl(std::uint32_t f, double v) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    fixed64(f, bits);
  }
  void str(std::uint32_t f, std::string_view s) {
    tag(f, 2);
    varint(s.size());
    b_.append(s);
  }
  void msg(std::uint32_t f, const Pb& m) { str(f, m.view()); }
  void raw(std::string_view s) { b_.append(s); }
  std::string_view view() const { return b_; }
  std::size_t size() const { return b_.size(); }
  bool empty() const { return b_.empty(); }
  void clear() { b_.clear(); }

 private:
  std::string b_;
};

// Field numbers (see the file comment for their source).
namespace trace { constexpr std::uint32_t packet = 1; }
namespace packet {
constexpr std::uint32_t clock_snapshot = 6, timestamp = 8, sequence_id = 10, track_event = 11,
                        interned_data = 12, sequence_flags = 13, trace_packet_defaults = 59,
                        track_descriptor = 60;
constexpr std::uint64_t kIncrementalStateCleared = 1, kNeedsIncrementalState = 2;
}  // namespace packet
namespace defaults { constexpr std::uint32_t timestamp_clock_id = 58; }
namespace clocks {
constexpr std::uint32_t clocks = 1, primary_trace_clock = 2;  // ClockSnapshot
constexpr std::uint32_t clock_id = 1, timestamp = 2;          // ClockSnapshot.Clock
constexpr std::uint64_t kRealtime = 1, kTraceClock = 64;      // 64: first sequence-scoped id
}  // namespace clocks
namespace track {
constexpr std::uint32_t uuid = 1, name = 2, process = 3, thread = 4, parent_uuid = 5,
                        counter = 8;
}
namespace process { constexpr std::uint32_t pid = 1, process_name = 6; }
namespace thread { constexpr std::uint32_t pid = 1, tid = 2, thread_name = 5; }
namespace event {
constexpr std::uint32_t category_iids = 3, debug_annotations = 4, type = 9, name_iid = 10,
                        track_uuid = 11, counter_value = 30, flow_ids = 47,
                        terminating_flow_ids = 48;
constexpr std::uint64_t kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4;
}  // namespace event
namespace annotation {
constexpr std::uint32_t name_iid = 1, bool_value = 2, uint_value = 3, int_value = 4,
                        double_value = 5, string_value = 6, legacy_json_value = 9;
}  // namespace annotation
namespace interned {
constexpr std::uint32_t event_categories = 1, event_names = 2, debug_annotation_names = 3;
constexpr std::uint32_t iid = 1, name = 2;
}  // namespace interned

constexpr std::int64_t kDevicePidBase = 1000000000;  // device "processes" (see file comment)
constexpr std::size_t kFlushAt = 1 << 20;

class PerfettoOut {
 public:
  PerfettoOut(const TraceData& d, TraceFile& f) : d_(d), f_(f) {
    Pb p, defaults_pb, snapshot, clock;
    p.u(packet::sequence_id, 1);
    p.u(packet::sequence_flags, packet::kIncrementalStateCleared);
    defaults_pb.u(defaults::timestamp_clock_id, clocks::kTraceClock);
    p.msg(packet::trace_packet_defaults, defaults_pb);
    clock.u(clocks::clock_id, clocks::kTraceClock);
    clock.u(clocks::timestamp, 0);
    snapshot.msg(clocks::clocks, clock);
    clock.clear();
    clock.u(clocks::clock_id, clocks::kRealtime);
    clock.u(clocks::timestamp, static_cast<std::uint64_t>(d.base_ns));
    snapshot.msg(clocks::clocks, clock);
    snapshot.u(clocks::primary_trace_clock, clocks::kRealtime);
    p.msg(packet::clock_snapshot, snapshot);
    emit(p);
  }

  void begin(char ph, std::string_view cat, std::string_view name, std::int64_t pid,
             std::int64_t tid, std::int64_t ts, std::int64_t dur) {
    flush_pending();
    ph_ = ph;
    pid_ = pid;
    tid_ = tid;
    ts_ = ts < 0 ? 0 : ts;
    dur_ = dur < 0 ? 0 : dur;
    meta_name_ = ph == 'M' ? name : std::string_view{};
    if (ph == 'M') return;
    if (ph == 'C') {
      counter_name_.assign(name);
      return;
    }
    ann_.clear();
    flows_.clear();
    ends_.clear();
    // Kineto puts the GPU projection of NVTX ranges on the stream's own row; as slices of
    // the stream's track they would nest with its kernels by event order (they start with
    // their first kernel), so they get a track of their own beside the stream.
    span_row_ = cat == "gpu_user_annotation";
    name_iid_ = intern(names_, name, interned::event_names);
    cat_iid_ = cat.empty() ? 0 : intern(categories_, cat, interned::event_categories);
  }
  void flow(char ph, std::uint64_t id, std::int64_t, std::int64_t, std::int64_t) {
    (ph == 'f' ? ends_ : flows_).push_back(id);  // belongs to the event just written
  }
  template <class K>
  void arg(const K& k, std::int64_t v) {
    if (ph_ == 'M') return;
    if (ph_ == 'C') {
      counter(k, v);
      return;
    }
    if (track_is_row_key(k)) return;
    Pb a;
    a.u(annotation::name_iid, key(k));
    a.i(annotation::int_value, v);
    ann_.msg(event::debug_annotations, a);
  }
  template <class K>
  void arg_u(const K& k, std::uint64_t v) {
    Pb a;
    a.u(annotation::name_iid, key(k));
    a.u(annotation::uint_value, v);
    ann_.msg(event::debug_annotations, a);
  }
  template <class K>
  void arg_d(const K& k, double v) {
    Pb a;
    a.u(annotation::name_iid, key(k));
    a.dbl(annotation::double_value, v);
    ann_.msg(event::debug_annotations, a);
  }
  template <class K>
  void arg_f(const K& k, float v) {
    arg_d(k, static_cast<double>(v));
  }
  template <class K>
  void arg_s(const K& k, std::string_view v) {
    if (ph_ == 'M') {
      meta(v);
      return;
    }
    Pb a;
    a.u(annotation::name_iid, key(k));
    a.str(annotation::string_value, v);
    ann_.msg(event::debug_annotations, a);
  }
  template <class K>
  void arg_b(const K& k, bool v) {
    Pb a;
    a.u(annotation::name_iid, key(k));
    a.u(annotation::bool_value, v ? 1 : 0);
    ann_.msg(event::debug_annotations, a);
  }
  // As JSON text ("[1,1,1]"), which trace_processor turns into array args: half the bytes
  // of a NestedValue array of three ints.
  template <class K>
  void arg_dims(const K& k, const std::uint32_t (&v)[3]) {
    Pb a;
    a.u(annotation::name_iid, key(k));
    a.str(annotation::legacy_json_value, "[" + std::to_string(v[0]) + "," +
                                             std::to_string(v[1]) + "," + std::to_string(v[2]) +
                                             "]");
    ann_.msg(event::debug_annotations, a);
  }
  void ann(std::string_view k, const graph_annotations::AnnotationValue& v) {
    std::visit([&](const auto& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::nullptr_t>) {
        arg_s(k, "null");
      } else if constexpr (std::is_same_v<T, bool>) {
        arg_b(k, x);
      } else if constexpr (std::is_same_v<T, std::int64_t>) {
        arg(k, x);
      } else if constexpr (std::is_same_v<T, double>) {
        arg_d(k, x);
      } else {
        arg_s(k, x);
      }
    }, v);
  }
  // Args that repeat (a kernel shape's): their annotation bytes are saved and copied; the
  // keys they refer to were interned when they were first written.
  template <class F>
  void memo(std::string& saved, F&& write) {
    if (!saved.empty()) {
      ann_.raw(saved);
      return;
    }
    const std::size_t start = ann_.size();
    write();
    saved.assign(ann_.view().substr(start));
  }
  void end() {
    if (ph_ == 'X' || ph_ == 'i') pending_ = true;
  }
  void finish() {
    flush_pending();
    if (!out_.empty()) f_.write(out_.view().data(), out_.size());
    out_.clear();
  }

 private:
  using Table = std::unordered_map<std::string, std::uint64_t>;

  // Interned id of `s` in `table`; a new one is added to the current packet's InternedData.
  std::uint64_t intern(Table& table, std::string_view s, std::uint32_t field) {
    auto it = table.find(std::string(s));
    if (it != table.end()) return it->second;
    const std::uint64_t iid = table.size() + 1;
    table.emplace(std::string(s), iid);
    Pb entry;
    entry.u(interned::iid, iid);
    entry.str(interned::name, s);
    interned_.msg(field, entry);
    return iid;
  }
  template <std::size_t N>
  std::uint64_t key(const char (&k)[N]) {  // cudakit's literal keys: by address first
    auto it = literal_keys_.find(k);
    if (it != literal_keys_.end()) return it->second;
    const std::uint64_t iid = intern(keys_, std::string_view(k, N - 1),
                                     interned::debug_annotation_names);
    literal_keys_.emplace(k, iid);
    return iid;
  }
  std::uint64_t key(std::string_view k) {
    return intern(keys_, k, interned::debug_annotation_names);
  }

  // On a device row, "device" and "stream" are the track itself (the JSON repeats them
  // because Kineto's readers look for them there): 12 bytes of each kernel's ~60.
  template <class K>
  bool track_is_row_key(const K& k) const {
    if constexpr (std::is_array_v<K>) {
      return is_device(pid_) && (std::string_view(k) == "device" || std::string_view(k) == "stream");
    } else {
      return false;  // annotation keys are the user's: always kept
    }
  }

  void meta(std::string_view value) {
    if (meta_name_ == "process_name") {
      process_names_[pid_] = std::string(value);
    } else if (meta_name_ == "process_labels") {
      labels_[pid_] = std::string(value);
    } else if (meta_name_ == "thread_name") {
      thread_names_[{pid_, tid_}] = std::string(value);
    }
  }
  bool is_device(std::int64_t pid) const {
    auto it = labels_.find(pid);
    return it != labels_.end() && it->second.rfind("GPU", 0) == 0;
  }

  std::uint64_t process_track(std::int64_t pid) {
    auto it = process_tracks_.find(pid);
    if (it != process_tracks_.end()) return it->second;
    const std::uint64_t uuid = ++next_uuid_;
    process_tracks_.emplace(pid, uuid);
    Pb desc, proc;
    desc.u(track::uuid, uuid);
    const bool device = is_device(pid);
    proc.i(process::pid, device ? kDevicePidBase + pid : pid);
    std::string name = device ? labels_[pid] : process_names_[pid];
    if (!device && name.empty()) name = "process " + std::to_string(pid);
    proc.str(process::process_name, name);
    desc.msg(track::process, proc);
    descriptor(desc);
    return uuid;
  }
  std::uint64_t row_track(std::int64_t pid, std::int64_t tid, bool spans = false) {
    auto& tracks = spans ? span_tracks_ : row_tracks_;
    auto it = tracks.find({pid, tid});
    if (it != tracks.end()) return it->second;
    const std::uint64_t parent = process_track(pid);
    const std::uint64_t uuid = ++next_uuid_;
    tracks.emplace(std::make_pair(pid, tid), uuid);
    Pb desc;
    desc.u(track::uuid, uuid);
    desc.u(track::parent_uuid, parent);
    auto nt = thread_names_.find({pid, tid});
    std::string name = nt != thread_names_.end() ? nt->second : "";
    if (spans) {
      desc.str(track::name, (name.empty() ? "stream " + std::to_string(tid) : name) +
                                " (annotations)");
    } else if (is_device(pid)) {
      desc.str(track::name, name.empty() ? "stream " + std::to_string(tid) : name);
    } else {
      Pb th;
      th.i(thread::pid, pid);
      th.i(thread::tid, tid);
      th.str(thread::thread_name, name.empty() ? "thread " + std::to_string(tid) : name);
      desc.msg(track::thread, th);
    }
    descriptor(desc);
    return uuid;
  }
  template <class K>
  void counter(const K& k, std::int64_t v) {
    std::string name = counter_name_ + " " + std::string(std::string_view(k));
    auto it = counter_tracks_.find({pid_, name});
    std::uint64_t uuid;
    if (it != counter_tracks_.end()) {
      uuid = it->second;
    } else {
      const std::uint64_t parent = process_track(pid_);
      uuid = ++next_uuid_;
      counter_tracks_.emplace(std::make_pair(pid_, name), uuid);
      Pb desc, counter_desc;
      desc.u(track::uuid, uuid);
      desc.u(track::parent_uuid, parent);
      desc.str(track::name, name);
      desc.msg(track::counter, counter_desc);  // present, empty: a counter track
      descriptor(desc);
    }
    Pb te;
    te.u(event::type, event::kCounter);
    te.u(event::track_uuid, uuid);
    te.i(event::counter_value, v);
    event_packet(ts_, te);
  }

  void descriptor(const Pb& desc) {
    Pb p;
    p.u(packet::sequence_id, 1);
    p.msg(packet::track_descriptor, desc);
    emit(p);
  }
  void event_packet(std::int64_t ts, const Pb& te) {
    Pb& p = packet_;
    p.clear();
    p.u(packet::timestamp, static_cast<std::uint64_t>(ts));
    p.u(packet::sequence_id, 1);
    p.u(packet::sequence_flags, packet::kNeedsIncrementalState);
    if (!interned_.empty()) {
      p.msg(packet::interned_data, interned_);
      interned_.clear();
    }
    p.msg(packet::track_event, te);
    emit(p);
  }
  void flush_pending() {
    if (!pending_) return;
    pending_ = false;
    const std::uint64_t uuid = row_track(pid_, tid_, span_row_);
    Pb& te = event_;
    te.clear();
    te.u(event::type, ph_ == 'X' ? event::kSliceBegin : event::kInstant);
    te.u(event::track_uuid, uuid);
    te.u(event::name_iid, name_iid_);
    if (cat_iid_) te.u(event::category_iids, cat_iid_);
    te.raw(ann_.view());
    for (std::uint64_t id : flows_) te.fixed64(event::flow_ids, id);
    for (std::uint64_t id : ends_) te.fixed64(event::terminating_flow_ids, id);
    event_packet(ts_, te);
    if (ph_ == 'X') {
      te.clear();
      te.u(event::type, event::kSliceEnd);
      te.u(event::track_uuid, uuid);
      event_packet(ts_ + dur_, te);
    }
  }
  void emit(const Pb& p) {
    out_.msg(trace::packet, p);
    if (out_.size() >= kFlushAt) {
      f_.write(out_.view().data(), out_.size());
      out_.clear();
    }
  }

  const TraceData& d_;
  TraceFile& f_;
  Pb out_, packet_, event_, ann_, interned_;
  Table names_, categories_, keys_;
  std::unordered_map<const char*, std::uint64_t> literal_keys_;
  std::map<std::int64_t, std::string> process_names_, labels_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> thread_names_;
  std::map<std::int64_t, std::uint64_t> process_tracks_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::uint64_t> row_tracks_, span_tracks_;
  std::map<std::pair<std::int64_t, std::string>, std::uint64_t> counter_tracks_;
  std::uint64_t next_uuid_ = 0;
  // the event being written
  char ph_ = 0;
  std::int64_t pid_ = 0, tid_ = 0, ts_ = 0, dur_ = 0;
  std::string_view meta_name_;
  std::string counter_name_;
  std::uint64_t name_iid_ = 0, cat_iid_ = 0;
  std::vector<std::uint64_t> flows_, ends_;
  bool pending_ = false;
  bool span_row_ = false;  // the event goes on its row's annotation track
};

}  // namespace

void write_perfetto(const TraceData& d, TraceFile& f) {
  PerfettoOut out(d, f);
  layout::Emitter<PerfettoOut> em(d, out);
  em.run();
  out.finish();
}

}  // namespace cudakit::profiler::detail
