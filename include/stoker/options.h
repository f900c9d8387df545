// stoker/options.h: how a Loader is configured.
//
// A plain struct with documented defaults, named after PyTorch's DataLoader where the meaning is
// the same. Loader checks it once, at construction, and throws stoker::Error for a bad value.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/device.h"
#include "stoker/export.h"
#include "stoker/transform.h"

namespace stoker {

enum class Format { auto_detect, hdf5, lmdb };

// For Options::num_workers and Options::prefetch: let the loader choose, from how long the training
// loop waits for data (Stats::auto_tuning says what it chose).
inline constexpr std::size_t kAuto = static_cast<std::size_t>(-1);

enum class ShmBacking { automatic, dev_shm, memfd };

// Options::max_open_shards by default (and a reader's of the shard set).
inline constexpr std::size_t kDefaultMaxOpenShards = 64;

// Options::max_image_pixels by default: PIL's MAX_IMAGE_PIXELS, a 1 GiB RGBA image's pixels / 3.
inline constexpr std::uint64_t kDefaultMaxImagePixels = 89'478'485;

// What a worker does with a sample whose pipeline cannot decode it (a corrupt or truncated image,
// bytes that are not an image, one over max_image_pixels, another size than decode(H,W) declares;
// a user operation's stoker::Error of ErrorCode::dataset):
//   fail  the batch fails: the training loop gets stoker::Error at its turn, naming the file, field
//         and sample index (the batches before it are delivered)
//   skip  the sample is delivered with zeros in that field (the pipeline's declared dtype and
//         shape; its other fields as usual), so that every epoch keeps its batches and indices;
//         Batch::skipped() lists its position, Stats counts it, and a warning names the file,
//         field, sample and the decoder's reason (docs/pipeline.md, "Errors").
enum class OnDecodeError { fail, skip };

// With OnDecodeError::skip the Python package delivers Batch::skipped() in each batch's dict under
// this key, beside the fields: a dataset field of that name is then refused at construction.
inline constexpr std::string_view kSkippedKey = "skipped";

// The epoch's sample order (docs/sampler.md), a pure function of (N, seed, epoch):
//   sequential    0, 1, ..., N-1
//   random        a uniform shuffle
//   quasi_random  a shuffle of chunk-sized groups, shuffled again within windows of a few groups:
//                 each HDF5 chunk (or ~64 KiB run of records) is read about once per epoch, while
//                 batches stay well mixed. For gzip-compressed HDF5 this is the difference between
//                 inflating a chunk per sample and per chunk.
enum class Order { sequential, random, quasi_random };

// Which part of every epoch this process loads, with DistributedSampler semantics: the epoch's
// sample order is cut into world_size interleaved parts and this rank takes part `rank`. Unless
// drop_last is set, the order is first padded by wrapping around so that every rank gets the same
// number of samples (docs/sampler.md).
struct STOKER_API Shard {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;

  // Reads the launcher's rank and world size: torchrun (RANK/WORLD_SIZE), Open MPI
  // (OMPI_COMM_WORLD_RANK/_SIZE), PMI (PMI_RANK/PMI_SIZE) or SLURM (SLURM_PROCID/SLURM_NTASKS);
  // the innermost of nested launchers (docs/distributed.md). Throws stoker::Error when none is set,
  // a value is malformed, or two launchers' variables for the same processes conflict: sharding is
  // never guessed.
  static Shard from_env();
};

// How stoker's messages name options and their values: as this C++ API does (Options::shm_budget,
// Device::cpu()), as stoker's command-line tools do (--shm-budget, --device cpu), or as the Python
// package does (shm_budget, device='cpu'). Process-wide; a program sets it once, before any Loader.
enum class OptionSpelling : std::uint8_t { cpp, command_line, python };
STOKER_API void set_option_spelling(OptionSpelling spelling) noexcept;

// One dataset of a weighted mix (Options::mix).
struct Source {
  // As Options::source: an HDF5 file, an LMDB database, or a shard set (a glob or a directory).
  std::string path;
  // Its share of the draws: weight / the weights' sum (docs/sampler.md, "Mixes").
  double weight = 1.0;
};

struct Options {
  // HDF5 file, or LMDB database (a single file, or a directory holding data.mdb); or a shard set:
  // a glob ("train-*.h5", matches sorted by name) or a directory of shards.
  std::string source;
  // A shard set as a list (instead of `source`): files, LMDB databases, globs or directories, in
  // order. The shards' samples are concatenated in that order into one dataset; every shard must
  // have the same fields (docs/sharding.md).
  std::vector<std::string> sources;
  // A weighted mix (instead of `source`): several datasets with the same fields, drawn by weight
  // in a deterministic interleave (docs/sampler.md, "Mixes"). Each source is drawn in passes, each
  // pass every one of its samples once in a new shuffle (in order for Order::sequential); a source
  // that runs out starts its next pass. An epoch is samples_per_epoch draws, and the next epoch
  // goes on where it stopped. The Python package's sources=[stoker.Source(path, weight=w), ...].
  std::vector<Source> mix;
  // Draws per epoch of a mix (before sharding); 0: the sources' samples together.
  std::uint64_t samples_per_epoch = 0;
  // Remote shards: a source (or an entry of sources, or a mix's path) may be an http:// or https://
  // URL, with brace ranges as WebDataset writes them ("https://host/train-{00000..01023}.h5"), or an
  // s3:// prefix or key (S3 and S3-compatible stores, from the AWS variables and files). Each
  // object is fetched into cache_dir once per node (every rank and process on it shares the cache),
  // resumed by Range after a broken connection, retried with backoff on 5xx, 429 and S3's SlowDown,
  // and checked against the size and ETag it had when listed; the loader then reads the cached
  // files. A set that fits cache_limit is cached whole before the first batch; a larger one is
  // read through the cache, each epoch's shards fetched as it reads them and the one read again
  // furthest ahead evicted (docs/remote.md). cache_dir "": the default of remote/shard_cache.h
  // ($STOKER_CACHE_DIR, else ~/.cache/stoker/shards).
  std::string cache_dir;
  // The most bytes the set may take in cache_dir (0: as much as its disk has free).
  std::uint64_t cache_limit = 0;
  // Objects fetched at once.
  std::size_t fetch_parallelism = 4;
  // How long one object's fetch may keep failing (each retry after a growing pause) before it is an
  // error naming its URL and the last answer.
  std::chrono::milliseconds fetch_timeout{std::chrono::minutes(2)};
  // Shards a worker keeps open at once (the least recently read is closed first).
  std::size_t max_open_shards = kDefaultMaxOpenShards;
  Format format = Format::auto_detect;

  // Fields to deliver, in this order. Empty: every field, alphabetical by name. In HDF5 a field
  // is a dataset, or a group whose members "0" .. "N-1" are one sample each (a bytes field), named
  // by its path relative to `group` ("train/images").
  std::vector<std::string> fields;
  // HDF5: the group the fields are in ("" is the root group).
  std::string group;
  // LMDB without a stoker schema whose sample is one key per field, as text-recognition datasets
  // are written: "image=image-{:09d},label=label-{:09d}:i64" (NAME=TEMPLATE[:TYPE]; TYPE bytes, the
  // default, or a number type parsed from decimal text). Sample 0 is key index 0, or 1 where the
  // database starts there. `lmdb_count_key` ("num-samples"): a key whose value must equal the count.
  std::string lmdb_keys;
  std::string lmdb_count_key;

  // Per-sample operations the workers run on fields (stoker/pipeline.h), e.g.
  // "jpeg=decode,random_resized_crop(224),flip,to_chw". A field with a pipeline is delivered as
  // its output: a fixed field. Empty: fields are delivered as stored.
  std::string pipeline;
  // Shared libraries of pipeline operations (STOKER_REGISTER_OP, stoker/pipeline.h), each named by
  // a path: loaded (dlopen) in this process before the pipelines are built and in the workers, so
  // that their operations work in `pipeline` without rebuilding stoker or the worker program. A
  // library that cannot be loaded or registers nothing is an error naming it.
  std::vector<std::string> op_libraries;
  // Per-sample code of the user's own, run after the pipelines in the workers (or, without
  // workers, in the calling thread): what the Loader delivers is what it returns
  // (stoker/transform.h). Empty fields: none.
  Transform transform;
  // The most pixels (height x width) an image the pipeline decodes may have. A larger one is an
  // error naming the sample and its size, from its header alone: a small file that claims a huge
  // image (a decompression bomb) costs no memory. A worker's peak memory for one image is about
  // 3 bytes per pixel (docs/pipeline.md, "Memory").
  std::uint64_t max_image_pixels = kDefaultMaxImagePixels;
  // A sample its pipeline cannot decode fails its batch, or is replaced by zeros (above).
  OnDecodeError on_decode_error = OnDecodeError::fail;

  std::size_t batch_size = 1;

  // Worker processes. 0 loads in the calling thread, like PyTorch. kAuto: start with one; while the
  // training loop waits for data, go at once to as many as the stage times say it needs (up to the
  // CPUs this process may use: its affinity mask and cgroup CPU quota, 16 at most), then add more
  // one at a time while they help.
  std::size_t num_workers = 0;

  // Batches each worker may have in flight (PyTorch's prefetch_factor). The shared-memory ring
  // holds num_workers * prefetch batches (and held_batches), or fewer when /dev/shm cannot hold
  // that many. With num_workers = 0 it is the number of batch buffers. kAuto: start at 2 and deepen (up to 4) while
  // the training loop waits and it helps; where the first step takes every worker there is, as deep
  // as half the CPU's last-level cache holds. Stats::auto_tuning says what was chosen.
  std::size_t prefetch = 2;

  // Batches the training loop keeps while it asks for the next one. The ring holds this many slots
  // beyond num_workers * prefetch, so that batches kept do not shrink the window of batches in
  // flight (and a loop that keeps its batch while asking for the next never finds every slot
  // held). 0 suits C++'s `for (Batch& b : loader.epoch(e))`, which lets go of each batch before it
  // asks for the next; Python's `for batch in loader` keeps its last batch until the next one
  // arrives, and the Python package's default is 1. Without workers there are max(prefetch,
  // held_batches + 1) batch buffers. On a CUDA device the batches kept hold device buffers
  // instead: there are prefetch_to_device + max(1, held_batches) of them.
  std::size_t held_batches = 0;

  Order order = Order::sequential;
  // Shorthand for order = random (PyTorch's name): with it, a sequential order means random.
  bool shuffle = false;
  std::uint64_t seed = 0;
  // Drop the last incomplete batch (and, when sharded, the samples that do not divide evenly).
  bool drop_last = false;

  Shard shard;

  // Shared memory for the ring, in bytes; 0 means the default: shm_fraction of /dev/shm's free
  // space (or of the available memory, for memfd), never more than is free or the memory cgroup
  // allows, divided among the ranks on this node (docs/shm-layout.md).
  std::uint64_t shm_budget = 0;
  double shm_fraction = 0.5;  // (0, 0.5]

  // Where the ring lives. automatic: /dev/shm when it holds the ring at full depth, else memory
  // from memfd_create (not limited by the size of /dev/shm, only by the memory cgroup and RAM),
  // saying so in one warning line. Either may be forced.
  ShmBacking shm_backing = ShmBacking::automatic;

  // A worker that has work and makes no progress for this long while it can run is stuck: its
  // progress is counted at every step of a batch (the read, each sample's pipeline), so a slow disk
  // that still delivers is not stuck, nor a worker stopped by SIGSTOP or a debugger, nor one whose
  // whole job was suspended (Ctrl-Z, scontrol suspend, docker pause); a read hung in the kernel or
  // a decoder looping is. Zero: never stuck (a dead worker is reported at once regardless).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};

  // A worker that dies (any signal or a non-zero exit: the out-of-memory killer, a crash) or is
  // stuck past `timeout` is replaced by a new one that loads its unfinished batches again: the
  // batches and their order are exactly those of an undisturbed run. At most this many times in the
  // Loader's life; past it, the error names every death. 0: the first death ends the loader.
  std::uint32_t max_respawns = 3;

  // The fork server and workers take this oom_score_adj (0 .. 1000; the trainer's own when that
  // is higher: it is never lowered, which would need privilege), so that under memory pressure the
  // kernel's out-of-memory killer picks a worker, which is replaced with an exact replay (above),
  // rather than the training process. 0 leaves them as the trainer is.
  int worker_oom_score_adj = 500;

  // How long shutdown waits for workers to exit before killing them.
  std::chrono::milliseconds shutdown_grace{2000};

  // Where batches go (stoker/device.h). With a CUDA device a staging thread copies batches to the
  // GPU `prefetch_to_device` batches ahead of the training loop.
  Device device = Device::cpu();
  std::size_t prefetch_to_device = 2;
  Staging staging = Staging::automatic;

  // A Chrome trace-event file to write the run into, as it goes (docs/observability.md): open it in
  // Perfetto's UI or chrome://tracing. Empty: none.
  std::string trace;

  // Receives one-line warnings (e.g. a lowered ring depth). Default: stderr, prefixed "stoker: ".
  // Called on the thread that meets the warning (one inside Epoch::next(), the staging thread),
  // within a call of the Loader: it must not call the Loader itself.
  std::function<void(std::string_view)> on_warning;
};

}  // namespace stoker
