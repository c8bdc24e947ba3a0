// The stream sanitizer (seed: "Stream Sanitizer", torch.cuda._sanitizer / CSAN): finds device
// memory that two streams use without synchronisation between them.
//
// What it sees. Every cudakit op, copy and fill (the reads and writes of each operand's byte
// range, on the stream the work is enqueued on), device allocations and frees (stream-ordered
// reuse: memory handed out on stream A is safe on A only), record_stream, event record / wait /
// synchronize / a query that returned true, stream wait / synchronize / query, device
// synchronisation, and graph replays (a replay's accesses are those captured, made on the
// replay stream). Kernels cudakit does not launch — a user's own launch, CuPy, another
// library — are declared with declare_access() / access() (Python: sanitizer.access), so they
// are checked like built-in ops. torch's CSAN sees torch operators only.
//
// The model is CSAN's: a vector clock per stream (the last sequence number of every stream
// known to be complete before the stream's next work), copied into an event when it is
// recorded, merged into a stream that waits for the event, merged into the host's clock by a
// synchronize (and into every stream at its next launch, as work issued after a host
// synchronisation is ordered after what the host waited for). Two accesses to overlapping bytes
// of one allocation, at least one a write, race when neither is ordered before the other.
// Unlike CSAN, accesses are byte ranges within an allocation (views of one buffer used on two
// streams race only where they overlap; two views with different start pointers still race
// where they overlap), and an allocation is a write on its allocation stream for the purpose
// of its first use on another stream.
//
// On a race: CUDASanitizerErrors (raise mode: the op is not enqueued) or a warning through the
// warning handler (warn mode: the op runs), with torch's CSAN message: the tensor (data pointer,
// allocation and size, allocation stack), the two streams, and both accesses' stacks (Python
// frames when called from Python, then C++ frames). A free whose memory another stream may
// still use (no record_stream, no synchronisation) is always reported as a warning: frees run
// in destructors, at a point the program does not choose (on the emulated backend, the stream
// worker that drops an op's last reference).
//
// Enabling: enable(), or CUDAKIT_CUDA_SANITIZER=1|raise|warn at library load (also
// TORCH_CUDA_SANITIZER set to anything but "" or "0", as torch). Enable it before the work to
// check: memory allocated while it was off has no allocation stack and no allocation stream.
// Disabled, every instrumentation point costs one relaxed atomic load and a predictable branch.
//
// Thread-safety: every function may be called from any thread. Tracking takes no global lock on
// the op path: a lock per stream, per allocation shard (64, by address) and per event shard;
// the host clock's lock only when a synchronisation changed it. The model treats the host as
// one thread (as CSAN): a synchronisation on any thread orders work issued later on every
// thread, so races between host threads that are ordered only by host-side locks are not seen.
// Buffer, Access and UnsynchronizedAccess are plain values; CUDASanitizerErrors is immutable.
// Enable and disable while no other thread issues work (a check in flight on another thread
// finishes against the state it started with).
#pragma once

// std::span is part of this header's API (declare_access), so it needs C++20. nvcc compiles
// .cu files as C++17 unless told otherwise: pass -std=c++20 to nvcc (CMake: CUDA_STANDARD 20)
// for a .cu file that includes it.
#if __cplusplus < 202002L
#error "cudakit/sanitizer.hpp needs C++20 (std::span): compile with -std=c++20 (nvcc too)"
#endif

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "cudakit/error.hpp"
#include "cudakit/export.hpp"
#include "cudakit/python_stacks.hpp"
#include "cudakit/stream.hpp"

namespace CUDAKIT_API cudakit {

class Tensor;

namespace sanitizer {

enum class OnRace { raise, warn };

// Starts tracking with fresh state (what was tracked before a disable() is forgotten).
// Enabling again while enabled only changes `on_race`.
void enable(OnRace on_race = OnRace::raise);
// Stops tracking and forgets all state. Work in flight on other threads finishes its check.
void disable() noexcept;
bool is_enabled() noexcept;
OnRace on_race() noexcept;

// Device memory a kernel touches: a tensor's extent (every byte between its lowest and highest
// element), or a raw range. `name` labels it in reports ("argument(s) x"); nullptr: unnamed.
// The name must outlive the declare_access() call (the sanitizer keeps its own copy).
struct Buffer {
  Buffer(const Tensor& t, const char* name = nullptr);
  Buffer(const void* ptr, std::size_t nbytes, const char* name = nullptr) noexcept
      : ptr(ptr), nbytes(nbytes), name(name) {}
  const void* ptr = nullptr;
  std::size_t nbytes = 0;
  const char* name = nullptr;
  // Start of the allocation holding the range when known (a tensor's storage), so no lookup
  // by address is needed.
  const void* allocation = nullptr;
};

// Declares that work cudakit did not launch, enqueued on `stream` (default: the current stream
// of the first buffer's device), reads `reads` and writes `writes`: checked and recorded as a
// built-in op named `kernel`. Call it once the work is enqueued (after any stream waits the
// launch depends on). In raise mode a race throws CUDASanitizerErrors and nothing is recorded.
// Host memory and null / empty buffers are ignored. No-op while disabled.
void declare_access(std::span<const Buffer> reads, std::span<const Buffer> writes,
                    std::optional<StreamRef> stream = std::nullopt,
                    std::string_view kernel = "foreign kernel");
inline void declare_access(std::initializer_list<Buffer> reads,
                           std::initializer_list<Buffer> writes,
                           std::optional<StreamRef> stream = std::nullopt,
                           std::string_view kernel = "foreign kernel") {
  declare_access(std::span<const Buffer>(reads.begin(), reads.size()),
                 std::span<const Buffer>(writes.begin(), writes.size()), stream, kernel);
}

// The C++ form of Python's `with sanitizer.access(...)`: runs `launch` (which enqueues the
// work), then declares its accesses. If `launch` throws, nothing is declared.
template <class Launch>
decltype(auto) access(std::initializer_list<Buffer> reads, std::initializer_list<Buffer> writes,
                      Launch&& launch, std::optional<StreamRef> stream = std::nullopt,
                      std::string_view kernel = "foreign kernel") {
  struct Declare {
    std::initializer_list<Buffer> r, w;
    std::optional<StreamRef> s;
    std::string_view k;
    void operator()() const { declare_access(r, w, s, k); }
  } declare{reads, writes, stream, kernel};
  if constexpr (std::is_void_v<decltype(launch())>) {
    std::forward<Launch>(launch)();
    declare();
  } else {
    decltype(auto) result = std::forward<Launch>(launch)();
    declare();
    return result;
  }
}

// ---- reports ----

// One access of a race report.
struct Access {
  bool write = false;
  NativeStream stream = nullptr;  // native handle, as torch prints cuda_stream
  int device = -1;
  std::string kernel;                // op name ("add", "copy_", "allocation", ...)
  std::vector<std::string> aliases;  // argument names ("self", "other", "out", ...)
  bool is_output = false;            // the op's result (torch's "the output")
  std::string stack;                 // formatted: Python frames, then C++ frames
};

// Two unsynchronised accesses to overlapping bytes of one allocation (torch's
// UnsynchronizedAccessError). `previous.kernel == "free"` does not occur (frees are warnings).
struct UnsynchronizedAccess {
  std::uintptr_t data_ptr = 0;         // the current access's first byte (tensor data pointer)
  std::uintptr_t allocation = 0;       // the allocation it belongs to
  std::size_t allocation_size = 0;     // bytes (0 when unknown)
  std::uintptr_t overlap_begin = 0, overlap_end = 0;  // the bytes both accesses cover
  Access current, previous;
  std::string allocation_stack;  // empty when the allocation was not seen
  std::string message() const;   // torch's CSAN format
};

// Thrown in raise mode (torch's CUDASanitizerErrors); what() is every report's message.
class CUDASanitizerErrors : public Error {
 public:
  explicit CUDASanitizerErrors(std::vector<UnsynchronizedAccess> errors);
  const std::vector<UnsynchronizedAccess>& errors() const noexcept { return errors_; }

 private:
  std::vector<UnsynchronizedAccess> errors_;
};

// Where warn-mode reports and free reports go (stderr by default). Called on the thread that
// found the race, with no sanitizer lock held; an exception it throws propagates from the op
// (never from a free). `from_free`: the report comes from a free, which runs in a destructor,
// possibly on a stream worker thread and under other locks: the handler must not block (an
// interpreter that needs its lock to report should print instead). nullptr restores stderr.
using WarningHandler = std::function<void(const std::string& message, bool from_free)>;
void set_warning_handler(WarningHandler handler);

// Counters since enable(), for tests and benchmarks.
struct Stats {
  std::uint64_t accesses = 0;      // operand accesses checked
  std::uint64_t races = 0;         // reports made (raised or warned, frees included)
  std::uint64_t allocations = 0;   // allocations currently tracked
  std::uint64_t streams = 0;       // streams seen
  std::uint64_t captured = 0;      // accesses recorded into graph captures
};
Stats stats() noexcept;

// For embedding interpreters (cudakit's Python bindings). `capture` appends the calling
// thread's interpreter stack, innermost first, to `out`; with `may_block` it may take the
// interpreter lock back when the thread released it around the call (ops called without the
// GIL, such as copies), otherwise it records nothing then (allocations and frees, which may
// run under other locks). `symbolize` gives file, line, function and source text of a frame
// for a report (with `may_block` false — a free's report — it must not wait for the interpreter
// lock: it may leave the fields as they are). Code objects must stay valid for the life of the
// process (python_stacks.hpp).
using PyCaptureHook = void (*)(std::vector<PyFrameRef>& out, bool may_block);
using PySourceHook = void (*)(const PyFrameRef& frame, std::string& file, int& line,
                              std::string& name, std::string& source, bool may_block);
void set_python_hooks(PyCaptureHook capture, PySourceHook symbolize);

}  // namespace sanitizer
}  // namespace cudakit
