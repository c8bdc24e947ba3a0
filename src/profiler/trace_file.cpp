// Trace output files (trace_file.hpp).
#include "profiler/trace_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cudakit/error.hpp"

// CUDAKIT_HAVE_ZLIB is set for this file only (src/CMakeLists.txt), so finding zlib does
// not rebuild the library.
#if CUDAKIT_HAVE_ZLIB
#include <zlib.h>
#endif

namespace cudakit::profiler::detail {
namespace {

bool ends_with_gz(const std::string& p) {
  return p.size() > 3 && p.compare(p.size() - 3, 3, ".gz") == 0;
}

}  // namespace

TraceFile::TraceFile(const std::string& path, const char* what) : path_(path), what_(what) {
  if (path.empty()) {
    throw ValueError(std::string(what) + ": path is empty; pass a file name such as "
                     "'trace.json'");
  }
  if (ends_with_gz(path)) {
#if CUDAKIT_HAVE_ZLIB
    // Level 6, zlib's default: 1 GB of trace JSON compresses ~10x at ~60 MB/s per core,
    // level 1 was 25% larger for 2x the speed (docs/performance.md).
    gzFile gz = gzopen(path.c_str(), "wb6");
    if (gz == nullptr) {
      throw Error(std::string(what) + ": cannot open '" + path + "' for writing: " +
                  std::strerror(errno ? errno : EIO) +
                  " (check that the directory exists and is writable)");
    }
    gzbuffer(gz, 1 << 20);
    gz_ = gz;
    return;
#else
    throw NotSupportedError(std::string(what) + ": '" + path + "' asks for gzip, but cudakit "
                            "was built without zlib; write the plain file (drop '.gz') or "
                            "rebuild with zlib's development files installed");
#endif
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    throw Error(std::string(what) + ": cannot open '" + path + "' for writing: " +
                std::strerror(errno) + " (check that the directory exists and is writable)");
  }
  file_ = f;
}

TraceFile::~TraceFile() {
  try {
    if (file_ || gz_) close();
  } catch (...) {  // destructors never throw: the caller that wanted the error used close()
  }
}

void TraceFile::write(const char* data, std::size_t n) noexcept {
  if (failed_ || n == 0) return;
#if CUDAKIT_HAVE_ZLIB
  if (gz_) {
    while (n > 0) {  // gzwrite takes an unsigned count
      const unsigned chunk = n > (1u << 30) ? (1u << 30) : static_cast<unsigned>(n);
      if (gzwrite(static_cast<gzFile>(gz_), data, chunk) != static_cast<int>(chunk)) {
        failed_ = true;
        err_ = errno;
        return;
      }
      data += chunk;
      n -= chunk;
    }
    return;
  }
#endif
  if (std::fwrite(data, 1, n, static_cast<std::FILE*>(file_)) != n) {
    failed_ = true;
    err_ = errno;
  }
}

void TraceFile::close() {
  bool close_failed = false;
#if CUDAKIT_HAVE_ZLIB
  if (gz_) {
    close_failed = gzclose(static_cast<gzFile>(gz_)) != Z_OK;
    gz_ = nullptr;
  }
#endif
  if (file_) {
    close_failed = std::fclose(static_cast<std::FILE*>(file_)) != 0;
    file_ = nullptr;
  }
  if (close_failed && !failed_) {
    failed_ = true;
    err_ = errno;
  }
  if (failed_) {
    failed_ = false;  // reported once
    throw Error(std::string(what_) + ": writing '" + path_ + "' failed: " +
                std::strerror(err_ ? err_ : EIO) + " (is the disk full?)");
  }
}

}  // namespace cudakit::profiler::detail
