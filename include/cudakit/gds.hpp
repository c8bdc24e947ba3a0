// GPUDirect Storage (seed: torch.cuda.gds — is_available, gds_register_buffer,
// gds_deregister_buffer, GdsFile).
//
// Two I/O paths behind one API, chosen per file when its handle is registered:
//   * gds:    cuFile moves data by DMA between storage and device memory (cuFile loaded at run
//             time, its driver open, the nvidia-fs kernel driver present, and the file's file
//             system accepting cuFileHandleRegister);
//   * compat: cudakit's own engine — O_DIRECT where the file system allows it (buffered I/O
//             otherwise, and for pages already in the page cache), pinned staging buffers, and
//             several threads with their own copy streams pipelining read -> H2D and
//             D2H -> write. Same results, same errors.
// CUDAKIT_GDS selects: "auto" (default: gds where it works, else compat), "compat" (always
// compat), "gds" (gds or an error saying why not). The emulated backend has no cuFile, so it
// always takes the compat path. Tuning of the compat engine (read once, at first use):
// CUDAKIT_GDS_THREADS (I/O threads, default 8), CUDAKIT_GDS_CHUNK (bytes per transfer, "8M"
// default, K/M/G suffixes), CUDAKIT_GDS_DIRECT ("auto": O_DIRECT reads where allowed, except
// of pages already cached, and buffered writes; "always": O_DIRECT for both; "never").
//
// Synchronous calls (load/save: torch's load_storage/save_storage) return when every byte has
// moved, after the work already enqueued on the device's current stream (which may still be
// writing the tensor). Stream-ordered calls (read_into/write_from) start after the work already
// enqueued on the given stream, and later work there sees them: write_from (compat path)
// copies the bytes into pinned staging on that stream and returns at once (as much pinned
// memory as the transfer, from the pinned cache, each chunk given back once written);
// read_into, and both on the GDS path, return once the transfer is done (the stream itself is
// never blocked: the device-side gates tried hung on the H200, file.cpp says why). The returned IoRequest
// reports completion and errors. Stream capture of either is refused (file I/O runs on host
// threads).
//
// Thread-safety: File methods may be called from several threads at once; a transfer
// started before deregister_handle/close completes on the registration it started with.
// Transfers on overlapping file ranges or tensors are not ordered with each other (as for
// pread/pwrite). The buffer registry is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cudakit/export.hpp"
#include "cudakit/stream.hpp"
#include "cudakit/tensor.hpp"

namespace CUDAKIT_API cudakit {
namespace gds {

// True when GPUDirect Storage can move data by DMA here (never on the emulated backend).
// Never throws; probing loads cuFile and opens its driver once.
bool is_available() noexcept;
// Why is_available() is false ("" when it is true).
std::string unavailable_reason() noexcept;

enum class IoPath { gds, compat };
const char* io_path_name(IoPath path) noexcept;  // "gds" / "compat"

// The completion of a stream-ordered transfer. Copyable handle; thread-safe.
class IoRequest {
 public:
  IoRequest() = default;
  bool done() const;         // the transfer finished (successfully or not)
  std::size_t wait() const;  // blocks; returns the bytes moved or rethrows the transfer's error
  struct State;
  explicit IoRequest(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

class File {
 public:
  // Opens `path` with open(2) `flags` (O_RDONLY/O_WRONLY/O_RDWR, O_CREAT, O_TRUNC, O_EXCL;
  // O_DIRECT is added where the file system supports it) and `mode` for a created file, then
  // registers the handle. IoError (errno, path) when open fails; ValueError for O_APPEND
  // (transfers write at explicit offsets).
  File(const std::string& path, int flags, unsigned mode = 0644);
  // Deregisters and closes. Transfers in flight keep the descriptors (and the cuFile
  // registration) until they finish.
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // cuFileHandleRegister (gds), or the compat path with the reason. Error when already
  // registered or closed; NotSupportedError when CUDAKIT_GDS=gds and GDS cannot be used.
  void register_handle();
  void deregister_handle();  // Error when not registered
  bool is_registered() const noexcept;
  IoPath io_path() const;                   // Error when not registered
  const std::string& compat_reason() const noexcept;  // why compat ("" on the gds path)
  // The cuFile handle (gds) or the file descriptor (compat) as an integer; 0 when not registered.
  std::uintptr_t handle() const noexcept;
  int fd() const noexcept;  // the descriptor opened with the caller's flags
  const std::string& path() const noexcept;
  int flags() const noexcept;
  std::uint64_t size() const;  // current size in bytes (fstat)
  void close();  // deregisters (if registered) and closes, as ~File; idempotent

  // Reads `bytes` bytes at `offset` into device memory `dst` / writes them from `src`.
  // ValueError for host memory, a read past the end of the file (naming its size) or a file
  // opened for the other direction; IoError for a failing system call.
  void load(void* dst, std::size_t bytes, std::uint64_t offset = 0);
  void save(const void* src, std::size_t bytes, std::uint64_t offset = 0);
  // The tensor's bytes (a contiguous cuda tensor), as torch's load_storage / save_storage.
  void load(const Tensor& tensor, std::uint64_t offset = 0);
  void save(const Tensor& tensor, std::uint64_t offset = 0);

  // Stream-ordered (default: the current stream of the tensor's device); see the top of this
  // file for when each returns. The argument errors above are raised here, before anything
  // is enqueued.
  IoRequest read_into(const Tensor& tensor, std::uint64_t offset = 0,
                      std::optional<StreamRef> stream = std::nullopt);
  IoRequest write_from(const Tensor& tensor, std::uint64_t offset = 0,
                       std::optional<StreamRef> stream = std::nullopt);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Registers a contiguous cuda tensor's memory for GDS transfers (cuFileBufRegister on the gds
// path; bookkeeping only otherwise). The registry keeps the memory alive until deregistered.
// ValueError for host memory, an empty tensor, or memory already registered.
void register_buffer(const Tensor& tensor);
// ValueError when `tensor`'s memory was not registered.
void deregister_buffer(const Tensor& tensor);
// Whether the tensor's data pointer is registered.
bool is_buffer_registered(const Tensor& tensor);

}  // namespace gds
}  // namespace cudakit
