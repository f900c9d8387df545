#include "loader/remote_sources.h"

#include <optional>

#include "remote/remote_url.h"
#include "remote/s3_store.h"
#include "remote/shard_cache.h"

namespace stoker::detail {

std::vector<std::string> cached_names(const std::vector<std::string>& named, const Options& o,
                                      remote::FetchCounters& counters) {
  remote::CacheOptions cache;
  cache.dir = o.cache_dir.empty() ? remote::default_cache_dir() : o.cache_dir;
  cache.limit = o.cache_limit;
  cache.parallelism = o.fetch_parallelism;
  cache.policy.timeout = o.fetch_timeout;
  // Each name's expansion in order; the objects among them, and where each is.
  std::vector<std::string> expanded;
  std::vector<remote::ListedObject> objects;
  std::vector<std::size_t> object_at;
  std::optional<remote::S3Config> s3;  // read once, from the environment, where an s3:// name needs it
  for (const std::string& name : named) {
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
      expanded.push_back(name);
      continue;
    }
    for (auto& f : found) {
      object_at.push_back(expanded.size());
      expanded.push_back(f.object.name);
      objects.push_back(std::move(f));
    }
  }
  if (objects.empty()) return named;
  const std::vector<std::string> paths = remote::cache_objects(objects, cache, counters);
  for (std::size_t k = 0; k < objects.size(); ++k) expanded[object_at[k]] = paths[k];
  return expanded;
}

}  // namespace stoker::detail
