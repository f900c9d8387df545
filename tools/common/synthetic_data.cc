#include "tools/common/synthetic_data.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/lmdb/lmdb_writer.h"
#include "stoker/digest.h"

namespace stoker::tools {
namespace {

constexpr std::uint64_t kBlock = 1024;

// 4 bits of noise on a level that changes every 1024 samples: deflate halves it, about what it does
// to decoded photos, so the gzip variant exercises real inflation.
void fill_image(std::byte* out, std::size_t bytes, std::uint64_t index) {
  std::uint64_t noise = 0;
  for (std::size_t k = 0; k < bytes; ++k) {
    if (k % 16 == 0) {
      const std::uint64_t at = k / 16;  // 64 bits of noise per 16 bytes, unrelated between samples
      noise = XXH64(&at, sizeof at, index);
    }
    auto level = static_cast<unsigned>(index / 1024 * 16);
    out[k] = static_cast<std::byte>((level & 0xf0u) | (noise & 0x0fu));
    noise >>= 4;
  }
}

std::int64_t label_of(std::uint64_t index) { return static_cast<std::int64_t>(index % 1000); }

}  // namespace

Schema image_schema(std::uint64_t num_samples, std::int64_t side) {
  Schema s;
  s.num_samples = num_samples;
  s.fields = {{"image", FieldKind::fixed, DType::u8, {3, side, side}}, {"label", FieldKind::fixed, DType::i64, {}}};
  return s;
}

void write_synthetic_hdf5(const std::string& path, const Schema& schema, const formats::Hdf5WriteOptions& options,
                          const std::function<void(std::uint64_t)>& progress) {
  formats::Hdf5Writer w(path, schema, options);
  const std::size_t image_bytes = schema.fields[0].bytes_per_sample();
  std::vector<std::byte> images(kBlock * image_bytes);
  std::vector<std::int64_t> labels(kBlock);
  for (std::uint64_t start = 0; start < schema.num_samples; start += kBlock) {
    std::uint64_t n = std::min(kBlock, schema.num_samples - start);
    for (std::uint64_t k = 0; k < n; ++k) {
      fill_image(images.data() + k * image_bytes, image_bytes, start + k);
      labels[k] = label_of(start + k);
    }
    w.write(0, start, n, images.data());
    w.write(1, start, n, labels.data());
    if (progress) progress(start + n);
  }
  w.close();
}

void write_synthetic_lmdb(const std::string& path, const Schema& schema,
                          const std::function<void(std::uint64_t)>& progress) {
  formats::LmdbWriter w(path, schema, {});
  const std::size_t image_bytes = schema.fields[0].bytes_per_sample();
  std::vector<std::byte> record(image_bytes + 8);
  ContentDigest digest;
  for (std::uint64_t i = 0; i < schema.num_samples; ++i) {
    fill_image(record.data(), image_bytes, i);
    std::int64_t label = label_of(i);
    std::memcpy(record.data() + image_bytes, &label, 8);
    digest.add(i, record);
    w.append(record.data());
    if (progress && (i + 1) % kBlock == 0) progress(i + 1);
  }
  w.finish(digest.hex());
  if (progress) progress(schema.num_samples);
}

}  // namespace stoker::tools
