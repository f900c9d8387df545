// h5-to-lmdb's conversion of one HDF5 file into stoker's LMDB layout (docs/lmdb-layout.md).
//
// Memory stays bounded whatever the input's size: one read block (~16 MiB of samples, or one chunk
// of the largest field if that is bigger), the records of one uncommitted transaction twice over
// (kept to replay it when the map must grow, and LMDB's dirty pages on the heap; --commit-every and
// 32 MiB bound it), and HDF5's chunk cache for compressed datasets (8 chunks, at most 64 MiB, per
// field): about 100 MiB plus the chunk caches.
#include "tools/h5_to_lmdb/conversion.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <utility>

#include "formats/core/schema_json.h"
#include "formats/hdf5/hdf5_reader.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_reader.h"
#include "formats/lmdb/lmdb_writer.h"
#include "stoker/digest.h"
#include "stoker/error.h"
#include "tools/common/atomic_output.h"
#include "tools/common/cli.h"
#include "tools/common/output_check.h"
#include "tools/common/progress.h"

namespace stoker::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using stoker::Error;

constexpr std::uint64_t kBlockBytes = 16u << 20;
constexpr std::uint64_t kCommitBytes = 32u << 20;
constexpr std::string_view kProgressKey = formats::kConversionProgressKey;
constexpr std::size_t kLmdbMaxKeyBytes = 511;  // mdb_env_get_maxkeysize() of LMDB as built by default
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
  Progress progress("verify", schema.num_samples, schema.bytes_per_sample(), a.quiet);
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
// whatever h5-to-lmdb does not write (tools/common/output_check.h) even then.
// OUTPUT.partial is a file this tool made, never one it was pointed to: in a shared directory a
// symbolic link planted there (dangling or not) would make the conversion create or overwrite a
// file of someone else's choosing. A link is refused, and a new one is created with O_EXCL and
// O_NOFOLLOW before LMDB opens it.
bool resuming(const Args& a, const std::string& partial) {
  check_output(a.output, kWrites, a.force);
  refuse_symlink(partial, "h5-to-lmdb");
  if (!check_partial(partial, kWrites)) return false;
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

// Samples [start, N) of `h5` appended to `writer` in chunk-aligned blocks; returns their bytes.
std::uint64_t copy_samples(stoker::formats::Hdf5Reader& h5, stoker::formats::LmdbWriter& writer, std::uint64_t start,
                           stoker::ContentDigest& digest, Progress& progress) {
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

}  // namespace

std::string differences(const json& was, const json& now) {
  std::vector<std::string> out;
  for (auto& [k, v] : now.items()) {
    if (!was.contains(k) || was[k] != v) {
      out.push_back(fmt::format("{} was {}, now {}", k, was.contains(k) ? was[k].dump() : "unset", v.dump()));
    }
  }
  return fmt::format("{}", fmt::join(out, "; "));
}

void replace_output(const std::string& partial, const Args& a) {
  check_output(a.output, kWrites, a.force);
  move_into_place(partial, a.output);
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
  // What the file stores beside its samples (stoker-pack's class names, say) goes along, but its
  // digest (of all its fields: the database records its own), anything of the name of one of the
  // database's own records, and a name longer than an LMDB key may be (said).
  std::map<std::string, std::string> carried;
  try {
    carried = h5.metadata();
  } catch (const stoker::Error& e) {  // the samples do not depend on it
    std::cerr << fmt::format("h5-to-lmdb: the file's metadata is not carried: {}\n", e.what());
  }
  std::erase_if(carried, [&](const auto& kv) {
    if (kv.first.size() > kLmdbMaxKeyBytes) {
      std::cerr << fmt::format(
          "h5-to-lmdb: attribute '{}...' of {} is not carried: its name is longer than the {} "
          "bytes of an LMDB key\n",
          stoker::printable(kv.first.substr(0, 40)), stoker::printable(a.input), kLmdbMaxKeyBytes);
      return true;
    }
    return kv.first == "content_digest" || stoker::formats::is_private_meta_key(kv.first);
  });
  // The resume point commits in the same transaction as the records it counts.
  wo.on_commit = [&](const auto& put) {
    if (!writer_ptr) return;  // the writer's own first commit, before any sample
    // With the commits that hold the last sample (one retried after the map grew redoes its puts):
    // once the samples are all there, whatever was resumed.
    if (writer_ptr->next_index() == schema.num_samples) {
      for (const auto& [key, value] : carried) put(key, value);
    }
    json p = {{"fingerprint", fp}, {"next_sample", writer_ptr->next_index()}, {"digest", digest.hex()}};
    put(kProgressKey, p.dump());
  };
  if (!resume) create_exclusive(partial);  // once the input is known to be readable
  stoker::formats::LmdbWriter writer(partial, schema, wo);
  writer_ptr = &writer;
  const std::uint64_t start = resume ? resume_point(writer, partial, fp, digest) : writer.next_index();
  if (resume && !a.quiet)
    std::cerr << fmt::format("h5-to-lmdb: resuming {} at sample {}\n", stoker::printable(partial), start);

  Progress progress(stoker::printable(a.output), schema.num_samples, schema.bytes_per_sample(), a.quiet, start);
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
                             schema.num_samples - start, binary_size(bytes), seconds,
                             binary_rate(bytes / std::max(seconds, 1e-9)), a.verify ? ", verified" : "",
                             stoker::printable(a.output), digest.hex());
  }
}

}  // namespace stoker::tools
