// cudakit error model: one exception hierarchy, mapped onto Python exceptions in one table
// (python/src/errors.hpp): Error -> RuntimeError, ValueError -> ValueError,
// NotSupportedError -> NotImplementedError, IoError -> OSError, AcceleratorError and
// OutOfMemoryError -> cudakit.AcceleratorError / cudakit.OutOfMemoryError (RuntimeErrors,
// as torch's).
//
// Thread-safety: exception objects are immutable after construction.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "cudakit/export.hpp"

namespace CUDAKIT_API cudakit {

// Base of every error cudakit throws. Maps to Python RuntimeError.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad argument from the caller (invalid device index, wrong dtype, ...). Maps to ValueError.
class ValueError : public Error {
 public:
  using Error::Error;
};

// A name that is not known (e.g. a sleep-pool tag nobody allocated from). Maps to Python
// cudakit.KeyNotFoundError, a KeyError that is also a ValueError (it is a bad argument).
class KeyError : public ValueError {
 public:
  using ValueError::ValueError;
};

// Feature unavailable on this backend / build / driver (e.g. NVML on the emulated backend).
// Maps to NotImplementedError in Python.
class NotSupportedError : public Error {
 public:
  using Error::Error;
};

// An error reported by the accelerator (CUDA driver or the emulated device). Carries the
// driver's error code (CUresult numbering, shared by the emulated backend) and its name.
class AcceleratorError : public Error {
 public:
  AcceleratorError(int code, std::string code_name, const std::string& what);
  int code() const noexcept { return code_; }
  const std::string& code_name() const noexcept { return code_name_; }

 private:
  int code_;
  std::string code_name_;
};

// Allocation failure after the caching allocator freed what it could. Carries sizes so a
// caller can react (shrink a batch) without parsing the message.
class OutOfMemoryError : public AcceleratorError {
 public:
  OutOfMemoryError(const std::string& what, int device, std::size_t requested_bytes,
                   std::size_t free_bytes = 0, std::size_t total_bytes = 0);
  int device() const noexcept { return device_; }
  std::size_t requested_bytes() const noexcept { return requested_; }
  std::size_t free_bytes() const noexcept { return free_; }
  std::size_t total_bytes() const noexcept { return total_; }

 private:
  int device_;
  std::size_t requested_, free_, total_;
};

// A failed file-system call (open, pread, pwrite, fstat ...) with its errno and the path it
// concerned. Maps to Python's OSError(errno, message, path), which Python turns into the
// errno's subclass (FileNotFoundError for ENOENT, PermissionError for EACCES, ...).
class IoError : public Error {
 public:
  IoError(int error_number, std::string path, const std::string& what);
  int error_number() const noexcept { return errno_; }
  const std::string& path() const noexcept { return path_; }

 private:
  int errno_;
  std::string path_;
};

// Driver error codes used by both backends (numbering of CUresult).
namespace errc {
inline constexpr int success = 0;
inline constexpr int invalid_value = 1;
inline constexpr int out_of_memory = 2;
inline constexpr int not_initialized = 3;
inline constexpr int no_device = 100;
inline constexpr int invalid_device = 101;
inline constexpr int invalid_context = 201;
inline constexpr int peer_access_unsupported = 217;
inline constexpr int invalid_handle = 400;
inline constexpr int not_found = 500;
inline constexpr int not_ready = 600;
inline constexpr int peer_access_already_enabled = 704;
inline constexpr int context_is_destroyed = 709;
inline constexpr int not_permitted = 800;
inline constexpr int not_supported = 801;
inline constexpr int stream_capture_unsupported = 900;
inline constexpr int stream_capture_invalidated = 901;
inline constexpr int stream_capture_unmatched = 903;
inline constexpr int stream_capture_unjoined = 904;
inline constexpr int stream_capture_isolation = 905;
inline constexpr int stream_capture_implicit = 906;
inline constexpr int invalid_resource_type = 914;
inline constexpr int invalid_resource_configuration = 915;
inline constexpr int unknown = 999;
}  // namespace errc

// Name of a CUresult-numbered code ("CUDA_ERROR_OUT_OF_MEMORY"), for both backends.
const char* error_code_name(int code) noexcept;

// Throws AcceleratorError(code) with `what` as context unless code == 0.
void throw_accelerator_error(int code, const std::string& what);

}  // namespace cudakit
