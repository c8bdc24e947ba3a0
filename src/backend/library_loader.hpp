// The one place that opens run-time-loaded libraries (cuda: libcuda, NVML, cuBLAS, cuBLASLt,
// cuSOLVER, NVRTC, CUPTI, NCCL, cuFile; emulated: OpenBLAS's CBLAS). Backend-neutral (it needs
// no CUDA header), so it is built and tested on every machine; only backends use it
// (tests/layout enforces that).
//
// A library is described by a LibrarySpec (display name, sonames tried in order, what to do
// when it is missing) and a symbol table: typed function-pointer slots, each required or
// optional. load_library() opens the first soname that loads, resolves the table and asks the
// spec's version hook for a version string. It never throws: a missing library, a missing
// required symbol or a failing init is recorded as `reason`, which callers turn into
// NotSupportedError when (and only when) the library is actually needed. Probing never aborts
// the process and never makes import fail.
//
// Handles are never dlclose'd: function pointers and library state live until process exit
// (unloading at exit would run library teardown while other threads may still call in).
//
// Why not one loader per library (as before): three copies had drifted apart in how they
// reported failures (one kept dlerror(), one did not, one printed a fixed hint), and the five
// libraries added since would have made eight.
//
// Thread-safety: load_library() is reentrant; callers load each library once (call_once or a
// function-local static) and share the immutable result.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cudakit/libraries.hpp"

namespace cudakit::detail {

// One slot of a library's symbol table: the symbol name and the typed function pointer that
// receives it. Build with bind_symbol(), which keeps the pointer's real type.
struct SymbolSlot {
  const char* name;
  bool required;
  void* slot;                                // address of the typed function pointer
  void (*assign)(void* slot, void* address);  // stores `address` with the slot's type
};

template <class Fn>
SymbolSlot bind_symbol(const char* name, Fn*& slot, bool required = true) {
  return SymbolSlot{name, required, &slot,
                    [](void* s, void* address) {
                      *static_cast<Fn**>(s) = reinterpret_cast<Fn*>(address);
                    }};
}

class LoadedLibrary;

struct LibrarySpec {
  const char* name;                  // display name: "cuBLAS"
  std::vector<const char*> sonames;  // tried in order: {"libcublas.so.13", "libcublas.so.12"}
  const char* missing_hint;          // appended to the reason when no soname loads
  // Optional: asks the loaded library for its version ("13.0.2"); "" if it cannot say. Runs
  // after the symbol table resolved, so it may use the table or symbol().
  std::string (*version)(const LoadedLibrary&) = nullptr;
};

// The outcome of loading one library. The library's own loader may still record an init
// failure (fail) or a version it learnt after init (set_version); after that one-time load it
// is shared read-only.
class LoadedLibrary {
 public:
  bool available() const noexcept { return handle_ != nullptr && reason_.empty(); }
  const std::string& name() const noexcept { return name_; }
  const std::string& soname() const noexcept { return soname_; }  // "" when none loaded
  const std::string& path() const noexcept { return path_; }      // resolved file
  const std::string& version() const noexcept { return version_; }
  const std::string& reason() const noexcept { return reason_; }  // "" when available
  // The dlerror() texts when no soname loaded.
  const std::string& open_error() const noexcept { return open_error_; }
  // A symbol outside the table (version hooks, optional extras); nullptr if absent.
  void* symbol(const char* name) const noexcept;
  // Marks the library unusable (e.g. its init call failed) with `why`.
  void fail(std::string why) { reason_ = std::move(why); }
  void set_version(std::string v) { version_ = std::move(v); }
  LibraryInfo info() const;

 private:
  friend LoadedLibrary load_library(const LibrarySpec&,
                                    std::initializer_list<SymbolSlot>) noexcept;
  void* handle_ = nullptr;
  std::string name_, soname_, path_, version_, reason_, open_error_;
};

// Opens the first loadable soname of `spec`, resolves `symbols`, then calls spec.version.
// Never throws (an allocation failure while building messages is reported as the reason).
LoadedLibrary load_library(const LibrarySpec& spec,
                           std::initializer_list<SymbolSlot> symbols) noexcept;

// The file of the first of `spec`'s sonames that is already loaded in the process (by us or
// by anyone, e.g. torch), without loading anything; "" when none is. Microseconds, where
// loading a large library (NVRTC: ~100 MB) costs milliseconds: the jiterator identifies the
// compiler of cached kernels this way on a warm start.
std::string loaded_library_path(const LibrarySpec& spec) noexcept;

// For a library that is needed now but unavailable: NotSupportedError "<what>: <reason>".
[[noreturn]] void throw_library_unavailable(const LoadedLibrary& lib, const char* what);

// "major.minor.patch", for version hooks.
std::string version_string(int major, int minor, int patch);

}  // namespace cudakit::detail
