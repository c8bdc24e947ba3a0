// Optional run-time libraries: which ones the backend in use found, where, which version.
// The first thing to paste into a bug report (meant for `python -m cudakit info`).
//
// Thread-safety: optional_libraries() may be called from any thread; each library is probed
// once per process and the answer reused.
#pragma once

#include <string>
#include <vector>

#include "cudakit/export.hpp"

namespace CUDAKIT_API cudakit {

struct LibraryInfo {
  std::string name;     // "cuBLAS", "cuSOLVER", "NVML", "OpenBLAS" ...
  bool found = false;   // loaded and usable
  std::string soname;   // the name that loaded, e.g. "libcublas.so.13"
  std::string path;     // the file it resolved to
  std::string version;  // as the library reports it, "" if it cannot say
  std::string reason;   // why it is not usable, "" when found
};

// The libraries the backend in use loads at run time (cuda: NVML, cuBLAS, cuSOLVER, ...;
// emulated: the CBLAS it was built with). Probing loads each library once. Never throws for
// a missing library: that is reported in `reason`. Creates the backend if needed.
std::vector<LibraryInfo> optional_libraries();

}  // namespace cudakit
