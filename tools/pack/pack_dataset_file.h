// One dataset of a pack being written, LMDB or HDF5: the samples appended in order, the labels'
// names, each sample's source path and, for an LMDB, the pack's resume record committed with every
// transaction (tools/pack/pack_output.h says how a pack resumes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/hdf5/hdf5_writer.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_writer.h"
#include "stoker/schema.h"

namespace stoker::tools {

// Transactions of 8 MiB: LMDB's dirty pages are heap memory, and a smaller transaction reuses what
// the last one freed instead of faulting in new pages (a third faster than 64 MiB on small files).
inline constexpr std::uint64_t kCommitBytes = 8u << 20;
inline constexpr std::uint64_t kHdf5BlockSamples = 1024;
// The key of the pack's resume record in an LMDB's `stoker` sub-database.
inline constexpr std::string_view kRecordKey = formats::kPackRecordKey;

// One dataset being written: the samples appended in order, the labels' names and, for an LMDB,
// the resume record committed with every transaction.
class DatasetFile {
 public:
  virtual ~DatasetFile() = default;
  virtual void append(std::span<const std::span<const std::byte>> fields, std::string_view source) = 0;
  virtual std::uint64_t samples() const = 0;
  virtual void finish(const std::string& content_digest) = 0;
  // Makes what was appended durable for a resume (LMDB; nothing for HDF5, which is written again).
  virtual void commit() {}
  // The resume record committed last (LMDB; empty for HDF5 and for a new database).
  virtual std::optional<std::string> record() const { return std::nullopt; }
};

class LmdbFile final : public DatasetFile {
 public:
  LmdbFile(const std::string& path, const Schema& schema, const std::string& labels, std::uint64_t commit_records,
           std::function<std::string()> record)
      : labels_(labels), record_(std::move(record)), writer_(path, schema, options(commit_records)) {}
  void append(std::span<const std::span<const std::byte>> fields, std::string_view source) override {
    writer_.append_sample(fields, source);
  }
  std::uint64_t samples() const override { return writer_.next_index(); }
  void finish(const std::string& content_digest) override { writer_.finish(content_digest); }
  void commit() override { writer_.commit(); }
  std::optional<std::string> record() const override { return writer_.meta(kRecordKey); }
  // From now on every commit records the pack's state (the writer's own first commit, the schema,
  // and a resumed database's reopening come before there is one).
  void arm() { armed_ = true; }

 private:
  formats::LmdbWriteOptions options(std::uint64_t commit_records) {
    formats::LmdbWriteOptions wo;
    wo.commit_bytes = kCommitBytes;
    if (commit_records > 0) wo.commit_records = commit_records;
    wo.open_ended = true;
    wo.paths = true;
    wo.on_commit = [this](const auto& put) {
      put("labels", labels_);
      if (armed_) put(kRecordKey, record_());
    };
    return wo;
  }

  std::string labels_;
  std::function<std::string()> record_;
  bool armed_ = false;
  formats::LmdbWriter writer_;
};

// HDF5: growable datasets written in blocks of at most 1024 samples or 8 MiB.
class Hdf5File final : public DatasetFile {
 public:
  Hdf5File(const std::string& path, const Schema& schema, const std::string& labels)
      : schema_(schema),
        writer_(path, empty(schema), options()),
        pending_(schema.fields.size()),
        lengths_(pending_.size()) {
    writer_.set_text_attribute("labels", labels);
  }
  void append(std::span<const std::span<const std::byte>> fields, std::string_view source) override {
    for (std::size_t f = 0; f < fields.size(); ++f) {
      pending_[f].insert(pending_[f].end(), fields[f].begin(), fields[f].end());
      lengths_[f].push_back(fields[f].size());
      bytes_ += fields[f].size();
    }
    sources_.emplace_back(source);
    if (++count_ == kHdf5BlockSamples || bytes_ >= kCommitBytes) flush();
  }
  std::uint64_t samples() const override { return written_ + count_; }
  void finish(const std::string& content_digest) override {
    flush();
    writer_.set_text_attribute("content_digest", content_digest);
    writer_.close();
  }

 private:
  static Schema empty(Schema s) {
    s.num_samples = 0;
    return s;
  }
  static formats::Hdf5WriteOptions options() {
    formats::Hdf5WriteOptions o;
    o.layout = formats::Hdf5WriteOptions::Layout::chunked;
    o.rows_per_chunk = kHdf5BlockSamples;
    o.growable = true;
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
    writer_.write_texts(kHdf5Paths, written_, sources_);
    sources_.clear();
    written_ += count_;
    count_ = 0;
    bytes_ = 0;
  }
  Schema schema_;
  formats::Hdf5Writer writer_;
  std::vector<std::vector<std::byte>> pending_;
  std::vector<std::vector<std::uint64_t>> lengths_;
  std::vector<std::string> sources_;  // the pending samples' paths
  std::uint64_t count_ = 0, bytes_ = 0, written_ = 0;
};

}  // namespace stoker::tools
