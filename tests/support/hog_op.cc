#include "tests/support/hog_op.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "stoker/error.h"
#include "stoker/pipeline.h"

namespace stoker::test {
namespace {

OpSpec hog_once_spec(const OpSpec& in, std::span<const double> args) {
  if (in.bytes || in.dtype != DType::i64 || !in.shape.empty()) throw Error("hog_once takes i64 scalars");
  if (args.size() != 2) throw Error("hog_once takes the sample to take memory at and how many MiB");
  return in;
}

void hog_once(const SampleIn& in, SampleOut& out, std::span<const double> args, SampleRandom&) {
  std::int64_t v;
  std::memcpy(&v, in.data.data(), sizeof v);
  std::memcpy(out.resize(in.dtype, {}), &v, sizeof v);
  static std::uint64_t seen = 0;  // samples this process has passed through
  const char* marker = std::getenv(kHogMarkerEnv);
  if (seen++ != static_cast<std::uint64_t>(args[0]) || !marker) return;
  const int fd = ::open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;  // another process took it already
  ::close(fd);
  const std::size_t bytes = static_cast<std::size_t>(args[1]) << 20;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw Error("hog_once: mmap failed");
  std::memset(p, 1, bytes);  // resident, page by page, until the memory limit is reached
  for (;;) ::pause();        // held: only a kill ends it
}

}  // namespace
}  // namespace stoker::test

STOKER_REGISTER_OP(hog_once, stoker::test::hog_once_spec, stoker::test::hog_once);
