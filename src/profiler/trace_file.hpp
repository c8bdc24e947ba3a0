// An output file of a trace export: plain, or gzip-compressed when the name ends in ".gz"
// (zlib, streamed: the JSON of a 1 GB trace is never held in memory to compress it). Errors
// name the path, the operation and the system's reason; the file is complete only once
// close() returned.
#pragma once

#include <cstddef>
#include <string>

namespace cudakit::profiler::detail {

class TraceFile {
 public:
  // `what` names the export in errors ("export_chrome_trace"). Throws ValueError for an
  // empty path, Error when the file cannot be opened, NotSupportedError for ".gz" in a build
  // without zlib.
  TraceFile(const std::string& path, const char* what);
  ~TraceFile();  // closes (errors ignored) if close() was not called
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // Buffers `n` bytes; a failure is remembered and reported by close().
  void write(const char* data, std::size_t n) noexcept;
  void close();  // throws Error when any write or the close failed
  bool compressed() const noexcept { return gz_ != nullptr; }

 private:
  std::string path_;
  const char* what_;
  void* file_ = nullptr;  // std::FILE*
  void* gz_ = nullptr;    // gzFile
  int err_ = 0;           // first errno seen (0: none)
  bool failed_ = false;
};

}  // namespace cudakit::profiler::detail
