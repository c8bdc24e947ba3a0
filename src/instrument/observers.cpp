// The observer tables' slots (observers.hpp). Constant-initialised, so a call during static
// initialisation (the sanitizer's environment switch) finds them ready.
#include "instrument/observers.hpp"

namespace cudakit::instrument::detail {

constinit std::atomic<const StreamObserver*> g_stream_observer{nullptr};
constinit std::atomic<const StreamObserver*> g_installed{nullptr};

}  // namespace cudakit::instrument::detail

#include "instrument/stream_lifetime.hpp"

namespace cudakit::instrument::detail {

constinit std::atomic<StreamRetiringHook> g_stream_retiring{nullptr};

}  // namespace cudakit::instrument::detail
