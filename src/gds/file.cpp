// gds::File: opening, handle registration (choice of the gds or compat path), argument
// checks, and transfers through the engine (engine.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>

#include "backend/gds_ops.hpp"
#include "backend/graph_ops.hpp"
#include "backend/memory_ops.hpp"
#include "cudakit/error.hpp"
#include "cudakit/gds.hpp"
#include "devices/sync_debug.hpp"
#include "gds/engine.hpp"
#include "gds/policy.hpp"

namespace cudakit::gds {

// ---- IoRequest ----

bool IoRequest::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

std::size_t IoRequest::wait() const {
  if (!state_) return 0;
  state_->wait_quietly();
  if (state_->error) std::rethrow_exception(state_->error);
  return state_->bytes;
}

// ---- File ----

struct File::Impl {
  std::string path;
  int flags = 0;
  std::shared_ptr<io::FileDescriptors> files;  // null once closed
  mutable std::mutex mu;                       // registration state
  bool registered = false;
  IoPath io = IoPath::compat;
  std::string compat_reason;
  std::shared_ptr<io::GdsRegistration> gds;  // the gds path; transfers share it

  int primary_fd() const {
    if (!files) return -1;
    return files->direct >= 0 ? files->direct : files->buffered;
  }

  void deregister_locked() {
    gds.reset();  // cuFileHandleDeregister once the transfers in flight are done
    registered = false;
    compat_reason.clear();
  }
};

namespace {

[[noreturn]] void throw_errno(int err, const std::string& path, const std::string& what) {
  throw IoError(err, path, what + " '" + path + "': " + std::strerror(err));
}

// Opens `path` twice: with O_DIRECT (when the file system accepts it) and without.
std::shared_ptr<io::FileDescriptors> open_files(const std::string& path, int flags,
                                                unsigned mode) {
  auto f = std::make_shared<io::FileDescriptors>();
  f->path = path;
  const int base = (flags & ~O_DIRECT) | O_CLOEXEC;
  int fd = ::open(path.c_str(), base | O_DIRECT, static_cast<mode_t>(mode));
  if (fd < 0 && errno == EINVAL) {  // no O_DIRECT on this file system (tmpfs, some FUSE)
    fd = ::open(path.c_str(), base, static_cast<mode_t>(mode));
    if (fd < 0) throw_errno(errno, path, "GdsFile: cannot open");
    f->buffered = fd;
  } else if (fd < 0) {
    throw_errno(errno, path, "GdsFile: cannot open");
  } else {
    f->direct = fd;
    // The same file again without O_DIRECT (flags are per open file description, so a dup
    // would share O_DIRECT). Through /proc/self/fd so a rename in between cannot matter;
    // creation flags were honoured by the first open.
    const int reopen = base & ~(O_CREAT | O_EXCL | O_TRUNC);
    std::string self = "/proc/self/fd/" + std::to_string(fd);
    int b = ::open(self.c_str(), reopen);
    if (b < 0) b = ::open(path.c_str(), reopen);
    if (b < 0) {  // no second descriptor: give up O_DIRECT on the first
      int fl = ::fcntl(fd, F_GETFL);
      if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0) {
        throw_errno(errno, path, "GdsFile: cannot reopen without O_DIRECT");
      }
      f->direct = -1;
      b = fd;
    }
    f->buffered = b;
  }
  struct stat st {};
  if (::fstat(f->buffered, &st) != 0) throw_errno(errno, path, "GdsFile: cannot stat");
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    throw ValueError("GdsFile: '" + path + "' is not a regular file or block device");
  }
  return f;
}

std::string access_name(int flags) {
  switch (flags & O_ACCMODE) {
    case O_RDONLY: return "O_RDONLY";
    case O_WRONLY: return "O_WRONLY";
    default: return "O_RDWR";
  }
}

}  // namespace

File::File(const std::string& path, int flags, unsigned mode) : impl_(std::make_shared<Impl>()) {
  if (flags & O_APPEND) {
    throw ValueError("GdsFile('" + path + "'): O_APPEND is not supported (save_storage writes "
                     "at explicit offsets); open without it");
  }
  impl_->path = path;
  impl_->flags = flags;
  impl_->files = open_files(path, flags, mode);
  register_handle();
}

File::~File() {
  try {
    close();
  } catch (...) {
  }
}

void File::register_handle() {
  std::lock_guard lock(impl_->mu);
  if (!impl_->files) throw Error("GdsFile.register_handle: '" + impl_->path + "' is closed");
  if (impl_->registered) {
    throw Error("GdsFile.register_handle: cannot register a handle that is already registered");
  }
  const Policy policy = policy_from_env();
  auto& be = detail::gds_ops();
  std::string why;
  if (policy != Policy::compat) {
    detail::GdsStatus status = be.gds_status();
    if (status.available) {
      if (detail::GdsFileHandle h = be.gds_file_register(impl_->primary_fd(), &why)) {
        impl_->gds = std::make_shared<io::GdsRegistration>();
        impl_->gds->handle = h;
      }
    } else {
      why = status.reason;
    }
    if (!impl_->gds && policy == Policy::gds) {
      throw NotSupportedError("GdsFile.register_handle: CUDAKIT_GDS=gds but GPUDirect Storage "
                              "cannot be used for '" + impl_->path + "': " + why);
    }
  } else {
    why = "CUDAKIT_GDS=compat";
  }
  impl_->io = impl_->gds ? IoPath::gds : IoPath::compat;
  impl_->compat_reason = impl_->gds ? "" : why;
  impl_->registered = true;
}

void File::deregister_handle() {
  std::lock_guard lock(impl_->mu);
  if (!impl_->registered) {
    throw Error("GdsFile.deregister_handle: cannot deregister a handle that is not registered");
  }
  impl_->deregister_locked();
}

bool File::is_registered() const noexcept {
  std::lock_guard lock(impl_->mu);
  return impl_->registered;
}

IoPath File::io_path() const {
  std::lock_guard lock(impl_->mu);
  if (!impl_->registered) throw Error("GdsFile: the handle is not registered");
  return impl_->io;
}

const std::string& File::compat_reason() const noexcept { return impl_->compat_reason; }

std::uintptr_t File::handle() const noexcept {
  std::lock_guard lock(impl_->mu);
  if (!impl_->registered) return 0;
  if (impl_->gds) return reinterpret_cast<std::uintptr_t>(impl_->gds->handle);
  return static_cast<std::uintptr_t>(impl_->primary_fd());
}

int File::fd() const noexcept {
  std::lock_guard lock(impl_->mu);
  return impl_->primary_fd();
}

const std::string& File::path() const noexcept { return impl_->path; }
int File::flags() const noexcept { return impl_->flags; }

std::uint64_t File::size() const {
  std::shared_ptr<io::FileDescriptors> f;
  {
    std::lock_guard lock(impl_->mu);
    f = impl_->files;
  }
  if (!f) throw Error("GdsFile.size: '" + impl_->path + "' is closed");
  struct stat st {};
  if (::fstat(f->buffered, &st) != 0) throw_errno(errno, impl_->path, "GdsFile: cannot stat");
  return static_cast<std::uint64_t>(st.st_size);
}

void File::close() {
  std::lock_guard lock(impl_->mu);
  if (impl_->registered) impl_->deregister_locked();
  impl_->files.reset();  // descriptors close when the last transfer using them ends
}

// ---- transfers ----

namespace {

struct Checked {
  io::Transfer transfer;
  StreamRef stream = StreamRef::default_for(0);
};

Checked check_transfer(File::Impl& impl, bool read, void* ptr, std::size_t bytes,
                       std::uint64_t offset, const char* what,
                       std::optional<StreamRef> stream, std::shared_ptr<const void> keep) {
  // Before anything else: in a child forked after initialisation this raises, where the
  // engine's threads (which do not survive fork) would otherwise never run the transfer.
  detail::ensure_initialized();
  Checked c;
  io::Transfer& t = c.transfer;
  std::uint64_t file_size = 0;
  {
    std::lock_guard lock(impl.mu);
    if (!impl.files) throw Error(std::string(what) + ": '" + impl.path + "' is closed");
    if (!impl.registered) {
      throw Error(std::string(what) + ": cannot " + (read ? "load data from" : "save data to") +
                  " a file that is not registered (call register_handle())");
    }
    t.files = impl.files;
    t.gds = impl.gds;
  }
  const int access = impl.flags & O_ACCMODE;
  if (read && access == O_WRONLY) {
    throw ValueError(std::string(what) + ": '" + impl.path + "' was opened " +
                     access_name(impl.flags) + ": open it with O_RDONLY or O_RDWR to read");
  }
  if (!read && access == O_RDONLY) {
    throw ValueError(std::string(what) + ": '" + impl.path + "' was opened " +
                     access_name(impl.flags) + ": open it with O_WRONLY or O_RDWR to write");
  }
  constexpr auto kMaxOffset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
  if (offset > kMaxOffset || bytes > kMaxOffset - offset) {
    throw ValueError(std::string(what) + ": offset " + std::to_string(offset) + " + " +
                     std::to_string(bytes) + " bytes is past the largest file offset");
  }
  if (bytes > 0) {
    const int device = detail::memory_ops().pointer_device(ptr);
    if (device < 0) {
      throw ValueError(std::string(what) + ": the buffer is host memory; GdsFile moves data to "
                       "and from device (cuda) memory");
    }
    t.device = device;
  } else {
    t.device = current_device();
  }
  if (read) {
    struct stat st {};
    if (::fstat(t.files->buffered, &st) != 0) throw_errno(errno, impl.path, "GdsFile: cannot stat");
    file_size = static_cast<std::uint64_t>(st.st_size);
    if (offset + bytes > file_size) {
      throw ValueError(std::string(what) + ": reading " + std::to_string(bytes) +
                       " bytes at offset " + std::to_string(offset) + " needs " +
                       std::to_string(offset + bytes) + " bytes, but '" + impl.path +
                       "' has " + std::to_string(file_size));
    }
  }
  t.read = read;
  t.device_ptr = static_cast<char*>(ptr);
  t.file_offset = offset;
  t.bytes = bytes;
  t.keep_alive = std::move(keep);
  c.stream = stream ? *stream : current_stream(t.device);
  if (stream && bytes > 0 && stream->device() != t.device) {
    throw ValueError(std::string(what) + ": the stream is on device " +
                     std::to_string(stream->device()) + " but the tensor on device " +
                     std::to_string(t.device));
  }
  std::uint64_t capture = 0;
  if (detail::graph_ops().stream_capture_status(c.stream.handle(), &capture) !=
      detail::CaptureStatus::none) {
    throw NotSupportedError(std::string(what) + ": cannot run while the stream is being "
                            "captured into a CUDA graph (file I/O runs on host threads)");
  }
  return c;
}

std::pair<void*, std::shared_ptr<const void>> tensor_bytes(const Tensor& t, const char* what) {
  if (!t.defined()) throw ValueError(std::string(what) + ": the tensor is undefined");
  if (!t.is_cuda()) {
    throw ValueError(std::string(what) + ": the tensor is on " + t.device().str() +
                     "; GdsFile moves data to and from cuda tensors");
  }
  if (!t.is_contiguous()) {
    throw ValueError(std::string(what) + ": the tensor is not contiguous (sizes " +
                     shape_str(t.sizes()) + ", strides " + shape_str(t.strides()) +
                     "): call .contiguous() first");
  }
  return {t.data_ptr(), t.storage()};
}

IoRequest run(File::Impl& impl, bool read, void* ptr, std::size_t bytes, std::uint64_t offset,
              const char* what, std::optional<StreamRef> stream,
              std::shared_ptr<const void> keep, bool ordered) {
  Checked c = check_transfer(impl, read, ptr, bytes, offset, what, stream, std::move(keep));
  // A stream-ordered write on the compat path stages its bytes on the caller's stream
  // (engine.hpp) and returns at once. Other stream-ordered transfers return once done, so
  // later work on the stream sees them; the stream itself is never blocked. Rejected, both
  // hung on the H200 (driver 580): a host task on the stream that waits for completion, and a
  // device-side wait on a pinned word (cuStreamWaitValue32). Both gated the stream on copies
  // that run on the engine's own streams, an order CUDA cannot see, and the driver serialised
  // those copies behind the gate (docs/architecture.md, "GPUDirect Storage").
  const bool staged_write = ordered && !read && !c.transfer.gds;
  auto state = io::submit(std::move(c.transfer), c.stream, staged_write);
  if (ordered && !staged_write) state->wait_quietly();
  return IoRequest(state);
}

}  // namespace

void File::load(void* dst, std::size_t bytes, std::uint64_t offset) {
  run(*impl_, true, dst, bytes, offset, "GdsFile.load_storage", std::nullopt, nullptr, false)
      .wait();
}

void File::save(const void* src, std::size_t bytes, std::uint64_t offset) {
  run(*impl_, false, const_cast<void*>(src), bytes, offset, "GdsFile.save_storage",
      std::nullopt, nullptr, false)
      .wait();
}

void File::load(const Tensor& tensor, std::uint64_t offset) {
  auto [ptr, keep] = tensor_bytes(tensor, "GdsFile.load_storage");
  run(*impl_, true, ptr, tensor.nbytes(), offset, "GdsFile.load_storage", std::nullopt, keep,
      false)
      .wait();
}

void File::save(const Tensor& tensor, std::uint64_t offset) {
  auto [ptr, keep] = tensor_bytes(tensor, "GdsFile.save_storage");
  run(*impl_, false, ptr, tensor.nbytes(), offset, "GdsFile.save_storage", std::nullopt, keep,
      false)
      .wait();
}

IoRequest File::read_into(const Tensor& tensor, std::uint64_t offset,
                          std::optional<StreamRef> stream) {
  auto [ptr, keep] = tensor_bytes(tensor, "GdsFile.read_into");
  return run(*impl_, true, ptr, tensor.nbytes(), offset, "GdsFile.read_into", stream, keep,
             true);
}

IoRequest File::write_from(const Tensor& tensor, std::uint64_t offset,
                           std::optional<StreamRef> stream) {
  auto [ptr, keep] = tensor_bytes(tensor, "GdsFile.write_from");
  return run(*impl_, false, ptr, tensor.nbytes(), offset, "GdsFile.write_from", stream, keep,
             true);
}

}  // namespace cudakit::gds
