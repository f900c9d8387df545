#include "loader/streamed_probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/unique_fd.h"
#include "formats/open_reader.h"
#include "formats/shard_set.h"
#include "loader/set_index.h"
#include "loader/worker/reader_options_json.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

using nlohmann::json;

// "<cache>/sets/<XXH64 of the objects' versions and the reader options>.json", or "" for a set
// with local shards (which could change without the memo knowing).
std::string memo_path(const ShardFetcher& fetcher, const formats::ReaderOptions& options, const std::string& dir) {
  json key = json::array();
  for (const auto& s : fetcher.shards()) {
    if (!s) return "";
    key.push_back({s->object.url, s->info.size, s->info.etag});
  }
  formats::ReaderOptions o = options;
  o.shard_samples.clear();
  o.shard_identities.clear();
  json reader;
  put_reader_options(reader, "", o);
  const std::string text = json{{"memo", 2}, {"objects", key}, {"reader", reader}}.dump();
  return fmt::format("{}/sets/{:016x}.json", dir, XXH64(text.data(), text.size(), 0));
}

// A memo larger than this is not one stoker wrote (a probe's answer is bounded far below it).
constexpr std::uint64_t kMaxMemoBytes = 64ull << 20;

std::optional<ProbeResult> read_memo(const std::string& path, std::size_t shards) {
  // A regular file of bounded size, never a link or a FIFO someone left there.
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::uint64_t>(st.st_size) > kMaxMemoBytes) {
    return std::nullopt;
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n <= 0) return std::nullopt;  // cut short or unreadable: probed again, and rewritten
    got += static_cast<std::size_t>(n);
  }
  try {
    ProbeResult r = probe_result_from_json(text);
    if (r.shard_samples.size() == shards) return r;
  } catch (const Error&) {  // a memo cut short or from another version: probed again, and rewritten
  }
  return std::nullopt;
}

// Written whole or not at all (a temporary file renamed); a memo that cannot be written is no
// error, only a probe again for the next loader.
void write_memo(const std::string& path, const ProbeResult& r) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return;
  const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << probe_result_to_json(r);
    out.flush();
    if (!out) {
      ::unlink(tmp.c_str());
      return;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

std::string joined(const std::vector<std::string>& paths, std::size_t from, std::size_t to) {
  std::string out;
  for (std::size_t k = from; k < to; ++k) out += (out.empty() ? "" : "\n") + paths[k];
  return out;
}

// The windows' results as one result for the set: their counts and identities in order, the
// largest bounds and typical sizes, the first window's fields (every other's must equal them),
// encodings and metadata.
void join_window(ProbeResult& set, ProbeResult window, const std::vector<std::string>& paths, std::size_t from) {
  if (window.shard_samples.empty()) {  // one shard: not a set
    window.shard_samples = {window.schema.num_samples};
    window.shard_identities = {formats::file_identity(paths[from])};
    if (window.shard_identities[0]) window.shard_identities[0]->version = window.version;  // an LMDB's transaction
  }
  if (from == 0) {
    set = std::move(window);
    return;
  }
  if (window.schema.fields != set.schema.fields) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: shard {} of {} has fields {}, and {} (the first shard) has {}: every shard of a "
                            "dataset must have the same fields",
                            paths[from], from, paths.size(), window.schema.describe_fields(), paths[0],
                            set.schema.describe_fields()));
  }
  set.schema.num_samples += window.schema.num_samples;
  for (std::size_t f = 0; f < set.bounds.size(); ++f) {
    set.bounds[f].bytes = std::max(set.bounds[f].bytes, window.bounds[f].bytes);
    set.bounds[f].exact = set.bounds[f].exact && window.bounds[f].exact;
    set.typical[f] = std::max(set.typical[f], window.typical[f]);
  }
  set.locality_rows = std::min(set.locality_rows, window.locality_rows);
  set.file_bytes += window.file_bytes;
  set.shard_samples.insert(set.shard_samples.end(), window.shard_samples.begin(), window.shard_samples.end());
  set.shard_identities.insert(set.shard_identities.end(), window.shard_identities.begin(),
                              window.shard_identities.end());
}

}  // namespace

ProbeResult probe_streamed(const std::string& source, formats::ReaderOptions& options, ShardFetcher& fetcher,
                           bool in_child, std::chrono::milliseconds timeout, const std::function<bool()>& keep_going,
                           const IndexAtHand& index) {
  options.open_shards_lazily = true;  // shard 0 may not be cached when a reader is made
  options.max_open_shards = std::min(options.max_open_shards, fetcher.capacity());
  const auto probe = [&](const std::string& some) {
    if (in_child) return probe_dataset(some, options, timeout, keep_going);
    return describe_dataset(*formats::open_reader(some, options), some);
  };
  const std::vector<std::string> paths = formats::shard_paths(source);
  const auto& shards = fetcher.shards();
  const std::string memo = memo_path(fetcher, options, fetcher.cache_dir());
  // The store's index first: a memo of a store that gives no ETags may be of shards rewritten since
  // at the same size, which the index's digests catch.
  std::optional<ProbeResult> result;
  std::vector<std::string> warnings;
  const std::optional<SetIndex> set_index = index.read ? index.read(warnings) : std::nullopt;
  for (const std::string& w : warnings)
    if (index.warn) index.warn(w);
  if (set_index) {
    std::string why;
    result = probe_from_index(*set_index, options, paths, why);
    if (result) {
      std::vector<std::optional<std::uint64_t>> digests;
      for (const IndexedShard& s : set_index->shards) digests.emplace_back(s.digest);
      fetcher.expect_digests(std::move(digests));
    } else if (index.warn) {
      index.warn(
          fmt::format("{} is not used ({}): the set is learned without it; write it again with this "
                      "loader's options (Loader::write_index)",
                      index.name, why));
    }
  }
  if (!result && !memo.empty()) result = read_memo(memo, paths.size());
  if (result) fetcher.hold_found();
  if (!result) {
    ProbeResult set;
    bool first_window_is_set = false;  // its layout begins with its shards, which the set's replace
    // Windows of at most capacity() remote shards (local ones need no room).
    for (std::size_t from = 0; from < paths.size();) {
      std::vector<std::uint32_t> held;
      std::size_t to = from;
      for (; to < paths.size(); ++to) {
        if (!shards[to]) continue;
        if (held.size() == fetcher.capacity()) break;
        held.push_back(static_cast<std::uint32_t>(to));
      }
      fetcher.hold_only(held, keep_going);
      if (from == 0) first_window_is_set = to > 1;
      join_window(set, probe(joined(paths, from, to)), paths, from);
      from = to;
    }
    // The layout of the whole set, as a probe of it says it.
    std::string layout = set.layout;
    if (first_window_is_set) {
      const std::size_t cut = layout.find("; ");
      layout = cut == std::string::npos ? "" : layout.substr(cut + 2);
    }
    set.layout = fmt::format("{} shards, {} .. {}{}{}", paths.size(), paths.front(), paths.back(),
                             layout.empty() ? "" : "; ", layout);
    if (!memo.empty()) write_memo(memo, set);
    result = std::move(set);
  }
  // A remote shard is the same whichever inode holds its copy: its size and version say which.
  result->shard_identities.resize(paths.size());
  for (std::size_t k = 0; k < paths.size(); ++k) {
    if (!shards[k]) continue;
    const std::uint64_t version = result->shard_identities[k] ? result->shard_identities[k]->version : 0;
    result->shard_identities[k] = formats::FileIdentity::of_content(shards[k]->info.size, version);
  }
  return *result;
}

}  // namespace stoker::detail
