#include "loader/remote_sources.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "formats/shard_set.h"
#include "remote/remote_url.h"
#include "remote/s3_store.h"
#include "remote/shard_cache.h"

namespace stoker::detail {
namespace {

StreamedObjects stream_objects(const std::vector<remote::ListedObject>& objects,
                               const std::vector<remote::ObjectInfo>& infos, const remote::CacheOptions& cache,
                               std::uint64_t bytes) {
  StreamedObjects s;
  s.cache = cache;
  s.bytes = bytes;
  // As many shards as fit whatever their sizes: the largest ones.
  std::vector<std::size_t> by_size(objects.size());
  for (std::size_t k = 0; k < by_size.size(); ++k) by_size[k] = k;
  std::sort(by_size.begin(), by_size.end(),
            [&](std::size_t a, std::size_t b) { return infos[a].size > infos[b].size; });
  std::uint64_t used = 0;
  for (std::size_t k : by_size) {
    if (used + infos[k].size > cache.limit) break;
    used += infos[k].size;
    ++s.capacity;
  }
  if (s.capacity == 0) {
    const std::size_t big = by_size.front();
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: {} is {}, and shard {} alone takes {}: the cache must hold a shard at least, and a "
                            "batch's shards at once",
                            cache.dir, option_name("cache_limit"), format_bytes(cache.limit), objects[big].object.name,
                            format_bytes(infos[big].size)));
  }
  std::uint64_t cached = 0;
  for (std::size_t k = 0; k < objects.size(); ++k) {
    const std::string path = remote::cached_path(cache.dir, objects[k].object.url, infos[k]);
    if (remote::is_cached(path, infos[k].size)) cached += infos[k].size;
    s.by_path.emplace(path, ShardFetcher::RemoteShard{objects[k].object, infos[k], path});
  }
  remote::prepare_cache_dir(cache, used > cached ? used - cached : 0);
  return s;
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
  remote::CacheOptions cache;
  cache.dir = o.cache_dir.empty() ? remote::default_cache_dir() : o.cache_dir;
  cache.limit = o.cache_limit;
  cache.parallelism = o.fetch_parallelism;
  cache.policy.timeout = o.fetch_timeout;
  cache.keep_going = keep_going;
  std::vector<std::vector<std::string>> out(named.size());
  std::vector<remote::ListedObject> objects;
  std::vector<std::pair<std::size_t, std::size_t>> object_at;  // (named entry, position in it)
  std::optional<remote::S3Config> s3;  // read once, from the environment, where an s3:// name needs it
  for (std::size_t k = 0; k < named.size(); ++k) {
    const std::string& name = named[k];
    std::vector<remote::ListedObject> found;
    if (remote::is_s3(name)) {
      if (!s3) s3 = remote::S3Config::from_environment();
      found = remote::s3_objects(name, *s3, cache.policy, counters);
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
  if (objects.empty()) return out;
  if (cache.limit != 0) {
    std::vector<remote::ObjectInfo> infos = remote::object_infos(objects, cache, counters);
    std::uint64_t bytes = 0;
    for (const auto& i : infos) bytes += i.size;
    if (bytes > cache.limit) {
      remote.streamed = stream_objects(objects, infos, cache, bytes);
      for (std::size_t j = 0; j < objects.size(); ++j) {
        out[object_at[j].first][object_at[j].second] = remote::cached_path(cache.dir, objects[j].object.url, infos[j]);
      }
      return out;
    }
    for (std::size_t j = 0; j < objects.size(); ++j) objects[j].info = infos[j];  // not stat'ed again
  }
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
