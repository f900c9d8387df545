#include "loader/producers/slot_check.h"

#include <fmt/format.h>

#include <algorithm>

#include "loader/producers/slot_task.h"

namespace stoker::detail {
namespace {

std::string check_task(const SlotHeader& h, const std::uint64_t* indices, const EpochPlan& plan, std::uint64_t b,
                       std::uint64_t digest) {
  const std::uint64_t n = plan.batch_length(b);
  if (h.task_id != b || h.epoch != plan.epoch || h.batch_index != b || h.num_samples != n) {
    return fmt::format(
        "its header says task {}, epoch {}, batch {} of {} samples; the consumer asked for batch {} "
        "of epoch {}, {} samples",
        h.task_id, h.epoch, h.batch_index, h.num_samples, b, plan.epoch, n);
  }
  if (indices_digest(indices, n) != digest) return "its sample indices are not the task's";
  return "";
}

std::string check_bytes_field(const SegmentView& view, const Field& field, std::uint32_t s, std::size_t f,
                              std::uint32_t n) {
  const std::uint64_t* offsets = view.slot_offsets(s, f);
  if (offsets[0] != 0) return fmt::format("field '{}': its offsets start at {}, not 0", field.name, offsets[0]);
  const std::size_t element = dtype_size(field.dtype);
  for (std::uint32_t k = 0; k < n; ++k) {
    if (offsets[k + 1] < offsets[k]) {
      return fmt::format("field '{}': offset {} ({}) is below offset {} ({})", field.name, k + 1, offsets[k + 1], k,
                         offsets[k]);
    }
    if (offsets[k + 1] % element != 0) {
      return fmt::format("field '{}': offset {} ({}) is not a whole number of its {}-byte elements", field.name, k + 1,
                         offsets[k + 1], element);
    }
  }
  if (offsets[n] > view.data_capacity(f)) {
    return fmt::format("field '{}': its {} bytes overrun the field's region of {}", field.name, offsets[n],
                       view.data_capacity(f));
  }
  return "";
}

}  // namespace

std::string check_filled_slot(const SegmentView& view, const Schema& schema, std::uint32_t s, const EpochPlan& plan,
                              std::uint64_t b, std::uint64_t digest) {
  const SlotHeader& h = view.slot_header(s);
  if (std::string why = check_task(h, view.slot_indices(s), plan, b, digest); !why.empty()) return why;
  switch (static_cast<SlotStatus>(h.status)) {
    case SlotStatus::ok:
      if (std::string why = view.check_skipped(s, h.num_samples); !why.empty()) return why;
      for (std::size_t f = 0; f < schema.fields.size(); ++f) {
        if (!schema.fields[f].is_bytes()) continue;
        if (std::string why = check_bytes_field(view, schema.fields[f], s, f, h.num_samples); !why.empty()) return why;
      }
      return "";
    case SlotStatus::error:
      if (h.error_bytes > kErrorTextBytes) {
        return fmt::format("its error text of {} bytes overruns its region of {}", h.error_bytes, kErrorTextBytes);
      }
      return "";
    case SlotStatus::too_large:
      if (h.needed_bytes == 0) return "it is too large by 0 bytes";
      return view.check_skipped(s, h.num_samples);
    case SlotStatus::empty: break;
  }
  return fmt::format("its status is {}, which no stoker worker writes", h.status);
}

}  // namespace stoker::detail
