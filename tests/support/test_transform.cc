#include "tests/support/test_transform.h"

#include <unistd.h>

#include <cstring>
#include <span>
#include <string>

#include "stoker/error.h"

namespace stoker::test {
namespace {

class TwiceAndIds final : public SampleTransform {
 public:
  explicit TwiceAndIds(std::int64_t factor) : factor_(factor) {}
  void apply(std::span<const SampleField> in, std::uint64_t, std::uint64_t index, SampleSink& out) override {
    if (factor_ == 7 && index == 13) throw Error(ErrorCode::transform, "thirteen");
    std::int64_t label = 0;
    for (const SampleField& f : in) {
      if (f.name == "label") std::memcpy(&label, f.data.data(), sizeof label);
    }
    const auto twice = static_cast<std::int64_t>(static_cast<std::uint64_t>(label) * 2u *
                                                 static_cast<std::uint64_t>(factor_));  // wraps, as the test's
    out.put({"twice", DType::i64, {}, std::as_bytes(std::span(&twice, 1))});
    const std::vector<std::int32_t> ids(index % 5, static_cast<std::int32_t>(index));
    const std::int64_t n = static_cast<std::int64_t>(ids.size());
    out.put({"ids", DType::i32, {&n, 1}, std::as_bytes(std::span(ids))});
  }

 private:
  std::int64_t factor_;
};

}  // namespace

std::shared_ptr<SampleTransform> twice_and_ids(std::int64_t factor) { return std::make_shared<TwiceAndIds>(factor); }

std::vector<TransformField> twice_and_ids_fields() {
  return {{"twice", DType::i64, {}, false, 0}, {"ids", DType::i32, {1}, true, 64}};
}

void serve_test_transform_host() {
  // Questions: "pid" (its pid), "exit" (exits with status 3), "throw" (its answer function throws);
  // any other q is answered "answer to q".
  const TransformAnswer answer = [](const std::string& q) -> std::string {
    if (q == "pid") return std::to_string(::getpid());
    if (q == "exit") ::_exit(3);
    if (q == "throw") throw Error(ErrorCode::transform, "stoker: this host answers no such question");
    return "answer to " + q;
  };
  serve_transform_host([](const std::string& payload) { return twice_and_ids(std::stoll(payload)); }, {}, answer);
}

}  // namespace stoker::test
