// GPUDirect Storage on the emulated backend: there is none. cudakit.gds sees gds_status()
// unavailable and moves file data through its compat path (src/gds/compat_engine.cpp), the
// same path the cuda backend takes where cuFile or a GDS file system is missing. The
// registration and DMA entry points refuse as the cuda backend does without cuFile.
#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {
namespace {

constexpr const char* kNoGds =
    "the emulated backend has no GPUDirect Storage (cuFile): cudakit.gds moves file data "
    "through its compat path (O_DIRECT or buffered I/O, pinned staging buffers, copy streams)";

[[noreturn]] void no_gds(const char* what) {
  throw NotSupportedError(std::string(what) + ": " + kNoGds);
}

}  // namespace

GdsStatus EmulatedBackend::gds_status() noexcept {
  GdsStatus s;
  try {
    s.reason = kNoGds;
  } catch (...) {
  }
  return s;
}

GdsFileHandle EmulatedBackend::gds_file_register(int, std::string*) {
  no_gds("GdsFile.register_handle");
}
void EmulatedBackend::gds_file_deregister(GdsFileHandle) { no_gds("GdsFile.deregister_handle"); }
void EmulatedBackend::gds_buffer_register(void*, std::size_t) { no_gds("gds_register_buffer"); }
void EmulatedBackend::gds_buffer_deregister(void*) { no_gds("gds_deregister_buffer"); }
std::size_t EmulatedBackend::gds_read(GdsFileHandle, void*, std::size_t, std::int64_t) {
  no_gds("GdsFile.load_storage");
}
std::size_t EmulatedBackend::gds_write(GdsFileHandle, const void*, std::size_t, std::int64_t) {
  no_gds("GdsFile.save_storage");
}

}  // namespace cudakit::detail::emulated
