#include "stoker/digest.h"

#include <fmt/format.h>
#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack
#include <xxhash.h>

#include <bit>
#include <cstring>

namespace stoker {

std::string digest_hex(std::uint64_t v) { return fmt::format("{:016x}", v); }

void ContentDigest::add(std::uint64_t index, std::span<const std::byte> sample_bytes) {
  sum_ += XXH64(sample_bytes.data(), sample_bytes.size(), index);
}

void ContentDigest::add(const Batch& batch) {
  XXH64_state_t state;
  const auto fields = batch.fields();
  for (std::size_t k = 0; k < batch.size(); ++k) {
    XXH64_reset(&state, batch.indices()[k]);
    for (const auto& f : fields) {
      const auto bytes = f.sample(k);
      XXH64_update(&state, bytes.data(), bytes.size());
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
