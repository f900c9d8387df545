// Where stoker-pack's samples go, in plan order: one dataset (OUTPUT), or with a shard size a
// directory OUTPUT of shards shard-00000.lmdb, shard-00001.lmdb, ... (or .h5), each closed before the
// sample that would take it past the size (a shard holds at least one sample). Each dataset is
// stoker's LMDB layout 2 or HDF5 (a variable-length u8 dataset and label datasets) and holds the
// labels' names and each sample's source path, by its index in that dataset: LMDB's sub-database
// `paths` under the sample's key (the path's bytes, normally UTF-8), HDF5's dataset `stoker/paths`
// (variable-length UTF-8 strings: a path that is not UTF-8, or holds a backslash, escaped as
// Hdf5Writer::write_texts says).
// Everything is written under OUTPUT.partial, created by this tool and never through a link, and
// moved into place when complete: a reader never sees a part of a pack.
//
// Resume: a pack killed at any point continues where its last commit left off and ends with the
// same datasets as an uninterrupted one.
//   - The shard being written is SHARD.partial inside OUTPUT.partial/ (for one dataset,
//     OUTPUT.partial itself). An LMDB commits its resume record with its records (the `stoker`
//     sub-database's key `pack`: the fingerprint, the items it covers, its digest so far and the
//     files it skipped). HDF5 cannot be appended to after a kill: an unfinished HDF5 shard (or one
//     HDF5 dataset) is written again.
//   - A finished shard is closed and synced, recorded in OUTPUT.partial/pack.json (replaced
//     atomically), and only then renamed from SHARD.partial to SHARD.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/schema.h"

namespace stoker::tools {

// HDF5 output: the group of the pack's own datasets (no field may take its name), and the dataset
// of each sample's source path.
inline constexpr std::string_view kHdf5PackGroup = "stoker";
inline constexpr const char* kHdf5Paths = "stoker/paths";

struct PackOutputSpec {
  std::string output;
  bool hdf5 = false;
  std::uint64_t shard_bytes = 0;     // 0: one dataset
  Schema schema;                     // the fields, in stored order; num_samples: the plan's items
  std::string labels_json;           // {"label": ["cat", "dog"]}
  std::string fingerprint;           // of the plan and of everything that shapes the stored bytes
  std::uint64_t commit_records = 0;  // LMDB: commit (a resume point) every N samples; 0: every 8 MiB
};

struct SkippedFile {
  std::uint64_t item = 0;  // its place in the plan
  std::string reason;
};

// A finished dataset: its path (under OUTPUT.partial until moved into place), samples and digest.
struct PackedDataset {
  std::string path;
  std::uint64_t samples = 0;
  std::string content_digest;
};

class PackOutput {
 public:
  // Starts a pack in a new OUTPUT.partial, or with `resume` continues the one there (refused when
  // it was started from another plan or with other options). Refuses an existing OUTPUT unless
  // `force` (which also discards an interrupted pack that is not resumed), and even then anything
  // but a dataset of stoker-pack's (tools/common/output_check.h).
  PackOutput(const PackOutputSpec& spec, bool resume, bool force);
  // Before move_into_place() (the pack failed): removes the HDF5 dataset being written, which
  // cannot be continued; an LMDB's work and a shard set's finished shards stay for --resume.
  ~PackOutput();
  PackOutput(const PackOutput&) = delete;
  PackOutput& operator=(const PackOutput&) = delete;

  // The first item of the plan not yet stored or skipped.
  std::uint64_t next_item() const;
  // Samples stored so far, in every shard.
  std::uint64_t samples() const;
  // Every file skipped, by this run and the runs it resumes.
  const std::vector<SkippedFile>& skipped() const;
  // Whether this run continues an earlier one, and where that one had got to.
  bool resumed() const;

  // Stores item `item` (== next_item()) with its fields in the schema's order, and the path of
  // the file it was made from.
  void append(std::uint64_t item, std::span<const std::span<const std::byte>> fields, std::string_view source);
  // Records that item `item` (== next_item()) is not stored, and why.
  void skip(std::uint64_t item, std::string reason);
  // Commits what was stored (LMDB): a resume continues after it. Also done every
  // commit_records samples and 8 MiB.
  void commit();
  // Finishes the last dataset (every one is then closed, synced and listed in datasets()).
  void finish();
  const std::vector<PackedDataset>& datasets() const;
  // Moves OUTPUT.partial into place as OUTPUT (after finish()).
  void move_into_place();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::tools
