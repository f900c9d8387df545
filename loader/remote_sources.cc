#include "loader/remote_sources.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "formats/shard_set.h"
#include "remote/remote_url.h"
#include "remote/s3_store.h"
#include "remote/shard_cache.h"

namespace stoker::detail {
namespace {

// Each shard a fetcher holds keeps a descriptor open (remote::HeldObject): as many shards as the
// process may open beside kDescriptorsBeside others, its soft limit raised towards its hard one
// where that is needed.
constexpr rlim_t kDescriptorsBeside = 512;
// The longest a loader waits for a set's index, which it can do without.
constexpr std::chrono::milliseconds kIndexWait{15'000};
std::size_t holdable(std::size_t wanted) {
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return wanted;
  if (const rlim_t need = wanted + kDescriptorsBeside; l.rlim_cur < need) {
    rlimit raised = l;
    raised.rlim_cur = l.rlim_max == RLIM_INFINITY ? need : std::min(need, l.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) l = raised;
  }
  return l.rlim_cur > 2 * kDescriptorsBeside ? std::min<std::size_t>(wanted, l.rlim_cur - kDescriptorsBeside)
                                             : std::min<std::size_t>(wanted, l.rlim_cur / 2);
}

StreamedObjects stream_objects(const std::vector<remote::ListedObject>& objects,
                               const std::vector<remote::ObjectInfo>& infos, const remote::CacheOptions& cache,
                               std::uint64_t bytes) {
  StreamedObjects s;
  s.cache = cache;
  s.bytes = bytes;
  std::vector<std::string> paths(objects.size());
  std::uint64_t cached = 0;
  for (std::size_t k = 0; k < objects.size(); ++k) {
    paths[k] = remote::cached_path(cache.dir, objects[k].object.url, infos[k]);
    if (remote::is_cached(paths[k], infos[k].size)) cached += infos[k].size;
  }
  // No limit: what the disk has free, beside what the set has cached already.
  const std::uint64_t limit = cache.limit != 0 ? cache.limit : cached + remote::free_bytes_of(cache.dir);
  // As many shards as fit whatever their sizes: the largest ones.
  std::vector<std::size_t> by_size(objects.size());
  for (std::size_t k = 0; k < by_size.size(); ++k) by_size[k] = k;
  std::sort(by_size.begin(), by_size.end(),
            [&](std::size_t a, std::size_t b) { return infos[a].size > infos[b].size; });
  std::uint64_t used = 0;
  const std::size_t most = holdable(objects.size());
  for (std::size_t k : by_size) {
    if (used + infos[k].size > limit || s.capacity == most) break;
    used += infos[k].size;
    ++s.capacity;
  }
  if (s.capacity == 0) {
    const std::size_t big = by_size.front();
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: {} is {}, and shard {} alone takes {}: the cache must hold a shard at least, and a "
                            "batch's shards at once",
                            cache.dir, cache.limit != 0 ? option_name("cache_limit") : "the free space of its disk",
                            format_bytes(limit), objects[big].object.name, format_bytes(infos[big].size)));
  }
  for (std::size_t k = 0; k < objects.size(); ++k)
    s.by_path.emplace(paths[k], ShardFetcher::RemoteShard{objects[k].object, infos[k], paths[k]});
  s.cache.limit = limit;
  remote::prepare_cache_dir(s.cache, used > cached ? used - cached : 0);
  return s;
}

// `object`'s sibling named `name`: the same store, signing, directory and query (a token).
remote::RemoteObject sibling(const remote::RemoteObject& object, std::string_view name) {
  const auto replaced = [&](const std::string& url) {
    const std::size_t end = std::min(url.find_first_of("?#"), url.size());
    return url.substr(0, url.substr(0, end).find_last_of('/') + 1) + std::string(name) + url.substr(end);
  };
  return remote::RemoteObject{replaced(object.url), replaced(object.name), object.signing};
}

// The index beside the first of `objects` (all of one remote set, of sizes `infos`), when the store
// has one that describes them; nullopt (with a warning, for one that does not) else. Throws what
// fetching it throws but an answer that it is not there.
std::optional<SetIndex> find_index(const std::vector<remote::ListedObject>& objects,
                                   const std::vector<remote::ObjectInfo>& infos, const remote::CacheOptions& cache,
                                   remote::FetchCounters& counters, std::vector<std::string>& warnings) {
  const remote::RemoteObject index_object = sibling(objects.front().object, kIndexName);
  const std::string& where = index_object.name;
  // Optional: waited for kIndexWait at most, and stopped with the loader's build (keep_going).
  remote::CacheOptions o = cache;
  o.policy.timeout = std::min(o.policy.timeout, kIndexWait);
  std::string text;
  try {
    remote::for_each_object(1, o, [&](std::size_t, const remote::FetchPolicy& policy) {
      text = remote::fetch_text(index_object, policy, counters);
    });
  } catch (const Error& e) {
    if (e.code() == ErrorCode::interrupted) throw;
    if (e.code() != ErrorCode::dataset) {  // none there (404, 403) is no news; a store that fails is
      warnings.push_back(fmt::format("{}: could not be read ({}); the set is learned without it", where, e.what()));
    }
    return std::nullopt;
  }
  try {
    SetIndex index = parse_set_index(text, where);
    std::vector<std::string> names;
    std::vector<std::uint64_t> sizes;
    for (std::size_t k = 0; k < objects.size(); ++k) {
      // Files' names: an S3 key's last part as it is, a URL's percent-encoded.
      const std::string& name = objects[k].object.name;
      names.push_back(remote::is_s3(name) ? name.substr(name.find_last_of('/') + 1)
                                          : remote::percent_decoded(remote::url_file_name(name)));
      sizes.push_back(infos[k].size);
    }
    if (const std::string why = index_mismatch(index, names, sizes); !why.empty()) {
      warnings.push_back(
          fmt::format("{} does not describe the shards beside it ({}): it is not used, and the set is learned "
                      "without it; write it again (Loader::write_index)",
                      where, why));
      return std::nullopt;
    }
    return index;
  } catch (const Error& e) {
    warnings.push_back(fmt::format("{}; the set is learned without it", e.what()));
    return std::nullopt;
  }
}

// The remote objects each of `named` stands for, listed (S3) or expanded (brace ranges), appended
// to `objects` with their place in `out` (`object_at`); a local name goes to `out` as it is.
void list_named(const std::vector<std::string>& named, const remote::FetchPolicy& policy,
                remote::FetchCounters& counters, std::vector<std::vector<std::string>>& out,
                std::vector<remote::ListedObject>& objects,
                std::vector<std::pair<std::size_t, std::size_t>>& object_at) {
  std::optional<remote::S3Config> s3;  // read once, from the environment, where an s3:// name needs it
  for (std::size_t k = 0; k < named.size(); ++k) {
    const std::string& name = named[k];
    std::vector<remote::ListedObject> found;
    if (remote::is_s3(name)) {
      if (!s3) s3 = remote::S3Config::from_environment();
      found = remote::s3_objects(name, *s3, policy, counters);
    } else if (remote::is_remote(name)) {
      for (std::string& url : remote::expand_braces(name)) {
        const std::string shown = remote::shown_url(url);
        found.push_back(remote::ListedObject{remote::RemoteObject{std::move(url), shown, {}}, std::nullopt});
      }
    } else {
      out[k].push_back(name);
      continue;
    }
    for (auto& f : found) {
      object_at.emplace_back(k, out[k].size());
      out[k].push_back(f.object.name);
      objects.push_back(std::move(f));
    }
  }
}

remote::CacheOptions cache_options(const Options& o, const std::function<bool()>& keep_going) {
  remote::CacheOptions cache;
  cache.dir = o.cache_dir.empty() ? remote::default_cache_dir() : o.cache_dir;
  cache.limit = o.cache_limit;
  cache.parallelism = o.fetch_parallelism;
  cache.policy.timeout = o.fetch_timeout;
  cache.keep_going = keep_going;
  return cache;
}

}  // namespace

std::unique_ptr<ShardFetcher> streamed_fetcher(const StreamedObjects& streamed, const std::string& source,
                                               remote::FetchCounters& counters) {
  std::vector<std::optional<ShardFetcher::RemoteShard>> shards;
  for (const std::string& path : formats::shard_paths(source)) {
    const auto it = streamed.by_path.find(path);
    shards.push_back(it == streamed.by_path.end() ? std::nullopt : std::make_optional(it->second));
  }
  return std::make_unique<ShardFetcher>(std::move(shards), streamed.capacity, streamed.cache, counters);
}

std::vector<std::vector<std::string>> cached_names(const std::vector<std::string>& named, const Options& o,
                                                   remote::FetchCounters& counters,
                                                   const std::function<bool()>& keep_going, RemoteShards& remote) {
  const remote::CacheOptions cache = cache_options(o, keep_going);
  std::vector<std::vector<std::string>> out(named.size());
  std::vector<remote::ListedObject> objects;
  std::vector<std::pair<std::size_t, std::size_t>> object_at;  // (named entry, position in it)
  list_named(named, cache.policy, counters, out, objects, object_at);
  if (objects.empty()) return out;
  remote.any = true;
  std::vector<remote::ObjectInfo> infos = remote::object_infos(objects, cache, counters);
  std::uint64_t bytes = 0;
  for (const auto& i : infos) bytes += i.size;
  remote::prepare_cache_dir(cache, 0);
  const bool one_set = named.size() == 1 && objects.size() == out[0].size();
  // Called now or later while the loader is built, never after: the caller's keep_going it keeps
  // stops it as it stops the rest of the build.
  const std::function<std::optional<SetIndex>(std::vector<std::string>&)> index_finder =
      [objects, infos, cache, &counters](std::vector<std::string>& warnings) {
        return find_index(objects, infos, cache, counters, warnings);
      };
  const std::string index_name = sibling(objects.front().object, kIndexName).name;
  const auto stream = [&] {
    remote.streamed = stream_objects(objects, infos, cache, bytes);
    for (std::size_t j = 0; j < objects.size(); ++j) {
      out[object_at[j].first][object_at[j].second] = remote::cached_path(cache.dir, objects[j].object.url, infos[j]);
    }
  };
  if (cache.limit != 0 && bytes > cache.limit) {
    stream();  // the set's index, where the store has one, is read first when the set is learned
    if (one_set) {
      remote.streamed->find_index = index_finder;
      remote.streamed->index_name = index_name;
    }
    return out;
  }
  // One remote set that fits, not cached whole: with its index the first epoch starts at once and
  // reads the shards as they arrive, the cache holding them all (a descriptor each: where the
  // process may not open that many, it is fetched whole first, as without an index, and a warning
  // says so).
  if (one_set) {
    std::uint64_t cached = 0;
    for (std::size_t j = 0; j < objects.size(); ++j) {
      if (remote::is_cached(remote::cached_path(cache.dir, objects[j].object.url, infos[j]), infos[j].size))
        cached += infos[j].size;
    }
    const bool fits = cache.limit != 0 || bytes <= cached + remote::free_bytes_of(cache.dir);
    std::optional<SetIndex> index = cached < bytes && fits ? index_finder(remote.warnings) : std::nullopt;
    if (index && holdable(objects.size()) < objects.size()) {
      remote.warnings.push_back(
          fmt::format("{}: the set's {} shards are fetched whole before the first batch, not as "
                      "it reads them: this process may not hold that many files open",
                      index_name, objects.size()));
      index.reset();
    }
    if (index) {
      stream();
      remote.streamed->index_name = index_name;
      remote.streamed->find_index = [index = std::move(*index)](std::vector<std::string>&) {
        return std::optional<SetIndex>(index);
      };
      return out;
    }
  }
  for (std::size_t j = 0; j < objects.size(); ++j) objects[j].info = infos[j];  // not stat'ed again
  const std::vector<std::string> paths = remote::cache_objects(objects, cache, counters);
  for (std::size_t j = 0; j < objects.size(); ++j) {
    out[object_at[j].first][object_at[j].second] = paths[j];
    if (paths.size() > kMaxHeldWhole) continue;
    if (std::optional<remote::HeldObject> h = remote::try_hold(paths[j], std::nullopt))
      remote.held.push_back(std::move(*h));
  }
  return out;
}

}  // namespace stoker::detail
