// The device-index check shared by every module (devices/resolve.hpp).
#include "devices/resolve.hpp"

#include <cstdlib>
#include <string>

#include "backend/device_ops.hpp"
#include "cudakit/device.hpp"
#include "cudakit/error.hpp"
#include "devices/sync_debug.hpp"

namespace cudakit {

std::string invalid_device_message(std::int64_t device) {
  const int n = detail::cached_device_count();
  std::string m = "Invalid device index " + std::to_string(device) + ": this process sees " +
                  std::to_string(n) + " device(s) on the '" + backend_name() + "' backend, so ";
  m += n > 0 ? "valid indices are 0.." + std::to_string(n - 1) : std::string("no index is valid");
  m += "; CUDA_VISIBLE_DEVICES=";
  // The backend read it when it started; a later change does not add devices.
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  m += visible ? "'" + std::string(visible) + "'" : std::string("unset");
  return m;
}

namespace detail {

void throw_invalid_device(std::int64_t device) { throw ValueError(invalid_device_message(device)); }

int resolve_device_index(int device) {
  if (device == kCurrentDevice) return device_ops().current_device();
  if (device < 0 || device >= cached_device_count()) [[unlikely]] throw_invalid_device(device);
  return device;
}

}  // namespace detail
}  // namespace cudakit
