#include "cudakit/error.hpp"

#include <string>

namespace cudakit {

AcceleratorError::AcceleratorError(int code, std::string code_name, const std::string& what)
    : Error(what), code_(code), code_name_(std::move(code_name)) {}

OutOfMemoryError::OutOfMemoryError(const std::string& what, int device, std::size_t requested,
                                   std::size_t free_bytes, std::size_t total_bytes)
    : AcceleratorError(errc::out_of_memory, "CUDA_ERROR_OUT_OF_MEMORY", what),
      device_(device), requested_(requested), free_(free_bytes), total_(total_bytes) {}

IoError::IoError(int error_number, std::string path, const std::string& what)
    : Error(what), errno_(error_number), path_(std::move(path)) {}

const char* error_code_name(int code) noexcept {
  switch (code) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 217: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 300: return "CUDA_ERROR_INVALID_SOURCE";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case 704: return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
    case 705: return "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED";
    case 709: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case 902: return "CUDA_ERROR_STREAM_CAPTURE_MERGE";
    case 903: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED";
    case 904: return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED";
    case 905: return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION";
    case 906: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT";
    case 907: return "CUDA_ERROR_CAPTURED_EVENT";
    case 908: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
    case 914: return "CUDA_ERROR_INVALID_RESOURCE_TYPE";
    case 915: return "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUDA_ERROR_UNRECOGNIZED";
  }
}

void throw_accelerator_error(int code, const std::string& what) {
  if (code == 0) return;
  std::string name = error_code_name(code);
  if (code == errc::out_of_memory) {
    throw OutOfMemoryError(what + ": " + name, -1, 0);
  }
  throw AcceleratorError(code, name, what + ": " + name + " (code " + std::to_string(code) + ")");
}

}  // namespace cudakit
