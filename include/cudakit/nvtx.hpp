// NVTX annotations (seed: torch.cuda.nvtx.mark, range_push, range_pop, range_start, range_end,
// range), plus what torch lacks: domains, categories, colours, payloads and an RAII
// ScopedRange.
//
// The calls go to the NVTX3 headers of the CUDA toolkit, compiled into libcudakit: nothing is
// loaded unless a tool (Nsight Systems, or any library named by NVTX_INJECTION64_PATH)
// attaches at the first call. With no tool attached each call is a null-pointer test plus
// cudakit's own bookkeeping. A build without the nvtx3 headers compiles the same API with
// nothing forwarded (tool_attached() is then always false).
//
// Depths are cudakit's, not the tool's: range_push returns the zero-based depth of the range
// it starts and range_pop the depth of the range it ends, counted per thread and per domain
// over the ranges pushed through cudakit. (torch returns whatever nvtxRangePushA returns, which
// is -2 when no tool is attached.) range_pop with nothing pushed returns -1 and still forwards
// the pop, so a tool can pair it with a push made outside cudakit.
//
// range_start returns the tool's range id, or, with no tool attached (the id is then 0), an
// id of cudakit's own that is unique in the process. Ids may be ended on any thread.
//
// NVTX3's C++ API can address cudakit's domain directly:
//   nvtx3::scoped_range_in<cudakit::nvtx::nvtx3_domain> r{"step"};
//
// Thread-safety: every function may be called from any thread. Push/pop nesting is per thread
// (as in NVTX), so a ScopedRange must be destroyed on the thread that made it. Domain objects
// live until the process exits; Domain::get and the category functions take a lock, as does
// a domain's first use (creating its NVTX handle, once). The range/mark calls take no lock and
// do not allocate, except a thread's first range in each domain past the 32nd.
#pragma once

#include "cudakit/export.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

namespace CUDAKIT_API cudakit {
namespace nvtx {

// Colour of a range or mark, as 0xAARRGGBB. Color{} (0) means "none": the tool picks.
struct Color {
  std::uint32_t argb = 0;

  static constexpr Color rgb(std::uint8_t r, std::uint8_t g, std::uint8_t b) noexcept {
    return Color{0xFF000000u | (std::uint32_t{r} << 16) | (std::uint32_t{g} << 8) | b};
  }
  // An X11/CSS colour name ("red", "green", "blue", "orange", ...; see nvtx/color.cpp),
  // "#RRGGBB" or "#AARRGGBB". Throws ValueError naming the text and what is accepted.
  static Color parse(std::string_view text);
  constexpr bool is_set() const noexcept { return argb != 0; }
  // Spelled out rather than defaulted: this header also compiles as C++17 (nvcc's default
  // dialect for .cu files).
  friend constexpr bool operator==(Color a, Color b) noexcept { return a.argb == b.argb; }
  friend constexpr bool operator!=(Color a, Color b) noexcept { return a.argb != b.argb; }
};

// A number attached to an event (NVTX payload); Nsight Systems shows it with the range.
class Payload {
 public:
  enum class Kind : std::uint8_t { none, int64, uint64, float64 };

  constexpr Payload() noexcept = default;
  // enable_if rather than concepts: C++17 (nvcc's default dialect) includes this header too.
  template <typename T, std::enable_if_t<std::is_integral_v<T> && std::is_signed_v<T>, int> = 0>
  constexpr Payload(T v) noexcept : kind_(Kind::int64), i_(v) {}  // NOLINT: implicit by design
  template <typename T, std::enable_if_t<std::is_integral_v<T> && std::is_unsigned_v<T> &&
                                             !std::is_same_v<T, bool>, int> = 0>
  constexpr Payload(T v) noexcept : kind_(Kind::uint64), u_(v) {}  // NOLINT
  constexpr Payload(double v) noexcept : kind_(Kind::float64), d_(v) {}  // NOLINT
  Payload(bool) = delete;  // a flag is not a measurement: pass 0 / 1 explicitly

  constexpr Kind kind() const noexcept { return kind_; }
  constexpr std::int64_t as_int64() const noexcept { return i_; }
  constexpr std::uint64_t as_uint64() const noexcept { return u_; }
  constexpr double as_double() const noexcept { return d_; }

 private:
  Kind kind_ = Kind::none;
  union {
    std::int64_t i_ = 0;
    std::uint64_t u_;
    double d_;
  };
};

// An NVTX domain: a named namespace for ranges, marks and categories, shown as its own row
// group by Nsight Systems. Each domain has its own push/pop stack per thread.
class Domain {
 public:
  // NVTX's default domain: the one torch.cuda.nvtx and the plain-message calls use.
  static Domain& global() noexcept;
  // The "cudakit" domain.
  static Domain& cudakit() noexcept;
  // The domain called `name`, created on first use (one object per name, never destroyed).
  // Throws ValueError for an empty name.
  static Domain& get(std::string_view name);

  const std::string& name() const noexcept { return name_; }  // "" for global()
  // nvtxDomainHandle_t for the NVTX C API; null for global(), without NVTX, or when no tool
  // is attached. Created on first use (nvtxDomainCreateA initialises NVTX, which loads a tool:
  // making a Domain object does neither).
  void* handle() const noexcept {
    if (!created_.load(std::memory_order_acquire)) [[unlikely]] return create_handle();
    return handle_;
  }

  // The id of category `name` in this domain, assigned (from 1) and announced to the tool
  // with nvtxDomainNameCategory on first use. Throws ValueError for an empty name.
  std::uint32_t category(std::string_view name);
  // Names category `id` (as nvtxDomainNameCategoryA); category(name) then returns `id`.
  void name_category(std::uint32_t id, std::string_view name);

  // Internal: index of this domain's per-thread depth counter.
  int slot() const noexcept { return slot_; }

  Domain(const Domain&) = delete;
  Domain& operator=(const Domain&) = delete;

 private:
  struct Categories;
  Domain(std::string name, int slot);
  ~Domain();
  void* create_handle() const noexcept;
  std::string name_;
  mutable void* handle_ = nullptr;           // written once, before created_ is set
  mutable std::atomic<bool> created_{false};
  int slot_ = 0;
  std::unique_ptr<Categories> categories_;
};

// Everything an event can carry. `message` is NUL-terminated UTF-8 (null: no message);
// category 0 means none.
struct Attributes {
  const char* message = nullptr;
  Color color{};
  std::uint32_t category = 0;
  Payload payload{};
};

// ---- torch.cuda.nvtx ----
// Starts a nested range on this thread; returns its zero-based depth.
int range_push(const char* message) noexcept;
inline int range_push(const std::string& message) noexcept { return range_push(message.c_str()); }
int range_push(const Attributes& attributes, Domain& domain = Domain::global()) noexcept;
// Ends this thread's innermost range; returns its depth, or -1 when none was open.
int range_pop() noexcept;
int range_pop(Domain& domain) noexcept;
// Starts a range that may end on another thread; returns its id for range_end.
std::uint64_t range_start(const char* message) noexcept;
inline std::uint64_t range_start(const std::string& message) noexcept {
  return range_start(message.c_str());
}
std::uint64_t range_start(const Attributes& attributes,
                          Domain& domain = Domain::global()) noexcept;
void range_end(std::uint64_t id) noexcept;
void range_end(std::uint64_t id, Domain& domain) noexcept;
// An instantaneous event.
void mark(const char* message) noexcept;
inline void mark(const std::string& message) noexcept { mark(message.c_str()); }
void mark(const Attributes& attributes, Domain& domain = Domain::global()) noexcept;

// ---- beyond torch ----
// Ranges open on this thread in `domain` (pushed through cudakit and not yet popped).
int depth(const Domain& domain = Domain::global()) noexcept;
// True when an NVTX tool attached to cudakit's NVTX instance (forces NVTX's one-time init).
bool tool_attached() noexcept;

// Pushes a range on construction and pops it on destruction (same thread).
class ScopedRange {
 public:
  explicit ScopedRange(const char* message) noexcept
      : domain_(nullptr), depth_(range_push(message)) {}
  explicit ScopedRange(const std::string& message) noexcept : ScopedRange(message.c_str()) {}
  explicit ScopedRange(const Attributes& attributes, Domain& domain = Domain::global()) noexcept
      : domain_(&domain), depth_(range_push(attributes, domain)) {}
  ~ScopedRange() {
    if (domain_) {
      range_pop(*domain_);
    } else {
      range_pop();
    }
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

  int depth() const noexcept { return depth_; }

 private:
  Domain* domain_;
  int depth_;
};

// Tag for NVTX3's C++ API (nvtx3::scoped_range_in<nvtx3_domain>, nvtx3::mark_in<...>): the
// same "cudakit" domain, without going through this header's functions.
struct nvtx3_domain {
  static constexpr char const* name{"cudakit"};
};

}  // namespace nvtx
}  // namespace cudakit
