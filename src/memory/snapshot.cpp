// memory_snapshot(): the allocator state in torch's format (segments with blocks, and the
// per-device trace ring), serialised as JSON. Frames are symbolised here, lazily, with a
// cache, so recording stays cheap.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "cudakit/error.hpp"
#include "cudakit/memory.hpp"
#include "instrument/symbolizer.hpp"
#include "memory/device_allocator.hpp"
#include "memory/expandable_segment.hpp"
#include "memory/history.hpp"
#include "memory/snapshot.hpp"

namespace cudakit::memory {

std::vector<SegmentInfo> DeviceAllocator::snapshot(std::optional<MempoolId> only_pool) {
  Locked lock(*this);
  quick_flush();  // parked blocks show as free
  std::vector<SegmentInfo> out;
  HistoryRecorder::ContextCache contexts;
  auto owner_of = [](const Block* b) {
    return b->pool->owner ? b->pool->owner->id : MempoolId{0, 0};
  };
  auto add_block = [&](SegmentInfo& seg, const Block* b) {
    SegmentInfoBlock bi;
    bi.address = b->ptr;
    bi.size = b->size;
    bi.requested = b->requested;
    bi.state = b->allocated ? "active_allocated"
                            : (b->event_count > 0 ? "active_pending_free" : "inactive");
    bi.context = trace_.recorder().context_of(b->stack, contexts);
    seg.total_size += b->size;
    if (b->allocated) {
      seg.allocated_size += b->size;
      seg.requested_size += b->requested;
    }
    if (b->allocated || b->event_count > 0) seg.active_size += b->size;
    seg.blocks.push_back(std::move(bi));
  };
  for (Block* head : segment_heads_) {
    if (only_pool && owner_of(head) != *only_pool) continue;
    SegmentInfo seg;
    seg.device = device_;
    seg.address = head->ptr;
    seg.stream = head->stream;
    seg.is_large = !head->pool->is_small;
    seg.owner = owner_of(head);
    if (const SleepPool* sp = head->pool->owner ? head->pool->owner->sleep : nullptr) {
      seg.sleep_tag = sp->tag;
      seg.asleep = sp->state != SleepPool::State::awake;
    }
    for (const Block* b = head; b; b = b->next) add_block(seg, b);
    out.push_back(std::move(seg));
  }
  for (auto& es : expandable_) {
    // Each run of mapped blocks is reported as one segment (as torch does); a pool's
    // snapshot leaves out the default pools' expandable segments.
    SegmentInfo seg;
    bool open = false;
    auto emit = [&] {
      if (!only_pool || seg.owner == *only_pool) out.push_back(std::move(seg));
    };
    for (const Block* b = es->first; b; b = b->next) {
      if (!b->mapped) {
        if (open) emit();
        open = false;
        continue;
      }
      if (!open) {
        seg = SegmentInfo{};
        seg.device = device_;
        seg.address = b->ptr;
        seg.stream = b->stream;
        seg.is_large = !es->small;
        seg.is_expandable = true;
        seg.owner = owner_of(b);
        open = true;
      }
      add_block(seg, b);
    }
    if (open) emit();
  }
  std::sort(out.begin(), out.end(),
            [](const SegmentInfo& a, const SegmentInfo& b) { return a.address < b.address; });
  return out;
}

namespace {
using nlohmann::json;

json frames_json(const std::shared_ptr<HistoryContext>& ctx) {
  json frames = json::array();
  if (!ctx) return frames;
  json py = json::array();  // Python frames are outer to the C++ ones: listed after them
  {
    static std::mutex py_mutex;
    struct PyKeyHash {
      std::size_t operator()(const PyFrameRef& f) const noexcept {
        return std::hash<const void*>()(f.code) ^ (static_cast<std::size_t>(f.lasti) * 0x9E3779B1u);
      }
    };
    static std::unordered_map<PyFrameRef, json, PyKeyHash> py_cache;
    for (const PyFrameRef& f : ctx->py_frames) {
      {
        std::lock_guard lock(py_mutex);
        auto it = py_cache.find(f);
        if (it != py_cache.end()) {
          py.push_back(it->second);
          continue;
        }
      }
      std::string file, name;
      int line = 0;
      symbolize_python_frame(f, file, line, name);  // takes the GIL: no lock held here
      json fr = {{"filename", file}, {"line", line}, {"name", name}};
      std::lock_guard lock(py_mutex);
      py_cache.emplace(f, fr);
      py.push_back(std::move(fr));
    }
  }
  for (void* pc : ctx->frames) {
    instrument::CppFrameSymbol sym = instrument::cpp_frame_symbol(pc);  // prepared for the whole snapshot below
    frames.push_back({{"filename", std::move(sym.file)}, {"line", sym.line}, {"name", std::move(sym.name)}});
  }
  for (auto& f : py) frames.push_back(std::move(f));
  return frames;
}
}  // namespace

std::string snapshot_json(std::optional<MempoolId> pool) {
  json segs = json::array();
  json traces = json::array();
  auto allocators = existing_allocators();
  int max_dev = -1;
  for (DeviceAllocator* a : allocators) max_dev = std::max(max_dev, a->device());
  for (int d = 0; d <= max_dev; ++d) traces.push_back(json::array());
  // Every C++ frame of the snapshot symbolised in one batch per object (addr2line runs once
  // per object, instrument/symbolizer.hpp), before the JSON is built.
  std::vector<std::vector<SegmentInfo>> segments_of;
  std::vector<std::vector<TraceEntry>> traces_of;
  std::vector<void*> pcs;
  for (DeviceAllocator* a : allocators) {
    segments_of.push_back(a->snapshot(pool));
    traces_of.push_back(a->history_traces());
    for (const SegmentInfo& s : segments_of.back())
      for (const SegmentInfoBlock& b : s.blocks)
        if (b.context) pcs.insert(pcs.end(), b.context->frames.begin(), b.context->frames.end());
    for (const TraceEntry& e : traces_of.back())
      if (e.context) pcs.insert(pcs.end(), e.context->frames.begin(), e.context->frames.end());
  }
  std::sort(pcs.begin(), pcs.end());
  pcs.erase(std::unique(pcs.begin(), pcs.end()), pcs.end());
  instrument::prepare_cpp_frame_symbols(pcs);
  for (std::size_t ai = 0; ai < allocators.size(); ++ai) {
    DeviceAllocator* a = allocators[ai];
    for (const SegmentInfo& s : segments_of[ai]) {
      json js;
      js["device"] = s.device;
      js["address"] = s.address;
      js["total_size"] = s.total_size;
      js["allocated_size"] = s.allocated_size;
      js["active_size"] = s.active_size;
      js["requested_size"] = s.requested_size;
      js["stream"] = reinterpret_cast<std::uintptr_t>(s.stream);
      js["segment_type"] = s.is_large ? "large" : "small";
      js["segment_pool_id"] = {s.owner.first, s.owner.second};
      js["is_expandable"] = s.is_expandable;
      if (!s.sleep_tag.empty()) {  // cudakit's keys (torch's tools ignore them)
        js["sleep_tag"] = s.sleep_tag;
        js["asleep"] = s.asleep;
      }
      js["frames"] = json::array();
      json blocks = json::array();
      for (const SegmentInfoBlock& b : s.blocks) {
        blocks.push_back({{"address", b.address},
                          {"size", b.size},
                          {"requested_size", b.requested},
                          {"state", b.state},
                          {"frames", frames_json(b.context)}});
      }
      js["blocks"] = std::move(blocks);
      segs.push_back(std::move(js));
    }
    json& tr = traces[a->device()];
    for (const TraceEntry& e : traces_of[ai]) {
      tr.push_back({{"action", e.action},
                    {"addr", e.addr},
                    {"size", e.size},
                    {"stream", reinterpret_cast<std::uintptr_t>(e.stream)},
                    {"time_us", static_cast<std::int64_t>(e.time_us)},
                    {"frames", frames_json(e.context)}});
      // torch's tools read an out-of-memory event's device_free (_memory_viz's trace()).
      if (std::strcmp(e.action, "oom") == 0) tr.back()["device_free"] = e.addr;
    }
  }
  // What the allocators run with (not what the environment said at start-up).
  const AllocatorConfig c = settings_in_force();
  json divisions = json::object();
  for (std::size_t i = 0; i < c.roundup_power2_divisions.size(); ++i)
    if (c.roundup_power2_divisions[i]) divisions[std::to_string(std::size_t(1) << i)] = c.roundup_power2_divisions[i];
  json settings = {
      {"PYTORCH_CUDA_ALLOC_CONF", c.source},
      {"backend", c.backend == AllocatorConfig::Backend::native ? "native" : "cudaMallocAsync"},
      {"expandable_segments", c.expandable_segments},
      {"expandable_segments_small", c.expandable_small},
      {"max_split_size", c.max_split_size == SIZE_MAX ? -1 : std::int64_t(c.max_split_size)},
      {"max_non_split_rounding", c.max_non_split_rounding},
      {"garbage_collection_threshold", c.garbage_collection_threshold},
      {"roundup_power2_divisions", std::move(divisions)},
      {"per_process_memory_fraction", c.per_process_memory_fraction},
      {"release_lock_on_malloc", c.release_lock_on_device_malloc},
      {"pinned_use_host_register", c.pinned_use_host_register},
      {"pinned_num_register_threads", c.pinned_num_register_threads},
      {"pinned_use_background_threads", c.pinned_use_background_threads},
      {"quick_cache", c.quick_cache},
      {"device_mutex_spin", c.device_mutex_spin},
      {"expandable_segments_chunk_pages", c.expandable_chunk_pages},
      {"expandable_segments_slack_div", c.expandable_slack_div}};
  json out = {{"segments", std::move(segs)}, {"device_traces", std::move(traces)},
              {"allocator_settings", std::move(settings)}};
  return out.dump();
}

}  // namespace cudakit::memory

namespace cudakit {
void record_memory_history(std::optional<std::string> enabled, const std::string& context,
                           const std::string& stacks, std::size_t max_entries,
                           bool clear_history) {
  memory::record_memory_history(enabled ? enabled->c_str() : nullptr, context.c_str(),
                                stacks.c_str(), max_entries, clear_history);
}
std::string memory_snapshot_json(std::optional<MempoolId> pool) {
  return memory::snapshot_json(pool);
}
void dump_snapshot(const std::string& path, std::optional<MempoolId> pool) {
  auto ends_with = [&](const char* suffix) {
    const std::size_t n = std::strlen(suffix);
    return path.size() >= n && path.compare(path.size() - n, n, suffix) == 0;
  };
  if (ends_with(".pickle") || ends_with(".pkl")) {
    throw ValueError("dump_snapshot: '" + path + "': the C++ snapshot is JSON, not a pickle: "
                     "name the file .json (cudakit.memory._dump_snapshot writes pickles from "
                     "Python); python -m cudakit.memory_viz reads both");
  }
  const std::string text = memory::snapshot_json(pool);  // before opening: no partial file
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    const int err = errno;
    throw IoError(err, path, "dump_snapshot: cannot open '" + path + "' for writing: " +
                                 std::strerror(err));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const int err = !written ? write_err : errno;
    throw IoError(err, path, "dump_snapshot: writing '" + path + "' failed: " +
                                 std::strerror(err));
  }
}
}  // namespace cudakit
