#include "tools/pack/pack_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "formats/hdf5/hdf5_writer.h"
#include "formats/lmdb/lmdb_writer.h"
#include "stoker/digest.h"
#include "stoker/error.h"
#include "tools/common/atomic_output.h"
#include "tools/common/output_check.h"
#include "tools/pack/pack_dataset_file.h"

namespace stoker::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kJournal = "pack.json";
// What stoker-pack writes, and so all it replaces with --force or discards: an LMDB or HDF5 dataset,
// or a directory of them with the journal.
const OutputKind kWrites{"stoker-pack", true, true, kJournal};

bool is_symlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// Our own records, but read from disk: parsed a few levels deep at most (printing a value recurses).
json parse_record(const std::string& text, const std::string& where) {
  try {
    return json::parse(text, [](int depth, json::parse_event_t, json&) {
      if (depth > 8) throw std::runtime_error("nested too deep");
      return true;
    });
  } catch (const std::exception& e) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: the pack's resume record is damaged ({}); start over with --force", where, e.what()));
  }
}

// Skipped files [from, to) of `list`, as [[item, reason], ...].
json skipped_json(const std::vector<SkippedFile>& list, std::size_t from, std::size_t to) {
  json out = json::array();
  for (std::size_t k = from; k < to; ++k) out.push_back({list[k].item, list[k].reason});
  return out;
}

// A digest as the record writes it: 16 hex digits, nothing else (stoull would take a sign, spaces
// and a 0x).
std::uint64_t parse_digest(const std::string& hex) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  if (hex.size() != 16 || ec != std::errc() || end != hex.data() + hex.size())
    throw std::runtime_error("its digest '" + hex.substr(0, 32) + "' is not 16 hex digits");
  return v;
}

void add_skipped(const json& list, std::vector<SkippedFile>& out, const std::string& where) {
  if (!list.is_array()) throw Error(ErrorCode::dataset, where + ": the resume record's skipped list is damaged");
  for (const auto& s : list) {
    if (!s.is_array() || s.size() != 2 || !s[0].is_number_unsigned() || !s[1].is_string())
      throw Error(ErrorCode::dataset, where + ": the resume record's skipped list is damaged");
    out.push_back({s[0].get<std::uint64_t>(), s[1].get<std::string>()});
  }
}

}  // namespace

struct PackOutput::Impl {
  PackOutputSpec spec;
  std::string partial;                                    // OUTPUT.partial: the dataset, or the directory of shards
  bool sharded = false, resumed = false, forced = false;  // forced: --force
  // An HDF5 dataset being written (created, not yet finished): it cannot be continued after a
  // failure, so it is removed when the pack fails.
  std::string unfinished_hdf5;

  // Finished shards (the journal) and the one being written.
  std::vector<PackedDataset> done;
  std::vector<std::uint64_t> done_end_items;
  std::vector<std::size_t> done_skipped_end;  // skipped.size() when each finished
  std::unique_ptr<DatasetFile> current;
  std::string current_path;
  std::uint64_t current_first_item = 0, current_bytes = 0;
  ContentDigest digest;
  std::size_t current_skipped_from = 0;

  std::uint64_t next_item = 0, samples_before = 0;
  std::vector<SkippedFile> skipped;
  std::vector<std::byte> digested;

  const char* extension() const { return spec.hdf5 ? ".h5" : ".lmdb"; }
  std::string shard_name(std::size_t k) const { return fmt::format("shard-{:05d}{}", k, extension()); }

  std::string record() const {
    json r = {
        {"fingerprint", spec.fingerprint}, {"first_item", current_first_item},
        {"next_item", next_item},          {"samples", current ? current->samples() : 0},
        {"digest", digest.hex()},          {"skipped", skipped_json(skipped, current_skipped_from, skipped.size())},
        {"bytes", current_bytes}};
    return r.dump();
  }

  void write_journal() const {
    json shards = json::array();
    std::size_t from = 0;
    for (std::size_t k = 0; k < done.size(); ++k) {
      shards.push_back({{"file", fs::path(done[k].path).filename().string()},
                        {"end_item", done_end_items[k]},
                        {"samples", done[k].samples},
                        {"digest", done[k].content_digest},
                        {"skipped", skipped_json(skipped, from, done_skipped_end[k])}});
      from = done_skipped_end[k];
    }
    const json j = {{"fingerprint", spec.fingerprint}, {"shards", shards}};
    const std::string path = partial + "/" + kJournal, tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << j.dump() << '\n';
      out.flush();
      if (!out) throw Error::from_errno(errno, tmp + ": writing");
    }
    fsync_path(tmp, O_RDONLY);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw Error::from_errno(errno, path + ": replacing it");
    fsync_dir(partial);
  }

  void open_current(bool existing) {
    current_bytes = 0;
    current_path = sharded ? fmt::format("{}/{}.partial", partial, shard_name(done.size())) : partial;
    if (!existing) create_exclusive(current_path);
    if (spec.hdf5) {
      unfinished_hdf5 = current_path;
      current = std::make_unique<Hdf5File>(current_path, spec.schema, spec.labels_json);
    } else {
      auto lmdb = std::make_unique<LmdbFile>(current_path, spec.schema, spec.labels_json, spec.commit_records,
                                             [this] { return record(); });
      LmdbFile* raw = lmdb.get();
      current = std::move(lmdb);
      if (existing) continue_lmdb();
      raw->arm();
    }
  }

  // An LMDB shard (or dataset) a killed pack was writing: where its last commit left off.
  void continue_lmdb() {
    const std::uint64_t stored = current->samples();
    const auto text = current->record();
    if (!text) {
      if (stored != 0)
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: has samples but no resume record; start over with --force", current_path));
      return;
    }
    const json r = parse_record(*text, current_path);
    if (!r.is_object() || !r.contains("fingerprint") || r["fingerprint"] != spec.fingerprint)
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: was packed from another folder or manifest, or with other options (its "
                              "fingerprint differs); start over with --force",
                              current_path));
    try {
      if (r.at("first_item").get<std::uint64_t>() != current_first_item ||
          r.at("samples").get<std::uint64_t>() != stored)
        throw std::runtime_error("it does not match the samples stored");
      next_item = r.at("next_item").get<std::uint64_t>();
      current_bytes = r.at("bytes").get<std::uint64_t>();  // the shard is cut where it would have been
      digest = ContentDigest(parse_digest(r.at("digest").get<std::string>()));
      if (!r.contains("skipped")) throw std::runtime_error("it has no skipped list");
    } catch (const std::exception& e) {
      throw Error(
          ErrorCode::dataset,
          fmt::format("{}: the pack's resume record is damaged ({}); start over with --force", current_path, e.what()));
    }
    add_skipped(r["skipped"], skipped, current_path);
  }

  void finish_current() {
    current->finish(digest.hex());
    const std::uint64_t n = current->samples();
    current.reset();
    unfinished_hdf5.clear();
    fsync_path(current_path, O_RDONLY);  // on disk before the journal lists it (HDF5 only flushes)
    std::string final_path = current_path;
    if (sharded) {
      final_path = fmt::format("{}/{}", partial, shard_name(done.size()));
      done.push_back({final_path, n, digest.hex()});
      done_end_items.push_back(next_item);
      done_skipped_end.push_back(skipped.size());
      write_journal();  // first the record, then the name: a listed shard is a finished one
      if (::rename(current_path.c_str(), final_path.c_str()) != 0)
        throw Error::from_errno(errno, fmt::format("{}: moving {} into place", final_path, current_path));
      fsync_dir(partial);
    } else {
      done.push_back({final_path, n, digest.hex()});
    }
    samples_before += n;
    digest = ContentDigest();
    current_first_item = next_item;
    current_skipped_from = skipped.size();
  }

  void start(bool resume, bool force);
  void resume_sharded();
};

void PackOutput::Impl::start(bool resume, bool force) {
  check_output(spec.output, kWrites, force);  // with --force, only a dataset of stoker-pack's is replaced
  if (is_symlink(partial))
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: is a symbolic link; stoker-pack writes only what it creates itself: remove the link",
                            partial));
  const bool there = check_partial(partial, kWrites);  // and only its own interrupted pack discarded
  if (there && resume) {
    if (fs::is_directory(partial) != sharded)
      throw Error(ErrorCode::invalid_option,
                  fmt::format("{}: was started {} --shard-size; resume with the same options, or start over with "
                              "--force",
                              partial, sharded ? "without" : "with"));
    resumed = true;
    if (sharded) {
      resume_sharded();
    } else if (spec.hdf5) {
      fs::remove(partial);  // an HDF5 file cannot be continued after a kill: written again
      open_current(false);
    } else {
      open_current(true);
    }
    return;
  }
  if (there && !force)
    throw Error(
        ErrorCode::invalid_option,
        fmt::format("{}: an interrupted pack is there; continue it with --resume or start over with --force", partial));
  if (there) fs::remove_all(partial);
  if (sharded) {
    if (::mkdir(partial.c_str(), 0755) != 0) throw Error::from_errno(errno, partial + ": creating it");
    write_journal();
  }
  open_current(false);
}

void PackOutput::Impl::resume_sharded() {
  const std::string journal_path = partial + "/" + kJournal;
  std::ifstream in(journal_path);
  if (!in) throw Error::from_errno(errno, journal_path + " (the pack's record of finished shards)");
  std::stringstream text;
  text << in.rdbuf();
  const json j = parse_record(text.str(), journal_path);
  if (!j.is_object() || !j.contains("fingerprint") || j["fingerprint"] != spec.fingerprint)
    throw Error(ErrorCode::dataset,
                fmt::format("{}: was packed from another folder or manifest, or with other options (its fingerprint "
                            "differs); start over with --force",
                            partial));
  try {
    for (const auto& s : j.at("shards")) {
      const std::string path = fmt::format("{}/{}", partial, shard_name(done.size()));
      if (s.at("file").get<std::string>() != fs::path(path).filename().string())
        throw std::runtime_error("its shards are not numbered in order");
      // Killed between the record and the rename: the rename is what is left to do.
      if (!fs::exists(path) && ::rename((path + ".partial").c_str(), path.c_str()) != 0)
        throw Error::from_errno(errno, path + ": a finished shard is missing");
      add_skipped(s.at("skipped"), skipped, journal_path);
      done.push_back({path, s.at("samples").get<std::uint64_t>(), s.at("digest").get<std::string>()});
      done_end_items.push_back(s.at("end_item").get<std::uint64_t>());
      done_skipped_end.push_back(skipped.size());
      samples_before += done.back().samples;
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: the pack's record is damaged ({}); start over with --force", journal_path, e.what()));
  }
  next_item = current_first_item = done_end_items.empty() ? 0 : done_end_items.back();
  current_skipped_from = skipped.size();
  const std::string unfinished = fmt::format("{}/{}.partial", partial, shard_name(done.size()));
  const bool there = fs::exists(fs::symlink_status(unfinished));
  if (there && spec.hdf5) fs::remove(unfinished);
  open_current(there && !spec.hdf5);
}

PackOutput::PackOutput(const PackOutputSpec& spec, bool resume, bool force) : impl_(std::make_unique<Impl>()) {
  impl_->spec = spec;
  impl_->partial = spec.output + ".partial";
  impl_->sharded = spec.shard_bytes > 0;
  impl_->forced = force;
  impl_->start(resume, force);
}

PackOutput::~PackOutput() {
  Impl& m = *impl_;
  if (m.unfinished_hdf5.empty()) return;
  // The pack failed (a full disk, a file that stopped it): an unfinished HDF5 dataset cannot be
  // continued, so it is closed (abandoned, if its writes failed) and removed; a shard set keeps its
  // finished shards for --resume.
  m.current.reset();
  ::unlink(m.unfinished_hdf5.c_str());
}

std::uint64_t PackOutput::next_item() const { return impl_->next_item; }
std::uint64_t PackOutput::samples() const {
  return impl_->samples_before + (impl_->current ? impl_->current->samples() : 0);
}
const std::vector<SkippedFile>& PackOutput::skipped() const { return impl_->skipped; }
bool PackOutput::resumed() const { return impl_->resumed; }
const std::vector<PackedDataset>& PackOutput::datasets() const { return impl_->done; }

void PackOutput::append(std::uint64_t item, std::span<const std::span<const std::byte>> fields,
                        std::string_view source) {
  Impl& m = *impl_;
  if (item != m.next_item)
    throw Error(ErrorCode::internal,
                fmt::format("stoker-pack: item {} stored out of order ({} next)", item, m.next_item));
  std::uint64_t bytes = 0;
  for (const auto& f : fields) bytes += f.size();
  if (m.sharded && m.current->samples() > 0 && m.current_bytes + bytes > m.spec.shard_bytes) {
    m.finish_current();
    m.open_current(false);
  }
  // The state the commit inside append records is the state after this sample.
  m.digested.clear();
  for (const auto& f : fields) m.digested.insert(m.digested.end(), f.begin(), f.end());
  m.digest.add(m.current->samples(), m.digested);
  m.next_item = item + 1;
  m.current_bytes += bytes;
  m.current->append(fields, source);
}

void PackOutput::skip(std::uint64_t item, std::string reason) {
  Impl& m = *impl_;
  if (item != m.next_item)
    throw Error(ErrorCode::internal,
                fmt::format("stoker-pack: item {} skipped out of order ({} next)", item, m.next_item));
  m.skipped.push_back({item, std::move(reason)});
  m.next_item = item + 1;
}

void PackOutput::commit() {
  if (impl_->current) impl_->current->commit();
}

void PackOutput::finish() {
  if (samples() == 0)
    throw Error(ErrorCode::dataset, fmt::format("{}: no file was stored (every one was skipped)", impl_->spec.output));
  Impl& m = *impl_;
  if (m.sharded && !m.done.empty() && m.current->samples() == 0) {
    // Every file after the last finished shard was skipped (or a resumed pack had finished them
    // all): no empty shard, which the loader would refuse.
    m.current.reset();
    m.unfinished_hdf5.clear();
    if (::unlink(m.current_path.c_str()) != 0) throw Error::from_errno(errno, m.current_path + ": removing it");
    return;
  }
  m.finish_current();
}

void PackOutput::move_into_place() {
  Impl& m = *impl_;
  const std::string& output = m.spec.output;
  check_output(output, kWrites, m.forced);  // again: a long pack leaves time for something to appear there
  tools::move_into_place(m.partial, output);
  // The journal only serves a resume: gone once the set is in place (a kill just before leaves a
  // file the loader does not take for a shard).
  if (m.sharded && ::unlink((output + "/" + kJournal).c_str()) != 0)
    throw Error::from_errno(errno, fmt::format("{}/{}: removing it", output, kJournal));
  for (auto& d : m.done) d.path = m.sharded ? output + "/" + fs::path(d.path).filename().string() : output;
}

}  // namespace stoker::tools
