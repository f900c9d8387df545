// How a download's bytes go into its partial file (remote/http_fetch.h): the blocks of the bytes
// still to come reserved ahead of them, the bytes written in large pieces, and the reserved blocks
// given back when the download stops short. Plain system calls, each answered with an errno: the
// writes happen inside libcurl's callbacks, which must not throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace stoker::remote {

// What a download joins before it writes: libcurl hands a body over in pieces of 16 KiB at most,
// whatever its buffer, and a write of 16 KiB costs ext4 twice the CPU per byte of a write of 1 MiB
// (0.29 against 0.15 s for 768 MiB here). Written 1 MiB at a time into reserved blocks, a cold
// epoch of 768 MiB took the loader 0.75 CPU seconds here instead of 1.45.
inline constexpr std::size_t kPartialWriteBytes = std::size_t{1} << 20;

// "writing the download of s3://b/k.h5: No space left on device (3158073 of its 3158073 bytes still
// to come)": a write at `at` into the download of `name`, `size` bytes, failed with errno `err`.
std::string write_error(const std::string& name, int err, std::uint64_t at, std::uint64_t size);

// Reserves the file's blocks from `from` to `size`, its size left as it is (it says where a resume
// starts): writes into reserved blocks cost ext4 a third less CPU (0.09 against 0.14 s for 768 MiB
// in writes of 1 MiB), and a disk too full for the object fails here, before a byte of it is
// fetched. Returns 0, or the errno of a reservation that failed (a write would fail alike: what it
// got is given back); a filesystem that cannot reserve (NFSv3, FUSE: EOPNOTSUPP) answers 0.
int reserve_blocks(int fd, std::uint64_t from, std::uint64_t size) noexcept;

// Gives back the blocks reserved past the file's end, `size`: a download that failed or was
// stopped keeps no more of the disk than its bytes. (A truncation to the same size frees them on
// ext4, XFS and tmpfs; ext4 punches no hole past a file's end.)
void release_reserved(int fd, std::uint64_t size) noexcept;

// Writes `n` bytes at `at`, short writes and EINTR continued. Returns 0, or the errno of the write
// that failed (ENOSPC for one that wrote nothing), `written` bytes having made it.
int write_all(int fd, const char* data, std::size_t n, std::uint64_t at, std::uint64_t& written) noexcept;

// The disk a file takes, its reserved blocks included (0 when there is no such file): a partial
// download's blocks are no longer in the free space, and a room check counts them as the file's.
std::uint64_t allocated_bytes(const std::string& path);

}  // namespace stoker::remote
