// The observer tables' slots (observers.hpp). Constant-initialised, so a call during static
// initialisation (the sanitizer's environment switch) finds them ready.
#include "instrument/observers.hpp"

namespace cudakit::instrument::detail {

constinit std::atomic<const StreamObserver*> g_stream_observer{nullptr};
constinit std::atomic<const StreamObserver*> g_installed{nullptr};

}  // namespace cudakit::instrument::detail
