// Backend-neutral helpers of the collectives seam (collectives.hpp).
#include "backend/collectives.hpp"

namespace cudakit::detail {

std::size_t comm_type_size(CommDataType t) noexcept {
  switch (t) {
    case CommDataType::int8:
    case CommDataType::uint8: return 1;
    case CommDataType::float16:
    case CommDataType::bfloat16: return 2;
    case CommDataType::int32:
    case CommDataType::float32: return 4;
    case CommDataType::int64:
    case CommDataType::float64: return 8;
  }
  return 1;
}

const char* comm_type_name(CommDataType t) noexcept {
  switch (t) {
    case CommDataType::int8: return "int8";
    case CommDataType::uint8: return "uint8";
    case CommDataType::int32: return "int32";
    case CommDataType::int64: return "int64";
    case CommDataType::float16: return "float16";
    case CommDataType::float32: return "float32";
    case CommDataType::float64: return "float64";
    case CommDataType::bfloat16: return "bfloat16";
  }
  return "unknown type";
}

const char* comm_kind_name(CommKind k) noexcept {
  switch (k) {
    case CommKind::all_reduce: return "all_reduce";
    case CommKind::broadcast: return "broadcast";
    case CommKind::reduce: return "reduce";
    case CommKind::all_gather: return "all_gather";
    case CommKind::reduce_scatter: return "reduce_scatter";
    case CommKind::send: return "send";
    case CommKind::recv: return "recv";
  }
  return "unknown operation";
}

void split_nccl_version(int code, int* major, int* minor, int* patch) noexcept {
  // NCCL_VERSION(X,Y,Z): X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z from 2.9 on.
  if (code < 10000) {
    *major = code / 1000;
    *minor = (code % 1000) / 100;
  } else {
    *major = code / 10000;
    *minor = (code % 10000) / 100;
  }
  *patch = code % 100;
}

}  // namespace cudakit::detail
