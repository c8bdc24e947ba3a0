// Configuration of the emulated backend, read once from the environment when the backend is
// created. The parsers are exposed (internal header) so tests can exercise them directly.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>

namespace cudakit::detail::emulated {

struct Config {
  int devices = 2;                                   // CUDAKIT_EMULATED_DEVICES
  std::size_t memory_per_device = std::size_t{8} << 30;  // CUDAKIT_EMULATED_MEMORY
  int major = 9, minor = 0;                          // CUDAKIT_EMULATED_CAPABILITY
};

// "8589934592", "512MiB", "2GiB", "1.5GB", "64k" ... (case-insensitive). Binary units:
// K/KiB, M/MiB, G/GiB, T/TiB; decimal units: KB, MB, GB, TB; "B" or no unit = bytes.
// Throws ValueError naming `variable` and giving an example on bad input.
std::size_t parse_memory_size(const std::string& text,
                              const char* variable = "CUDAKIT_EMULATED_MEMORY");

// Builds a Config from the raw variable values (nullptr or "" = default). Throws ValueError.
Config parse_config(const char* devices, const char* memory, const char* capability);

// parse_config(getenv(...)) for the three variables.
Config config_from_env();

}  // namespace cudakit::detail::emulated
