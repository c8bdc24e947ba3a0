// cudakit::jiterator — elementwise kernels compiled at run time from the source of one C++
// function template (torch.cuda.jiterator), for both backends.
//
//   auto axpy = jiterator::create_jit_fn(
//       "template <typename T> T axpy(T x, T y, T a) { return a * x + y; }", {{"a", 2.0}});
//   Tensor z = axpy({x, y});                 // a = 2.0
//   Tensor w = axpy({x, y}, {{"a", 0.5}});   // per-call override, same kernel
//
// The contract is torch's:
//   * the code string holds one or more `template <typename T> R name(...)` definitions; the
//     last one is the entry. It is called once per element with T = the computation type of
//     the inputs' common dtype (float for float16/bfloat16, as torch's opmath), then the
//     tensor arguments in order, then the scalar parameters in their declaration order.
//   * inputs (1 to 8 device tensors on one device) broadcast together and promote to their
//     common dtype like the built-in ops (result_type); outputs have the broadcast shape and
//     the common dtype. Each input is converted to the common dtype, then to T.
//   * scalar parameters are named, have defaults, and can be overridden per call; their C++
//     type follows the value (bool, long long, double, complex<double>), so a call with an
//     int where the default was a float compiles one more specialisation.
//   * create_multi_output_jit_fn: the entry returns void and takes `T&` outputs last.
//
// Specialisations are compiled per (input dtypes, scalar parameter types, layout, vector
// width, index width) for the device's exact architecture — NVRTC on the cuda backend; the
// host C++ compiler on the emulated backend, into a shared object run as a host task — and
// cached in memory and on disk (see cache_dir()). Work runs on the current stream of the
// inputs' device; outputs are allocated there.
//
// Thread-safety: a JitFunction is immutable after construction (copies share the compiled
// kernels); calls may come from any number of threads. Compilation of one specialisation
// happens once per process; concurrent callers wait for it. Disk cache entries are written to
// a temporary file and renamed, so concurrent processes never read a partial entry. Compiled
// modules stay loaded until the process exits (a kernel may still run when the last
// JitFunction using it is destroyed), as torch's and CuPy's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cudakit/error.hpp"
#include "cudakit/export.hpp"
#include "cudakit/tensor.hpp"

namespace CUDAKIT_API cudakit {
namespace jiterator {

inline constexpr int kMaxInputs = 8;
inline constexpr int kMaxOutputs = 8;
inline constexpr int kMaxParams = 32;  // scalar parameters of one function

// The runtime compiler rejected the generated kernel. what() carries the compiler's
// diagnostics and the offending line of the code string. RuntimeError in Python.
class CompileError : public Error {
 public:
  CompileError(const std::string& what, std::string log, int line);
  const std::string& log() const noexcept { return log_; }  // the compiler's full output
  // 1-based line of the code string the first error points at; 0 when the error is in
  // the generated part around it.
  int line() const noexcept { return line_; }

 private:
  std::string log_;
  int line_;
};

// A named scalar parameter of a jitted function (a keyword argument in Python).
struct Param {
  std::string name;
  Scalar value;
};

class JitFunction {
 public:
  // Parses `code` (ValueError when no entry function can be found in it). Nothing is
  // compiled before the first call.
  explicit JitFunction(std::string code, std::vector<Param> params = {}, int num_outputs = 1,
                       bool return_by_ref = false);

  // Single-output call: the function applied elementwise to `inputs`. `overrides` replace
  // parameter defaults by name for this call (ValueError for an undeclared name).
  Tensor operator()(const std::vector<Tensor>& inputs,
                    const std::vector<Param>& overrides = {}) const;
  // Any number of outputs, in order.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs,
                          const std::vector<Param>& overrides = {}) const;

  const std::string& name() const noexcept;  // the entry function's name
  const std::string& code() const noexcept;
  int num_outputs() const noexcept;
  bool return_by_ref() const noexcept;
  const std::vector<Param>& params() const noexcept;  // declaration order, with defaults
  // Specialisations this function has compiled or loaded so far (all devices).
  std::size_t num_kernels() const noexcept;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// torch.cuda.jiterator._create_jit_fn / _create_multi_output_jit_fn.
JitFunction create_jit_fn(std::string code, std::vector<Param> params = {});
JitFunction create_multi_output_jit_fn(std::string code, int num_outputs,
                                       std::vector<Param> params = {});

// ---- the compile cache ----
// Directory of the disk cache: $CUDAKIT_CACHE_DIR/jiterator, else
// $XDG_CACHE_HOME/cudakit/jiterator, else ~/.cache/cudakit/jiterator. "" when disabled
// (CUDAKIT_JITERATOR_DISK_CACHE=0, no home directory, or a directory that other users can
// write to: compiled code from there is never loaded). Read from the environment once.
std::string cache_dir();

struct CacheStats {
  std::uint64_t memory_hits = 0;    // a specialisation found compiled in this process
  std::uint64_t disk_hits = 0;      // loaded from the disk cache
  std::uint64_t compiles = 0;       // compiled (NVRTC / host compiler)
  std::uint64_t disk_writes = 0;    // entries written to the disk cache
  std::uint64_t disk_rejected = 0;  // entries found corrupt or for another key (rewritten)
  double compile_ms = 0;            // total compile time
};
CacheStats cache_stats() noexcept;

}  // namespace jiterator
}  // namespace cudakit
