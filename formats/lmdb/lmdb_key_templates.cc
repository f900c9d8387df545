#include "formats/lmdb/lmdb_key_templates.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "stoker/error.h"

namespace stoker::formats {
namespace {

constexpr std::size_t kMaxWidth = 20;  // the digits of 2^64 - 1

[[noreturn]] void bad_entry(std::string_view entry, const std::string& why) {
  throw Error(ErrorCode::invalid_option,
              fmt::format("lmdb_keys: '{}' {} (an entry is NAME=TEMPLATE[:TYPE], the template holding {{}} or "
                          "{{:0Nd}}, e.g. image=image-{{:09d}},label=label-{{:09d}}:i64)",
                          entry, why));
}

bool is_number_type(DType t) { return t != DType::b8 && t != DType::f16 && t != DType::bf16; }

template <class T>
bool parse_as(std::string_view text, std::byte* out) {
  T v{};
  const char* end = text.data() + text.size();
  std::from_chars_result r;
  // A sign once: '+' is taken as Python's int() and float() take it (from_chars does not), but not
  // before another sign ("+-5").
  const bool plus = text.size() > 1 && text.front() == '+' && text[1] != '-' && text[1] != '+';
  const char* begin = text.data() + (plus ? 1 : 0);
  if constexpr (std::is_floating_point_v<T>) {
    r = std::from_chars(begin, end, v, std::chars_format::general);
    if (r.ec == std::errc() && !std::isfinite(v)) return false;
  } else {
    r = std::from_chars(begin, end, v);
  }
  if (r.ec != std::errc() || r.ptr != end) return false;
  std::memcpy(out, &v, sizeof v);
  return true;
}

}  // namespace

std::size_t KeyTemplate::key(std::uint64_t i, char* buf) const {
  std::memcpy(buf, prefix.data(), prefix.size());
  char digits[kMaxWidth + 1];
  const auto r = std::to_chars(digits, digits + sizeof digits, i);
  const std::size_t n = static_cast<std::size_t>(r.ptr - digits);
  std::size_t at = prefix.size();
  for (std::size_t pad = n; pad < width; ++pad) buf[at++] = '0';
  std::memcpy(buf + at, digits, n);
  at += n;
  std::memcpy(buf + at, suffix.data(), suffix.size());
  return at + suffix.size();
}

std::optional<std::uint64_t> KeyTemplate::parse(std::string_view k) const {
  if (k.size() < prefix.size() + suffix.size() + 1 || !k.starts_with(prefix) || !k.ends_with(suffix))
    return std::nullopt;
  const std::string_view digits = k.substr(prefix.size(), k.size() - prefix.size() - suffix.size());
  if (width > 0 ? digits.size() != width && !(digits.size() > width && digits.front() != '0')
                : digits.size() > 1 && digits.front() == '0')
    return std::nullopt;  // each index has one spelling: the one key() writes
  std::uint64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return std::nullopt;
  return v;
}

Field KeyTemplate::as_field() const {
  return bytes ? Field::bytes_field(field) : Field{field, FieldKind::fixed, dtype, {}};
}

std::string KeyTemplate::text() const {
  return prefix + (width ? fmt::format("{{:0{}d}}", width) : std::string("{}")) + suffix;
}

std::vector<KeyTemplate> parse_key_templates(std::string_view spec) {
  std::vector<KeyTemplate> out;
  std::set<std::string> names;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view entry = spec.substr(start, comma - start);
    start = comma + 1;
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) bad_entry(entry, "has no NAME=");
    KeyTemplate t;
    // Spaces around a name and its template are the spelling's ("image = image-{:09d}, label = ..."),
    // not the field's or the key's.
    const auto trim = [](std::string_view v) {
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
      return v;
    };
    t.field = std::string(trim(entry.substr(0, eq)));
    if (t.field.empty()) bad_entry(entry, "has no NAME=");
    std::string_view tmpl = trim(entry.substr(eq + 1));
    const std::size_t close = tmpl.rfind('}');
    const std::size_t colon = tmpl.rfind(':');
    if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
      const std::string_view type = tmpl.substr(colon + 1);
      tmpl = tmpl.substr(0, colon);
      if (type != "bytes") {
        const auto d = parse_dtype(type);
        if (!d || !is_number_type(*d)) bad_entry(entry, fmt::format("has type '{}': bytes or a number type", type));
        t.bytes = false;
        t.dtype = *d;
      }
    }
    const std::size_t open = tmpl.find('{');
    if (open == std::string_view::npos || tmpl.find('{', open + 1) != std::string_view::npos)
      bad_entry(entry, "needs exactly one index placeholder");
    const std::size_t end = tmpl.find('}', open);
    if (end == std::string_view::npos) bad_entry(entry, "has a placeholder that is not closed");
    const std::string_view spec_text = tmpl.substr(open + 1, end - open - 1);
    if (!spec_text.empty()) {
      // ":0Nd" (or ":d")
      std::size_t w = 0;
      const bool ok = spec_text.size() >= 2 && spec_text.front() == ':' && spec_text.back() == 'd' &&
                      (spec_text.size() == 2 ||
                       (spec_text[1] == '0' &&
                        std::from_chars(spec_text.data() + 2, spec_text.data() + spec_text.size() - 1, w).ptr ==
                            spec_text.data() + spec_text.size() - 1 &&
                        w >= 1 && w <= kMaxWidth));
      if (!ok) bad_entry(entry, fmt::format("has placeholder {{{}}}: {{}} or {{:0Nd}} (N from 1 to 20)", spec_text));
      t.width = w;
    }
    t.prefix = std::string(tmpl.substr(0, open));
    t.suffix = std::string(tmpl.substr(end + 1));
    if (t.suffix.find('}') != std::string::npos) bad_entry(entry, "needs exactly one index placeholder");
    if (!names.insert(t.field).second) bad_entry(entry, fmt::format("names field '{}' twice", t.field));
    out.push_back(std::move(t));
    if (comma == spec.size()) break;
  }
  return out;
}

bool parse_number_value(std::span<const std::byte> value, DType dtype, std::byte* out) {
  std::string_view text(reinterpret_cast<const char*>(value.data()), value.size());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty() || text.size() > 64) return false;
  switch (dtype) {
    case DType::u8: return parse_as<std::uint8_t>(text, out);
    case DType::i8: return parse_as<std::int8_t>(text, out);
    case DType::u16: return parse_as<std::uint16_t>(text, out);
    case DType::i16: return parse_as<std::int16_t>(text, out);
    case DType::u32: return parse_as<std::uint32_t>(text, out);
    case DType::i32: return parse_as<std::int32_t>(text, out);
    case DType::u64: return parse_as<std::uint64_t>(text, out);
    case DType::i64: return parse_as<std::int64_t>(text, out);
    case DType::f32: return parse_as<float>(text, out);
    case DType::f64: return parse_as<double>(text, out);
    default: return false;
  }
}

}  // namespace stoker::formats
