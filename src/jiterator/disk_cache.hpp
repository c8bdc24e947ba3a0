// The jiterator's disk cache: one file per compiled image, named by a hash of its key and
// holding the full key, so a hash collision or a stale entry can never load the wrong code.
//
// Entry format (little-endian, as written by this machine):
//   "CKJIT001"           8 bytes magic (the format version)
//   u64 key_size, u64 image_size, u64 checksum (FNV-1a 64 of key then image)
//   key bytes, image bytes
// An entry that is short, has another magic, another key or a wrong checksum is rejected
// (a miss; counted) and rewritten by the next compile. Writers write a temporary file in the
// same directory and rename() it over the entry: readers in other processes see the old
// entry, the new one, or none — never a partial one. Two processes compiling the same kernel
// both write; the last rename wins, with identical content.
//
// Location: $CUDAKIT_CACHE_DIR/jiterator, else $XDG_CACHE_HOME/cudakit/jiterator, else
// $HOME/.cache/cudakit/jiterator; CUDAKIT_JITERATOR_DISK_CACHE=0 disables it. Directories we
// create are 0700. A directory not owned by us or writable by group/others disables the cache:
// the emulated backend loads cached images as shared objects, so such a directory would let
// another user run code in this process.
//
// Thread-safety: the directory is settled once (function-local static); read/write are
// reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudakit::jit {

// FNV-1a 64 (file names, checksums: not a security boundary; the key inside is compared).
std::uint64_t fnv1a64(std::string_view data, std::uint64_t seed = 0xcbf29ce484222325ull);

class DiskCache {
 public:
  // The process's cache, configured from the environment on first use.
  static DiskCache& instance();
  // A cache in `dir` (tests; "" = disabled). Creates it (0700) if needed.
  explicit DiskCache(std::string dir);

  const std::string& dir() const noexcept { return dir_; }  // "" when disabled
  const std::string& reason() const noexcept { return reason_; }  // why disabled

  enum class Lookup { hit, miss, rejected };
  // The image stored for `key` in `file` (a name inside dir()).
  Lookup read(const std::string& file, const std::string& key, std::vector<char>& image) const;
  // Best effort: false when the entry could not be written (full disk, read-only dir).
  bool write(const std::string& file, const std::string& key, const std::vector<char>& image) const;

 private:
  std::string dir_, reason_;
};

}  // namespace cudakit::jit
