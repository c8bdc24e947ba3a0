// The NVTX injection library described in recorder.h.
//
// NVTX3's tool ABI: the loader dlopen()s NVTX_INJECTION64_PATH and calls
// InitializeInjectionNvtx2(getExportTable); the tool asks for the callbacks export table, gets
// each module's function table (an array of pointers to the instance's function-pointer
// slots) and writes its own functions into the slots it handles. Slots left alone become
// no-ops. One process may hold several NVTX instances (one per module that includes the
// headers); each calls this init once.
#define NVTX_NO_IMPL  // a tool: the types and callback ids, not the client implementation
#include "recorder.h"

#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>

namespace {

struct Record {
  cudakit_nvtx_event ev{};
  std::string domain, message;
};

struct DomainInfo {
  std::string name;
};

std::mutex mu;
std::deque<Record> records;  // deque: element addresses stay valid as it grows
std::string json;
std::atomic<int> instances{0};
std::atomic<std::uint64_t> next_id{1000};

std::uint64_t thread_id() { return static_cast<std::uint64_t>(::syscall(SYS_gettid)); }

const char* domain_name(nvtxDomainHandle_t d) {
  return d ? reinterpret_cast<DomainInfo*>(d)->name.c_str() : "";
}

void add(int kind, const char* domain, const char* message,
         const nvtxEventAttributes_t* attr = nullptr, std::uint64_t id = 0,
         std::uint32_t category = 0) {
  std::lock_guard lock(mu);
  Record& r = records.emplace_back();
  r.domain = domain ? domain : "";
  r.message = message ? message : "";
  r.ev.kind = kind;
  r.ev.id = id;
  r.ev.category = category;
  r.ev.thread = thread_id();
  if (attr) {
    if (attr->messageType == NVTX_MESSAGE_TYPE_ASCII && attr->message.ascii) {
      r.message = attr->message.ascii;
    } else if (attr->messageType != NVTX_MESSAGE_UNKNOWN) {
      r.message = "<non-ascii message type>";
    }
    if (attr->colorType == NVTX_COLOR_ARGB) r.ev.color = attr->color;
    r.ev.category = attr->category;
    r.ev.payload_type = attr->payloadType;
    switch (attr->payloadType) {
      case NVTX_PAYLOAD_TYPE_INT64: r.ev.payload_int64 = attr->payload.llValue; break;
      case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64: r.ev.payload_uint64 = attr->payload.ullValue; break;
      case NVTX_PAYLOAD_TYPE_DOUBLE: r.ev.payload_double = attr->payload.dValue; break;
      default: break;
    }
  }
  r.ev.domain = r.domain.c_str();
  r.ev.message = r.message.c_str();
}

// Per-thread push depth per domain, answered to push/pop as a tool would.
int& tool_depth(nvtxDomainHandle_t d) {
  thread_local std::map<nvtxDomainHandle_t, int> depth;
  return depth[d];
}
int pushed(nvtxDomainHandle_t d) { return tool_depth(d)++; }
int popped(nvtxDomainHandle_t d) {
  int& n = tool_depth(d);
  return n > 0 ? --n : -1;
}

// ---- the functions written into NVTX's slots ----
void MarkEx(const nvtxEventAttributes_t* a) { add(CUDAKIT_NVTX_MARK, "", nullptr, a); }
void MarkA(const char* m) { add(CUDAKIT_NVTX_MARK, "", m); }
nvtxRangeId_t RangeStartEx(const nvtxEventAttributes_t* a) {
  std::uint64_t id = next_id++;
  add(CUDAKIT_NVTX_START, "", nullptr, a, id);
  return id;
}
nvtxRangeId_t RangeStartA(const char* m) {
  std::uint64_t id = next_id++;
  add(CUDAKIT_NVTX_START, "", m, nullptr, id);
  return id;
}
void RangeEnd(nvtxRangeId_t id) { add(CUDAKIT_NVTX_END, "", nullptr, nullptr, id); }
int RangePushEx(const nvtxEventAttributes_t* a) {
  add(CUDAKIT_NVTX_PUSH, "", nullptr, a);
  return pushed(nullptr);
}
int RangePushA(const char* m) {
  add(CUDAKIT_NVTX_PUSH, "", m);
  return pushed(nullptr);
}
int RangePop() {
  add(CUDAKIT_NVTX_POP, "", nullptr);
  return popped(nullptr);
}
void NameCategoryA(uint32_t id, const char* name) {
  add(CUDAKIT_NVTX_NAME_CATEGORY, "", name, nullptr, 0, id);
}

void DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  add(CUDAKIT_NVTX_MARK, domain_name(d), nullptr, a);
}
nvtxRangeId_t DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::uint64_t id = next_id++;
  add(CUDAKIT_NVTX_START, domain_name(d), nullptr, a, id);
  return id;
}
void DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) {
  add(CUDAKIT_NVTX_END, domain_name(d), nullptr, nullptr, id);
}
int DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  add(CUDAKIT_NVTX_PUSH, domain_name(d), nullptr, a);
  return pushed(d);
}
int DomainRangePop(nvtxDomainHandle_t d) {
  add(CUDAKIT_NVTX_POP, domain_name(d), nullptr);
  return popped(d);
}
void DomainNameCategoryA(nvtxDomainHandle_t d, uint32_t id, const char* name) {
  add(CUDAKIT_NVTX_NAME_CATEGORY, domain_name(d), name, nullptr, 0, id);
}
nvtxDomainHandle_t DomainCreateA(const char* name) {
  auto* info = new DomainInfo{name ? name : ""};  // lives as long as the process
  add(CUDAKIT_NVTX_DOMAIN_CREATE, info->name.c_str(), info->name.c_str());
  return reinterpret_cast<nvtxDomainHandle_t>(info);
}
void DomainDestroy(nvtxDomainHandle_t) {}

template <class Fn>
void install(NvtxFunctionTable table, unsigned size, unsigned id, Fn fn) {
  if (table && id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // UTF-8 passes through
    }
  }
  out += '"';
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned core_size = 0, core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) {
    return 0;
  }
  install(core, core_size, NVTX_CBID_CORE_MarkEx, MarkEx);
  install(core, core_size, NVTX_CBID_CORE_MarkA, MarkA);
  install(core, core_size, NVTX_CBID_CORE_RangeStartEx, RangeStartEx);
  install(core, core_size, NVTX_CBID_CORE_RangeStartA, RangeStartA);
  install(core, core_size, NVTX_CBID_CORE_RangeEnd, RangeEnd);
  install(core, core_size, NVTX_CBID_CORE_RangePushEx, RangePushEx);
  install(core, core_size, NVTX_CBID_CORE_RangePushA, RangePushA);
  install(core, core_size, NVTX_CBID_CORE_RangePop, RangePop);
  install(core, core_size, NVTX_CBID_CORE_NameCategoryA, NameCategoryA);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, DomainMarkEx);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainRangeStartEx, DomainRangeStartEx);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainRangeEnd, DomainRangeEnd);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, DomainRangePushEx);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, DomainRangePop);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainNameCategoryA, DomainNameCategoryA);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, DomainCreateA);
  install(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, DomainDestroy);
  ++instances;
  return 1;
}

__attribute__((visibility("default"))) int cudakit_nvtx_recorder_count(void) {
  std::lock_guard lock(mu);
  return static_cast<int>(records.size());
}

__attribute__((visibility("default"))) const cudakit_nvtx_event* cudakit_nvtx_recorder_event(
    int index) {
  std::lock_guard lock(mu);
  if (index < 0 || static_cast<std::size_t>(index) >= records.size()) return nullptr;
  return &records[static_cast<std::size_t>(index)].ev;
}

__attribute__((visibility("default"))) void cudakit_nvtx_recorder_clear(void) {
  std::lock_guard lock(mu);
  records.clear();
}

__attribute__((visibility("default"))) int cudakit_nvtx_recorder_instances(void) {
  return instances.load();
}

__attribute__((visibility("default"))) const char* cudakit_nvtx_recorder_json(void) {
  static const char* kinds[] = {"",      "push",          "pop",          "mark",
                                "start", "end",           "name_category", "domain_create"};
  std::lock_guard lock(mu);
  json = "[";
  for (const Record& r : records) {
    if (json.size() > 1) json += ',';
    char nums[512];
    std::snprintf(nums, sizeof(nums),
                  "\"color\":%u,\"category\":%u,\"payload_type\":%d,\"payload_int64\":%lld,"
                  "\"payload_uint64\":%llu,\"payload_double\":%.17g,\"id\":%llu,\"thread\":%llu",
                  r.ev.color, r.ev.category, r.ev.payload_type,
                  static_cast<long long>(r.ev.payload_int64),
                  static_cast<unsigned long long>(r.ev.payload_uint64), r.ev.payload_double,
                  static_cast<unsigned long long>(r.ev.id),
                  static_cast<unsigned long long>(r.ev.thread));
    json += "{\"kind\":\"";
    json += kinds[r.ev.kind];
    json += "\",\"domain\":";
    append_json_string(json, r.domain);
    json += ",\"message\":";
    append_json_string(json, r.message);
    json += ',';
    json += nums;
    json += '}';
  }
  json += ']';
  return json.c_str();
}

}  // extern "C"
