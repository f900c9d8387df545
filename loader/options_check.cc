#include "loader/options_check.h"

#include <fmt/format.h>

#include "loader/base/option_spelling.h"
#include "stoker/error.h"

namespace stoker::detail {

void check_options(const Options& o) {
  if (o.source.empty() && o.sources.empty()) {
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
  if (o.batch_size > (1u << 24))
    throw Error(ErrorCode::invalid_option, fmt::format("options: batch_size {} is too large", o.batch_size));
  if (o.device.staged() && o.prefetch_to_device == 0) {
    throw Error(ErrorCode::invalid_option, "options: prefetch_to_device is 0; it must be at least 1");
  }
}

}  // namespace stoker::detail
