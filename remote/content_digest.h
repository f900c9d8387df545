// The digest a cached object's record keeps of its bytes (XXH3, 64 bits): computed as a download
// writes them, and again from the file when a later boot must check it (remote/cache_record.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct XXH3_state_s;

namespace stoker::remote {

class ContentDigest {
 public:
  ContentDigest();  // throws stoker::Error (io) when out of memory
  void add(const void* data, std::size_t n) noexcept;
  // The first `bytes` of the file `fd` (named `path` in errors), read with pread. Throws
  // stoker::Error (io) for a read that fails or a file shorter than `bytes`.
  void add_file(int fd, std::uint64_t bytes, const std::string& path);
  void restart() noexcept;  // as if made anew
  std::uint64_t value() const noexcept;

 private:
  struct Free {
    void operator()(XXH3_state_s* state) const noexcept;
  };
  std::unique_ptr<XXH3_state_s, Free> state_;
};

}  // namespace stoker::remote
