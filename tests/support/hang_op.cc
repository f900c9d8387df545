#include "tests/support/hang_op.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "stoker/error.h"
#include "stoker/pipeline.h"

namespace stoker::test {
namespace {

OpSpec hang_once_spec(const OpSpec& in, std::span<const double> args) {
  if (in.bytes || in.dtype != DType::i64 || !in.shape.empty()) throw Error("hang_once takes i64 scalars");
  if (args.size() != 1) throw Error("hang_once takes the value to hang at");
  return in;
}

void hang_once(const SampleIn& in, SampleOut& out, std::span<const double> args, SampleRandom&) {
  std::int64_t v;
  std::memcpy(&v, in.data.data(), sizeof v);
  std::memcpy(out.resize(in.dtype, {}), &v, sizeof v);
  static std::uint64_t seen = 0;  // samples this process has passed through
  const char* marker = std::getenv(kHangMarkerEnv);
  if (seen++ != static_cast<std::uint64_t>(args[0]) || !marker) return;
  const int fd = ::open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;  // another process hung here already
  const std::string pid = std::to_string(::getpid());
  (void)!::write(fd, pid.data(), pid.size());
  ::close(fd);
  for (;;) ::pause();
}

}  // namespace
}  // namespace stoker::test

STOKER_REGISTER_OP(hang_once, stoker::test::hang_once_spec, stoker::test::hang_once);
