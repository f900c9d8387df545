#include "loader/shm/segment_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace stoker::detail {
namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kLine = 64;

constexpr std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// A channel: tasks.write, tasks.read, done.write, done.read, cpu_ns, progress (with sample), each
// on its own cache line, then the two rings' items.
constexpr std::size_t kChannelCounters = 6;
std::size_t channel_bytes(std::uint32_t num_slots) {
  return align_up(kChannelCounters * kLine + 2 * align_up(num_slots * sizeof(std::uint32_t), kLine), kLine);
}

}  // namespace

SegmentLayout::SegmentLayout(const Schema& schema, std::size_t batch_size, std::uint32_t num_workers,
                             const std::vector<std::uint64_t>& sample_bound)
    : schema_(schema), sample_bound_(sample_bound), batch_size_(batch_size), num_workers_(num_workers) {
  error_offset_ = indices_offset_ + align_up(batch_size * sizeof(std::uint64_t), kLine);
  skipped_offset_ = error_offset_ + kErrorTextBytes;
  stages_offset_ = skipped_offset_ + align_up((batch_size + 1) * sizeof(std::uint32_t), kLine);
  std::size_t off = stages_offset_ + (kStageSlots + 1) * sizeof(std::uint64_t);
  for (std::size_t i = 0; i < schema.fields.size(); ++i) {
    const Field& f = schema.fields[i];
    off = align_up(off, kLine);
    field_offsets_.push_back(off);
    if (f.is_bytes()) {
      off = align_up(off + (batch_size + 1) * sizeof(std::uint64_t), kLine);
      data_offsets_.push_back(off);
      // The bound is at most kMaxSampleBytes, so this cannot overflow for any batch size that fits memory.
      const std::uint64_t bound =
          std::clamp<std::uint64_t>(i < sample_bound.size() ? sample_bound[i] : 0, 1, kMaxSampleBytes);
      data_capacity_.push_back(align_up(bound * batch_size, kLine));
      off += data_capacity_.back();
    } else {
      data_offsets_.push_back(off);
      data_capacity_.push_back(0);
      off += f.bytes_per_sample() * batch_size;
    }
  }
  slot_bytes_ = align_up(off, kPage);
}

std::size_t SegmentLayout::control_bytes(std::uint32_t num_slots) const noexcept {
  std::size_t fields = sizeof(SegmentHeader) + schema_.fields.size() * sizeof(FieldLayout);
  return align_up(align_up(fields, kLine) + num_workers_ * channel_bytes(num_slots), kPage);
}

std::size_t SegmentLayout::segment_bytes(std::uint32_t num_slots) const noexcept {
  return control_bytes(num_slots) + num_slots * slot_bytes_;
}

void SegmentLayout::initialize(std::byte* base, std::uint32_t num_slots) const {
  auto* h = new (base) SegmentHeader{};
  std::memcpy(h->magic, kSegmentMagic, sizeof kSegmentMagic);
  h->version = kSegmentVersion;
  h->num_slots = num_slots;
  h->num_workers = num_workers_;
  h->num_fields = static_cast<std::uint32_t>(schema_.fields.size());
  h->batch_size = batch_size_;
  h->segment_bytes = segment_bytes(num_slots);
  h->control_bytes = control_bytes(num_slots);
  h->slots_offset = h->control_bytes;
  h->slot_bytes = slot_bytes_;
  h->fields_offset = sizeof(SegmentHeader);
  h->channels_offset = align_up(sizeof(SegmentHeader) + schema_.fields.size() * sizeof(FieldLayout), kLine);
  h->channel_bytes = channel_bytes(num_slots);
  auto* fl = reinterpret_cast<FieldLayout*>(base + h->fields_offset);
  for (std::size_t f = 0; f < schema_.fields.size(); ++f) {
    new (&fl[f]) FieldLayout{};
    fl[f].kind = static_cast<std::uint8_t>(schema_.fields[f].kind);
    fl[f].dtype = static_cast<std::uint8_t>(schema_.fields[f].dtype);
    fl[f].offset = field_offsets_[f];
    fl[f].bytes_per_sample = schema_.fields[f].bytes_per_sample();
    fl[f].capacity = schema_.fields[f].is_bytes() ? data_capacity_[f] : fl[f].bytes_per_sample * batch_size_;
  }
  SegmentView view(base, *this);
  new (&view.awaited_slot()) std::atomic<std::uint64_t>(0);
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    WorkerChannel c = view.channel(w);
    c.tasks.initialize();
    c.done.initialize();
    new (c.cpu_ns) std::atomic<std::uint64_t>(0);
    new (c.progress) std::atomic<std::uint64_t>(0);
    new (c.sample) std::atomic<std::uint64_t>(0);
    new (c.idle) std::atomic<std::uint64_t>(1);  // a worker not started yet is woken
  }
  for (std::uint32_t s = 0; s < num_slots; ++s) new (&view.slot_header(s)) SlotHeader{};
}

std::string SegmentLayout::check(const std::byte* base, std::size_t mapped_bytes) const {
  if (mapped_bytes < sizeof(SegmentHeader))
    return fmt::format("the segment is {} bytes, less than its header", mapped_bytes);
  SegmentHeader h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, kSegmentMagic, sizeof kSegmentMagic) != 0) return "the segment does not start with STOKERSM";
  if (h.version != kSegmentVersion) {
    return fmt::format("the segment is of layout version {}, this stoker reads version {} (docs/shm-layout.md)",
                       h.version, kSegmentVersion);
  }
  const std::size_t fields_end = sizeof(SegmentHeader) + schema_.fields.size() * sizeof(FieldLayout);
  const std::pair<const char*, std::pair<std::uint64_t, std::uint64_t>> sizes[] = {
      {"num_workers", {h.num_workers, num_workers_}},
      {"num_fields", {h.num_fields, schema_.fields.size()}},
      {"batch_size", {h.batch_size, batch_size_}},
      {"segment_bytes", {h.segment_bytes, mapped_bytes}},
      {"segment_bytes for its slots", {h.segment_bytes, segment_bytes(h.num_slots)}},
      {"control_bytes", {h.control_bytes, control_bytes(h.num_slots)}},
      {"slots_offset", {h.slots_offset, control_bytes(h.num_slots)}},
      {"slot_bytes", {h.slot_bytes, slot_bytes_}},
      {"fields_offset", {h.fields_offset, sizeof(SegmentHeader)}},
      {"channels_offset", {h.channels_offset, align_up(fields_end, kLine)}},
      {"channel_bytes", {h.channel_bytes, channel_bytes(h.num_slots)}},
  };
  for (const auto& [name, v] : sizes) {
    if (v.first != v.second)
      return fmt::format("the segment's {} is {}, this loader's layout makes {}", name, v.first, v.second);
  }
  if (mapped_bytes < fields_end) return "the segment is smaller than its field table";
  for (std::size_t f = 0; f < schema_.fields.size(); ++f) {
    FieldLayout fl;
    std::memcpy(&fl, base + sizeof(SegmentHeader) + f * sizeof(FieldLayout), sizeof fl);
    const Field& field = schema_.fields[f];
    const std::uint64_t capacity = field.is_bytes() ? data_capacity_[f] : field.bytes_per_sample() * batch_size_;
    if (fl.kind != static_cast<std::uint8_t>(field.kind) || fl.dtype != static_cast<std::uint8_t>(field.dtype) ||
        fl.offset != field_offsets_[f] || fl.bytes_per_sample != field.bytes_per_sample() || fl.capacity != capacity) {
      return fmt::format("the segment's field {} is laid out differently from field '{}' of this loader", f,
                         field.name);
    }
  }
  return "";
}

SegmentView::SegmentView(std::byte* base, const SegmentLayout& layout)
    : base_(base),
      header_(reinterpret_cast<const SegmentHeader*>(base)),
      indices_offset_(layout.indices_offset_),
      error_offset_(layout.error_offset_),
      skipped_offset_(layout.skipped_offset_),
      stages_offset_(layout.stages_offset_),
      field_offsets_(layout.field_offsets_),
      data_offsets_(layout.data_offsets_),
      data_capacity_(layout.data_capacity_) {}

std::byte* SegmentView::slot_begin(std::uint32_t s) const noexcept {
  return base_ + header_->slots_offset + static_cast<std::size_t>(s) * header_->slot_bytes;
}

SlotHeader& SegmentView::slot_header(std::uint32_t s) const noexcept {
  return *reinterpret_cast<SlotHeader*>(slot_begin(s));
}

std::uint64_t* SegmentView::slot_indices(std::uint32_t s) const noexcept {
  return reinterpret_cast<std::uint64_t*>(slot_begin(s) + indices_offset_);
}

char* SegmentView::slot_error(std::uint32_t s) const noexcept {
  return reinterpret_cast<char*>(slot_begin(s) + error_offset_);
}

std::uint64_t* SegmentView::slot_stage_ns(std::uint32_t s) const noexcept {
  return reinterpret_cast<std::uint64_t*>(slot_begin(s) + stages_offset_);
}

std::uint32_t* SegmentView::slot_skipped(std::uint32_t s) const noexcept {
  return reinterpret_cast<std::uint32_t*>(slot_begin(s) + skipped_offset_);
}

std::string SegmentView::check_skipped(std::uint32_t s, std::uint32_t num_samples) const {
  const std::uint32_t* region = slot_skipped(s);
  const std::uint32_t count = region[0];
  if (count > num_samples) return fmt::format("it records {} skipped samples in a batch of {}", count, num_samples);
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::uint32_t at = region[1 + k];
    if (at >= num_samples || (k > 0 && at <= region[k])) {
      return fmt::format("skipped sample {} is at position {}, not after {} and below {}", k, at,
                         k > 0 ? fmt::format("{}", region[k]) : std::string("none"), num_samples);
    }
  }
  if (const std::uint32_t notes = slot_header(s).error_bytes; notes > kErrorTextBytes)
    return fmt::format("its notes of {} bytes overrun their region of {}", notes, kErrorTextBytes);
  return "";
}

void SegmentView::copy_skipped(std::uint32_t s, std::vector<std::uint32_t>& out) const {
  out.clear();
  const std::uint32_t* region = slot_skipped(s);
  const std::uint32_t num_samples = slot_header(s).num_samples;
  const std::uint32_t count = std::min(region[0], num_samples);
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::uint32_t at = region[1 + k];
    if (at >= num_samples || (!out.empty() && at <= out.back())) break;
    out.push_back(at);
  }
}

std::byte* SegmentView::slot_field(std::uint32_t s, std::size_t f) const noexcept {
  return slot_begin(s) + field_offsets_[f];
}

WorkerChannel SegmentView::channel(std::uint32_t w) const noexcept {
  std::byte* c = base_ + header_->channels_offset + static_cast<std::size_t>(w) * header_->channel_bytes;
  const std::uint32_t n = header_->num_slots;
  std::byte* items = c + kChannelCounters * kLine;
  std::size_t ring_items = align_up(n * sizeof(std::uint32_t), kLine);
  WorkerChannel out;
  // Counters first (tasks.write, tasks.read, done.write, done.read, cpu_ns, progress with sample
  // and idle), then the items.
  out.tasks = SlotRing(c, items, n);
  out.done = SlotRing(c + 2 * kLine, items + ring_items, n);
  out.cpu_ns = reinterpret_cast<std::atomic<std::uint64_t>*>(c + 4 * kLine);
  out.progress = reinterpret_cast<std::atomic<std::uint64_t>*>(c + 5 * kLine);
  out.sample = reinterpret_cast<std::atomic<std::uint64_t>*>(c + 5 * kLine + sizeof(std::uint64_t));
  out.idle = reinterpret_cast<std::atomic<std::uint64_t>*>(c + 5 * kLine + 2 * sizeof(std::uint64_t));
  return out;
}

void SegmentView::set_error(std::uint32_t s, ErrorCode code, std::string_view message) const noexcept {
  std::size_t n = std::min(message.size(), kErrorTextBytes);
  std::memcpy(slot_error(s), message.data(), n);
  slot_header(s).error_bytes = static_cast<std::uint32_t>(n);
  slot_header(s).error_code = static_cast<std::uint32_t>(code);
}

void SegmentView::set_skip_notes(std::uint32_t s, std::string_view notes) const noexcept {
  const std::size_t n = std::min(notes.size(), kErrorTextBytes);
  std::memcpy(slot_error(s), notes.data(), n);
  slot_header(s).error_bytes = static_cast<std::uint32_t>(n);
  slot_header(s).error_code = 0;
}

Error SegmentView::slot_error_of(std::uint32_t s) const {
  return Error(error_code_from_wire(slot_header(s).error_code), std::string(error(s)));
}

std::string_view SegmentView::error(std::uint32_t s) const noexcept {
  return {slot_error(s), std::min<std::size_t>(slot_header(s).error_bytes, kErrorTextBytes)};
}

}  // namespace stoker::detail
