#include "tools/pack/pack_plan.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "stoker/digest.h"
#include "stoker/error.h"

namespace stoker::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Cells of a manifest, as messages print them.
std::vector<std::string> shown(const std::vector<std::string>& cells) {
  std::vector<std::string> out;
  out.reserve(cells.size());
  for (const auto& c : cells) out.push_back(printable(c));
  return out;
}

bool is_image_name(const fs::path& p) {
  static const std::set<std::string> kExtensions{".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                                 ".pgm", ".tif",  ".tiff", ".webp"};
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return kExtensions.count(ext) > 0;
}

}  // namespace

PackPlan image_folder(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw Error(fmt::format("{}: not a directory (--folder wants ROOT/<class>/<file>)", root));
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && !name.starts_with(".")) classes.push_back(name);
  }
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) throw Error(fmt::format("{}: no class folders (ROOT/<class>/<file>)", root));
  PackPlan plan;
  plan.labels.push_back({"label", DType::i64, classes});
  for (std::size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(fs::path(root) / classes[c])) {
      if (e.is_regular_file() && is_image_name(e.path()) && !e.path().filename().string().starts_with("."))
        files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      std::string source = fs::path(f).lexically_relative(root).string();
      plan.items.push_back({f, printable(f), {static_cast<std::int64_t>(c)}, std::move(source)});
    }
  }
  if (plan.items.empty()) throw Error(fmt::format("{}: no image files in its class folders", root));
  return plan;
}

namespace {

// CSV fields of one line (RFC 4180 quoting; no newlines inside quotes).
std::vector<std::string> csv_fields(const std::string& line, const std::string& where) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  if (quoted) throw Error(fmt::format("{}: a quote is not closed", where));
  return out;
}

// A label cell: an integer, a number, or a string.
using Cell = std::variant<std::int64_t, double, std::string>;

Cell parse_cell(const std::string& s) {
  if (!s.empty()) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0 && end == s.c_str() + s.size()) return static_cast<std::int64_t>(v);
    errno = 0;
    const double d = std::strtod(s.c_str(), &end);
    if (errno == 0 && end == s.c_str() + s.size() && std::isfinite(d)) return d;
  }
  return s;
}

Cell json_cell(const json& v, const std::string& where, const std::string& column) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) return v.get<double>();
  if (v.is_string()) return v.get<std::string>();
  throw Error(
      fmt::format("{}: column '{}' is {}; a label is an integer, a number or a string", where, column, v.type_name()));
}

// A manifest's rows as read: each row's path, where it was, and its label columns' cells.
struct ManifestRows {
  std::vector<std::string> paths, wheres;
  std::vector<std::vector<Cell>> cells;  // per label column
};

void add_jsonl_row(const ManifestColumns& a, const std::string& line, const std::string& where, ManifestRows& rows) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not a JSON object ({})", where, printable(e.what(), Printable::message)));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", where));
  if (!j.contains(a.path_column) || !j[a.path_column].is_string())
    throw Error(fmt::format("{}: no string '{}' (the path column, --path-column)", where, a.path_column));
  rows.paths.push_back(j[a.path_column].get<std::string>());
  for (std::size_t c = 0; c < a.label_columns.size(); ++c) {
    if (!j.contains(a.label_columns[c])) throw Error(fmt::format("{}: no '{}'", where, a.label_columns[c]));
    rows.cells[c].push_back(json_cell(j[a.label_columns[c]], where, a.label_columns[c]));
  }
}

// The CSV header's columns: the path column's and each label column's position.
struct CsvColumns {
  std::size_t count = 0, path = 0;
  std::vector<std::size_t> labels;
};

CsvColumns csv_header(const ManifestColumns& a, const std::string& line, const std::string& where) {
  const auto header = csv_fields(line, where);
  auto find = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end())
      throw Error(
          fmt::format("{}: the header has no column '{}' (it has {})", where, name, fmt::join(shown(header), ", ")));
    return static_cast<std::size_t>(it - header.begin());
  };
  CsvColumns c;
  c.count = header.size();
  c.path = find(a.path_column);
  for (const auto& name : a.label_columns) c.labels.push_back(find(name));
  return c;
}

ManifestRows read_manifest(const std::string& file, const ManifestColumns& a) {
  std::ifstream in(file);
  if (!in) throw Error::from_errno(errno, file);
  const bool jsonl = file.ends_with(".jsonl") || file.ends_with(".ndjson");
  ManifestRows rows;
  rows.cells.resize(a.label_columns.size());
  std::optional<CsvColumns> columns;
  std::string line;
  for (std::uint64_t number = 1; std::getline(in, line); ++number) {
    const std::string where = fmt::format("{}:{}", file, number);
    if (line.empty() || line == "\r") continue;
    if (jsonl) {
      add_jsonl_row(a, line, where, rows);
    } else if (!columns) {
      columns = csv_header(a, line, where);
      continue;
    } else {
      const auto row = csv_fields(line, where);
      if (row.size() != columns->count)
        throw Error(fmt::format("{}: {} columns, but the header has {}", where, row.size(), columns->count));
      rows.paths.push_back(row[columns->path]);
      for (std::size_t c = 0; c < columns->labels.size(); ++c)
        rows.cells[c].push_back(parse_cell(row[columns->labels[c]]));
    }
    rows.wheres.push_back(where);
  }
  if (in.bad()) throw Error::from_errno(errno, file + ": reading");
  if (rows.paths.empty()) throw Error(fmt::format("{}: no rows", file));
  return rows;
}

// A label column's field and each row's value: integers when every cell is one, numbers when every
// cell is a number, strings otherwise (every cell read as its text, numbered in sorted order).
void add_label(PackPlan& plan, const std::string& name, const std::vector<Cell>& cells) {
  bool all_int = true, all_number = true;
  for (const Cell& v : cells) {
    all_int = all_int && std::holds_alternative<std::int64_t>(v);
    all_number = all_number && !std::holds_alternative<std::string>(v);
  }
  LabelField field{name, all_number && !all_int ? DType::f64 : DType::i64, {}};
  auto text = [](const Cell& v) {
    if (auto s = std::get_if<std::string>(&v)) return *s;
    if (auto i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
    return fmt::format("{}", std::get<double>(v));
  };
  std::map<std::string, std::int64_t> index;
  if (!all_number) {
    for (const Cell& v : cells) index.emplace(text(v), 0);
    for (auto& [value, i] : index) {
      i = static_cast<std::int64_t>(field.names.size());
      field.names.push_back(value);
    }
  }
  for (std::size_t k = 0; k < cells.size(); ++k) {
    const Cell& v = cells[k];
    if (!all_number) {
      plan.items[k].labels.emplace_back(index.at(text(v)));
    } else if (all_int) {
      plan.items[k].labels.emplace_back(std::get<std::int64_t>(v));
    } else {
      plan.items[k].labels.emplace_back(
          std::holds_alternative<double>(v) ? std::get<double>(v) : static_cast<double>(std::get<std::int64_t>(v)));
    }
  }
  plan.labels.push_back(std::move(field));
}

}  // namespace

PackPlan manifest(const std::string& file, const ManifestColumns& a) {
  if (a.label_columns.empty()) throw Error(fmt::format("{}: --label names no column; give at least one", file));
  const ManifestRows rows = read_manifest(file, a);
  const fs::path base = a.root.empty() ? fs::path(file).parent_path() : fs::path(a.root);
  PackPlan plan;
  plan.items.resize(rows.paths.size());
  for (std::size_t k = 0; k < rows.paths.size(); ++k) {
    const fs::path p(rows.paths[k]);
    plan.items[k].path = (p.is_absolute() ? p : base / p).string();
    plan.items[k].where = fmt::format("{} ({})", rows.wheres[k], printable(plan.items[k].path));
    plan.items[k].source = rows.paths[k];
  }
  for (std::size_t c = 0; c < a.label_columns.size(); ++c) add_label(plan, a.label_columns[c], rows.cells[c]);
  return plan;
}

std::string plan_fingerprint(const PackPlan& plan) {
  XXH64_state_t* h = XXH64_createState();
  if (!h) throw Error(ErrorCode::io, "XXH64: out of memory");
  XXH64_reset(h, 0);
  auto add = [&](const void* p, std::size_t n) {
    const std::uint64_t size = n;
    XXH64_update(h, &size, sizeof size);  // lengths first: ("ab", "c") differs from ("a", "bc")
    XXH64_update(h, p, n);
  };
  for (const auto& l : plan.labels) {
    add(l.name.data(), l.name.size());
    const auto dtype = static_cast<int>(l.dtype);
    add(&dtype, sizeof dtype);
    for (const auto& n : l.names) add(n.data(), n.size());
  }
  for (const auto& item : plan.items) {
    add(item.path.data(), item.path.size());
    for (const auto& v : item.labels) {
      std::visit([&](auto x) { add(&x, sizeof x); }, v);
    }
  }
  const std::uint64_t v = XXH64_digest(h);
  XXH64_freeState(h);
  return digest_hex(v);
}

}  // namespace stoker::tools
