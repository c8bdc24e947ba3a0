// instrument/symbolizer.hpp: dynamic symbols, the object's .symtab, then addr2line for lines.
#include "instrument/symbolizer.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

extern char** environ;

namespace cudakit::instrument {
namespace {

std::string demangle(const char* s) {
  int status = 0;
  char* dem = abi::__cxa_demangle(s, nullptr, nullptr, &status);
  std::string out = (status == 0 && dem) ? dem : s;
  std::free(dem);
  return out;
}

// What one object file says about itself: its static function symbols and whether it has
// DWARF line tables. Read once, with mmap, then unmapped.
struct ObjectInfo {
  bool position_independent = true;  // ET_DYN: addresses are offsets from the load base
  bool has_lines = false;
  struct Func {
    std::uintptr_t start, size;
    std::string name;
  };
  std::vector<Func> funcs;  // sorted by start
};

ObjectInfo read_object(const std::string& path) {
  ObjectInfo info;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return info;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    ::close(fd);
    return info;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return info;
  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  auto in_file = [&](std::uint64_t off, std::uint64_t len) { return off <= size && len <= size - off; };
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
      eh->e_shentsize == sizeof(Elf64_Shdr) &&
      in_file(eh->e_shoff, std::uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr)) &&
      eh->e_shstrndx < eh->e_shnum) {
    info.position_independent = eh->e_type == ET_DYN;
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    const Elf64_Shdr& names = sh[eh->e_shstrndx];
    for (int i = 0; i < eh->e_shnum; ++i) {
      if (in_file(names.sh_offset, names.sh_size) && sh[i].sh_name < names.sh_size &&
          std::strcmp(reinterpret_cast<const char*>(base + names.sh_offset + sh[i].sh_name),
                      ".debug_line") == 0)
        info.has_lines = true;
      if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strtab = sh[sh[i].sh_link];
      if (!in_file(sh[i].sh_offset, sh[i].sh_size) || !in_file(strtab.sh_offset, strtab.sh_size))
        continue;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
      const std::size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
      for (std::size_t k = 0; k < n; ++k) {
        const int type = ELF64_ST_TYPE(syms[k].st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || syms[k].st_value == 0 ||
            syms[k].st_name >= strtab.sh_size)
          continue;
        const char* name = reinterpret_cast<const char*>(base + strtab.sh_offset + syms[k].st_name);
        const std::size_t room = strtab.sh_size - syms[k].st_name;
        info.funcs.push_back({syms[k].st_value, syms[k].st_size,
                              std::string(name, strnlen(name, room))});
      }
    }
    std::sort(info.funcs.begin(), info.funcs.end(),
              [](const ObjectInfo::Func& a, const ObjectInfo::Func& b) { return a.start < b.start; });
  }
  ::munmap(map, size);
  return info;
}

const ObjectInfo::Func* find_func(const ObjectInfo& o, std::uintptr_t addr) {
  auto it = std::upper_bound(o.funcs.begin(), o.funcs.end(), addr,
                             [](std::uintptr_t a, const ObjectInfo::Func& f) { return a < f.start; });
  if (it == o.funcs.begin()) return nullptr;
  --it;
  // A zero size (hand-written assembly) is taken as reaching the next symbol.
  if (it->size != 0 && addr >= it->start + it->size) return nullptr;
  return &*it;
}

// The main program's load base: its dladdr file name is argv[0] as given (possibly
// relative, or changed since), so its file is the target of /proc/self/exe (resolved here:
// in the addr2line process that name would be addr2line itself).
std::uintptr_t main_program_base() {
  static const std::uintptr_t base = [] {
    std::uintptr_t b = 0;
    dl_iterate_phdr([](dl_phdr_info* i, std::size_t, void* out) {
      *static_cast<std::uintptr_t*>(out) = i->dlpi_addr;
      return 1;  // the first entry is the main program
    }, &b);
    return b;
  }();
  return base;
}

const std::string& main_program_path() {
  static const std::string path = [] {
    std::error_code ec;
    const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("/proc/self/exe") : p.string();
  }();
  return path;
}

bool lines_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("CUDAKIT_SYMBOLIZE_LINES");
    return !(v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0));
  }();
  return wanted;
}

// addr2line -f -C -e path addr...: two lines per address (function, then "file:line" with an
// optional " (discriminator N)"); "??" when unknown. Empty on any failure.
std::vector<std::pair<std::string, int>> addr2line(const std::string& path,
                                                   const std::vector<std::uintptr_t>& addrs) {
  std::vector<std::pair<std::string, int>> out;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return out;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {"addr2line", "-f", "-C", "-e", path};
  char hex[32];
  for (std::uintptr_t a : addrs) {
    std::snprintf(hex, sizeof hex, "%#zx", static_cast<std::size_t>(a));
    args.emplace_back(hex);
  }
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "addr2line", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return out;
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return out;
  std::vector<std::string> lines;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t nl = text.find('\n', pos);
    lines.push_back(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    pos = nl == std::string::npos ? text.size() : nl + 1;
  }
  if (lines.size() != 2 * addrs.size()) return out;
  for (std::size_t i = 0; i < addrs.size(); ++i) {
    std::string loc = lines[2 * i + 1];
    if (const auto d = loc.find(" (discriminator"); d != std::string::npos) loc.erase(d);
    const auto colon = loc.rfind(':');
    int line = 0;
    std::string file;
    if (colon != std::string::npos && loc.compare(0, 2, "??") != 0) {
      file = loc.substr(0, colon);
      line = std::atoi(loc.c_str() + colon + 1);
    }
    out.emplace_back(line > 0 ? file : std::string(), line);
  }
  return out;
}

struct Caches {
  std::mutex mutex;
  std::unordered_map<void*, CppFrameSymbol> symbols;
  std::map<std::string, std::shared_ptr<const ObjectInfo>> objects;
};
Caches& caches() {
  static auto* c = new Caches();  // leaked: snapshots may be taken while statics go away
  return *c;
}

std::shared_ptr<const ObjectInfo> object_info(const std::string& path) {
  Caches& c = caches();
  {
    std::lock_guard lock(c.mutex);
    if (auto it = c.objects.find(path); it != c.objects.end()) return it->second;
  }
  auto info = std::make_shared<const ObjectInfo>(read_object(path));
  std::lock_guard lock(c.mutex);
  return c.objects.emplace(path, std::move(info)).first->second;
}

struct Pending {
  std::size_t index;    // into prepare_cpp_frame_symbols' list of new addresses
  std::uintptr_t addr;  // in the object's own address space (what addr2line takes)
};

// Name and object of one return address (sources 1 and 2); `line_lookup` gets the object to
// ask addr2line and the address there, when the object has line tables.
CppFrameSymbol resolve(void* pc, std::string* line_object, std::uintptr_t* line_addr) {
  CppFrameSymbol sym;
  // pc is a return address: the call instruction is just before it (matters for the last
  // instruction of a function that ends in a call to a noreturn function).
  void* in_call = static_cast<char*>(pc) - 1;
  Dl_info dl{};
  void* entry_ptr = nullptr;
  const bool found = dladdr1(in_call, &dl, &entry_ptr, RTLD_DL_SYMENT) != 0 && dl.dli_fname;
  const auto* entry = static_cast<const ElfW(Sym)*>(entry_ptr);
  // dladdr answers the nearest exported symbol below the address, even when the address lies
  // past that symbol's end (in a function that is not exported): checked with its size.
  if (found && dl.dli_sname && entry && entry->st_size != 0 &&
      reinterpret_cast<std::uintptr_t>(in_call) >=
          reinterpret_cast<std::uintptr_t>(dl.dli_saddr) + entry->st_size)
    dl.dli_sname = nullptr;
  char hex[32];
  std::snprintf(hex, sizeof hex, "%p", pc);
  sym.name = hex;
  sym.file = found ? dl.dli_fname : "??";
  if (!found) return sym;
  const auto fbase = reinterpret_cast<std::uintptr_t>(dl.dli_fbase);
  const std::string path = fbase == main_program_base() ? main_program_path() : dl.dli_fname;
  const auto info = object_info(path);
  const auto at = reinterpret_cast<std::uintptr_t>(in_call);
  const std::uintptr_t addr = info->position_independent ? at - fbase : at;
  if (dl.dli_sname) {
    sym.name = demangle(dl.dli_sname);
  } else if (const ObjectInfo::Func* f = find_func(*info, addr)) {
    sym.name = demangle(f->name.c_str());
  }
  if (line_object && info->has_lines) {
    *line_object = path;
    *line_addr = addr;
  }
  return sym;
}

}  // namespace

CppFrameSymbol cpp_frame_name(void* pc) { return resolve(pc, nullptr, nullptr); }

void prepare_cpp_frame_symbols(const std::vector<void*>& pcs) {
  Caches& c = caches();
  std::vector<std::pair<void*, CppFrameSymbol>> done;
  {
    // Two threads may symbolise the same address at once (or `pcs` repeat one): each answer
    // is the same, and the cache keeps one.
    std::lock_guard lock(c.mutex);
    for (void* pc : pcs)
      if (!c.symbols.count(pc)) done.emplace_back(pc, CppFrameSymbol{});
  }
  const bool want_lines = lines_wanted();
  std::map<std::string, std::vector<Pending>> by_object;  // objects with line tables
  for (std::size_t i = 0; i < done.size(); ++i) {
    std::string object;
    std::uintptr_t addr = 0;
    done[i].second = resolve(done[i].first, want_lines ? &object : nullptr, &addr);
    if (!object.empty()) by_object[object].push_back({i, addr});
  }
  for (auto& [path, pending] : by_object) {
    // Batches keep the command line well under the kernel's argument limit.
    constexpr std::size_t kBatch = 512;
    for (std::size_t i = 0; i < pending.size(); i += kBatch) {
      std::vector<std::uintptr_t> addrs;
      const std::size_t end = std::min(pending.size(), i + kBatch);
      for (std::size_t k = i; k < end; ++k) addrs.push_back(pending[k].addr);
      const auto found = addr2line(path, addrs);
      for (std::size_t k = 0; k < found.size(); ++k) {
        if (found[k].second <= 0) continue;
        CppFrameSymbol& sym = done[pending[i + k].index].second;
        sym.file = std::filesystem::path(found[k].first).lexically_normal().string();
        sym.line = found[k].second;
      }
    }
  }
  std::lock_guard lock(c.mutex);
  for (auto& [pc, sym] : done) c.symbols[pc] = std::move(sym);
}

CppFrameSymbol cpp_frame_symbol(void* pc) {
  Caches& c = caches();
  {
    std::lock_guard lock(c.mutex);
    auto it = c.symbols.find(pc);
    if (it != c.symbols.end()) return it->second;
  }
  prepare_cpp_frame_symbols({pc});
  std::lock_guard lock(c.mutex);
  return c.symbols[pc];
}

}  // namespace cudakit::instrument
