#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "formats/shard_set.h"
#include "stoker/error.h"
#include "tools/common/atomic_output.h"
#include "tools/common/output_check.h"
#include "tools/h5_to_lmdb/conversion.h"

namespace stoker::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using stoker::Error;

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
  write_file_atomically(partial + "/" + kSetJournal, journal.dump() + "\n");
}

}  // namespace

bool names_a_shard_set(const std::string& input) {
  return fs::is_directory(input) || input.find_first_of("*?[") != std::string::npos;
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
  check_output(a.output, kWrites, a.force);
  const std::string partial = a.output + ".partial";
  refuse_symlink(partial, "h5-to-lmdb");
  if (check_partial(partial, kWrites) && !a.resume) {
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

}  // namespace stoker::tools
