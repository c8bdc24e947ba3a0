// The run-time library loader (see library_loader.hpp).
#include "backend/library_loader.hpp"

#include <dlfcn.h>
#include <link.h>

#include "cudakit/error.hpp"

namespace cudakit::detail {

void* LoadedLibrary::symbol(const char* name) const noexcept {
  return handle_ ? dlsym(handle_, name) : nullptr;
}

LibraryInfo LoadedLibrary::info() const {
  LibraryInfo i;
  i.name = name_;
  i.found = available();
  i.soname = soname_;
  i.path = path_;
  i.version = version_;
  i.reason = reason_;
  return i;
}

LoadedLibrary load_library(const LibrarySpec& spec,
                           std::initializer_list<SymbolSlot> symbols) noexcept {
  LoadedLibrary lib;
  try {
    lib.name_ = spec.name;
    std::string& errors = lib.open_error_;
    for (const char* soname : spec.sonames) {
      // RTLD_LOCAL: the libraries' symbols never leak into the global namespace, where they
      // could satisfy (or clash with) another copy loaded by the application, e.g. torch's.
      if (void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) {
        lib.handle_ = h;
        lib.soname_ = soname;
        errors.clear();
        break;
      }
      const char* err = dlerror();
      if (!errors.empty()) errors += "; ";
      errors += err ? err : soname;
    }
    if (!lib.handle_) {
      lib.reason_ = std::string(spec.name) + " not found (" + errors + "): " + spec.missing_hint;
      return lib;
    }
    lib.path_ = lib.soname_;
    link_map* lm = nullptr;
    if (dlinfo(lib.handle_, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) {
      lib.path_ = lm->l_name;
    }
    std::string missing;
    for (const SymbolSlot& s : symbols) {
      void* address = dlsym(lib.handle_, s.name);
      s.assign(s.slot, address);
      if (!address && s.required) missing += (missing.empty() ? "" : ", ") + std::string(s.name);
    }
    if (spec.version) lib.version_ = spec.version(lib);
    if (!missing.empty()) {
      lib.reason_ = lib.path_ + " lacks " + missing + ": it is too old or not " + spec.name +
                    " (" + spec.missing_hint + ")";
    }
  } catch (const std::exception& e) {
    lib.reason_ = std::string("loading ") + spec.name + " failed: " + e.what();
  }
  return lib;
}

std::string loaded_library_path(const LibrarySpec& spec) noexcept {
  try {
    for (const char* soname : spec.sonames) {
      // RTLD_NOLOAD: a handle only if already loaded (one more reference, dropped below).
      void* h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
      if (!h) continue;
      std::string path = soname;
      link_map* lm = nullptr;
      if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) path = lm->l_name;
      dlclose(h);
      return path;
    }
  } catch (...) {  // allocation failure: report nothing loaded
  }
  dlerror();
  return "";
}

void throw_library_unavailable(const LoadedLibrary& lib, const char* what) {
  throw NotSupportedError(std::string(what) + ": " + lib.reason());
}

std::string version_string(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace cudakit::detail
