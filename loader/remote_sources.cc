#include "loader/remote_sources.h"

#include <optional>

#include "remote/remote_url.h"
#include "remote/s3_store.h"
#include "remote/shard_cache.h"

namespace stoker::detail {

std::vector<std::vector<std::string>> cached_names(const std::vector<std::string>& named, const Options& o,
                                                   remote::FetchCounters& counters,
                                                   const std::function<bool()>& keep_going) {
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
  const std::vector<std::string> paths = remote::cache_objects(objects, cache, counters);
  for (std::size_t j = 0; j < objects.size(); ++j) out[object_at[j].first][object_at[j].second] = paths[j];
  return out;
}

}  // namespace stoker::detail
