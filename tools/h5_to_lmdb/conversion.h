// h5-to-lmdb's conversions: one HDF5 file into one LMDB database, or a shard set into a directory
// of them. Each writes into OUTPUT.partial and moves it into place when complete and (with
// --verify) verified; --resume continues an interrupted one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/common/output_check.h"

namespace stoker::tools {

struct Args {
  std::string input, output;
  std::vector<std::string> fields;
  std::string group;
  std::uint64_t commit_every = 10000;
  std::uint64_t map_size = 0;
  bool resume = false, verify = false, force = false, quiet = false;
};

// A shard set's journal, OUTPUT.partial/sources.json: for each finished shard (and the one being
// converted, under "converting"), its source as it was when its conversion started
// (source_identity). A resume keeps a finished shard only while its source is unchanged (one
// rewritten since, or finished by a run killed before it was listed, is converted again; so is an
// unfinished one whose source changed), and a database in the directory that is none of the set's
// is an error: never a stale or stray shard moved into place.
inline constexpr const char* kSetJournal = "sources.json";

// What h5-to-lmdb writes, and so all it replaces with --force or discards: an LMDB database (a
// file, or an environment directory), or a directory of them.
inline const OutputKind kWrites{"h5-to-lmdb", true, false, kSetJournal};

// What differs between two fingerprints of a source: "size was 10, now 12; ...".
std::string differences(const nlohmann::json& was, const nlohmann::json& now);
// Moves the finished `partial` over OUTPUT, which is checked again first: a long conversion leaves
// time for something else to appear there.
void replace_output(const std::string& partial, const Args& a);

// One HDF5 file into one LMDB database (`a.input` to `a.output`).
void convert(const Args& a);

// INPUT a directory or a glob: a shard set, converted shard by shard into a directory of LMDB
// databases (OUTPUT/<shard's stem>.lmdb), which the loader reads as the same set. The shards are
// written into OUTPUT.partial/ (each atomically, as one conversion is) and the directory is moved
// into place when every one is done; --resume keeps the finished shards and continues the next.
bool names_a_shard_set(const std::string& input);
void convert_set(const Args& a);

}  // namespace stoker::tools
