// An LMDB database without a stoker schema whose sample is several keys, one per field, as the
// widely copied text-recognition and detection scripts write them: `image-000000001`,
// `label-000000001`, ..., and `num-samples`. Options::lmdb_keys names the fields and their keys:
//
//   "image=image-{:09d},label=label-{:09d}"        two bytes fields
//   "image=img-{},label=lbl-{}:i64"                 label: decimal text, delivered as i64
//
// Each entry is NAME=TEMPLATE[:TYPE]. The template holds one index placeholder, `{}` (plain decimal)
// or `{:0Nd}` (zero-padded to N digits); TYPE is `bytes` (the value as it is, the default) or a
// number type (i8 ... i64, u8 ... u64, f32, f64) whose values are decimal text ("17", "-3", "0.25";
// surrounding spaces allowed), delivered as a scalar of that type. The first sample is key index 0
// or, when the database has no key of index 0 and has one of index 1 (those scripts count from 1),
// key index 1. Options::lmdb_count_key optionally names a key whose decimal value is the count,
// checked against the keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/schema.h"

namespace stoker::formats {

struct KeyTemplate {
  std::string field;
  std::string prefix, suffix;  // around the index
  std::size_t width = 0;       // zero-padded digits; 0: plain decimal
  bool bytes = true;           // else a number of `dtype`, parsed from text
  DType dtype = DType::u8;

  // The key of index i, in buf; returns its length. REQUIRES buf holds prefix + 20 + suffix.
  std::size_t key(std::uint64_t i, char* buf) const;
  // The index a key spells in this template, or nullopt.
  std::optional<std::uint64_t> parse(std::string_view key) const;
  // The schema field it makes.
  Field as_field() const;
  std::string text() const;  // "label-{:09d}"
};

// Parses Options::lmdb_keys; throws stoker::Error (invalid_option) naming the entry that is wrong.
std::vector<KeyTemplate> parse_key_templates(std::string_view spec);

// A value of a number template, decimal text, written as its dtype to `out` (dtype_size bytes);
// returns false for text that is not such a number (or out of the type's range).
bool parse_number_value(std::span<const std::byte> value, DType dtype, std::byte* out);

}  // namespace stoker::formats
