#include "backend/cuda/nvrtc.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "core/files.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::cuda {
namespace {

const LibrarySpec& spec() {
  static const LibrarySpec s{
      "NVRTC",
      // The toolkit's default location last: runfile installs often leave it off the
      // loader's path, while NVRTC (unlike libcuda) ships only with the toolkit.
      {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
       "/usr/local/cuda/lib64/libnvrtc.so.12"},
      "install the CUDA NVRTC runtime (libnvrtc, e.g. the cuda-nvrtc package or the "
      "nvidia-cuda-nvrtc wheel) or add its directory to LD_LIBRARY_PATH",
      [](const LoadedLibrary& l) -> std::string {
        auto version = reinterpret_cast<int (*)(int*, int*)>(l.symbol("nvrtcVersion"));
        int major = 0, minor = 0;
        if (!version || version(&major, &minor) != 0) return "";
        return std::to_string(major) + "." + std::to_string(minor);
      }};
  return s;
}

// What decides which file dlopen("libnvrtc.so.N") resolves to.
std::string resolution_inputs() {
  const char* ld = std::getenv("LD_LIBRARY_PATH");
  return std::string("LD_LIBRARY_PATH=") + (ld ? ld : "") + " ld.so.cache=" +
         file_identity("/etc/ld.so.cache");
}

std::string join_archs(const std::vector<int>& archs) {
  std::string s;
  for (int a : archs) s += (s.empty() ? "" : ",") + std::to_string(a);
  return s;
}

std::vector<int> split_archs(const std::string& s) {
  std::vector<int> out;
  std::istringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(std::atoi(item.c_str()));
  return out;
}

std::map<std::string, std::string> read_record(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

void write_record(const std::string& path, const std::map<std::string, std::string>& kv) {
  std::string text;
  for (const auto& [k, v] : kv) text += k + '=' + v + '\n';
  // Best effort: when it fails, the next process loads NVRTC again.
  (void)write_file_atomically(path, {text});
}

std::string result_text(const Nvrtc& n, int rc) {
  const char* s = n.api.nvrtcGetErrorString ? n.api.nvrtcGetErrorString(rc) : nullptr;
  return s ? s : "NVRTC error " + std::to_string(rc);
}

const Nvrtc& loaded(const char* what) {
  const Nvrtc& n = nvrtc();
  if (!n.lib.available()) throw_library_unavailable(n.lib, what);
  return n;
}

}  // namespace

const Nvrtc& nvrtc() noexcept {
  static const Nvrtc* lib = [] {
    auto* n = new Nvrtc();  // leaked: NVRTC lives until exit (library_loader.hpp)
    NvrtcApi& a = n->api;
    n->lib = load_library(spec(),
                          {bind_symbol("nvrtcVersion", a.nvrtcVersion),
                           bind_symbol("nvrtcGetErrorString", a.nvrtcGetErrorString),
                           bind_symbol("nvrtcCreateProgram", a.nvrtcCreateProgram),
                           bind_symbol("nvrtcDestroyProgram", a.nvrtcDestroyProgram),
                           bind_symbol("nvrtcCompileProgram", a.nvrtcCompileProgram),
                           bind_symbol("nvrtcGetProgramLogSize", a.nvrtcGetProgramLogSize),
                           bind_symbol("nvrtcGetProgramLog", a.nvrtcGetProgramLog),
                           bind_symbol("nvrtcGetPTXSize", a.nvrtcGetPTXSize),
                           bind_symbol("nvrtcGetPTX", a.nvrtcGetPTX),
                           bind_symbol("nvrtcGetCUBINSize", a.nvrtcGetCUBINSize, false),
                           bind_symbol("nvrtcGetCUBIN", a.nvrtcGetCUBIN, false),
                           bind_symbol("nvrtcGetNumSupportedArchs", a.nvrtcGetNumSupportedArchs, false),
                           bind_symbol("nvrtcGetSupportedArchs", a.nvrtcGetSupportedArchs, false)});
    if (n->lib.available()) {
      a.nvrtcVersion(&n->major, &n->minor);
      int count = 0;
      if (a.nvrtcGetNumSupportedArchs && a.nvrtcGetSupportedArchs &&
          a.nvrtcGetNumSupportedArchs(&count) == 0 && count > 0) {
        n->archs.resize(static_cast<std::size_t>(count));
        if (a.nvrtcGetSupportedArchs(n->archs.data()) != 0) n->archs.clear();
        std::sort(n->archs.begin(), n->archs.end());
      }
      if (n->major < 11 || (n->major == 11 && n->minor < 2))
        n->lib.fail(n->lib.path() + " is NVRTC " + std::to_string(n->major) + "." +
                    std::to_string(n->minor) + "; the jiterator needs 11.2 or newer (" +
                    spec().missing_hint + ")");
    }
    return n;
  }();
  return *lib;
}

NvrtcTarget nvrtc_target(const std::vector<int>& archs, int device_arch) {
  if (std::find(archs.begin(), archs.end(), device_arch) != archs.end())
    return NvrtcTarget{device_arch, true};
  int best = 0;
  for (int a : archs)
    if (a <= device_arch) best = std::max(best, a);
  if (best == 0)
    throw NotSupportedError("NVRTC supports architectures " + join_archs(archs) +
                            ", none at or below this device's sm_" +
                            std::to_string(device_arch) + ": use an older CUDA toolkit's NVRTC");
  return NvrtcTarget{best, false};
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program,
                          NvrtcTarget target) {
  const Nvrtc& n = loaded("jiterator (NVRTC)");
  const NvrtcApi& a = n.api;
  void* prog = nullptr;
  int rc = a.nvrtcCreateProgram(&prog, source.c_str(), program.c_str(), 0, nullptr, nullptr);
  if (rc != 0) throw Error("nvrtcCreateProgram: " + result_text(n, rc));
  struct Destroy {
    const NvrtcApi& a;
    void*& p;
    ~Destroy() { a.nvrtcDestroyProgram(&p); }
  } destroy{a, prog};

  const bool cubin = target.cubin && a.nvrtcGetCUBIN && a.nvrtcGetCUBINSize;
  const std::string arch =
      std::string("--gpu-architecture=") + (cubin ? "sm_" : "compute_") + std::to_string(target.arch);
  // -default-device: the user's functions carry no __device__; -minimal (12.4+) skips the
  // CUDA runtime declarations the generated source never uses, which shortens compiles.
  std::vector<const char*> opts = {"--std=c++17", arch.c_str(), "-default-device", "-DNDEBUG"};
  if (n.major > 12 || (n.major == 12 && n.minor >= 4)) opts.push_back("-minimal");

  NvrtcOutput out;
  rc = a.nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  std::size_t log_size = 0;
  if (a.nvrtcGetProgramLogSize(prog, &log_size) == 0 && log_size > 1) {
    out.log.resize(log_size);
    a.nvrtcGetProgramLog(prog, out.log.data());
    out.log.resize(log_size - 1);  // drop the NUL
  }
  if (rc != 0) {
    if (out.log.empty()) out.log = result_text(n, rc);
    return out;
  }
  std::size_t size = 0;
  rc = cubin ? a.nvrtcGetCUBINSize(prog, &size) : a.nvrtcGetPTXSize(prog, &size);
  if (rc != 0) throw Error("NVRTC: getting the compiled image failed: " + result_text(n, rc));
  out.image.resize(size);
  rc = cubin ? a.nvrtcGetCUBIN(prog, out.image.data()) : a.nvrtcGetPTX(prog, out.image.data());
  if (rc != 0) throw Error("NVRTC: getting the compiled image failed: " + result_text(n, rc));
  out.ok = true;
  return out;
}

NvrtcIdentity nvrtc_identity(const std::string& state_dir) {
  const std::string record = state_dir.empty() ? "" : state_dir + "/nvrtc.identity";
  if (!record.empty()) {
    auto kv = read_record(record);
    const std::string already = loaded_library_path(spec());
    if (!kv.empty() && kv["inputs"] == resolution_inputs() &&
        (already.empty() || already == kv["path"]) && !kv["path"].empty() &&
        kv["file"] == file_identity(kv["path"]) && !kv["version"].empty()) {
      return NvrtcIdentity{kv["version"], split_archs(kv["archs"]), kv["file"]};
    }
  }
  const Nvrtc& n = loaded("jiterator (NVRTC)");
  NvrtcIdentity id{n.lib.version(), n.archs, file_identity(n.lib.path())};
  if (id.file.empty()) id.file = n.lib.path();
  if (!record.empty()) {
    write_record(record,
                 {{"inputs", resolution_inputs()},
                  {"path", n.lib.path()},
                  {"file", id.file},
                  {"version", id.version},
                  {"archs", join_archs(id.archs)}});
  }
  return id;
}

}  // namespace cudakit::detail::cuda
