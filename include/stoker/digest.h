// stoker/digest.h: digests that prove two loaders delivered the same data (docs/digest.md).
//
// content_digest = (sum over delivered samples of XXH64(sample bytes, seed = sample index))
// mod 2^64, where a sample's bytes are its fields' raw little-endian C-order bytes concatenated in
// field order. It does not depend on order, workers or shuffling, works as a running sum, and is
// equal for an HDF5 file and the LMDB database converted from it.
// order_digest = XXH64 (seed 0) of the delivered sample indices as little-endian uint64, in
// delivery order. Both print as 16 lowercase hex digits. Not synchronised.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "stoker/batch.h"
#include "stoker/export.h"

namespace stoker {

class STOKER_API ContentDigest {
 public:
  explicit ContentDigest(std::uint64_t initial = 0) : sum_(initial) {}
  // One sample whose field bytes are contiguous.
  void add(std::uint64_t index, std::span<const std::byte> sample_bytes);
  // Every sample of a batch, fields in the batch's order; a batch on a device is copied back to
  // the host for it (Batch::copy_field_to_host).
  void add(const Batch& batch);
  std::uint64_t value() const noexcept { return sum_; }
  std::string hex() const;

 private:
  std::uint64_t sum_;
};

class STOKER_API OrderDigest {
 public:
  OrderDigest();
  ~OrderDigest();
  OrderDigest(const OrderDigest&) = delete;
  OrderDigest& operator=(const OrderDigest&) = delete;
  void add(std::span<const std::uint64_t> indices);
  void add(const Batch& batch) { add(batch.indices()); }
  std::uint64_t value() const;
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// 16 lowercase hex digits.
STOKER_API std::string digest_hex(std::uint64_t v);

}  // namespace stoker
