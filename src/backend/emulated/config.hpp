// Configuration of the emulated backend, read once from the environment when the backend is
// created: CUDAKIT_EMULATED_DEVICES / _MEMORY / _CAPABILITY / _GDS describe the emulated machine,
// CUDA_VISIBLE_DEVICES selects its devices as CUDA does. The parsers are exposed (internal
// header) so tests can exercise them directly.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace cudakit::detail::emulated {

struct Config {
  int devices = 2;                                   // CUDAKIT_EMULATED_DEVICES (the "machine")
  std::size_t memory_per_device = std::size_t{8} << 30;  // CUDAKIT_EMULATED_MEMORY
  int major = 9, minor = 0;                          // CUDAKIT_EMULATED_CAPABILITY
  // CUDAKIT_EMULATED_GDS=1: the machine has GPUDirect Storage (a model of cuFile with the
  // nvidia-fs driver: files opened with O_DIRECT register, data moves with pread/pwrite
  // straight into device memory). Default 0: no GDS, as on the H200 hosts.
  bool gds = false;
  // Machine ordinals the process sees, in visible order (CUDA_VISIBLE_DEVICES applied);
  // nullopt = all of them.
  std::optional<std::vector<int>> visible;
};

// UUID of the emulated machine's device `ordinal` ("xxxxxxxx-xxxx-..."), deterministic.
std::string device_uuid(int ordinal);

// CUDA_VISIBLE_DEVICES as CUDA (and torch's NVML path) reads it, for a machine of
// `machine_devices` devices. `text` nullptr (unset) = all devices. Otherwise a comma-separated
// list of either ordinals or UUIDs ("GPU-" + a unique prefix of the UUID):
//   * each ordinal is read like strtoul after trimming blanks ("1gpu" is 1); an entry that
//     is not a number, is negative, or is >= machine_devices ends the list there;
//   * a UUID entry that is not "GPU-"-prefixed, or matches no device or several, ends it;
//   * a repeated device makes the whole list empty (no devices), as in CUDA;
//   * "" is no devices.
// Returns the visible machine ordinals in order. Never throws.
std::vector<int> parse_visible_devices(const char* text, int machine_devices);

// "8589934592", "512MiB", "2GiB", "1.5GB", "64k" ... (case-insensitive). Binary units:
// K/KiB, M/MiB, G/GiB, T/TiB; decimal units: KB, MB, GB, TB; "B" or no unit = bytes.
// Throws ValueError naming `variable` and giving an example on bad input.
std::size_t parse_memory_size(const std::string& text,
                              const char* variable = "CUDAKIT_EMULATED_MEMORY");

// Builds a Config from the raw variable values (nullptr or "" = default, except
// `visible_devices`: nullptr = all, "" = none). Throws ValueError.
Config parse_config(const char* devices, const char* memory, const char* capability,
                    const char* visible_devices = nullptr, const char* gds = nullptr);

// parse_config(getenv(...)) for the five variables.
Config config_from_env();

}  // namespace cudakit::detail::emulated
