// What one compiled jiterator kernel is specialised for, and the byte layout of its single
// kernel parameter (shared by the host that fills it and the generated source that reads it).
//
// Why one parameter block instead of one kernel parameter per value: the emulated backend
// runs the kernel later on a stream worker, so it must copy the parameters at launch, which
// needs their size; a single block of known size works the same for cuLaunchKernel (the
// driver copies it too) and keeps the generated signature independent of the arity.
//
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cudakit/jiterator.hpp"
#include "cudakit/tensor.hpp"

namespace cudakit::jit {

inline constexpr int kMaxDims = 8;  // dims left after collapsing (ops::make_calc)

// Launch geometry of the generated kernels. kUnroll items (vectors on the contiguous path)
// per thread keep several 16-byte loads per input in flight.
inline constexpr int kBlock = 128;

struct KernelSpec {
  std::int8_t nin = 0, nout = 1;
  bool return_by_ref = false;
  bool contiguous = true;  // every operand dense and in the same order: linear indexing
  bool index64 = false;    // 64-bit indices and offsets (huge tensors)
  std::int8_t vec = 1;     // elements per vector access on the contiguous path
  std::int8_t unroll = 1;  // items per thread
  std::int8_t nparams = 0;
  DType common = DType::float32;
  DType inputs[jiterator::kMaxInputs] = {};
  Scalar::Kind params[jiterator::kMaxParams] = {};

  int operands() const { return nin + nout; }
  friend bool operator==(const KernelSpec&, const KernelSpec&) = default;
};

// The parameter block: (offsets in bytes)
//   0                     long long n            elements
//   8                     long long ndim         collapsed dims (strided kernels)
//   16                    char* data[NT]         outputs, then inputs
//   strided kernels only:
//   16 + 8*NT             Dim dims[8]            {long long size; unsigned m1, shift;}
//   + 128                 long long strides[8][NT]  in elements
//   then, 16-aligned      unsigned char params[NP][16]  scalar parameter slots
// The generated source static_asserts the sizes it computes against these numbers.
struct ParamLayout {
  int nt = 1, nparams = 0;
  bool strided = false;

  static std::size_t round16(std::size_t v) { return (v + 15) / 16 * 16; }
  std::size_t data_offset() const { return 16; }
  std::size_t dims_offset() const { return 16 + 8 * static_cast<std::size_t>(nt); }
  std::size_t strides_offset() const { return dims_offset() + 16 * kMaxDims; }
  std::size_t params_offset() const {
    return round16(strided ? strides_offset() + 8 * kMaxDims * static_cast<std::size_t>(nt)
                           : dims_offset());
  }
  std::size_t size() const {
    return params_offset() + 16 * static_cast<std::size_t>(nparams > 0 ? nparams : 1);
  }
};
inline constexpr std::size_t kMaxParamBytes = 16 + 8 * 16 + 16 * kMaxDims + 8 * kMaxDims * 16 +
                                              16 * jiterator::kMaxParams + 16;

// Launch tuning: CUDAKIT_JITERATOR_UNROLL=1|2|4|8 replaces the items-per-thread heuristic of
// device kernels (read once; for measuring on new hardware). 0 = heuristic.
int unroll_override() noexcept;
// Tests: every launch uses 64-bit indices (the huge-tensor path) while set.
void set_force_index64(bool on) noexcept;

inline ParamLayout layout_of(const KernelSpec& s) {
  return ParamLayout{s.operands(), s.nparams, !s.contiguous};
}

}  // namespace cudakit::jit
