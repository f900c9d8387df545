// Pipeline text (Options::pipeline): parsed and built against a schema with a bytes and a fixed
// image field, or refused with an Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "loader/pipeline/pipeline.h"
#include "stoker/error.h"

namespace {

// Whether every number written in `text` is at most 1024: then no image along the pipeline, the
// intermediate ones included (resize(6664),center_crop(7,6) ends small), is larger than 1024 x
// 1024, which an instrumented build runs quickly. A larger one only takes long, and proves nothing.
bool small_numbers_only(const std::string& text) {
  std::uint64_t n = 0;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      n = n * 10 + static_cast<std::uint64_t>(c - '0');
      if (n > 1024) return false;
    } else {
      n = 0;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const stoker::Schema kSchema = [] {
    stoker::Schema s;
    s.num_samples = 10;
    s.fields = {stoker::Field::bytes_field("jpeg"),
                stoker::Field{"img", stoker::FieldKind::fixed, stoker::DType::u8, {6, 5, 3}}};
    return s;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    stoker::check_pipeline(text);
    stoker::detail::SamplePipelines p(text, kSchema, 1, {});
    (void)p.describe();
    // A fixed input runs through whatever was accepted for it (outputs of up to 1 MiB, and no
    // image on the way larger than 1024 x 1024: a pipeline may legitimately ask for a 900 MB image,
    // which only takes long).
    if (p.transforms(1) && p.output().fields[1].bytes_per_sample() <= (1u << 20) && small_numbers_only(text)) {
      std::byte in[90] = {};
      std::vector<std::byte> out(p.output().fields[1].bytes_per_sample());
      p.run(1, in, 0, 3, out.data());
    }
  } catch (const stoker::Error&) {
  }
  return 0;
}
