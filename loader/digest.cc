#include "stoker/digest.h"

#include <fmt/format.h>
#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack
#include <xxhash.h>

#include <bit>
#include <cstring>
#include <vector>

namespace stoker {

std::string digest_hex(std::uint64_t v) { return fmt::format("{:016x}", v); }

void ContentDigest::add(std::uint64_t index, std::span<const std::byte> sample_bytes) {
  sum_ += XXH64(sample_bytes.data(), sample_bytes.size(), index);
}

void ContentDigest::add(const Batch& batch) {
  const auto fields = batch.fields();
  // A staged batch's fields are in device memory: copied back first (staged batches have fixed
  // fields only, so sample k of field f is its k-th equal part).
  std::vector<std::vector<std::byte>> host;
  if (batch.device().staged()) {
    host.resize(fields.size());
    for (std::size_t f = 0; f < fields.size(); ++f) {
      host[f].resize(fields[f].bytes);
      batch.copy_field_to_host(f, host[f].data());
    }
  }
  XXH64_state_t state;
  for (std::size_t k = 0; k < batch.size(); ++k) {
    XXH64_reset(&state, batch.indices()[k]);
    for (std::size_t f = 0; f < fields.size(); ++f) {
      if (host.empty()) {
        const auto bytes = fields[f].sample(k);
        XXH64_update(&state, bytes.data(), bytes.size());
      } else {
        const std::size_t per = host[f].size() / batch.size();
        XXH64_update(&state, host[f].data() + k * per, per);
      }
    }
    sum_ += XXH64_digest(&state);
  }
}

std::string ContentDigest::hex() const { return digest_hex(sum_); }

struct OrderDigest::State {
  XXH64_state_t xxh;
};

OrderDigest::OrderDigest() : state_(std::make_unique<State>()) { XXH64_reset(&state_->xxh, 0); }
OrderDigest::~OrderDigest() = default;

void OrderDigest::add(std::span<const std::uint64_t> indices) {
  static_assert(std::endian::native == std::endian::little, "stoker assumes a little-endian host");
  XXH64_update(&state_->xxh, indices.data(), indices.size_bytes());
}

std::uint64_t OrderDigest::value() const { return XXH64_digest(&state_->xxh); }

std::string OrderDigest::hex() const { return digest_hex(value()); }

}  // namespace stoker
