#include "loader/options_check.h"

#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "base/option_spelling.h"
#include "formats/shard_set.h"
#include "loader/plan/mix_order.h"
#include "loader/remote_sources.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

// A text option holds no NUL character: a path or name passed on through C strings (open(2), HDF5,
// a message) would be cut at it, and another file, group or field would be read without a word.
void check_no_nul(std::string_view value, const std::string& name) {
  const std::size_t at = value.find('\0');
  if (at == std::string_view::npos) return;
  throw Error(ErrorCode::invalid_option,
              fmt::format("options: {} holds a NUL character at byte {} ('{}'): a path, group, field name or "
                          "pipeline cannot hold one; pass the text without it",
                          name, at, printable(value)));
}

void check_texts(const Options& o) {
  check_no_nul(o.source, option_name("source"));
  // The Python package takes a list of shards as `source`.
  const std::string sources = option_spelling() == OptionSpelling::python ? "source" : option_name("sources");
  for (std::size_t k = 0; k < o.sources.size(); ++k) check_no_nul(o.sources[k], fmt::format("{}[{}]", sources, k));
  for (std::size_t k = 0; k < o.mix.size(); ++k)
    check_no_nul(o.mix[k].path, fmt::format("{}[{}]", option_name("mix"), k));
  for (std::size_t k = 0; k < o.fields.size(); ++k)
    check_no_nul(o.fields[k], fmt::format("{}[{}]", option_name("fields"), k));
  check_no_nul(o.group, option_name("group"));
  check_no_nul(o.cache_dir, option_name("cache_dir"));
  check_no_nul(o.lmdb_keys, option_name("lmdb_keys"));
  check_no_nul(o.lmdb_count_key, option_name("lmdb_count_key"));
  check_no_nul(o.pipeline, option_name("pipeline"));
}

}  // namespace

// A mix replaces the source; its weights are numbers above 0, its order a shuffle or sequential.
void check_mix(const Options& o) {
  if (o.mix.empty()) {
    if (o.samples_per_epoch != 0) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("options: {} is {}, but there is no mix ({}): an epoch of one dataset is all its "
                              "samples",
                              option_name("samples_per_epoch"), o.samples_per_epoch, option_name("mix")));
    }
    return;
  }
  if (!o.source.empty() || !o.sources.empty()) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("options: both {} ({} entries) and {} are set; a mix names its datasets itself: set one",
                            option_name("mix"), o.mix.size(),
                            option_spelling() == OptionSpelling::python || !o.source.empty() ? option_name("source")
                                                                                             : option_name("sources")));
  }
  (void)mix_weights(o.mix);  // throws for a bad weight, naming it
  if (o.samples_per_epoch > kMaxMixDrawsPerEpoch) {
    throw Error(ErrorCode::invalid_option, fmt::format("options: {} is {}, more than 2^63",
                                                       option_name("samples_per_epoch"), o.samples_per_epoch));
  }
  if (o.order == Order::quasi_random) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("options: {} is quasi_random, which a mix does not offer (its sources are drawn in "
                            "passes of a random or sequential order): use {}",
                            option_name("order"), option_setting("order", "Order::random", "random")));
  }
}

void check_options(const Options& o) {
  check_texts(o);
  check_mix(o);
  if (o.mix.empty() && o.source.empty() && o.sources.empty()) {
    throw Error(
        ErrorCode::invalid_option,
        "options: source is empty; set it to an HDF5 file or an LMDB database (or sources to a list of shards)");
  }
  if (!o.source.empty() && !o.sources.empty()) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("options: both source ('{}') and sources ({} entries) are set; set one", o.source,
                            o.sources.size()));
  }
  if (!o.lmdb_count_key.empty() && o.lmdb_keys.empty())
    throw Error(ErrorCode::invalid_option, fmt::format("options: {} names the key of the count of {}, which is not set",
                                                       option_name("lmdb_count_key"), option_name("lmdb_keys")));
  if (o.fetch_parallelism == 0 || o.fetch_parallelism > 256) {
    throw Error(ErrorCode::invalid_option, fmt::format("options: {} is {}; it must be 1 to 256",
                                                       option_name("fetch_parallelism"), o.fetch_parallelism));
  }
  if (o.fetch_timeout.count() < 0) {
    throw Error(ErrorCode::invalid_option, fmt::format("options: {} is negative", option_name("fetch_timeout")));
  }
  if (o.max_open_shards == 0)
    throw Error(ErrorCode::invalid_option, "options: max_open_shards is 0; it must be at least 1");
  if (o.batch_size == 0) throw Error(ErrorCode::invalid_option, "options: batch_size is 0; it must be at least 1");
  if (o.prefetch == 0) throw Error(ErrorCode::invalid_option, "options: prefetch is 0; it must be at least 1");
  if (o.num_workers > 1024 && o.num_workers != kAuto) {
    throw Error(ErrorCode::invalid_option, fmt::format("options: num_workers {} is more than 1024", o.num_workers));
  }
  if (o.prefetch > 1024 && o.prefetch != kAuto) {
    throw Error(ErrorCode::invalid_option, fmt::format("options: prefetch {} is more than 1024", o.prefetch));
  }
  if (o.held_batches > 1024) {
    throw Error(ErrorCode::invalid_option, fmt::format("options: held_batches {} is more than 1024", o.held_batches));
  }
  if (o.prefetch == kAuto && o.num_workers == 0) {
    throw Error(ErrorCode::invalid_option,
                "options: prefetch is kAuto but num_workers is 0: automatic prefetch tunes worker processes");
  }
  if (!(o.shm_fraction > 0 && o.shm_fraction <= 0.5)) {
    throw Error(ErrorCode::invalid_option, fmt::format("options: shm_fraction {} is outside (0, 0.5]", o.shm_fraction));
  }
  if (o.worker_oom_score_adj < 0 || o.worker_oom_score_adj > 1000) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("options: worker_oom_score_adj {} is outside 0 .. 1000", o.worker_oom_score_adj));
  }
  if (o.max_image_pixels == 0) {
    throw Error(ErrorCode::invalid_option,
                "options: max_image_pixels is 0; it must be at least 1 (the default is PIL's limit, 89478485)");
  }
  if (o.on_decode_error != OnDecodeError::fail && o.on_decode_error != OnDecodeError::skip) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("options: {} is {}, neither OnDecodeError::fail nor OnDecodeError::skip",
                            option_name("on_decode_error"), static_cast<int>(o.on_decode_error)));
  }
  if (o.batch_size > (1u << 24))
    throw Error(ErrorCode::invalid_option, fmt::format("options: batch_size {} is too large", o.batch_size));
  if (o.device.staged() && o.prefetch_to_device == 0) {
    throw Error(ErrorCode::invalid_option, "options: prefetch_to_device is 0; it must be at least 1");
  }
}

void check_delivered_names(const Schema& delivered, const std::string& source, OnDecodeError on_decode_error) {
  if (on_decode_error == OnDecodeError::skip && delivered.find(kSkippedKey) != nullptr) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: field '{}' has the name under which a batch's skipped samples are delivered with {} "
                            "(a batch's '{}' in Python): leave it out with {}, or rename it in the dataset",
                            source, kSkippedKey,
                            option_setting("on_decode_error", "Options::on_decode_error = OnDecodeError::skip", "skip"),
                            kSkippedKey, option_name("fields")));
  }
  for (const Field& bytes : delivered.fields) {
    if (!bytes.is_bytes()) continue;
    const std::string offsets = bytes.name + ".offsets";
    if (delivered.find(offsets) == nullptr) continue;
    throw Error(ErrorCode::dataset,
                fmt::format("{}: field '{}' has the name under which the offsets of bytes field '{}' are delivered "
                            "(a batch's '{}' beside '{}' in Python and stoker::to_tensors): select one of the two "
                            "with {}, or rename one in the dataset",
                            source, printable(offsets), printable(bytes.name), printable(offsets),
                            printable(bytes.name), option_name("fields")));
  }
}

namespace {

// resolve_source(names), except that the cache paths of streamed shards, which may not be there
// yet, are taken as they are (never as a glob or a directory).
std::string resolved(const std::vector<std::string>& names, const std::optional<StreamedObjects>& streamed) {
  std::string out;
  for (const std::string& n : names) {
    const bool cached = streamed && streamed->by_path.contains(n) && n.find('\n') == std::string::npos;
    out += (out.empty() ? "" : "\n") + (cached ? n : formats::resolve_source({n}));
  }
  return out;
}

}  // namespace

Options checked_and_resolved(Options o, remote::FetchCounters& fetches, const std::function<bool()>& keep_going,
                             RemoteShards& remote) {
  const std::optional<StreamedObjects>& streamed = remote.streamed;
  check_options(o);
  if (!o.mix.empty()) {
    // Each source resolved on its own (their remote objects fetched together), then joined as they
    // are, not resolved again: a directory a glob matched stays one shard of its source (or an
    // error), never several that shift the sources' boundaries.
    std::vector<std::string> paths;
    for (const Source& s : o.mix) paths.push_back(s.path);
    const std::vector<std::vector<std::string>> local = cached_names(paths, o, fetches, keep_going, remote);
    std::string joined;
    for (std::size_t k = 0; k < o.mix.size(); ++k) {
      o.mix[k].path = resolved(local[k], streamed);
      joined += (joined.empty() ? "" : "\n") + o.mix[k].path;
    }
    o.source = joined;
    return o;
  }
  std::vector<std::string> named;
  for (auto& each :
       cached_names(o.sources.empty() ? std::vector<std::string>{o.source} : o.sources, o, fetches, keep_going, remote))
    named.insert(named.end(), each.begin(), each.end());
  o.source = resolved(named, streamed);
  o.sources.clear();
  return o;
}

}  // namespace stoker::detail
