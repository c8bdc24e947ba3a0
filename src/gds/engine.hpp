// The transfer engine behind cudakit::gds::File: a process-wide pool of I/O threads that
// moves a transfer in chunks, on both paths.
//
// Compat path (no usable cuFile). Each thread owns two pinned staging buffers and, per device,
// a non-blocking copy stream. A read chunk is pread() into a buffer, then copied H2D on the
// thread's stream; a write chunk is copied D2H, then pwrite()n. A thread starts its next chunk
// before it waits for the previous chunk's copy, so disk I/O and copies overlap within a
// thread, and the threads' chunks overlap with each other (queue depth = threads).
//   * Reads: O_DIRECT for block-aligned chunks on file systems that accept it, buffered for
//     an unaligned head. Chunks already in the page cache (mincore) are read buffered: a
//     memcpy out of the cache beats re-reading the disk, which is what O_DIRECT would do.
//   * Writes: buffered by default (into the page cache, at memory speed, as the plain path
//     and torch.save); CUDAKIT_GDS_DIRECT=always writes aligned chunks with O_DIRECT (no
//     page-cache pollution, device speed), which the benchmark reports side by side.
//   * Measured on the H200 host: see docs/performance.md (bench/gds/bench_gds.py).
// GDS path (cuFile). The same chunks, each a cuFileRead/cuFileWrite on a pool thread, so
// cuFile sees parallel requests.
//
// Ordering: every chunk's device work waits (device-side) for `ready`, an event recorded on
// the caller's stream, so a transfer never overtakes work enqueued before it; and a worker
// takes a chunk only once `ready` has completed (queued chunks are polled), so it never blocks
// on the device while other transfers' chunks wait (see pop()). Completion is reported
// through the IoRequest state once all chunks' copies have finished.
//
// Rejected: one thread per transfer with double buffering (1 GiB loads from the page cache
// are memcpy-bound: one thread tops out near 5 GiB/s), and io_uring (not in every kernel
// and container; the thread pool reaches the disk's queue depth anyway).
//
// Thread-safety: submit() is thread-safe; the engine is created on first use and never
// destroyed (its threads are detached and make no device calls once exit has begun).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/types.hpp"
#include "cudakit/gds.hpp"
#include "gds/request.hpp"

namespace cudakit::gds::io {

enum class DirectPolicy { automatic, always, never };

struct EngineConfig {
  int threads = 8;
  std::size_t chunk_bytes = std::size_t{8} << 20;
  DirectPolicy direct = DirectPolicy::automatic;
};

// Parses CUDAKIT_GDS_THREADS / _CHUNK / _DIRECT (nullptr or "" = default). ValueError naming
// the variable on bad input. The chunk size is rounded up to a multiple of kBlock.
EngineConfig parse_engine_config(const char* threads, const char* chunk, const char* direct);
// "8388608", "512K", "8M", "1G" (binary units). ValueError naming `variable`.
std::size_t parse_bytes(const char* text, const char* variable);

// O_DIRECT alignment we use for offsets, lengths and buffers (the largest logical block size
// of common devices; 512-byte-sector devices accept it too).
inline constexpr std::size_t kBlock = 4096;

// The descriptors of an open file, shared by the File and its transfers in flight (closed by
// the last owner). `direct`: opened with O_DIRECT (-1 when the file system refuses it);
// `buffered`: the same file without O_DIRECT.
struct FileDescriptors {
  int direct = -1;
  int buffered = -1;
  std::string path;
  ~FileDescriptors();
};

// A file's cuFile registration, shared by the File and its transfers in flight:
// cuFileHandleDeregister runs when the last of them lets go, never under a running transfer.
struct GdsRegistration {
  detail::GdsFileHandle handle = nullptr;
  ~GdsRegistration();
};

struct Transfer {
  bool read = true;
  int device = 0;
  char* device_ptr = nullptr;  // device memory: destination of reads, source of writes
  std::uint64_t file_offset = 0;
  std::size_t bytes = 0;
  std::shared_ptr<const FileDescriptors> files;
  std::shared_ptr<const GdsRegistration> gds;  // non-null: the GDS path
  std::shared_ptr<const void> keep_alive;  // the tensor's storage
};

// Enqueues `t` after the work already on `stream` and returns its completion state.
// `stage` (only for writes on the compat path): the bytes are copied on `stream` into pinned staging buffers
// at the call, so later work on the stream may change the tensor at once; the engine's
// threads then only write the file. Nothing on the device ever waits for the host.
std::shared_ptr<IoRequest::State> submit(Transfer t, StreamRef stream, bool stage);

}  // namespace cudakit::gds::io
