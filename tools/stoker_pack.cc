// stoker-pack: writes a stoker dataset (LMDB layout 2, docs/lmdb-layout.md, or HDF5: a
// variable-length u8 dataset and label datasets, docs/hdf5.md) from a folder of images or a manifest of paths and
// labels, streaming with bounded memory (one file at a time and one uncommitted transaction), atomically
// (OUTPUT.partial, created O_EXCL|O_NOFOLLOW, then renamed into place; a failure removes it) and with errors that name
// the file and line.
//
//   ImageFolder   ROOT/<class>/<file>: classes are the sub-folders, sorted by name, labels 0..C-1;
//                 fields `image` (the file's bytes) and `label` (i64)
//   manifest      a CSV file with a header row, or JSON Lines (one object a line): a path column and
//                 label columns, each stored as a field: integers as i64, numbers as f64, strings
//                 as i64 indices into the sorted list of the column's distinct strings
//
// The class names and string mappings are stored with the dataset, in the `stoker` sub-database
// under the key `labels` (HDF5: the root group's attribute `labels`): {"label": ["cat", "dog"]}
// (label k is the k-th name). Files are copied byte for byte.
#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <variant>

#include "formats/core/schema_json.h"
#include "formats/hdf5/hdf5_writer.h"
#include "formats/lmdb/lmdb_writer.h"
#include "stoker/digest.h"
#include "stoker/error.h"
#include "stoker/options.h"
#include "tools/cli.h"
#include "tools/progress.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using stoker::Error;

constexpr std::uint64_t kCommitBytes = 64u << 20;
constexpr std::uint64_t kMaxFileBytes = std::uint64_t{1} << 30;  // stoker::kMaxSampleBytes

struct Args {
  std::string folder, manifest, output;
  std::string path_column = "path";
  std::vector<std::string> label_columns;
  std::string root;
  std::string format = "auto";
  bool force = false, quiet = false;
};

// One sample to pack: the file, and its label values in the order of the label fields.
struct Item {
  std::string path;
  std::string where;  // "manifest.csv:12", or the path itself
  std::vector<std::variant<std::int64_t, double>> labels;
};

// A label field: its name, its type, and for strings the names of its values.
struct LabelField {
  std::string name;
  stoker::DType dtype = stoker::DType::i64;
  std::vector<std::string> names;  // for string labels and ImageFolder classes
};

struct Plan {
  std::vector<Item> items;
  std::vector<LabelField> labels;
};

bool is_image_name(const fs::path& p) {
  static const std::set<std::string> kExtensions{".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                                 ".pgm", ".tif",  ".tiff", ".webp"};
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return kExtensions.count(ext) > 0;
}

Plan image_folder(const std::string& root) {
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
  Plan plan;
  plan.labels.push_back({"label", stoker::DType::i64, classes});
  for (std::size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(fs::path(root) / classes[c])) {
      if (e.is_regular_file() && is_image_name(e.path()) && !e.path().filename().string().starts_with("."))
        files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) plan.items.push_back({f, f, {static_cast<std::int64_t>(c)}});
  }
  if (plan.items.empty()) throw Error(fmt::format("{}: no image files in its class folders", root));
  return plan;
}

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

void add_jsonl_row(const Args& a, const std::string& line, const std::string& where, ManifestRows& rows) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: not a JSON object ({})", where, e.what()));
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

CsvColumns csv_header(const Args& a, const std::string& line, const std::string& where) {
  const auto header = csv_fields(line, where);
  auto find = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end())
      throw Error(fmt::format("{}: the header has no column '{}' (it has {})", where, name, fmt::join(header, ", ")));
    return static_cast<std::size_t>(it - header.begin());
  };
  CsvColumns c;
  c.count = header.size();
  c.path = find(a.path_column);
  for (const auto& name : a.label_columns) c.labels.push_back(find(name));
  return c;
}

ManifestRows read_manifest(const Args& a) {
  std::ifstream in(a.manifest);
  if (!in) throw Error::from_errno(errno, a.manifest);
  const bool jsonl = a.manifest.ends_with(".jsonl") || a.manifest.ends_with(".ndjson");
  ManifestRows rows;
  rows.cells.resize(a.label_columns.size());
  std::optional<CsvColumns> columns;
  std::string line;
  for (std::uint64_t number = 1; std::getline(in, line); ++number) {
    const std::string where = fmt::format("{}:{}", a.manifest, number);
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
  if (in.bad()) throw Error::from_errno(errno, a.manifest + ": reading");
  if (rows.paths.empty()) throw Error(fmt::format("{}: no rows", a.manifest));
  return rows;
}

// A label column's field and each row's value: integers when every cell is one, numbers when every
// cell is a number, strings otherwise (every cell read as its text, numbered in sorted order).
void add_label(Plan& plan, const std::string& name, const std::vector<Cell>& cells) {
  bool all_int = true, all_number = true;
  for (const Cell& v : cells) {
    all_int = all_int && std::holds_alternative<std::int64_t>(v);
    all_number = all_number && !std::holds_alternative<std::string>(v);
  }
  LabelField field{name, all_number && !all_int ? stoker::DType::f64 : stoker::DType::i64, {}};
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

Plan manifest(const Args& a) {
  if (a.label_columns.empty()) throw Error(fmt::format("{}: --label names no column; give at least one", a.manifest));
  const ManifestRows rows = read_manifest(a);
  const fs::path base = a.root.empty() ? fs::path(a.manifest).parent_path() : fs::path(a.root);
  Plan plan;
  plan.items.resize(rows.paths.size());
  for (std::size_t k = 0; k < rows.paths.size(); ++k) {
    const fs::path p(rows.paths[k]);
    plan.items[k].path = (p.is_absolute() ? p : base / p).string();
    plan.items[k].where = fmt::format("{} ({})", rows.wheres[k], plan.items[k].path);
  }
  for (std::size_t c = 0; c < a.label_columns.size(); ++c) add_label(plan, a.label_columns[c], rows.cells[c]);
  return plan;
}

// The file's bytes, whole; errors name it.
void read_file(const Item& item, std::vector<std::byte>& out) {
  const int fd = ::open(item.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error::from_errno(errno, item.where);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error::from_errno(err, item.where);
  }
  if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > kMaxFileBytes) {
    ::close(fd);
    throw Error(fmt::format("{}: not a regular file of at most 1 GiB", item.where));
  }
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      throw Error::from_errno(err, item.where + ": reading (the file shrank?)");
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error::from_errno(errno, dir + ": opening it to fsync");
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  if (rc != 0) throw Error::from_errno(err, dir + ": fsync");
}

// Removes OUTPUT.partial unless disarmed: no partial dataset is left behind by a failure.
class PartialFile {
 public:
  explicit PartialFile(std::string path) : path_(std::move(path)) {}
  ~PartialFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  void disarm() { path_.clear(); }

 private:
  std::string path_;
};

// The mean size of up to 64 of the files, spread over the list: the progress line's MB/s.
std::uint64_t typical_file_bytes(const Plan& plan) {
  const std::size_t n = std::min<std::size_t>(64, plan.items.size());
  std::uint64_t sum = 0, seen = 0;
  for (std::size_t k = 0; k < n; ++k) {
    struct stat st;
    if (::stat(plan.items[k * plan.items.size() / n].path.c_str(), &st) == 0) {
      sum += static_cast<std::uint64_t>(st.st_size);
      ++seen;
    }
  }
  return seen ? sum / seen : 0;
}

bool hdf5_output(const Args& a) {
  if (a.format != "auto") return a.format == "hdf5";
  return a.output.ends_with(".h5") || a.output.ends_with(".hdf5");
}

// Where the samples go, one at a time in index order, their fields in schema order.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void append(std::span<const std::span<const std::byte>> fields) = 0;
  virtual void finish(const std::string& content_digest) = 0;
};

// stoker's LMDB layout 2; the labels' names in the `stoker` sub-database, committed with every
// transaction.
class LmdbSink final : public Sink {
 public:
  LmdbSink(const std::string& path, const stoker::Schema& schema, std::string labels)
      : labels_(std::move(labels)), writer_(path, schema, options()) {}
  void append(std::span<const std::span<const std::byte>> fields) override { writer_.append_sample(fields); }
  void finish(const std::string& content_digest) override { writer_.finish(content_digest); }

 private:
  stoker::formats::LmdbWriteOptions options() {
    stoker::formats::LmdbWriteOptions wo;
    wo.commit_bytes = kCommitBytes;
    wo.on_commit = [this](const auto& put) { put("labels", labels_); };
    return wo;
  }
  std::string labels_;
  stoker::formats::LmdbWriter writer_;
};

// HDF5: a variable-length u8 dataset for the image and one dataset per label, written in blocks of
// at most 1024 samples or 64 MiB; the labels' names in the root group's `labels` attribute.
class Hdf5Sink final : public Sink {
 public:
  Hdf5Sink(const std::string& path, const stoker::Schema& schema, const std::string& labels)
      : schema_(schema),
        writer_(path, schema, hdf5_options()),
        pending_(schema.fields.size()),
        lengths_(schema.fields.size()) {
    writer_.set_text_attribute("labels", labels);
  }
  void append(std::span<const std::span<const std::byte>> fields) override {
    for (std::size_t f = 0; f < fields.size(); ++f) {
      pending_[f].insert(pending_[f].end(), fields[f].begin(), fields[f].end());
      lengths_[f].push_back(fields[f].size());
      bytes_ += fields[f].size();
    }
    if (++count_ == 1024 || bytes_ >= kCommitBytes) flush();
  }
  void finish(const std::string&) override {
    flush();
    writer_.close();
  }

 private:
  static stoker::formats::Hdf5WriteOptions hdf5_options() {
    stoker::formats::Hdf5WriteOptions o;
    o.layout = stoker::formats::Hdf5WriteOptions::Layout::chunked;
    o.rows_per_chunk = 1024;
    return o;
  }
  void flush() {
    if (count_ == 0) return;
    for (std::size_t f = 0; f < schema_.fields.size(); ++f) {
      if (schema_.fields[f].is_bytes()) {
        std::vector<std::span<const std::byte>> samples;
        std::size_t at = 0;
        for (std::uint64_t n : lengths_[f]) {
          samples.emplace_back(pending_[f].data() + at, n);
          at += n;
        }
        writer_.write_bytes(f, written_, samples);
      } else {
        writer_.write(f, written_, count_, pending_[f].data());
      }
      pending_[f].clear();
      lengths_[f].clear();
    }
    written_ += count_;
    count_ = 0;
    bytes_ = 0;
  }
  stoker::Schema schema_;
  stoker::formats::Hdf5Writer writer_;
  std::vector<std::vector<std::byte>> pending_;
  std::vector<std::vector<std::uint64_t>> lengths_;
  std::uint64_t count_ = 0, bytes_ = 0, written_ = 0;
};

void pack(const Args& a) {
  if (fs::exists(fs::symlink_status(a.output)) && !a.force)
    throw Error(fmt::format("{}: exists; replace it with --force", a.output));
  const Plan plan = a.folder.empty() ? manifest(a) : image_folder(a.folder);

  // The schema, fields alphabetical by name (the loader's default order): the image and the labels.
  std::vector<stoker::Field> fields{stoker::Field::bytes_field("image")};
  for (const auto& l : plan.labels) {
    if (l.name == "image") throw Error("--label image: the name of the image field; rename the manifest's column");
    fields.push_back(stoker::Field{l.name, stoker::FieldKind::fixed, l.dtype, {}});
  }
  std::vector<std::size_t> by_name(fields.size());
  for (std::size_t f = 0; f < fields.size(); ++f) by_name[f] = f;
  std::sort(by_name.begin(), by_name.end(),
            [&](std::size_t x, std::size_t y) { return fields[x].name < fields[y].name; });
  stoker::Schema schema;
  schema.num_samples = plan.items.size();
  for (std::size_t f : by_name) schema.fields.push_back(fields[f]);

  json names = json::object();
  for (const auto& l : plan.labels) {
    if (!l.names.empty()) names[l.name] = l.names;
  }

  const std::string partial = a.output + ".partial";
  // Created here, exclusively and never through a link, before LMDB opens it: a leftover or a
  // planted link is an error, not a file written through.
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST)
      throw Error(fmt::format("{}: exists (another stoker-pack, or one that was killed): remove it", partial));
    throw Error::from_errno(errno, partial);
  }
  ::close(fd);
  PartialFile guard(partial);

  std::unique_ptr<Sink> writer;
  if (hdf5_output(a)) {
    writer = std::make_unique<Hdf5Sink>(partial, schema, names.dump());
  } else {
    writer = std::make_unique<LmdbSink>(partial, schema, names.dump());
  }

  stoker::ContentDigest digest;
  stoker::tools::Progress progress(a.output, plan.items.size(), typical_file_bytes(plan), a.quiet);
  std::vector<std::byte> image, digested;
  std::vector<std::array<std::byte, 8>> label_bytes(plan.labels.size());
  std::vector<std::span<const std::byte>> parts(schema.fields.size());
  std::uint64_t bytes = 0;
  for (std::uint64_t i = 0; i < plan.items.size(); ++i) {
    const Item& item = plan.items[i];
    read_file(item, image);
    for (std::size_t l = 0; l < plan.labels.size(); ++l) {
      std::visit([&](auto v) { std::memcpy(label_bytes[l].data(), &v, 8); }, item.labels[l]);
    }
    digested.clear();
    for (std::size_t s = 0; s < schema.fields.size(); ++s) {
      const std::size_t f = by_name[s];
      parts[s] = f == 0 ? std::span<const std::byte>(image) : std::span<const std::byte>(label_bytes[f - 1]);
      digested.insert(digested.end(), parts[s].begin(), parts[s].end());
    }
    digest.add(i, digested);
    writer->append(parts);
    bytes += image.size();
    progress.update(i + 1);
  }
  writer->finish(digest.hex());
  progress.finish();
  if (fs::is_directory(a.output)) throw Error(fmt::format("{}: is a directory; remove it first", a.output));
  if (::rename(partial.c_str(), a.output.c_str()) != 0)
    throw Error::from_errno(errno, fmt::format("{}: moving {} into place", a.output, partial));
  guard.disarm();
  fsync_dir(fs::absolute(a.output).parent_path().string());
  if (!a.quiet) {
    const double seconds = progress.seconds();
    std::cerr << fmt::format("stoker-pack: {} files, {} in {:.2f} s ({}, {:.0f} files/s) -> {} (content_digest {})\n",
                             plan.items.size(), stoker::tools::binary_size(static_cast<double>(bytes)), seconds,
                             stoker::tools::binary_rate(static_cast<double>(bytes) / std::max(seconds, 1e-9)),
                             static_cast<double>(plan.items.size()) / std::max(seconds, 1e-9), a.output, digest.hex());
  }
}

int stoker_pack(int argc, char** argv) {
  stoker::set_option_spelling(stoker::OptionSpelling::command_line);
  Args a;
  CLI::App app{
      "stoker-pack: writes a stoker dataset (LMDB layout 2, or HDF5: an `image` bytes field with each file's bytes,\n"
      "copied byte for byte, and fixed label fields) from an ImageFolder tree or a manifest. OUTPUT appears only\n"
      "when complete.\n\n"
      "  stoker-pack --folder train/ train.lmdb            ROOT/<class>/<file>; labels 0..C-1, classes sorted\n"
      "  stoker-pack --manifest train.csv --label label train.lmdb\n"
      "                                                    CSV with a header row, or .jsonl: a path column and\n"
      "                                                    label columns (integers, numbers, or strings mapped\n"
      "                                                    to integers)\n\n"
      "Class names and string labels' names are stored with the dataset: LMDB's `stoker` sub-database under\n"
      "`labels`, HDF5's root attribute `labels` (JSON: {\"label\": [\"cat\", \"dog\"]}).",
      "stoker-pack"};
  auto* folder = app.add_option("--folder", a.folder, "An ImageFolder tree: ROOT/<class>/<file>");
  auto* man = app.add_option("--manifest", a.manifest, "A CSV (header row) or JSON Lines (.jsonl) manifest");
  folder->excludes(man);
  man->excludes(folder);
  app.add_option("--path-column", a.path_column, "The manifest's column of file paths")->capture_default_str();
  app.add_option("--label", a.label_columns, "A manifest column to store as a label field (repeat, or a,b)")
      ->delimiter(',');
  app.add_option("--root", a.root, "Where the manifest's relative paths start (default: the manifest's folder)");
  app.add_option("OUTPUT", a.output, "The dataset file to write: LMDB, or HDF5 for a name ending .h5 or .hdf5")
      ->required();
  app.add_option("--format", a.format, "lmdb, hdf5, or auto (from OUTPUT's extension)")
      ->check(CLI::IsMember({"auto", "lmdb", "hdf5"}))
      ->capture_default_str();
  app.add_flag("--force", a.force, "Replace an existing OUTPUT");
  app.add_flag("--quiet", a.quiet, "No progress and no summary");
  if (int rc = stoker::tools::parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (a.folder.empty() && a.manifest.empty()) {
    std::cerr << "stoker-pack: give --folder ROOT or --manifest FILE\nRun with --help for more information.\n";
    return 2;
  }
  pack(a);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return stoker_pack(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "stoker-pack: " << e.what() << std::endl;
  } catch (...) {
    std::cerr << "stoker-pack: an unknown exception" << std::endl;
  }
  return 1;
}
