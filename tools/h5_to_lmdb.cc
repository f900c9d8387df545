// h5-to-lmdb: converts an HDF5 dataset into stoker's LMDB layout (docs/lmdb-layout.md),
// streaming, atomically, resumably, and optionally verified.
//
// Memory stays bounded whatever the input's size: one read block (~16 MiB of samples, or one chunk
// of the largest field if that is bigger), the records of one uncommitted transaction twice over
// (kept to replay it when the map must grow, and LMDB's dirty pages on the heap; --commit-every and
// 32 MiB bound it), and HDF5's chunk cache for compressed datasets (8 chunks, at most 64 MiB, per
// field): about 100 MiB plus the chunk caches.
#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "formats/core/schema_json.h"
#include "formats/hdf5/hdf5_reader.h"
#include "formats/lmdb/lmdb_reader.h"
#include "formats/lmdb/lmdb_writer.h"
#include "formats/shard_set.h"
#include "stoker/digest.h"
#include "stoker/error.h"
#include "stoker/options.h"
#include "tools/atomic_output.h"
#include "tools/cli.h"
#include "tools/output_check.h"
#include "tools/progress.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using stoker::Error;

constexpr std::uint64_t kBlockBytes = 16u << 20;
constexpr std::uint64_t kCommitBytes = 32u << 20;
constexpr std::string_view kProgressKey = "progress";
// A shard set's journal, OUTPUT.partial/sources.json: for each finished shard (and the one being
// converted, under "converting"), its source as it was when its conversion started
// (source_identity). A resume keeps a finished shard only while its source is unchanged (one
// rewritten since, or finished by a run killed before it was listed, is converted again; so is an
// unfinished one whose source changed), and a database in the directory that is none of the set's
// is an error: never a stale or stray shard moved into place.
constexpr const char* kSetJournal = "sources.json";

// What h5-to-lmdb writes, and so all it replaces with --force or discards: an LMDB database (a
// file, or an environment directory), or a directory of them.
const stoker::tools::OutputKind kWrites{"h5-to-lmdb", true, false, kSetJournal};

struct Args {
  std::string input, output;
  std::vector<std::string> fields;
  std::string group;
  std::uint64_t commit_every = 10000;
  std::uint64_t map_size = 0;
  bool resume = false, verify = false, force = false, quiet = false;
};

// What makes two runs the same conversion: the source file as it was, and the fields.
json fingerprint(const std::string& input, const stoker::Schema& schema) {
  struct stat st;
  if (::stat(input.c_str(), &st) != 0) throw stoker::Error::from_errno(errno, input);
  json fields = json::array();
  for (const auto& f : schema.fields) fields.push_back(f.describe());
  // The path as stoker prints it: JSON holds UTF-8 text, and a file's name may be any bytes.
  return {{"source", stoker::printable(fs::absolute(input).string())},
          {"size", static_cast<std::uint64_t>(st.st_size)},
          {"mtime_ns", static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1000000000ull +
                           static_cast<std::uint64_t>(st.st_mtim.tv_nsec)},
          {"num_samples", schema.num_samples},
          {"fields", fields}};
}

std::string differences(const json& was, const json& now) {
  std::vector<std::string> out;
  for (auto& [k, v] : now.items()) {
    if (!was.contains(k) || was[k] != v) {
      out.push_back(fmt::format("{} was {}, now {}", k, was.contains(k) ? was[k].dump() : "unset", v.dump()));
    }
  }
  return fmt::format("{}", fmt::join(out, "; "));
}

// Samples per read block: about kBlockBytes, in whole chunks of the field that dominates the bytes.
// Not the lcm of every field's chunking: a label dataset chunked by 1024 samples next to 150 KB
// images would force 150 MB blocks; small fields' partial chunks stay in HDF5's chunk cache.
std::uint64_t block_rows(const stoker::formats::Hdf5Reader& r) {
  const stoker::Schema& s = r.schema();
  std::size_t dominant = 0;
  for (std::size_t f = 1; f < s.fields.size(); ++f) {
    if (s.fields[f].bytes_per_sample() > s.fields[dominant].bytes_per_sample()) dominant = f;
  }
  const std::uint64_t chunk = std::max<std::uint64_t>(1, r.rows_per_chunk(dominant));
  // Bytes fields by the reader's estimate of their samples.
  std::uint64_t sample_bytes = s.bytes_per_sample();
  for (std::size_t f = 0; f < s.fields.size(); ++f) {
    if (s.fields[f].is_bytes()) sample_bytes += r.sample_bound(f).bytes / 2;
  }
  std::uint64_t rows = std::max<std::uint64_t>(1, kBlockBytes / std::max<std::uint64_t>(1, sample_bytes));
  rows = std::max(chunk, rows / chunk * chunk);
  return std::min<std::uint64_t>(rows, s.num_samples);
}

// Samples [start, start + n) of every field, as read.
struct Block {
  std::vector<std::vector<std::byte>> fixed;     // per fixed field
  std::vector<stoker::formats::VarBytes> bytes;  // per bytes field
  std::vector<stoker::formats::FieldOut> out;

  std::span<const std::byte> sample(const stoker::Schema& s, std::size_t f, std::uint64_t k) const {
    if (s.fields[f].is_bytes()) return bytes[f].sample(k);
    const std::size_t b = s.fields[f].bytes_per_sample();
    return {fixed[f].data() + k * b, b};
  }
};

void read_block(stoker::formats::Reader& r, std::uint64_t start, std::uint64_t n, Block& block) {
  const stoker::Schema& s = r.schema();
  std::vector<std::uint64_t> idx(n);
  std::iota(idx.begin(), idx.end(), start);
  block.fixed.resize(s.fields.size());
  block.bytes.resize(s.fields.size());
  block.out.assign(s.fields.size(), {});
  for (std::size_t f = 0; f < s.fields.size(); ++f) {
    if (s.fields[f].is_bytes()) {
      block.bytes[f].clear();
      block.out[f].bytes = &block.bytes[f];
    } else {
      block.fixed[f].resize(n * s.fields[f].bytes_per_sample());
      block.out[f].fixed = block.fixed[f].data();
    }
  }
  r.read(idx, block.out);
}

// Sample k of a block: its fields, and the bytes content_digest hashes (the fields concatenated,
// docs/digest.md).
void split_sample(const stoker::Schema& s, const Block& block, std::uint64_t k,
                  std::vector<std::span<const std::byte>>& parts, std::vector<std::byte>& digested) {
  parts.clear();
  digested.clear();
  for (std::size_t f = 0; f < s.fields.size(); ++f) {
    parts.push_back(block.sample(s, f, k));
    digested.insert(digested.end(), parts.back().begin(), parts.back().end());
  }
}

void verify(const Args& a, const std::string& lmdb_path, stoker::formats::Hdf5Reader& h5) {
  stoker::formats::LmdbReader out(lmdb_path, {});
  const stoker::Schema& schema = h5.schema();
  if (!(out.schema() == schema)) throw Error(fmt::format("verify: {}: schema differs from {}'s", lmdb_path, a.input));
  stoker::tools::Progress progress("verify", schema.num_samples, schema.bytes_per_sample(), a.quiet);
  const std::uint64_t rows = block_rows(h5);
  Block want, got;
  stoker::ContentDigest digest;
  std::vector<std::span<const std::byte>> parts;
  std::vector<std::byte> digested;
  for (std::uint64_t start = 0; start < schema.num_samples; start += rows) {
    std::uint64_t n = std::min(rows, schema.num_samples - start);
    read_block(h5, start, n, want);
    read_block(out, start, n, got);
    for (std::uint64_t k = 0; k < n; ++k) {
      for (std::size_t f = 0; f < schema.fields.size(); ++f) {
        const auto w = want.sample(schema, f, k), g = got.sample(schema, f, k);
        if (w.size() != g.size() || !std::equal(w.begin(), w.end(), g.begin())) {
          throw Error(fmt::format("verify: {}: sample {} field '{}' differs from {}", lmdb_path, start + k,
                                  stoker::printable(schema.fields[f].name), a.input));
        }
      }
      split_sample(schema, got, k, parts, digested);
      digest.add(start + k, digested);
    }
    progress.update(start + n);
  }
  progress.finish();
  auto stored = stoker::formats::lmdb_stored_schema(lmdb_path);
  if (stored.content_digest != digest.hex()) {
    throw Error(fmt::format("verify: {}: stored content_digest {} but the content hashes to {}", lmdb_path,
                            stored.content_digest.value_or("(none)"), digest.hex()));
  }
}

// Whether an interrupted conversion is resumed; refuses to clobber what is there unless asked, and
// whatever h5-to-lmdb does not write (tools/output_check.h) even then.
// OUTPUT.partial is a file this tool made, never one it was pointed to: in a shared directory a
// symbolic link planted there (dangling or not) would make the conversion create or overwrite a
// file of someone else's choosing. A link is refused, and a new one is created with O_EXCL and
// O_NOFOLLOW before LMDB opens it.
bool resuming(const Args& a, const std::string& partial) {
  stoker::tools::check_output(a.output, kWrites, a.force);
  stoker::tools::refuse_symlink(partial, "h5-to-lmdb");
  if (!stoker::tools::check_partial(partial, kWrites)) return false;
  if (a.resume) return true;
  if (a.force) {
    fs::remove_all(partial);
    return false;
  }
  throw Error(fmt::format(
      "{}: an interrupted conversion is there; continue it with --resume or start over with --force", partial));
}

// Where an interrupted conversion left off (the digest so far into `digest`), checked against the
// source's fingerprint.
std::uint64_t resume_point(stoker::formats::LmdbWriter& writer, const std::string& partial, const json& fp,
                           stoker::ContentDigest& digest) {
  const std::uint64_t start = writer.next_index();
  const auto text = writer.meta(kProgressKey);
  if (!text) {
    if (start != 0) throw Error(fmt::format("{}: has samples but no resume point; start over with --force", partial));
    return start;
  }
  json p;
  try {
    // The record is ours, but the file is on disk: never more than a few levels deep (what is done
    // with a value afterwards, printing it, recurses).
    p = json::parse(*text, [](int depth, json::parse_event_t, json&) {
      if (depth > 8) throw std::runtime_error("nested too deep");
      return true;
    });
    if (!p.is_object() || !p.contains("fingerprint") || !p.contains("next_sample")) {
      throw std::runtime_error("not a progress record");
    }
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: its resume point is damaged ({}); start over with --force", partial, e.what()));
  }
  if (p["fingerprint"] != fp) {
    throw Error(
        fmt::format("{}: was started from a different source or with different fields ({}); start over "
                    "with --force",
                    partial, differences(p["fingerprint"], fp)));
  }
  if (p["next_sample"].get<std::uint64_t>() != start) {
    throw Error(fmt::format("{}: resume point {} does not match its {} samples; start over with --force", partial,
                            p["next_sample"].get<std::uint64_t>(), start));
  }
  const std::string hex = p["digest"].get<std::string>();
  std::uint64_t sum = 0;
  if (const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), sum, 16);
      hex.size() != 16 || ec != std::errc() || end != hex.data() + hex.size())
    throw Error(fmt::format("{}: its resume point's digest '{}' is not 16 hex digits; start over with --force", partial,
                            hex.substr(0, 32)));
  digest = stoker::ContentDigest(sum);
  return start;
}

// Moves the finished `partial` over OUTPUT, which is checked again first: a long conversion leaves
// time for something else to appear there.
void replace_output(const std::string& partial, const Args& a) {
  stoker::tools::check_output(a.output, kWrites, a.force);
  stoker::tools::move_into_place(partial, a.output);
}

// Samples [start, N) of `h5` appended to `writer` in chunk-aligned blocks; returns their bytes.
std::uint64_t copy_samples(stoker::formats::Hdf5Reader& h5, stoker::formats::LmdbWriter& writer, std::uint64_t start,
                           stoker::ContentDigest& digest, stoker::tools::Progress& progress) {
  const stoker::Schema& schema = h5.schema();
  const std::uint64_t rows = block_rows(h5);
  Block bufs;
  std::vector<std::span<const std::byte>> parts;
  std::vector<std::byte> digested;
  std::uint64_t written = 0;
  // Blocks stay aligned to chunks from sample 0, also when resuming mid-block.
  for (std::uint64_t block = start / rows * rows; block < schema.num_samples; block += rows) {
    const std::uint64_t first = std::max(block, start);
    const std::uint64_t n = std::min(block + rows, schema.num_samples) - first;
    read_block(h5, first, n, bufs);
    for (std::uint64_t k = 0; k < n; ++k) {
      split_sample(schema, bufs, k, parts, digested);
      digest.add(first + k, digested);
      writer.append_sample(parts);
      written += digested.size();
    }
    progress.update(first + n);
  }
  return written;
}

void convert(const Args& a) {
  const std::string partial = a.output + ".partial";
  const bool resume = resuming(a, partial);
  stoker::formats::Hdf5Reader h5(a.input, a.fields, stoker::formats::Hdf5Path::automatic, a.group);
  const stoker::Schema& schema = h5.schema();
  const json fp = fingerprint(a.input, schema);
  stoker::ContentDigest digest;
  stoker::formats::LmdbWriteOptions wo;
  wo.map_size = a.map_size;
  wo.commit_records = a.commit_every;
  wo.commit_bytes = kCommitBytes;
  stoker::formats::LmdbWriter* writer_ptr = nullptr;
  // The resume point commits in the same transaction as the records it counts.
  wo.on_commit = [&](const auto& put) {
    if (!writer_ptr) return;  // the writer's own first commit, before any sample
    json p = {{"fingerprint", fp}, {"next_sample", writer_ptr->next_index()}, {"digest", digest.hex()}};
    put(kProgressKey, p.dump());
  };
  if (!resume) stoker::tools::create_exclusive(partial);  // once the input is known to be readable
  stoker::formats::LmdbWriter writer(partial, schema, wo);
  writer_ptr = &writer;
  const std::uint64_t start = resume ? resume_point(writer, partial, fp, digest) : writer.next_index();
  if (resume && !a.quiet)
    std::cerr << fmt::format("h5-to-lmdb: resuming {} at sample {}\n", stoker::printable(partial), start);

  stoker::tools::Progress progress(stoker::printable(a.output), schema.num_samples, schema.bytes_per_sample(), a.quiet,
                                   start);
  const std::uint64_t written = copy_samples(h5, writer, start, digest, progress);
  writer.finish(digest.hex());
  progress.finish();
  const double seconds = progress.seconds();
  writer_ptr = nullptr;
  if (a.verify) verify(a, partial, h5);
  replace_output(partial, a);
  if (!a.quiet) {
    const auto bytes = static_cast<double>(written);
    std::cerr << fmt::format("h5-to-lmdb: {} samples, {} in {:.2f} s ({}){} -> {} (content_digest {})\n",
                             schema.num_samples - start, stoker::tools::binary_size(bytes), seconds,
                             stoker::tools::binary_rate(bytes / std::max(seconds, 1e-9)), a.verify ? ", verified" : "",
                             stoker::printable(a.output), digest.hex());
  }
}

// INPUT a directory or a glob: a shard set, converted shard by shard into a directory of LMDB
// databases (OUTPUT/<shard's stem>.lmdb), which the loader reads as the same set. The shards are
// written into OUTPUT.partial/ (each atomically, as one conversion is) and the directory is moved
// into place when every one is done; --resume keeps the finished shards and continues the next.
bool names_a_shard_set(const std::string& input) {
  return fs::is_directory(input) || input.find_first_of("*?[") != std::string::npos;
}

// A shard's source as this conversion reads it: the file (path, device and inode, size,
// modification and change times: a rewrite of the same size within the clock's step changes the
// change time, which no one can set back) and what is taken of it (fields, group).
json source_identity(const Args& a, const std::string& shard) {
  struct stat st;
  if (::stat(shard.c_str(), &st) != 0) throw stoker::Error::from_errno(errno, shard);
  const auto ns = [](const timespec& t) {
    return static_cast<std::uint64_t>(t.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(t.tv_nsec);
  };
  return {{"source", stoker::printable(fs::absolute(shard).string())},
          {"inode", static_cast<std::uint64_t>(st.st_ino)},
          {"size", static_cast<std::uint64_t>(st.st_size)},
          {"mtime_ns", ns(st.st_mtim)},
          {"ctime_ns", ns(st.st_ctim)},
          {"fields", a.fields},
          {"group", a.group}};
}

json read_set_journal(const std::string& partial, const std::vector<std::string>& names) {
  for (const auto& entry : fs::directory_iterator(partial)) {
    std::string name = entry.path().filename().string();
    if (name == kSetJournal || name == std::string(kSetJournal) + ".tmp") continue;
    if (name.ends_with(".partial")) name.resize(name.size() - 8);  // a shard being converted
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw Error(fmt::format("{}: holds {}, which is none of the set's shards; remove it, or start over with --force",
                              partial, stoker::printable(entry.path().filename().string())));
    }
  }
  const std::string path = partial + "/" + kSetJournal;
  if (!fs::exists(path)) return json::object();
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  json journal = json::parse(text.str(), nullptr, false);
  if (!journal.is_object())
    throw Error(fmt::format("{}: is not a journal h5-to-lmdb wrote; start over with --force", path));
  return journal;
}

void write_set_journal(const std::string& partial, const json& journal) {
  stoker::tools::write_file_atomically(partial + "/" + kSetJournal, journal.dump() + "\n");
}

void convert_set(const Args& a) {
  const std::vector<std::string> shards = stoker::formats::shard_paths(stoker::formats::resolve_source({a.input}));
  std::vector<std::string> names;
  for (const auto& s : shards) {
    names.push_back(fs::path(s).stem().string() + ".lmdb");
    if (std::count(names.begin(), names.end(), names.back()) > 1)
      throw Error(fmt::format("{}: two shards would both become {} (their names differ only in the extension)", a.input,
                              stoker::printable(names.back())));
  }
  stoker::tools::check_output(a.output, kWrites, a.force);
  const std::string partial = a.output + ".partial";
  stoker::tools::refuse_symlink(partial, "h5-to-lmdb");
  if (stoker::tools::check_partial(partial, kWrites) && !a.resume) {
    if (!a.force)
      throw Error(fmt::format(
          "{}: an interrupted conversion is there; continue it with --resume or start over with --force", partial));
    fs::remove_all(partial);
  }
  if (!fs::exists(partial) && ::mkdir(partial.c_str(), 0755) != 0)
    throw stoker::Error::from_errno(errno, partial + ": creating it");
  if (!fs::is_directory(partial))
    throw Error(fmt::format("{}: is not a directory (not a shard set's conversion); remove it", partial));
  json journal = read_set_journal(partial, names);
  std::uint64_t kept = 0;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const std::string out = partial + "/" + names[k];
    const std::string key = stoker::printable(names[k]);  // in the journal: JSON holds UTF-8 text
    const json source = source_identity(a, shards[k]);    // before it is read
    if (fs::exists(out)) {                                // finished by an earlier run (a shard appears only complete)
      if (journal.contains(key) && journal[key] == source) {
        ++kept;
        continue;
      }
      if (!a.quiet) {
        std::cerr << (journal.contains(key)
                          ? fmt::format("h5-to-lmdb: {}: changed since it was converted ({}); converting it again\n",
                                        stoker::printable(shards[k]), differences(journal[key], source))
                          : fmt::format("h5-to-lmdb: {}: its conversion was not recorded as finished; converting it "
                                        "again\n",
                                        stoker::printable(shards[k])));
      }
      fs::remove_all(out);
    }
    const json converting = {{"name", key}, {"source", source}};
    if (fs::exists(out + ".partial") && journal.value("converting", json()) != converting) {
      if (!a.quiet)
        std::cerr << fmt::format("h5-to-lmdb: {}: changed since its conversion began; starting it over\n",
                                 stoker::printable(shards[k]));
      fs::remove_all(out + ".partial");
    }
    journal["converting"] = converting;
    write_set_journal(partial, journal);
    if (!a.quiet)
      std::cerr << fmt::format("h5-to-lmdb: shard {} of {}: {}\n", k + 1, shards.size(), stoker::printable(shards[k]));
    Args one = a;
    one.input = shards[k];
    one.output = out;
    one.force = false;
    convert(one);
    journal.erase("converting");
    journal[key] = source;
    write_set_journal(partial, journal);
  }
  replace_output(partial, a);
  // The journal only serves a resume (a kill just before this leaves a file the loader does not
  // take for a shard).
  if (::unlink((a.output + "/" + kSetJournal).c_str()) != 0)
    throw stoker::Error::from_errno(errno, a.output + "/" + kSetJournal + ": removing it");
  if (!a.quiet)
    std::cerr << fmt::format("h5-to-lmdb: {} shards -> {}/{}\n", shards.size(), a.output,
                             kept ? fmt::format(" ({} kept from the interrupted run)", kept) : "");
}

void add_options(CLI::App& app, Args& a) {
  app.add_option("INPUT", a.input,
                 "HDF5 file to read; or a shard set, a directory of them or a glob ('train-*.h5'), converted "
                 "shard by shard")
      ->required();
  app.add_option("OUTPUT", a.output,
                 "LMDB database file to write; for a shard set, the directory of LMDB shards "
                 "(OUTPUT/<shard>.lmdb)")
      ->required();
  app.add_option("--fields", a.fields,
                 "Datasets to convert, in this order, by name or path (train/images); "
                 "default: every dataset and sample group (members 0 .. N-1, a bytes field) "
                 "of the root group or --group, alphabetical, all of which must be "
                 "convertible")
      ->delimiter(',');
  app.add_option("--group", a.group, "The group the fields are in (names relative to it)");
  app.add_option("--commit-every", a.commit_every, "Samples per transaction (also bounded to 32 MiB)")
      ->check(stoker::tools::whole_number(1))
      ->capture_default_str();
  app.add_option("--map-size", a.map_size,
                 "Initial LMDB map size (binary units: 4g = 4 GiB; grows when full; default: estimated)")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--resume", a.resume, "Continue an interrupted conversion of the same INPUT and fields");
  app.add_flag("--verify", a.verify, "Re-read every sample of the output and compare it with INPUT");
  app.add_flag("--force", a.force,
               "Replace an existing OUTPUT (atomically) or an interrupted conversion: only an LMDB database or a "
               "directory of them, never other files");
  app.add_flag("--quiet", a.quiet, "No progress and no summary");
}

// Everything but the catch-all: usage errors exit 2 (parse_or_exit), runtime errors 1.
int h5_to_lmdb(int argc, char** argv) {
  stoker::set_option_spelling(stoker::OptionSpelling::command_line);  // messages name --flags
  // LMDB mallocs every large record's overflow pages and frees them at commit. Above glibc's mmap
  // threshold each would be a fresh mapping, zero-filled page by page (measured: most of the time
  // for 150 KB records); keep them in the heap for reuse instead. Memory stays bounded by the
  // transaction size.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 128 << 20);
  Args a;
  CLI::App app{
      "h5-to-lmdb: converts an HDF5 dataset into stoker's LMDB layout (docs/lmdb-layout.md), streaming with\n"
      "bounded memory. OUTPUT appears only when complete: the work goes into OUTPUT.partial, which --resume\n"
      "continues after an interruption.",
      "h5-to-lmdb"};
  add_options(app, a);
  if (int rc = stoker::tools::parse_or_exit(app, argc, argv); rc >= 0) return rc;
  // OUTPUT/ names OUTPUT (a directory of shards, say): its .partial goes beside it, not into it.
  while (a.output.size() > 1 && a.output.back() == '/') a.output.pop_back();
  if (names_a_shard_set(a.input)) {
    convert_set(a);
  } else {
    convert(a);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return stoker::tools::run_tool("h5-to-lmdb", h5_to_lmdb, argc, argv); }
