// From generated source to a launchable function: the in-memory and disk caches in front of
// the backend's runtime compiler (backend.hpp, "runtime-compiled modules").
//
// Key of an image: a format tag, the backend's compiler id for the device (compiler and
// version, target architecture, driver / host flags) and the full generated source (which
// holds the user's code and every specialisation choice). Devices of one architecture share
// the image; each device loads its own module.
//
// Thread-safety: everything here is thread-safe. One image is compiled (or read from disk)
// once per process: concurrent callers for the same key wait for the first (call_once; a
// failed compile leaves the key uncompiled, so a later call retries and reports again).
// Each (image, device) is loaded once.
#pragma once

#include <string>

#include "backend/types.hpp"
#include "cudakit/jiterator.hpp"

namespace cudakit::jit {

struct KernelRequest {
  const std::string& source;
  const std::string& symbol;     // function to resolve in the module
  const std::string& name;       // the user's entry function (messages, program name)
  const std::string& user_code;  // the code string (quoted in compile errors)
};

// CompileError when the compiler rejects the source; NotSupportedError when there is none.
detail::FunctionHandle get_kernel(int device, const KernelRequest& request);

// Counters behind jiterator::cache_stats().
jiterator::CacheStats stats() noexcept;

}  // namespace cudakit::jit
