// Pipeline text (Options::pipeline): parsed and built against a schema with a bytes and a fixed
// image field, or refused with an Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "loader/pipeline/pipeline.h"
#include "stoker/error.h"

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
    // A fixed input runs through whatever was accepted for it (outputs of up to 1 MiB: a pipeline
    // may legitimately ask for a 900 MB image, which only takes long).
    if (p.transforms(1) && p.output().fields[1].bytes_per_sample() <= (1u << 20)) {
      std::byte in[90] = {};
      std::vector<std::byte> out(p.output().fields[1].bytes_per_sample());
      p.run(1, in, 0, 3, out.data());
    }
  } catch (const stoker::Error&) {
  }
  return 0;
}
