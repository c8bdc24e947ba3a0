// nccl:: names that need no communicator: errors, versions, ids, availability.
#include <cstring>

#include "backend/comm_ops.hpp"
#include "cudakit/nccl.hpp"

namespace cudakit::nccl {

const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::avg: return "avg";
  }
  return "unknown";
}

const char* result_name(int code) noexcept {
  switch (code) {
    case result::success: return "ncclSuccess";
    case result::unhandled_cuda_error: return "ncclUnhandledCudaError";
    case result::system_error: return "ncclSystemError";
    case result::internal_error: return "ncclInternalError";
    case result::invalid_argument: return "ncclInvalidArgument";
    case result::invalid_usage: return "ncclInvalidUsage";
    case result::remote_error: return "ncclRemoteError";
    case result::in_progress: return "ncclInProgress";
  }
  return "ncclUnknownResult";
}

NcclError::NcclError(int code, const std::string& what, bool timed_out)
    : Error(what), code_(code), timed_out_(timed_out) {}

UniqueId UniqueId::from_bytes(std::string_view data) {
  if (data.size() != kBytes) {
    throw ValueError("UniqueId: expected " + std::to_string(kBytes) + " bytes (as made by "
                     "unique_id()), got " + std::to_string(data.size()));
  }
  UniqueId id;
  std::memcpy(id.bytes.data(), data.data(), kBytes);
  return id;
}

bool engine_available() noexcept {
  try {
    // Fixed for the process once the backend exists (the library is probed once); comm's
    // transport choice asks on every call.
    static const bool available = detail::comm_ops().comm_engine().available;
    return available;
  } catch (...) {
    return false;
  }
}

Version version() {
  detail::CommEngineInfo info = detail::comm_ops().comm_engine();
  if (!info.available) throw NotSupportedError("nccl.version(): " + info.reason);
  Version v;
  detail::split_nccl_version(info.version_code, &v.major, &v.minor, &v.patch);
  v.suffix = info.suffix;
  return v;
}

bool is_available(const std::vector<Tensor>& tensors) noexcept {
  try {
    if (!engine_available()) return false;
    std::vector<int> seen;
    for (const Tensor& t : tensors) {
      if (!t.defined() || !t.is_cuda() || !t.is_contiguous()) return false;
      const int d = t.device().index;
      for (int s : seen) {
        if (s == d) return false;
      }
      seen.push_back(d);
    }
    return true;
  } catch (...) {
    return false;
  }
}

UniqueId unique_id() { return detail::comm_ops().comm_unique_id(); }

}  // namespace cudakit::nccl
