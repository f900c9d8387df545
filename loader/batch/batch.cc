#include "stoker/batch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "loader/batch/batch_builder.h"
#include "stoker/error.h"

namespace stoker {

namespace detail {

Batch BatchBuilder::make(std::shared_ptr<BatchOwner> owner, Parts parts) noexcept {
  Batch b;
  b.slot_ = parts.id;
  b.device_ = parts.device;
  b.ready_event_ = parts.ready_event;
  b.epoch_ = parts.epoch;
  b.index_ = parts.index;
  b.indices_ = parts.indices;
  b.skipped_ = parts.skipped;
  b.fields_ = std::move(parts.fields);
  b.owner_ = std::move(owner);  // last: from here on, destroying the Batch returns the memory
  return b;
}

}  // namespace detail

Batch::Batch(Batch&& other) noexcept
    : owner_(std::move(other.owner_)),
      slot_(other.slot_),
      device_(other.device_),
      ready_event_(std::exchange(other.ready_event_, nullptr)),
      epoch_(other.epoch_),
      index_(other.index_),
      indices_(std::exchange(other.indices_, {})),
      skipped_(std::exchange(other.skipped_, {})),
      fields_(std::move(other.fields_)) {}

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::move(other.owner_);
    slot_ = other.slot_;
    device_ = other.device_;
    ready_event_ = std::exchange(other.ready_event_, nullptr);
    epoch_ = other.epoch_;
    index_ = other.index_;
    indices_ = std::exchange(other.indices_, {});
    skipped_ = std::exchange(other.skipped_, {});
    fields_ = std::move(other.fields_);
  }
  return *this;
}

Batch::~Batch() { release(); }

void Batch::release() noexcept {
  if (owner_) {
    owner_->release(slot_);
    owner_.reset();
  }
  indices_ = {};
  skipped_ = {};
  fields_.clear();
  ready_event_ = nullptr;
}

void Batch::ready_on(void* stream) {
  if (owner_) owner_->ready_on(slot_, stream);
}

void Batch::record_stream(void* stream) {
  if (owner_) owner_->record_stream(slot_, stream);
}

void Batch::copy_field_to_host(std::size_t f, void* dst) const {
  if (!owner_) throw Error(ErrorCode::invalid_option, "batch: the batch is empty (moved from or released)");
  if (f >= fields_.size()) {
    throw Error(ErrorCode::invalid_option, fmt::format("batch: no field {} (the batch has {})", f, fields_.size()));
  }
  const FieldView& v = fields_[f];
  owner_->copy_to_host(slot_, v.data, static_cast<std::byte*>(dst), v.bytes);
}

const FieldView& Batch::field(std::string_view name) const {
  for (const auto& f : fields_) {
    if (f.name == name) return f;
  }
  std::vector<std::string_view> names;
  for (const auto& f : fields_) names.push_back(f.name);
  if (!owner_)
    throw Error(ErrorCode::invalid_option,
                fmt::format("batch: no field '{}': the batch is empty (moved from or released)", name));
  throw Error(ErrorCode::invalid_option,
              fmt::format("batch: no field '{}' (fields: {})", name, fmt::join(names, ", ")));
}

}  // namespace stoker
