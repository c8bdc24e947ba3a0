// File helpers shared by the modules and the backends (ground floor: includes nothing from
// src/). Internal header.
//
// write_file_atomically: the one temporary-file-and-rename writer. Caches and rendezvous
// files are read by other processes while they are written (several processes may share a
// cache directory), so a reader must see the old file or the whole new one, never a part,
// and a crash must not leave a truncated file under the real name.
//
// Thread-safety: both functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace cudakit::detail {

// Writes the concatenation of `parts` to `path` through a sibling temporary file
// (`path`.tmp.<pid>.<n>, created exclusively with `mode` before the umask), closed and then
// renamed over `path`; two writers racing for one path both succeed and the last rename
// wins. Returns 0, or the errno of the step that failed (the temporary is removed then and
// `path` is untouched).
int write_file_atomically(const std::string& path, std::initializer_list<std::string_view> parts,
                          mode_t mode = 0666);

// "realpath size=N mtime=S.NS" of `path`: changes whenever the file is replaced or rewritten,
// for caches keyed by the file a result came from (a compiler, a loaded library). "" when
// `path` cannot be stat()ed: an unknown identity, which callers must not treat as a match.
std::string file_identity(const std::string& path);

}  // namespace cudakit::detail
