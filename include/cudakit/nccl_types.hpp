// NCCL's value types (cudakit/nccl.hpp has the API that uses them): reduction operators,
// result codes, NcclError, the engine version and a communicator's UniqueId. A header of its
// own because the driver seam (src/backend/collectives.hpp) speaks this vocabulary and must
// not carry the tensor API that nccl.hpp includes (tests/layout enforces it).
//
// Thread-safety: the functions are pure; values are plain data.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "cudakit/error.hpp"
#include "cudakit/export.hpp"

namespace CUDAKIT_API cudakit {
namespace nccl {

// Reduction operators, numbered as ncclRedOp_t (torch.cuda.nccl.SUM == 0). avg needs a
// floating-point dtype. On bool tensors sum is logical or (max) and prod logical and (min),
// as torch.distributed does.
enum class ReduceOp : int { sum = 0, prod = 1, max = 2, min = 3, avg = 4 };
const char* reduce_op_name(ReduceOp op) noexcept;  // "sum", ...

// Result codes, numbered as ncclResult_t.
namespace result {
inline constexpr int success = 0;
inline constexpr int unhandled_cuda_error = 1;
inline constexpr int system_error = 2;
inline constexpr int internal_error = 3;
inline constexpr int invalid_argument = 4;
inline constexpr int invalid_usage = 5;
inline constexpr int remote_error = 6;  // a peer failed, exited or timed out
inline constexpr int in_progress = 7;
}  // namespace result
const char* result_name(int code) noexcept;  // "ncclRemoteError", ...

// A communication failure. Maps to cudakit.nccl.NcclError (a RuntimeError) in Python.
class NcclError : public Error {
 public:
  NcclError(int code, const std::string& what, bool timed_out = false);
  int code() const noexcept { return code_; }  // ncclResult_t numbering
  // The communicator's watchdog gave up waiting (the operation did not finish within the
  // timeout); code() is remote_error.
  bool timed_out() const noexcept { return timed_out_; }

 private:
  int code_;
  bool timed_out_;
};

struct Version {
  int major = 0, minor = 0, patch = 0;
  std::string suffix;  // NCCL_SUFFIX ("" for releases)
};

// The identity of a communicator (ncclUniqueId): 128 opaque bytes made by one rank and
// handed to all others.
struct UniqueId {
  static constexpr std::size_t kBytes = 128;
  std::array<unsigned char, kBytes> bytes{};
  // ValueError unless `data` is exactly kBytes long.
  static UniqueId from_bytes(std::string_view data);
  std::string to_bytes() const { return std::string(bytes.begin(), bytes.end()); }
  friend bool operator==(const UniqueId& a, const UniqueId& b) noexcept { return a.bytes == b.bytes; }
};

}  // namespace nccl
}  // namespace cudakit
