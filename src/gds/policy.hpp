// CUDAKIT_GDS: which I/O path GdsFile takes (gds.hpp). Read at every handle registration, so a
// process may switch between files.
#pragma once

namespace cudakit::gds {

enum class Policy { automatic, compat, gds };

// "auto" / unset / "" -> automatic, "compat", "gds". ValueError naming the variable otherwise.
Policy parse_policy(const char* text);
Policy policy_from_env();

}  // namespace cudakit::gds
