#include "remote/content_digest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <vector>

#include "base/posix_error.h"
#include "stoker/error.h"

namespace stoker::remote {

void ContentDigest::Free::operator()(XXH3_state_s* state) const noexcept { (void)XXH3_freeState(state); }

ContentDigest::ContentDigest() : state_(XXH3_createState()) {
  if (!state_) throw Error(ErrorCode::io, "out of memory for a digest's state");
  restart();
}

void ContentDigest::add(const void* data, std::size_t n) noexcept {
  (void)XXH3_64bits_update(state_.get(), data, n);  // fails only for a null state
}

void ContentDigest::add_file(int fd, std::uint64_t bytes, const std::string& path) {
  (void)::posix_fadvise(fd, 0, static_cast<off_t>(bytes), POSIX_FADV_SEQUENTIAL);  // advice only
  std::vector<char> buffer(std::min<std::uint64_t>(bytes, std::uint64_t{1} << 20));
  for (std::uint64_t at = 0; at < bytes;) {
    const ssize_t n =
        ::pread(fd, buffer.data(), std::min<std::uint64_t>(buffer.size(), bytes - at), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error::from_errno(errno, "reading " + path);
    if (n == 0) {
      throw Error(ErrorCode::io, fmt::format("{}: ends after {} bytes, {} were expected", path, at, bytes));
    }
    add(buffer.data(), static_cast<std::size_t>(n));
    at += static_cast<std::uint64_t>(n);
  }
}

void ContentDigest::restart() noexcept { (void)XXH3_64bits_reset(state_.get()); }

std::uint64_t ContentDigest::value() const noexcept { return XXH3_64bits_digest(state_.get()); }

}  // namespace stoker::remote
