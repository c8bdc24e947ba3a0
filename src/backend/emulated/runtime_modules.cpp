// Emulated backend: runtime-compiled modules (the jiterator), built by the host C++ compiler
// into a shared object and run as host tasks on the stream.
//
// The compiler is found at run time, once: the CXX environment variable (a command, words
// split on spaces), else `c++`, else `g++` on PATH. Its identity for cache keys is the
// resolved executable's path, size and modification time plus our flags and the machine:
// stat() calls, no subprocess — `g++ --version` would cost a fork+exec per process (~2 ms) and
// make a warm start from the disk cache slower than the 1 ms it should take.
//
// A compile writes the source to a private temporary directory, runs the compiler with
// posix_spawn (safe in a multithreaded process; stdout+stderr go to a file, so a chatty
// compiler can never block on a full pipe), and returns the .so bytes or the diagnostics.
//
// Loading: the image goes into a memfd that stays open for the life of the module, and is
// dlopen'ed as /proc/self/fd/N. glibc identifies loaded objects by the name given to dlopen:
// closing the fd would let a later module reuse the same /proc/self/fd/N name and be handed
// the old library. Without memfd (or /proc), a temporary file with a process-unique name is
// loaded and unlinked.
//
// Faults: a kernel runs under run_catching_faults (kernel_faults.hpp), so a SIGSEGV/SIGILL in
// user code becomes the device's sticky AcceleratorError, as on a GPU.
//
// Thread-safety: the compiler lookup runs once (function-local static); compiles use their
// own temporary directories; dlopen/dlsym are thread-safe.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "backend/emulated/kernel_faults.hpp"
#include "backend/emulated/state.hpp"
#include "core/files.hpp"
#include "cudakit/error.hpp"

extern char** environ;

namespace cudakit::detail::emulated {
namespace {

// -O2 (not -O3 -march=native): images may be shared through a cache directory by machines
// of one architecture. -fno-strict-aliasing: parameters are read from a byte block.
constexpr const char* kFlags[] = {"-std=c++17", "-O2", "-fPIC", "-shared", "-fno-strict-aliasing",
                                  "-fvisibility=hidden", "-x", "c++"};

struct HostCompiler {
  std::vector<std::string> command;  // argv prefix (CXX words, first one resolved)
  std::string identity;              // cache key part
  std::string reason;                // why none is usable ("" when found)
};

bool executable(const std::string& path, struct stat* st) {
  return ::stat(path.c_str(), st) == 0 && S_ISREG(st->st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// `name` resolved like execvp: as is when it contains '/', else along PATH. "" if not found.
std::string resolve(const std::string& name) {
  struct stat st {};
  if (name.find('/') != std::string::npos) return executable(name, &st) ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t b = 0;
  while (b <= dirs.size()) {
    std::size_t e = dirs.find(':', b);
    if (e == std::string::npos) e = dirs.size();
    std::string dir = dirs.substr(b, e - b);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (executable(candidate, &st)) return candidate;
    b = e + 1;
  }
  return "";
}

HostCompiler find_compiler() {
  HostCompiler c;
  std::vector<std::string> words;
  const char* cxx = std::getenv("CXX");
  if (cxx && *cxx) {
    std::istringstream in(cxx);
    for (std::string w; in >> w;) words.push_back(w);
  }
  std::string tried;
  if (!words.empty()) {
    std::string exe = resolve(words[0]);
    if (exe.empty()) {
      c.reason = "CXX='" + std::string(cxx) + "' names no executable (not found on PATH)";
      return c;
    }
    words[0] = exe;
  } else {
    for (const char* name : {"c++", "g++"}) {
      std::string exe = resolve(name);
      if (!exe.empty()) {
        words.push_back(exe);
        break;
      }
    }
    if (words.empty()) {
      const char* path = std::getenv("PATH");
      c.reason = std::string("no host C++ compiler found: set CXX, or install g++ (looked for "
                             "c++ and g++ on PATH=") + (path ? path : "") + ")";
      return c;
    }
  }
  struct utsname u {};
  ::uname(&u);
  const std::string compiler = file_identity(words[0]);  // "" if it vanished since the search
  std::string id = "host-c++ " + (compiler.empty() ? words[0] : compiler);
  for (std::size_t i = 1; i < words.size(); ++i) id += " " + words[i];
  id += " flags=";
  for (const char* f : kFlags) id += std::string(f) + " ";
  id += "machine=" + std::string(u.machine);
  c.command = std::move(words);
  c.identity = std::move(id);
  return c;
}

const HostCompiler& host_compiler() {
  static const HostCompiler c = find_compiler();
  return c;
}

const HostCompiler& usable_compiler(const char* call) {
  const HostCompiler& c = host_compiler();
  if (!c.reason.empty())
    throw NotSupportedError(std::string(call) +
                            ": the emulated backend compiles runtime modules (jiterator "
                            "kernels) with the host C++ compiler, and " + c.reason);
  return c;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A private temporary directory, removed with its files on scope exit.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/cudakit-jit-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
      throw Error("compile_runtime_module: cannot create a temporary directory from " + templ +
                  ": " + std::strerror(errno) + " (set TMPDIR to a writable directory)");
    path_ = buf.data();
  }
  ~TempDir() {
    for (const auto& f : files_) ::unlink(f.c_str());
    ::rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

// A loaded module: the dlopen handle and the memfd it came from (kept open, see above).
struct HostModule {
  static constexpr std::uint64_t kMagic = 0x646f4d74736f486bull;  // "kHostMod"
  std::uint64_t magic = kMagic;
  void* handle = nullptr;
  int fd = -1;
};

HostModule* host_module(ModuleHandle m, const char* call) {
  auto* h = static_cast<HostModule*>(m);
  if (!h || h->magic != HostModule::kMagic)
    throw NotSupportedError(std::string(call) +
                            ": not a runtime-compiled module (modules from PTX/cubin images "
                            "need the cuda backend)");
  return h;
}

[[noreturn]] void bad_image(const std::string& why) {
  throw_accelerator_error(200 /* CUDA_ERROR_INVALID_IMAGE */,
                          "emulated backend: load_runtime_module: " + why);
  std::abort();
}

}  // namespace

std::string EmulatedBackend::runtime_compiler_id(int device, const std::string&) {
  dev(device);
  return usable_compiler("runtime_compiler_id").identity;
}

Backend::RuntimeCompileResult EmulatedBackend::compile_runtime_module(int device,
                                                                      const std::string& source,
                                                                      const std::string& program) {
  dev(device);
  const HostCompiler& cc = usable_compiler("compile_runtime_module");
  TempDir dir;
  std::string safe;
  for (char ch : program) safe += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') ? ch : '_';
  const std::string src = dir.file((safe.empty() ? "program" : safe) + ".cpp");
  const std::string out = dir.file("module.so"), log = dir.file("log.txt");
  {
    std::ofstream f(src, std::ios::binary);
    f << source;
    if (!f) throw Error("compile_runtime_module: cannot write " + src);
  }
  std::vector<std::string> args = cc.command;
  for (const char* flag : kFlags) args.emplace_back(flag);
  args.insert(args.end(), {src, "-o", out});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw NotSupportedError("compile_runtime_module: cannot run the host C++ compiler " +
                            cc.command[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error(std::string("compile_runtime_module: waitpid: ") + std::strerror(errno));
  }
  RuntimeCompileResult r;
  r.log = read_file(log);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (r.log.empty())
      r.log = cc.command[0] + (WIFSIGNALED(status)
                                   ? " was killed by signal " + std::to_string(WTERMSIG(status))
                                   : " failed with status " + std::to_string(WEXITSTATUS(status)));
    return r;
  }
  std::string image = read_file(out);
  if (image.empty()) {
    r.log += "\n" + cc.command[0] + " reported success but wrote no shared object";
    return r;
  }
  r.image.assign(image.begin(), image.end());
  r.ok = true;
  return r;
}

ModuleHandle EmulatedBackend::load_runtime_module(int device, const void* image, std::size_t size) {
  dev(device);
  if (!image || size == 0) throw ValueError("load_runtime_module: empty image");
  auto m = std::make_unique<HostModule>();
  auto write_all = [&](int fd) {
    const char* p = static_cast<const char*>(image);
    std::size_t left = size;
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    return true;
  };
  std::string error;
  const int fd = ::memfd_create("cudakit-jit", MFD_CLOEXEC);
  if (fd >= 0 && write_all(fd)) {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    m->handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (m->handle) {
      m->fd = fd;
      return m.release();
    }
    const char* e = ::dlerror();
    error = e ? e : "dlopen failed";
  }
  if (fd >= 0) ::close(fd);
  // Fallback: a temporary file whose name this process never uses twice.
  static std::atomic<unsigned long long> counter{0};
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/cudakit-jit-" +
                           std::to_string(::getpid()) + "-" + std::to_string(++counter) + ".so";
  const int tfd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
  if (tfd < 0) bad_image("cannot write " + path + ": " + std::strerror(errno) + " (" + error + ")");
  const bool written = write_all(tfd);
  ::close(tfd);
  if (written) m->handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  const char* e = written && !m->handle ? ::dlerror() : nullptr;
  ::unlink(path.c_str());
  if (!m->handle) bad_image(std::string("dlopen: ") + (e ? e : "could not write the image") +
                            (error.empty() ? "" : " (memfd: " + error + ")"));
  return m.release();
}

void EmulatedBackend::module_unload(ModuleHandle m) {
  if (!m || is_shutting_down()) return;
  HostModule* h = host_module(m, "module_unload");
  ::dlclose(h->handle);
  if (h->fd >= 0) ::close(h->fd);
  h->magic = 0;
  delete h;
}

FunctionHandle EmulatedBackend::module_get_function(ModuleHandle m, const char* name) {
  if (!name) throw ValueError("module_get_function: kernel name is null");
  HostModule* h = host_module(m, "module_get_function");
  ::dlerror();
  void* f = ::dlsym(h->handle, name);
  if (!f)
    throw_accelerator_error(errc::not_found, std::string("emulated backend: module_get_function('") +
                                                 name + "'): no such function in the module (is it "
                                                 "declared extern \"C\" with default visibility?)");
  return f;
}

void EmulatedBackend::launch_runtime_kernel(FunctionHandle f, Dim3, Dim3, StreamHandle s,
                                            const void* params, std::size_t bytes,
                                            std::shared_ptr<const void> keep_alive) {
  if (!f) fail(errc::invalid_handle, "launch_runtime_kernel: null function");
  if (!params && bytes) fail(errc::invalid_value, "launch_runtime_kernel: null parameters");
  auto* fn = reinterpret_cast<void (*)(const void*)>(f);
  // 16-byte aligned copy (the block holds 16-byte aligned slots).
  std::vector<std::uint64_t> block((bytes + 15) / 16 * 2);
  if (bytes) std::memcpy(block.data(), params, bytes);
  // A fault in user code is the GPU's sticky error, not the end of the process
  // (kernel_faults.hpp).
  launch_host_kernel(s, "ck_jiterator", [fn, block = std::move(block), keep = std::move(keep_alive)] {
    KernelFault fault;
    if (!run_catching_faults(fn, block.data(), &fault)) {
      throw kernel_fault_error(fault, reinterpret_cast<const void*>(fn));
    }
  });
}

}  // namespace cudakit::detail::emulated
