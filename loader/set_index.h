// A shard set's index: what a probe of the set says (its schema, each shard's samples, its bounds),
// with each shard's file name, size and content digest, written beside the shards as
// "stoker-index.json" (Loader::write_index) and stored with them. A loader that reads the set from
// a store, on a node that never read it, starts from the index instead of fetching every shard to
// count its samples: its first epoch fetches the shards in the order it reads them, while it reads
// (docs/remote.md, "An index"). Each shard fetched is checked against the index's digest.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/core/reader.h"
#include "loader/child_reads/probe.h"
#include "stoker/options.h"

namespace stoker::detail {

inline constexpr std::string_view kIndexName = "stoker-index.json";

struct IndexedShard {
  std::string name;  // its file name
  std::uint64_t bytes = 0;
  std::uint64_t digest = 0;  // remote::ContentDigest of its bytes
};

struct SetIndex {
  std::vector<IndexedShard> shards;
  std::string reader;               // index_reader_key() of the options it was probed with, as JSON text
  std::vector<std::string> fields;  // the fields those options asked for (empty: all)
  ProbeResult probe;
};

// What of `options` a probe's answer depends on, as JSON: the format and where and how fields are
// read, not the order, the shards' counts or how many are kept open.
nlohmann::json index_reader_key(const formats::ReaderOptions& options);

// The index of the set whose shards are the files `paths` (in order), named `names` in its store,
// which `probe` describes, read with `options`. Reads every shard once, for its digest. Throws
// stoker::Error: invalid_option for a shard that is not a regular file (an LMDB directory: a store
// holds files), io for a read that fails.
std::string set_index_json(const std::vector<std::string>& paths, const std::vector<std::string>& names,
                           const ProbeResult& probe, const formats::ReaderOptions& options);

// Writes the index of the set a loader with options `o` reads (its reader's `reader`) to `path`
// ("": kIndexName beside its first shard), whole or not at all (a temporary file renamed), and
// returns where. The set is probed again here, in this process. Throws stoker::Error:
// invalid_option for a mix, a `remote` set without a path (its files are the cache's), or a set
// whose shards are not all here (a cache smaller than it, or not yet filled), and what
// set_index_json() and writing throw.
std::string write_loader_index(const std::string& path, const Options& o, const formats::ReaderOptions& reader,
                               bool remote);

// The index `text`, read from `url`. Throws stoker::Error (dataset) for a text that is not an index
// this version of stoker wrote, naming `url`.
SetIndex parse_set_index(std::string_view text, const std::string& url);

// Why `index` does not describe the objects named `names` (their file names) of `sizes` bytes, in
// order: the first difference; "" when it does.
std::string index_mismatch(const SetIndex& index, const std::vector<std::string>& names,
                           const std::vector<std::uint64_t>& sizes);

// The probe's answer for a reader with `options` of the set whose shards lie at `paths` (in
// order): the index's, its fields those `options` select. nullopt, with `why`, when the index was
// probed with other options (index_reader_key) or lacks a field they select.
std::optional<ProbeResult> probe_from_index(const SetIndex& index, const formats::ReaderOptions& options,
                                            const std::vector<std::string>& paths, std::string& why);

}  // namespace stoker::detail
