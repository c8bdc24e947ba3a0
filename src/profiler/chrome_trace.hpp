// Chrome / Perfetto trace output of a finished trace, in Kineto's layout (what
// torch.profiler's export_chrome_trace writes), so tools that read torch traces read ours:
//   {"schemaVersion": 1, "deviceProperties": [...], <metadata>, "displayTimeUnit": "ms",
//    "baseTimeNanoseconds": N, "traceEvents": [...], "traceName": "..."}
// with ts / dur in microseconds relative to baseTimeNanoseconds, 3 decimals (Kineto's
// "us.nnn" form: exact nanoseconds, no float rounding).
//
// One emitter walks the trace and feeds either the JSON writer (export) or the TraceEvent
// builder (Trace::events()), so the in-memory list and the file always agree. The JSON
// writer formats numbers with std::to_chars in place into a 1 MB buffer flushed to the file:
// no per-event allocation and no JSON library on the export path (nlohmann::json would build a
// DOM of every event first: an allocation per value; not used). What repeats from event to
// event (an event's head up to "ts", a kernel shape's args) is formatted once and copied.
// docs/performance.md has the measurements of the choices made here.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cudakit/profiler.hpp"
#include "profiler/trace_data.hpp"

namespace cudakit::profiler::detail {

class TraceFile;

// Writes the JSON to `f` (trace_file.hpp: plain or gzip; close() reports write errors).
void write_chrome_trace(const TraceData& d, TraceFile& f, const std::string& trace_name);
// Writes Perfetto's protobuf trace format (perfetto_trace.cpp).
void write_perfetto(const TraceData& d, TraceFile& f);
std::string chrome_trace_json(const TraceData& d, const std::string& trace_name);
std::vector<TraceEvent> trace_events(const TraceData& d);

}  // namespace cudakit::profiler::detail
