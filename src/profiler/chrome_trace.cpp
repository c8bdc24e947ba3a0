// Chrome / Perfetto JSON output in Kineto's layout (chrome_trace.hpp); the layout is
// trace_layout.hpp, the JSON writer json_writer.hpp.
#include "profiler/chrome_trace.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "cudakit/error.hpp"
#include "profiler/json_writer.hpp"
#include "profiler/trace_file.hpp"
#include "profiler/trace_layout.hpp"

namespace cudakit::profiler::detail {
namespace {

using layout::Emitter;

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
  // Non-finite numbers as the file has them (json_writer.hpp): json.load of the file and
  // events() agree.
  void arg_d(std::string_view k, double v) {
    if (const char* s = non_finite_name(v)) {
      add(k, std::string(s));
    } else {
      add(k, v);
    }
  }
  void arg_f(std::string_view k, float v) { arg_d(k, v); }
  void ann(std::string_view k, const graph_annotations::AnnotationValue& v) {
    std::visit([&](const auto& x) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, double>) {
        arg_d(k, x);
      } else {
        add(k, x);
      }
    }, v);
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
  out.raw("]},\n");
  if (d.rank >= 0) {  // Kineto's field (merge-ranks reads it)
    out.raw("\"distributedInfo\":{\"rank\":");
    out.num(d.rank);
    if (d.world_size > 0) {
      out.raw(",\"world_size\":");
      out.num(d.world_size);
    }
    out.raw("},\n");
  }
  out.raw("\"displayTimeUnit\":\"ms\",\n\"baseTimeNanoseconds\":");
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

}  // namespace

void write_chrome_trace(const TraceData& d, TraceFile& f, const std::string& trace_name) {
  JsonOut out([](void* c, const char* data, std::size_t n) {
    static_cast<TraceFile*>(c)->write(data, n);
  }, &f);
  write_all(out, d, trace_name);
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
