// stoker/batch.h: one batch handed out by a Loader.
//
// A Batch owns one slot of the loader's ring. Its field views and indices point into that slot and
// stay valid until the Batch is destroyed or release() is called; destroying it returns the slot,
// on any thread, and may outlive the Loader. Move-only. Not synchronised: one thread uses a Batch
// at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "stoker/dtype.h"

namespace stoker {

namespace detail {
class SlotPool;
}

// One field of a batch: a C-order array [batch size, field shape...].
struct FieldView {
  std::string_view name;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;  // shape[0] is the number of samples in the batch
  const std::byte* data = nullptr;
  std::size_t bytes = 0;

  // The elements as T; T's size must match the dtype's.
  template <class T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(data), bytes / sizeof(T)};
  }
};

class Batch {
 public:
  Batch() = default;
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch();

  // False for a default-constructed, moved-from or released Batch.
  explicit operator bool() const noexcept { return pool_ != nullptr; }

  std::uint64_t epoch() const noexcept { return epoch_; }
  // Position of this batch within its epoch (0-based).
  std::uint64_t index() const noexcept { return index_; }
  // Number of samples.
  std::size_t size() const noexcept { return indices_.size(); }
  // Dataset indices of the samples, in batch order.
  std::span<const std::uint64_t> indices() const noexcept { return indices_; }
  std::span<const FieldView> fields() const noexcept { return fields_; }
  // Throws stoker::Error naming the field and the ones present.
  const FieldView& field(std::string_view name) const;
  const FieldView& operator[](std::string_view name) const { return field(name); }

  // Returns the slot to the loader now; the views become invalid.
  void release() noexcept;

 private:
  friend class detail::SlotPool;
  std::shared_ptr<detail::SlotPool> pool_;
  std::uint32_t slot_ = 0;
  std::uint64_t epoch_ = 0;
  std::uint64_t index_ = 0;
  std::span<const std::uint64_t> indices_;
  std::vector<FieldView> fields_;
};

}  // namespace stoker
