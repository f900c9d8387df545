#include "loader/set_index.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <limits>

#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "base/unique_fd.h"
#include "base/untrusted_json.h"
#include "formats/core/file_identity.h"
#include "formats/open_reader.h"
#include "formats/shard_set.h"
#include "loader/worker/reader_options_json.h"
#include "remote/content_digest.h"
#include "remote/remote_url.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

using nlohmann::json;

constexpr int kIndexVersion = 1;
// An index larger than this is not one stoker wrote (a probe's answer is bounded far below it).
constexpr std::size_t kMaxIndexBytes = 64u << 20;

std::string hex(std::uint64_t v) { return fmt::format("{:016x}", v); }

std::uint64_t from_hex(const std::string& s) {
  std::uint64_t v = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (s.size() != 16 || error != std::errc() || end != s.data() + s.size())
    throw Error(ErrorCode::dataset, fmt::format("a digest of 16 hex digits, not {}", show_json(json(s))));
  return v;
}

// "16 shards, A .. B; LAYOUT" for the set at `paths`, from a probe's layout of the same set
// elsewhere (its paths are the writer's).
std::string layout_at(const std::string& layout, std::size_t shards, const std::vector<std::string>& paths) {
  std::string tail = layout;
  if (layout.starts_with(fmt::format("{} shards, ", shards))) {
    const std::size_t cut = layout.find("; ");
    tail = cut == std::string::npos ? "" : layout.substr(cut + 2);
  }
  if (paths.size() < 2) return tail;
  return fmt::format("{} shards, {} .. {}{}{}", paths.size(), paths.front(), paths.back(), tail.empty() ? "" : "; ",
                     tail);
}

}  // namespace

json index_reader_key(const formats::ReaderOptions& options) {
  formats::ReaderOptions o;
  o.format = options.format;
  o.group = options.group;
  o.hdf5_path = options.hdf5_path;
  o.lmdb_keys = options.lmdb_keys;
  o.lmdb_count_key = options.lmdb_count_key;
  json j;
  put_reader_options(j, "", o);
  return j;
}

std::string set_index_json(const std::vector<std::string>& paths, const std::vector<std::string>& names,
                           const ProbeResult& probe, const formats::ReaderOptions& options) {
  ProbeResult r = probe;
  if (r.shard_samples.empty() && paths.size() == 1) {  // one file: a set of one
    r.shard_samples = {r.schema.num_samples};
    r.shard_identities = {formats::file_identity(paths[0])};
    if (r.shard_identities[0]) r.shard_identities[0]->version = r.version;
  }
  json shards = json::array();
  for (std::size_t k = 0; k < paths.size(); ++k) {
    const std::string& path = paths[k];
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) throw Error::from_errno(errno, path);
    if (!S_ISREG(st.st_mode)) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("{}: not a file, and a store holds each shard as one: an index describes shards that "
                              "are files (an LMDB shard made with MDB_NOSUBDIR, as stoker-pack writes them)",
                              path));
    }
    remote::ContentDigest digest;
    digest.add_file(fd.get(), static_cast<std::uint64_t>(st.st_size), path);
    shards.push_back({{"name", text_to_json(names[k])},
                      {"bytes", static_cast<std::uint64_t>(st.st_size)},
                      {"xxh3", hex(digest.value())}});
  }
  json fields = json::array();
  for (const std::string& f : options.fields) fields.push_back(text_to_json(f));
  const json j{{"stoker_index", kIndexVersion},
               {"shards", shards},
               {"reader", index_reader_key(options)},
               {"fields", fields},
               {"probe", json::parse(probe_result_to_json(r))}};
  return j.dump(1) + "\n";
}

std::string write_loader_index(const std::string& path, const Options& o, const formats::ReaderOptions& reader,
                               bool remote) {
  if (!o.mix.empty()) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("stoker: this loader mixes {} sources, and an index describes one shard set: write one "
                            "for each source, with a loader of its own",
                            o.mix.size()));
  }
  if (path.empty() && remote) {
    throw Error(ErrorCode::invalid_option,
                "stoker: this loader reads its shards from a store, through the node's cache: give the index a path "
                "(then store it beside the shards, as stoker-index.json)");
  }
  const std::vector<std::string> paths = formats::shard_paths(o.source);
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 && errno == ENOENT) {
      if (!remote) throw Error::from_errno(ENOENT, p);  // deleted since the loader was built
      throw Error(ErrorCode::invalid_option,
                  fmt::format("{}: not all its shards are in the cache now ({} is not: a cache smaller than the set, "
                              "or one not yet filled by an epoch): write the index where the shards are files (before "
                              "they are stored), or after an epoch with a {} that holds the set",
                              formats::source_name(o.source), p, option_name("cache_limit")));
    }
  }
  // Probed afresh, as a loader that never read the set does: every shard counted and its bounds
  // read (with the counts the loader was built with, only the first shard would be opened).
  formats::ReaderOptions options = reader;
  options.open_shards_lazily = false;
  options.shard_samples.clear();
  options.shard_identities.clear();
  options.known.reset();
  const ProbeResult probe = describe_dataset(*formats::open_reader(o.source, options), o.source);
  // A cached file is named as its URL is, percent-encoded; the index names it as the store lists it.
  std::vector<std::string> names;
  for (const std::string& p : paths) {
    const std::string name = std::filesystem::path(p).filename().string();
    names.push_back(remote ? remote::percent_decoded(name) : name);
  }
  const std::string text = set_index_json(paths, names, probe, options);
  const std::string where =
      path.empty() ? (std::filesystem::path(paths.front()).parent_path() / kIndexName).string() : path;
  const std::string tmp = fmt::format("{}.{}.tmp", where, ::getpid());
  {
    const UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) throw Error::from_errno(errno, tmp);
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        ::unlink(tmp.c_str());
        throw Error::from_errno(e, tmp);
      }
      done += static_cast<std::size_t>(n);
    }
  }
  if (::rename(tmp.c_str(), where.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error::from_errno(e, "renaming " + tmp + " to " + where);
  }
  return where;
}

SetIndex parse_set_index(std::string_view text, const std::string& url) {
  try {
    const json j = parse_untrusted_json(text, JsonLimits{kMaxIndexBytes, 16});
    if (j.at("stoker_index").get<int>() != kIndexVersion) {
      throw Error(ErrorCode::dataset,
                  fmt::format("an index of version {}, and this stoker reads version {}: write it again with this one",
                              show_json(j.at("stoker_index")), kIndexVersion));
    }
    SetIndex index;
    for (const json& s : j.at("shards")) {
      index.shards.push_back(IndexedShard{text_from_json(s.at("name")), s.at("bytes").get<std::uint64_t>(),
                                          from_hex(s.at("xxh3").get<std::string>())});
    }
    index.reader = j.at("reader").dump();
    for (const json& f : j.at("fields")) index.fields.push_back(text_from_json(f));
    index.probe = probe_result_from_json(j.at("probe").dump());
    if (index.probe.shard_samples.size() != index.shards.size() ||
        index.probe.shard_identities.size() != index.shards.size()) {
      throw Error(ErrorCode::dataset, fmt::format("it lists {} shards and counts the samples of {}",
                                                  index.shards.size(), index.probe.shard_samples.size()));
    }
    std::uint64_t samples = 0;
    for (std::uint64_t n : index.probe.shard_samples) {
      if (n > std::numeric_limits<std::uint64_t>::max() - samples)
        throw Error(ErrorCode::dataset, "its shards' sample counts overflow");
      samples += n;
    }
    if (samples != index.probe.schema.num_samples) {
      throw Error(ErrorCode::dataset, fmt::format("its shards hold {} samples, and its schema says {}", samples,
                                                  index.probe.schema.num_samples));
    }
    return index;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::dataset, fmt::format("{}: not an index of a shard set stoker can read ({}): write it again "
                                                "with Loader::write_index, or delete it",
                                                url, e.what()));
  }
}

std::string index_mismatch(const SetIndex& index, const std::vector<std::string>& names,
                           const std::vector<std::uint64_t>& sizes) {
  if (index.shards.size() != names.size())
    return fmt::format("it lists {} shards, the store {}", index.shards.size(), names.size());
  for (std::size_t k = 0; k < names.size(); ++k) {
    const IndexedShard& s = index.shards[k];
    if (s.name != names[k]) return fmt::format("its shard {} is {}, the store's {}", k, s.name, names[k]);
    if (s.bytes != sizes[k]) return fmt::format("it lists {} as {} bytes, the store {}", s.name, s.bytes, sizes[k]);
  }
  return "";
}

std::optional<ProbeResult> probe_from_index(const SetIndex& index, const formats::ReaderOptions& options,
                                            const std::vector<std::string>& paths, std::string& why) {
  if (index.reader != index_reader_key(options).dump()) {
    why = "it was written by a loader with another format, group, HDF5 path or LMDB key options";
    return std::nullopt;
  }
  if (options.fields.empty() && !index.fields.empty()) {
    why = "it was written by a loader that read some of the fields, and this one reads them all";
    return std::nullopt;
  }
  ProbeResult r = index.probe;
  const std::vector<Field> all = r.schema.fields;
  try {
    r.schema = formats::select_fields(index.probe.schema, options.fields, paths.empty() ? "" : paths.front());
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
  r.bounds.clear();
  r.typical.clear();
  r.encoded.clear();
  for (const Field& f : r.schema.fields) {
    std::size_t k = 0;
    while (all[k].name != f.name) ++k;  // select_fields picked it from `all`
    r.bounds.push_back(index.probe.bounds[k]);
    r.typical.push_back(index.probe.typical[k]);
    r.encoded.push_back(index.probe.encoded[k]);
  }
  r.layout = layout_at(r.layout, index.shards.size(), paths);
  return r;
}

}  // namespace stoker::detail
