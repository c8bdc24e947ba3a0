// EmulatedBackend: the collective-communication part of the seam (collectives.hpp), served by
// the shared-memory engine of comm_engine.hpp.
#include <thread>

#include "backend/emulated/comm_engine.hpp"
#include "backend/emulated/state.hpp"
#include "cudakit/error.hpp"

namespace cudakit::detail::emulated {

namespace {
// Ranks of comm_init_all live in one process and cannot die separately; the limit only stops
// a program that never issues the other ranks' operations from hanging forever.
constexpr std::chrono::minutes kInitAllTimeout{10};
}  // namespace

CommEngineInfo EmulatedBackend::comm_engine() noexcept {
  CommEngineInfo info;
  info.available = true;
  info.version_code = kEngineVersionCode;
  try {
    info.suffix = "emulated";
  } catch (...) {
  }
  return info;
}

nccl::UniqueId EmulatedBackend::comm_unique_id() { return make_engine_id(); }

std::shared_ptr<BackendComm> EmulatedBackend::comm_init_rank(int nranks, const nccl::UniqueId& id,
                                                             int rank, int device,
                                                             const CommInitOptions& options) {
  dev(device);  // invalid_device for a device that does not exist
  const std::string name = segment_name(id);
  auto comm = std::make_shared<EmulatedComm>(*this, nranks, rank, device, options.timeout);
  if (!options.blocking) {
    // The thread owns a reference, so the communicator outlives its join.
    std::thread([comm, name] { comm->join_named(name); }).detach();
    return comm;
  }
  comm->join_named(name);
  CommError why;
  if (comm->state(&why) == CommState::failed) throw nccl::NcclError(why.code, why.message, why.timed_out);
  return comm;
}

std::vector<std::shared_ptr<BackendComm>> EmulatedBackend::comm_init_all(
    const std::vector<int>& devices) {
  if (devices.empty()) throw ValueError("comm_init_all: the device list is empty");
  std::vector<bool> seen(devices_.size(), false);
  for (int d : devices) {
    dev(d);
    if (seen[static_cast<std::size_t>(d)]) {
      throw ValueError("comm_init_all: device " + std::to_string(d) +
                       " appears twice (one rank per device)");
    }
    seen[static_cast<std::size_t>(d)] = true;
  }
  return init_all(*this, devices, kInitAllTimeout);
}

void EmulatedBackend::comm_group_start() { group_start(); }
void EmulatedBackend::comm_group_end() { group_end(*this); }

}  // namespace cudakit::detail::emulated
