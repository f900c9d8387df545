#include "remote/s3_store.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "remote/remote_url.h"
#include "stoker/error.h"

namespace stoker::remote {
namespace {

// The SHA-256 of an empty body: what S3 wants in x-amz-content-sha256 for a signed GET.
constexpr const char* kEmptyBodySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// The names a directory of shards counts as shards (formats/shard_set.h), for a listing.
bool is_shard_key(std::string_view key) {
  for (std::string_view ext : {".h5", ".hdf5", ".hdf", ".he5", ".lmdb", ".mdb"})
    if (key.ends_with(ext)) return true;
  return false;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string home_file(const char* variable, const char* relative) {
  if (std::string v = env(variable); !v.empty()) return v;
  return env("HOME") + "/" + relative;
}

// The sections of an INI file as the AWS files are written: "[name]", "key = value", '#' and ';'
// comments. A missing file has none.
std::map<std::string, std::map<std::string, std::string>> read_ini(const std::string& path) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::ifstream in(path);
  std::string section, line;
  const auto trim = [](std::string s) {
    const std::size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      out[section];
    } else if (const std::size_t eq = line.find('='); eq != std::string::npos) {
      out[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
    }
  }
  return out;
}

// Percent-encodes all but unreserved characters (and '/', where `keep_slash`), as SigV4's
// canonical URI and query want.
std::string encoded(std::string_view s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    const bool ascii_alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ascii_alnum || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// The text of XML character data: entities decoded.
std::string xml_text(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const std::size_t end = s.find(';', i);
    if (end == std::string_view::npos) return out + std::string(s.substr(i));
    const std::string_view entity = s.substr(i + 1, end - i - 1);
    if (entity == "amp") out += '&';
    else if (entity == "lt") out += '<';
    else if (entity == "gt") out += '>';
    else if (entity == "quot") out += '"';
    else if (entity == "apos") out += '\'';
    else if (entity.starts_with("#x"))
      out += static_cast<char>(std::strtol(std::string(entity.substr(2)).c_str(), nullptr, 16));
    else if (entity.starts_with("#"))
      out += static_cast<char>(std::strtol(std::string(entity.substr(1)).c_str(), nullptr, 10));
    i = end;
  }
  return out;
}

// The text of the first <tag>...</tag> in `xml` from `from`, or nullopt.
std::optional<std::string> element(std::string_view xml, std::string_view tag, std::size_t from = 0) {
  const std::string open = fmt::format("<{}>", tag), close = fmt::format("</{}>", tag);
  const std::size_t a = xml.find(open, from);
  if (a == std::string_view::npos) return std::nullopt;
  const std::size_t b = xml.find(close, a);
  if (b == std::string_view::npos) return std::nullopt;
  return xml_text(xml.substr(a + open.size(), b - a - open.size()));
}

Signing signing_of(const S3Config& c) {
  Signing s;
  if (c.access_key.empty()) return s;
  s.aws_sigv4 = fmt::format("aws:amz:{}:s3", c.region);
  s.user_password = c.access_key + ":" + c.secret_key;
  s.session_token = c.session_token;
  s.content_sha256 = kEmptyBodySha256;
  return s;
}

// One page of ListObjectsV2 under `prefix`: its shards appended to `out`; the next page's token.
std::optional<std::string> list_page(const S3Config& c, const std::string& bucket, const std::string& prefix,
                                     const std::optional<std::string>& token, const FetchPolicy& policy,
                                     FetchCounters& counters, std::vector<ListedObject>& out) {
  // The query's parameters sorted by name, as SigV4's canonical query is.
  // delimiter=/: the keys directly under the prefix, as a directory's files (not its subfolders').
  std::string query;
  if (token) query += "continuation-token=" + encoded(*token, false) + "&";
  query += "delimiter=%2F&list-type=2&prefix=" + encoded(prefix, false);
  RemoteObject listing{s3_url(c, bucket, "") + "?" + query, fmt::format("s3://{}/{} (its listing)", bucket, prefix),
                       signing_of(c)};
  ListingPage page = parse_listing(fetch_text(listing, policy, counters), c, bucket);
  for (auto& o : page.objects) out.push_back(std::move(o));
  if (!page.truncated) return std::nullopt;
  if (!page.next || page.next == token) {
    throw Error(ErrorCode::dataset,
                fmt::format("s3://{}/{}: the listing says it is cut short but gives {} continuation token: the "
                            "store does not list as S3's ListObjectsV2 does",
                            bucket, prefix, page.next ? "the same" : "no"));
  }
  return page.next;
}

}  // namespace

ListingPage parse_listing(std::string_view xml, const S3Config& c, const std::string& bucket) {
  ListingPage page;
  for (std::size_t at = 0; (at = xml.find("<Contents>", at)) != std::string_view::npos; ++at) {
    const std::size_t end = xml.find("</Contents>", at);
    const std::string_view item = xml.substr(at, end == std::string_view::npos ? end : end - at);
    const std::optional<std::string> key = element(item, "Key"), size = element(item, "Size");
    if (!key || !size || !is_shard_key(*key)) continue;
    const std::string file = key->substr(key->rfind('/') + 1);
    if (file.starts_with('.')) continue;  // hidden, as in a directory of shards
    if (file == "lock.mdb") continue;     // an LMDB's lock file, never a shard
    const std::optional<std::uint64_t> bytes = decimal(*size);
    if (!bytes) {
      throw Error(ErrorCode::dataset, fmt::format("s3://{}/{}: the listing gives its size as '{}', not a number",
                                                  bucket, printable(*key), printable(*size)));
    }
    ListedObject o;
    o.object = RemoteObject{s3_url(c, bucket, *key), fmt::format("s3://{}/{}", bucket, *key), signing_of(c)};
    o.info = ObjectInfo{*bytes, normalized_etag(element(item, "ETag").value_or(""))};
    page.objects.push_back(std::move(o));
  }
  page.truncated = element(xml, "IsTruncated") == "true";
  page.next = element(xml, "NextContinuationToken");
  return page;
}

S3Config S3Config::from_environment() {
  S3Config c;
  const std::string profile = env("AWS_PROFILE").empty() ? "default" : env("AWS_PROFILE");
  const auto credentials = read_ini(home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"));
  const auto config = read_ini(home_file("AWS_CONFIG_FILE", ".aws/config"));
  const auto section = [](const auto& ini, const std::string& name) -> const std::map<std::string, std::string>* {
    const auto it = ini.find(name);
    return it == ini.end() ? nullptr : &it->second;
  };
  const auto* creds = section(credentials, profile);
  const auto* conf = section(config, profile == "default" ? profile : "profile " + profile);
  if (!env("AWS_PROFILE").empty() && !creds && !conf && env("AWS_ACCESS_KEY_ID").empty()) {
    throw Error(ErrorCode::invalid_option, fmt::format("AWS_PROFILE is '{}', which neither {} nor {} has", profile,
                                                       home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
                                                       home_file("AWS_CONFIG_FILE", ".aws/config")));
  }
  const auto from = [](const std::map<std::string, std::string>* s, const char* key) {
    if (!s) return std::string();
    const auto it = s->find(key);
    return it == s->end() ? std::string() : it->second;
  };
  if (!env("AWS_ACCESS_KEY_ID").empty() && !env("AWS_SECRET_ACCESS_KEY").empty()) {
    c.access_key = env("AWS_ACCESS_KEY_ID");
    c.secret_key = env("AWS_SECRET_ACCESS_KEY");
    c.session_token = env("AWS_SESSION_TOKEN");
  } else {
    c.access_key = from(creds, "aws_access_key_id");
    c.secret_key = from(creds, "aws_secret_access_key");
    c.session_token = from(creds, "aws_session_token");
  }
  for (std::string region : {env("AWS_REGION"), env("AWS_DEFAULT_REGION"), from(conf, "region")}) {
    if (!region.empty()) {
      c.region = region;
      break;
    }
  }
  for (std::string endpoint : {env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"), from(conf, "endpoint_url")}) {
    if (!endpoint.empty()) {
      while (endpoint.ends_with('/')) endpoint.pop_back();
      c.endpoint = endpoint;
      break;
    }
  }
  return c;
}

bool is_s3(std::string_view name) noexcept { return name.starts_with("s3://"); }

std::string s3_url(const S3Config& c, const std::string& bucket, const std::string& key) {
  // Path-style for another store and for buckets with dots (a virtual host's TLS name would not
  // match them); virtual-hosted on AWS otherwise.
  if (!c.endpoint.empty()) return fmt::format("{}/{}/{}", c.endpoint, bucket, encoded(key, true));
  if (bucket.find('.') != std::string::npos)
    return fmt::format("https://s3.{}.amazonaws.com/{}/{}", c.region, bucket, encoded(key, true));
  return fmt::format("https://{}.s3.{}.amazonaws.com/{}", bucket, c.region, encoded(key, true));
}

std::vector<ListedObject> s3_objects(const std::string& name, const S3Config& c, const FetchPolicy& policy,
                                     FetchCounters& counters) {
  const std::string path = name.substr(5);  // after "s3://"
  const std::size_t slash = path.find('/');
  const std::string bucket = path.substr(0, slash);
  const std::string key = slash == std::string::npos ? "" : path.substr(slash + 1);
  if (bucket.empty()) throw Error(ErrorCode::invalid_option, fmt::format("'{}' names no bucket", name));
  std::vector<ListedObject> out;
  if (key.empty() || key.ends_with('/')) {
    std::optional<std::string> token;
    do {
      token = list_page(c, bucket, key, token, policy, counters, out);
    } while (token);
    if (out.empty()) {
      throw Error(
          ErrorCode::dataset,
          fmt::format("{}: holds no shard (no key under it ends in .h5, .hdf5, .hdf, .he5, .lmdb or .mdb)", name));
    }
    return out;
  }
  for (const std::string& k : expand_braces(key))
    out.push_back(ListedObject{RemoteObject{s3_url(c, bucket, k), fmt::format("s3://{}/{}", bucket, k), signing_of(c)},
                               std::nullopt});
  return out;
}

}  // namespace stoker::remote
