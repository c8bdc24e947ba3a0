// The transfer engine (see engine.hpp).
#include "gds/engine.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "backend/device_ops.hpp"
#include "backend/gds_ops.hpp"
#include "backend/lifetime.hpp"
#include "backend/memory_ops.hpp"
#include "backend/stream_ops.hpp"
#include "cudakit/allocation.hpp"
#include "cudakit/error.hpp"

namespace cudakit::gds::io {
namespace {

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

[[noreturn]] void throw_errno(int err, const std::string& path, const std::string& what) {
  throw IoError(err, path, what + " '" + path + "': " + std::strerror(err));
}

// ---- jobs and chunks ----

struct Job {
  Transfer t;
  Event ready;  // recorded on the caller's stream: chunks' device work waits for it
  std::atomic<bool> ready_seen{false};  // `ready` completed (sticky once true)
  std::atomic<std::size_t> remaining{0};
  std::mutex error_mu;
  std::exception_ptr error;
  std::shared_ptr<IoRequest::State> state;

  void fail(std::exception_ptr e) {
    std::lock_guard lock(error_mu);
    if (!error) error = std::move(e);
  }
};

struct Chunk {
  std::shared_ptr<Job> job;
  std::uint64_t file_offset = 0;
  std::size_t bytes = 0;
  // A staged write's bytes, copied there on the caller's stream before `ready` (submit()).
  std::shared_ptr<Allocation> staging;
  char* device_ptr() const {
    return job->t.device_ptr + (file_offset - job->t.file_offset);
  }
};

void complete(const Chunk& c) {
  Job& job = *c.job;
  if (job.remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::exception_ptr error;
  {
    std::lock_guard lock(job.error_mu);
    error = job.error;
  }
  auto state = job.state;
  std::size_t bytes = error ? 0 : job.t.bytes;
  // The job's last owners (tensor storage, descriptors) go with the chunk; the state outlives
  // it in the caller's IoRequest.
  state->finish(bytes, error);
}

// ---- host I/O ----

bool mostly_cached(int fd, std::uint64_t offset, std::size_t bytes) {
  // Offsets here are block-aligned, hence page-aligned for 4 KiB pages.
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return false;
  thread_local std::vector<unsigned char> pages;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  pages.resize((bytes + page - 1) / page);
  std::size_t resident = 0;
  if (::mincore(p, bytes, pages.data()) == 0) {
    for (unsigned char v : pages) resident += v & 1;
  }
  ::munmap(p, bytes);
  return resident * 2 >= pages.size();
}

// Reads exactly `bytes` at `offset` (fewer only if the file ends first: an error for us, the
// size was checked when the transfer was submitted).
void read_chunk(const FileDescriptors& f, DirectPolicy policy, char* buf, bool buf_aligned,
                std::uint64_t offset, std::size_t bytes) {
  bool direct = f.direct >= 0 && buf_aligned && offset % kBlock == 0 &&
                policy != DirectPolicy::never;
  if (direct && policy == DirectPolicy::automatic && mostly_cached(f.buffered, offset, bytes)) {
    direct = false;
  }
  std::size_t got = 0;
  while (got < bytes) {
    const int fd = direct ? f.direct : f.buffered;
    // O_DIRECT reads whole blocks: the last one may run past the end of the file, which
    // simply returns fewer bytes.
    std::size_t want = direct ? round_up(bytes - got, kBlock) : bytes - got;
    ssize_t r = ::pread(fd, buf + got, want, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (direct && errno == EINVAL) {  // the file system refused this O_DIRECT request
        direct = false;
        continue;
      }
      throw_errno(errno, f.path, "GdsFile: reading");
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
    if (direct && (static_cast<std::size_t>(r) % kBlock) != 0) break;  // end of file
  }
  if (got < bytes) {
    throw Error("GdsFile: '" + f.path + "' ended at byte " + std::to_string(offset + got) +
                " while reading up to byte " + std::to_string(offset + bytes) +
                " (was it truncated during the transfer?)");
  }
}

void write_chunk(const FileDescriptors& f, DirectPolicy policy, const char* buf,
                 bool buf_aligned, std::uint64_t offset, std::size_t bytes) {
  // Writes use O_DIRECT only when asked to ("always"): buffered writes return at memory
  // speed into the page cache (as the plain path and torch.save do; durability is fsync's
  // job), while O_DIRECT ones run at the device's speed, slower than that on network or
  // cloud disks.
  bool direct = f.direct >= 0 && buf_aligned && offset % kBlock == 0 &&
                bytes % kBlock == 0 && policy == DirectPolicy::always;
  std::size_t done = 0;
  while (done < bytes) {
    const int fd = direct ? f.direct : f.buffered;
    ssize_t r = ::pwrite(fd, buf + done, bytes - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (direct && errno == EINVAL) {
        direct = false;
        continue;
      }
      throw_errno(errno, f.path, "GdsFile: writing");
    }
    done += static_cast<std::size_t>(r);
    // A short O_DIRECT write leaves an unaligned remainder: finish it buffered.
    if (direct && (done % kBlock) != 0) direct = false;
  }
}

// ---- the pool ----

class Engine {
 public:
  explicit Engine(EngineConfig config) : config_(config) {
    for (int i = 0; i < config_.threads; ++i) {
      // Detached: never joined at exit; once exit has begun they make no device calls.
      std::thread([this] { worker(); }).detach();
    }
  }
  const EngineConfig& config() const noexcept { return config_; }

  void push(std::vector<Chunk> chunks) {
    {
      std::lock_guard lock(mu_);
      for (auto& c : chunks) queue_.push_back(std::move(c));
    }
    cv_.notify_all();
  }

 private:
  struct Slot {
    char* buffer = nullptr;
    bool aligned = false;
    std::array<detail::EventHandle, kMaxDevices> events{};
  };
  struct Worker {
    std::array<Slot, 2> slots;
    std::array<detail::StreamHandle, kMaxDevices> streams{};
  };
  struct InFlight {
    Chunk chunk;
    int slot = 0;
  };

  // Whether the work before the transfer on the caller's stream is done. Never throws: a
  // failing query (a sticky device error) lets the chunk run and report that error.
  static bool is_ready(Job& job) {
    if (job.ready_seen.load(std::memory_order_acquire)) return true;
    bool done = true;
    try {
      done = job.ready.is_done();
    } catch (...) {
    }
    if (done) job.ready_seen.store(true, std::memory_order_release);
    return done;
  }

  // The first queued chunk whose transfer is ready, in FIFO order. A chunk is started only
  // once the caller's stream reached the transfer, so a worker never blocks on a copy that
  // waits for the device: such a wait could hang behind another transfer's stream gate (a
  // host task, which on cuda shares the driver's callback thread with every other host task)
  // while that transfer's chunks sit in the queue behind this one.
  std::optional<Chunk> pop(bool block) {
    std::unique_lock lock(mu_);
    for (;;) {
      const Job* not_ready = nullptr;
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if (it->job.get() == not_ready) continue;  // a job's chunks are contiguous
        if (!is_ready(*it->job)) {
          not_ready = it->job.get();
          continue;
        }
        Chunk c = std::move(*it);
        queue_.erase(it);
        return c;
      }
      if (!block) return std::nullopt;
      if (queue_.empty()) {
        cv_.wait(lock);
      } else {
        cv_.wait_for(lock, std::chrono::milliseconds(1));  // poll the streams of queued work
      }
    }
  }

  void prepare(Worker& w, Slot& s, int device) {
    auto& memory = detail::memory_ops();
    auto& devices = detail::device_ops();
    auto& streams = detail::stream_ops();
    if (!s.buffer) {
      void* p = memory.host_alloc_pinned(config_.chunk_bytes);
      if (!p) {
        throw OutOfMemoryError("GdsFile: cannot allocate a pinned staging buffer of " +
                                   std::to_string(config_.chunk_bytes) +
                                   " bytes (lower CUDAKIT_GDS_CHUNK or CUDAKIT_GDS_THREADS)",
                               -1, config_.chunk_bytes);
      }
      s.buffer = static_cast<char*>(p);
      s.aligned = reinterpret_cast<std::uintptr_t>(p) % kBlock == 0;
    }
    if (devices.current_device() != device) devices.set_current_device(device);
    if (!w.streams[device]) {
      w.streams[device] = streams.stream_create(device, 0, detail::kStreamNonBlocking);
    }
    if (!s.events[device]) s.events[device] = streams.event_create(device, detail::kEventDisableTiming);
  }

  // Host I/O of a read, or the D2H copy of a write; the chunk's copy is enqueued on return.
  void start(Worker& w, InFlight& f) {
    const Transfer& t = f.chunk.job->t;
    Slot& s = w.slots[f.slot];
    auto& memory = detail::memory_ops();
    auto& streams = detail::stream_ops();
    if (t.gds || f.chunk.staging) return;  // all their work is in finish()
    prepare(w, s, t.device);
    detail::StreamHandle stream = w.streams[t.device];
    if (t.read) {
      read_chunk(*t.files, config_.direct, s.buffer, s.aligned, f.chunk.file_offset,
                 f.chunk.bytes);
      f.chunk.job->ready.wait(StreamRef::from_handle(stream, t.device));
      memory.memcpy_async(f.chunk.device_ptr(), s.buffer, f.chunk.bytes, stream);
    } else {
      f.chunk.job->ready.wait(StreamRef::from_handle(stream, t.device));
      memory.memcpy_async(s.buffer, f.chunk.device_ptr(), f.chunk.bytes, stream);
    }
    streams.event_record(s.events[t.device], stream);
  }

  // Waits for the chunk's copy (and writes it out), or runs a cuFile call.
  void finish(Worker& w, InFlight& f) {
    const Transfer& t = f.chunk.job->t;
    auto& streams = detail::stream_ops();
    auto& devices = detail::device_ops();
    auto& cufile = detail::gds_ops();
    if (f.chunk.staging) {  // its copy finished before `ready`, which pop() waited for
      char* p = static_cast<char*>(f.chunk.staging->get());
      write_chunk(*t.files, config_.direct, p, reinterpret_cast<std::uintptr_t>(p) % kBlock == 0,
                  f.chunk.file_offset, f.chunk.bytes);
      f.chunk.staging.reset();
      return;
    }
    if (t.gds) {
      // Not Event::sync(): this is no synchronizing call of the user's (sync-debug mode).
      if (f.chunk.job->ready.is_created()) streams.event_synchronize(f.chunk.job->ready.handle());
      if (devices.current_device() != t.device) devices.set_current_device(t.device);
      std::size_t moved =
          t.read ? cufile.gds_read(t.gds->handle, f.chunk.device_ptr(), f.chunk.bytes,
                               static_cast<std::int64_t>(f.chunk.file_offset))
                 : cufile.gds_write(t.gds->handle, f.chunk.device_ptr(), f.chunk.bytes,
                                static_cast<std::int64_t>(f.chunk.file_offset));
      if (moved != f.chunk.bytes) {
        throw Error(std::string(t.read ? "cuFileRead" : "cuFileWrite") + " moved " +
                    std::to_string(moved) + " of " + std::to_string(f.chunk.bytes) +
                    " bytes at offset " + std::to_string(f.chunk.file_offset) + " of '" +
                    t.files->path + "'");
      }
      return;
    }
    Slot& s = w.slots[f.slot];
    streams.event_synchronize(s.events[t.device]);
    if (!t.read) {
      write_chunk(*t.files, config_.direct, s.buffer, s.aligned, f.chunk.file_offset,
                  f.chunk.bytes);
    }
  }

  // After a failure the slot's copy may still be running: wait for it before the buffer is
  // reused. Errors here are the same sticky error already recorded.
  void drain(Worker& w, const InFlight& f) {
    const Transfer& t = f.chunk.job->t;
    if (t.gds || !w.streams[t.device]) return;
    try {
      detail::stream_ops().stream_synchronize(w.streams[t.device]);
    } catch (...) {
    }
  }

  void worker() {
    Worker w;
    std::optional<InFlight> pending;
    for (;;) {
      std::optional<Chunk> next = pop(/*block=*/!pending);
      std::optional<InFlight> started;
      if (next && !detail::is_shutting_down()) {
        started = InFlight{std::move(*next), pending ? 1 - pending->slot : 0};
        try {
          start(w, *started);
        } catch (...) {
          started->chunk.job->fail(std::current_exception());
          drain(w, *started);
          complete(started->chunk);
          started.reset();
        }
      } else if (next) {
        complete(*next);  // exit has begun: report without touching the device
      }
      if (pending && detail::is_shutting_down()) {
        complete(pending->chunk);  // no device calls once exit has begun
      } else if (pending) {
        try {
          finish(w, *pending);
        } catch (...) {
          pending->chunk.job->fail(std::current_exception());
          drain(w, *pending);
        }
        complete(pending->chunk);
      }
      pending = std::move(started);
    }
  }

  EngineConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
};

Engine& engine() {
  static Engine* e = new Engine(parse_engine_config(std::getenv("CUDAKIT_GDS_THREADS"),
                                                    std::getenv("CUDAKIT_GDS_CHUNK"),
                                                    std::getenv("CUDAKIT_GDS_DIRECT")));
  return *e;  // leaked: its threads run until exit
}

}  // namespace

GdsRegistration::~GdsRegistration() {
  if (!handle || detail::is_shutting_down()) return;
  try {
    detail::gds_ops().gds_file_deregister(handle);
  } catch (...) {  // destructors never throw
  }
}

FileDescriptors::~FileDescriptors() {
  if (direct >= 0) ::close(direct);
  if (buffered >= 0) ::close(buffered);
}

std::size_t parse_bytes(const char* text, const char* variable) {
  std::string s = text ? text : "";
  auto bad = [&]() -> std::size_t {
    throw ValueError(std::string(variable) + "='" + s +
                     "' is not a byte count: use e.g. 8388608, 512K, 8M or 1G");
  };
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) bad();
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno == ERANGE) bad();
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (unit == "K" || unit == "KB" || unit == "KIB") shift = 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") shift = 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") shift = 30;
  else if (!unit.empty() && unit != "B") bad();
  if (shift && v > (~0ull >> shift)) bad();
  return static_cast<std::size_t>(v << shift);
}

EngineConfig parse_engine_config(const char* threads, const char* chunk, const char* direct) {
  EngineConfig c;
  if (threads && *threads) {
    char* end = nullptr;
    long n = std::strtol(threads, &end, 10);
    if (*end != '\0' || n < 1 || n > 256) {
      throw ValueError(std::string("CUDAKIT_GDS_THREADS='") + threads +
                       "' is not a thread count: use an integer from 1 to 256");
    }
    c.threads = static_cast<int>(n);
  }
  if (chunk && *chunk) {
    std::size_t n = parse_bytes(chunk, "CUDAKIT_GDS_CHUNK");
    if (n < kBlock || n > (std::size_t{1} << 30)) {
      throw ValueError(std::string("CUDAKIT_GDS_CHUNK='") + chunk +
                       "' is out of range: use 4K to 1G");
    }
    c.chunk_bytes = round_up(n, kBlock);
  }
  if (direct && *direct) {
    std::string d = direct;
    if (d == "auto") c.direct = DirectPolicy::automatic;
    else if (d == "always") c.direct = DirectPolicy::always;
    else if (d == "never") c.direct = DirectPolicy::never;
    else {
      throw ValueError("CUDAKIT_GDS_DIRECT='" + d + "' is not one of 'auto', 'always', 'never'");
    }
  }
  return c;
}

std::shared_ptr<IoRequest::State> submit(Transfer t, StreamRef stream, bool stage) {
  auto state = std::make_shared<IoRequest::State>();
  if (t.bytes == 0) {
    state->finish(0, nullptr);
    return state;
  }
  Engine& e = engine();
  auto job = std::make_shared<Job>();
  job->t = std::move(t);
  job->state = state;
  // Chunk boundaries at multiples of the chunk size in the file, so every chunk but the
  // first starts block-aligned whatever the transfer's offset.
  const std::size_t size = e.config().chunk_bytes;
  std::vector<Chunk> chunks;
  const std::uint64_t end = job->t.file_offset + job->t.bytes;
  for (std::uint64_t at = job->t.file_offset; at < end;) {
    std::uint64_t next = std::min<std::uint64_t>(end, (at / size + 1) * size);
    chunks.push_back(Chunk{job, at, static_cast<std::size_t>(next - at), nullptr});
    at = next;
  }
  if (stage) {
    // Every staging buffer first (an out-of-memory error then leaves nothing enqueued), then
    // the copies on the caller's stream: later work there cannot overtake them.
    for (Chunk& c : chunks) {
      c.staging = std::make_shared<Allocation>(allocate_host(c.bytes, /*pinned=*/true));
    }
    auto& memory = detail::memory_ops();
    auto& streams = detail::stream_ops();
    try {
      for (const Chunk& c : chunks) {
        memory.memcpy_async(c.staging->get(), c.device_ptr(), c.bytes, stream.handle());
      }
    } catch (...) {
      try {  // copies already enqueued must finish before their buffers go back to the cache
        streams.stream_synchronize(stream.handle());
      } catch (...) {
      }
      throw;
    }
  }
  job->ready.record(stream);  // after the staging copies, when there are any
  job->remaining.store(chunks.size(), std::memory_order_release);
  e.push(std::move(chunks));
  return state;
}

}  // namespace cudakit::gds::io
