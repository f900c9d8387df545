// S3 and S3-compatible stores: s3:// names made objects to fetch. The endpoint, region and
// credentials come from the standard AWS variables and files, as the AWS CLI reads them (no AWS
// SDK): AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else the profile
// (AWS_PROFILE, else "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials); the region from
// AWS_REGION, AWS_DEFAULT_REGION or the profile's in AWS_CONFIG_FILE (~/.aws/config), else
// us-east-1; the endpoint from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the profile's endpoint_url,
// else AWS's. Requests are signed with SigV4 by libcurl; without credentials they go unsigned (a
// public bucket).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "remote/http_fetch.h"
#include "remote/shard_cache.h"

namespace stoker::remote {

struct S3Config {
  std::string endpoint;  // "https://host[:port]" of an S3-compatible store, addressed path-style; "": AWS
  std::string region = "us-east-1";
  std::string access_key, secret_key, session_token;

  // From the environment and the AWS files (above). Throws stoker::Error (invalid_option) for a
  // profile named by AWS_PROFILE that the files do not have.
  static S3Config from_environment();
};

// Whether `name` is an s3:// name.
bool is_s3(std::string_view name) noexcept;

// The objects `name` stands for: "s3://bucket/prefix/" (or "s3://bucket") lists the prefix, the
// shards among its keys (by the names a directory of shards has: *.h5, *.lmdb, ...) sorted by key,
// each with the size and ETag the listing gave; "s3://bucket/key" (with brace ranges) names objects
// one by one. Throws stoker::Error (dataset) for a prefix that holds no shard, naming it, and the
// fetch's errors for the listing.
std::vector<ListedObject> s3_objects(const std::string& name, const S3Config& config, const FetchPolicy& policy,
                                     FetchCounters& counters);

// One page of a ListObjectsV2 answer: the shards among its keys (as s3_objects keeps them), and
// whether another page follows, with its token. Throws stoker::Error (dataset) for a size that is
// not a number. Any text parses (a malformed answer lists nothing).
struct ListingPage {
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::optional<std::string> next;
};
ListingPage parse_listing(std::string_view xml, const S3Config& config, const std::string& bucket);

// The URL of an object, or of the bucket's root when `key` is empty (a listing's).
std::string s3_url(const S3Config& config, const std::string& bucket, const std::string& key);

}  // namespace stoker::remote
