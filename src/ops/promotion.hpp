// torch's type promotion (result_type) over any number of operands: the built-in ops use it
// for two, the jiterator for up to eight.
//
// Operands fall in three priority classes: tensors with dimensions, 0-d tensors, and
// Python-style scalars ("wrapped numbers"). Each class promotes within itself; a lower class
// only changes the result when it is of a higher category (bool < integer < floating <
// complex), as in torch's combine_categories.
#pragma once

#include <optional>

#include "cudakit/tensor.hpp"

namespace cudakit::ops {

class ResultType {
 public:
  void tensor(const Tensor& t) { add(t.dim() > 0 ? dim_ : zero_, t.dtype()); }
  void scalar(const Scalar& s) { add(wrapped_, s.default_dtype()); }
  // Precondition: at least one operand was added.
  DType result() const { return *combine(dim_, combine(zero_, wrapped_)); }

 private:
  static void add(std::optional<DType>& slot, DType t) {
    slot = slot ? promote_types(*slot, t) : t;
  }
  static DType to_complex(DType t) {
    return t == DType::float64 ? DType::complex128 : DType::complex64;
  }
  // `higher` is the result of the higher-priority class.
  static std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
    if (!higher) return lower;
    if (!lower) return higher;
    if (is_complex(*higher)) return higher;
    if (is_complex(*lower)) return is_floating_point(*higher) ? to_complex(*higher) : *lower;
    if (is_floating_point(*higher)) return higher;
    if (*higher == DType::bool_ || is_floating_point(*lower)) return promote_types(*higher, *lower);
    return higher;
  }

  std::optional<DType> dim_, zero_, wrapped_;
};

}  // namespace cudakit::ops
