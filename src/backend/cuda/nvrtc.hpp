// NVRTC, loaded at run time through the shared loader (library_loader.hpp), never linked: the
// jiterator's compiler on the cuda backend.
//
// Prototypes are declared from NVRTC's documented C ABI (nvrtc.h: nvrtcResult is a C enum,
// nvrtcProgram an opaque pointer), so building needs no NVRTC header.
//
// Targets: a device whose architecture NVRTC supports gets SASS for exactly that
// architecture (CUBIN: no driver JIT at load, no PTX-version coupling with the driver); a
// device newer than NVRTC gets PTX for the newest architecture NVRTC knows, which the driver
// compiles at load.
//
// Identity without loading: libnvrtc is ~100 MB and dlopen costs 10–20 ms warm (0.5 s cold),
// far over the 1 ms a warm start from the jiterator's disk cache may take. nvrtc_identity()
// therefore remembers, in a small file of a private state directory, which file the loader
// resolved NVRTC to and what that file reported (version, architectures), and trusts the
// record while the things that decide the resolution are unchanged: LD_LIBRARY_PATH,
// /etc/ld.so.cache, the file's size and mtime, and no other NVRTC already loaded in the
// process. Otherwise it loads NVRTC and rewrites the record.
//
// Thread-safety: nvrtc() loads once (function-local static) and returns an immutable table;
// NVRTC itself is thread-safe per program; nvrtc_identity() may race with another process
// writing the record (temporary file + rename: readers see a whole record or none).
#pragma once

#include <string>
#include <vector>

#include "backend/library_loader.hpp"

namespace cudakit::detail::cuda {

struct NvrtcApi {
  int (*nvrtcVersion)(int* major, int* minor) = nullptr;
  const char* (*nvrtcGetErrorString)(int result) = nullptr;
  int (*nvrtcCreateProgram)(void** prog, const char* src, const char* name, int num_headers,
                            const char* const* headers, const char* const* include_names) = nullptr;
  int (*nvrtcDestroyProgram)(void** prog) = nullptr;
  int (*nvrtcCompileProgram)(void* prog, int num_options, const char* const* options) = nullptr;
  int (*nvrtcGetProgramLogSize)(void* prog, std::size_t* size) = nullptr;
  int (*nvrtcGetProgramLog)(void* prog, char* log) = nullptr;
  int (*nvrtcGetPTXSize)(void* prog, std::size_t* size) = nullptr;
  int (*nvrtcGetPTX)(void* prog, char* ptx) = nullptr;
  int (*nvrtcGetCUBINSize)(void* prog, std::size_t* size) = nullptr;  // optional (11.1+)
  int (*nvrtcGetCUBIN)(void* prog, char* cubin) = nullptr;            // optional (11.1+)
  int (*nvrtcGetNumSupportedArchs)(int* n) = nullptr;                 // optional (11.2+)
  int (*nvrtcGetSupportedArchs)(int* archs) = nullptr;                // optional (11.2+)
};

struct Nvrtc {
  NvrtcApi api;
  LoadedLibrary lib;
  int major = 0, minor = 0;
  std::vector<int> archs;  // supported SM architectures, ascending (e.g. 75 ... 120)
};

// Loaded on first call; never throws (inspect lib.available()).
const Nvrtc& nvrtc() noexcept;

// What NVRTC produces for a device of architecture `arch` (major * 10 + minor).
struct NvrtcTarget {
  int arch = 0;       // the architecture compiled for
  bool cubin = true;  // SASS for exactly `arch`; else PTX for `arch`
};
// NotSupportedError when NVRTC knows no architecture at or below `device_arch`.
NvrtcTarget nvrtc_target(const std::vector<int>& archs, int device_arch);

struct NvrtcOutput {
  bool ok = false;
  std::vector<char> image;  // CUBIN, or NUL-terminated PTX
  std::string log;
};
// Compiles with NVRTC (loaded now if needed; NotSupportedError if unavailable).
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program, NvrtcTarget target);

// NVRTC's version, supported architectures and file identity (see the header comment).
struct NvrtcIdentity {
  std::string version;  // "13.0"
  std::vector<int> archs;
  std::string file;     // resolved path, size, mtime
};
// NotSupportedError when NVRTC cannot be loaded. `state_dir` "" never reads nor writes a
// record (NVRTC is loaded).
NvrtcIdentity nvrtc_identity(const std::string& state_dir);

}  // namespace cudakit::detail::cuda
