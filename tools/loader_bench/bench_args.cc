#include "tools/loader_bench/bench_args.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "tools/common/cli.h"

namespace stoker::tools {
namespace {

// "WEIGHT:PATH" split at its first ':'; nullopt when WEIGHT is not a number.
std::optional<Source> parse_weighted(const std::string& text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  const std::string weight = text.substr(0, colon);
  char* end = nullptr;
  const double w = std::strtod(weight.c_str(), &end);
  if (end != weight.c_str() + weight.size()) return std::nullopt;
  return Source{text.substr(colon + 1), w};
}

CLI::Validator weighted_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (parse_weighted(text)) return "";
        return "'" + text + "' is not WEIGHT:PATH (a number, ':', a dataset), e.g. 3:web/";
      },
      "");
}

// What to read and how the loader sees it.
void add_data_options(CLI::App& app, Args& args) {
  app.add_option("--data", args.data,
                 "HDF5 file or LMDB database to read, or a shard set: a comma-separated list, a glob ('train-*.h5', "
                 "quoted) or a directory of shards (default: a generated demo dataset)");
  app.add_option("--mix", args.mix,
                 "Instead of --data, a weighted mix of datasets with the same fields: WEIGHT:PATH, repeated (e.g. "
                 "--mix 3:web/ --mix 1:books.lmdb), each PATH as --data takes one, drawn by weight in a fixed "
                 "interleave, each source in passes of every sample once (docs/sampler.md, \"Mixes\")")
      ->type_name("WEIGHT:PATH")
      ->check(weighted_path())
      ->excludes("--data");
  app.add_option("--samples-per-epoch", args.options.samples_per_epoch,
                 "With --mix: draws per epoch (default: the sources' samples together)")
      ->check(whole_number(1));
  app.add_option("--cache-dir", args.options.cache_dir,
                 "Where http(s) shards are cached on this node, shared by every rank (default: $STOKER_CACHE_DIR, "
                 "else ~/.cache/stoker/shards); --data and --mix take URLs with brace ranges, "
                 "'https://host/train-{00000..00099}.h5'");
  app.add_option("--cache-limit", args.options.cache_limit,
                 "The most bytes the remote shards may take in --cache-dir (binary units: 100g; 0: its disk's free "
                 "space)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--fetch-parallelism", args.options.fetch_parallelism, "Remote shards fetched at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--fetch-timeout", args.fetch_timeout_s,
                 "Seconds one remote shard's fetch may keep failing (retried after growing pauses) before it is an "
                 "error")
      ->check(number_at_least(0))
      ->capture_default_str();
  app.add_option("--write-index", args.write_index,
                 "Write the index of the --data shard set to PATH (store it beside the shards as stoker-index.json: a "
                 "node that reads them from the store starts at once; docs/remote.md) and exit")
      ->type_name("PATH");
  app.add_option("--max-open-shards", args.options.max_open_shards, "Shards a worker keeps open at once")
      ->check(whole_number(1))
      ->capture_default_str();
  add_choice(app, "--format", args.options.format, "Format of --data");
  app.add_option("--fields", args.options.fields,
                 "Fields to load, in this order (default: all, alphabetical); HDF5 fields by path, e.g. "
                 "train/images,train/labels")
      ->delimiter(',');
  app.add_option("--group", args.options.group, "HDF5: the group the fields are in (names relative to it)");
  app.add_option("--lmdb-keys", args.options.lmdb_keys,
                 "LMDB without a stoker schema whose sample is one key per field: NAME=TEMPLATE[:TYPE],... e.g. "
                 "'image=image-{:09d},label=label-{:09d}' (TYPE bytes, or a number type parsed from text: "
                 "label=label-{:09d}:i64); samples start at key index 0, or 1 where the database does");
  app.add_option("--lmdb-count-key", args.options.lmdb_count_key,
                 "With --lmdb-keys: a key whose value is the number of samples (e.g. num-samples), checked");
  app.add_option("--save-batch", args.save_batch,
                 "Write the first batch of each epoch into DIR as NumPy files (FIELD.npy; FIELD.bytes.npy and "
                 "FIELD.offsets.npy for a bytes field; indices.npy), to look at what the pipeline makes (CPU device)");
  app.add_option("--pipeline", args.options.pipeline,
                 "Per-sample operations run in the workers, 'FIELD=op,op(args),...' with fields separated by ';', "
                 "e.g. 'jpeg=decode,random_resized_crop(224),flip,to_chw'. Operations: decode[(H,W)] (decode_jpeg, "
                 "decode_png: one format only), "
                 "random_resized_crop(H[,W]), resize(H,W), resize(S) (the shorter side), center_crop(H[,W]), "
                 "flip[(p)], color_jitter(b,c,s[,h]), to_chw, "
                 "normalize(m0,m1,m2,s0,s1,s2) (docs/pipeline.md)")
      ->check(pipeline_text());
  app.add_option("--op-library", args.options.op_libraries,
                 "A shared library of pipeline operations (STOKER_REGISTER_OP) to load here and in the workers, so "
                 "that --pipeline may name them; repeat for several")
      ->type_name("PATH");
  app.add_option("--max-image-pixels", args.options.max_image_pixels,
                 "The most pixels (height x width) an image the pipeline decodes may have; a larger one is an "
                 "error naming the sample, from its header alone (a decompression bomb costs no memory)")
      ->check(whole_number(1))
      ->capture_default_str();
  add_choice(app, "--on-decode-error", args.options.on_decode_error,
             "A sample the pipeline cannot decode: fail (the run stops, naming the file, field and sample) or "
             "skip (its field holds zeros, the epoch keeps its batches; a warning names it, and the report "
             "counts it)");
}

// How the loader runs: batches, workers, order, epochs.
void add_run_options(CLI::App& app, Args& args) {
  app.add_option("--batch-size", args.options.batch_size, "Samples per batch")
      ->check(whole_number(1))
      ->capture_default_str();
  app.add_option("--workers", args.workers,
                 "Worker processes (0: load in this process), or auto: add workers while the loop waits for data "
                 "and they help")
      ->check(whole_number_or_auto(0, 1024))
      ->capture_default_str();
  app.add_option("--prefetch", args.prefetch, "Batches in flight per worker, or auto (with workers)")
      ->check(whole_number_or_auto(1, 1024))
      ->capture_default_str();
  auto* shuffle = app.add_flag("--shuffle", args.options.shuffle,
                               "Shuffle every epoch (order depends on --seed and the epoch): --order random");
  add_choice(app, "--order", args.options.order,
             "Sample order: sequential, random, or quasi_random (shuffled chunk-sized groups, mixed within windows "
             "of a few: each chunk read about once per epoch; docs/sampler.md)")
      ->excludes(shuffle);
  app.add_option("--seed", args.options.seed, "Shuffle seed")->check(whole_number(0))->capture_default_str();
  app.add_option("--epochs", args.epochs, "Epochs to run")->check(whole_number(1, 1u << 30))->capture_default_str();
  app.add_flag("--drop-last", args.options.drop_last, "Drop the last incomplete batch");
}

// Where batches go, the ring, what is printed, and the runs that are not benchmarks.
void add_output_options(CLI::App& app, Args& args) {
  app.add_option("--device", args.device,
                 "Where batches go: cpu, cuda[:i], or emulated (the CUDA pipeline on host "
                 "memory)")
      ->check(device_name())
      ->capture_default_str();
  app.add_option("--trace", args.options.trace,
                 "Write the run into FILE as a Chrome trace (open it in Perfetto's UI or chrome://tracing): a track "
                 "per worker with its batches and their stages, the loop's waits and steps, warnings "
                 "(docs/observability.md); the demo's two runs write it in turn, the LMDB run's is left")
      ->type_name("FILE");
  add_choice(app, "--staging", args.options.staging,
             "CUDA staging: pinned_copy (copy into pinned buffers), registered_shm (copy straight from "
             "page-locked shared memory), or auto (registered_shm where the slots can be page-locked, else "
             "pinned_copy)");
  app.add_option("--step-ms", args.step_ms,
                 "Simulate a training step of T ms per batch (a sleep on the CPU, a "
                 "spinning kernel on CUDA); stall % is then the share of the loop spent "
                 "waiting for data. Without it the step is empty, so stall % is near 100 "
                 "by construction: the loop does nothing but wait for data")
      ->check(number_at_least(0));
  app.add_option("--shm-budget", args.options.shm_budget,
                 "Shared memory the ring may use (binary units: 512m = 512 MiB, 2g); "
                 "replaces the default of half the free /dev/shm, still capped by the "
                 "free space and the memory cgroup")
      ->transform(CLI::AsSizeValue(false));
  add_choice(app, "--shm-backing", args.options.shm_backing,
             "Where the ring lives: auto (/dev/shm when it holds the ring, else memfd memory, which /dev/shm's "
             "size does not limit), dev_shm or memfd");
  app.add_option("--shm-fraction", args.options.shm_fraction,
                 "Without --shm-budget: the share of /dev/shm's free space (or of the available memory, for memfd) "
                 "the ring may use, in (0, 0.5]")
      ->capture_default_str();
  app.add_option("--held-batches", args.options.held_batches,
                 "Batches the loop keeps while it asks for the next: slots beyond workers x prefetch (loader-bench "
                 "keeps none)")
      ->check(whole_number(0))
      ->capture_default_str();
  app.add_option("--prefetch-to-device", args.options.prefetch_to_device,
                 "On a CUDA or emulated device: batches copied to the device ahead of the loop")
      ->check(whole_number(1))
      ->capture_default_str();
  app.add_option("--shutdown-grace", args.shutdown_grace_s,
                 "Seconds shutdown waits for workers to exit before it kills them")
      ->check(number_at_least(0))
      ->capture_default_str();
  app.add_option("--timeout", args.timeout_s,
                 "Seconds a worker with work may make no progress while it can run before it is stuck "
                 "(killed and replaced); 0: never")
      ->check(number_at_least(0))
      ->capture_default_str();
  app.add_option("--max-respawns", args.options.max_respawns, "Dead or stuck workers replaced in the loader's life")
      ->capture_default_str();
  app.add_option("--worker-oom-score-adj", args.options.worker_oom_score_adj,
                 "oom_score_adj of the workers (0-1000, never below this process's): the out-of-memory killer "
                 "then picks a worker, which is replaced, before the trainer; 0: as this process")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_flag("--json", args.json, "One JSON object per epoch instead of the table");
  app.add_flag("--digest", args.digest, "Print content_digest and order_digest of each epoch (docs/digest.md)");
  app.add_option("--make-data", args.make_data, "Write the standard benchmark datasets into DIR and exit");
  app.add_option("--make-demo", args.make_demo,
                 "Write the demo dataset (--demo-samples samples) into DIR as demo.h5 "
                 "and demo.lmdb, and exit");
  app.add_option("--max-batches", args.max_batches, "Stop each epoch after N batches (0: the whole epoch)")
      ->check(whole_number(0));
  app.add_flag("--shard-from-env", args.shard_from_env,
               "Load this process's shard, with rank and world size from the launcher's variables (torchrun, Open "
               "MPI, PMI, SLURM; docs/distributed.md)");
  app.add_option("--stop-after-batches", args.stop_after_batches,
                 "Stop after K batches of the first epoch and end the run, as a preempted job would (with "
                 "--state-out, the state to resume from)")
      ->check(whole_number(1));
  app.add_option("--state-out", args.state_out, "Write the loader's state (JSON, docs/sampler.md) to FILE at the end");
  app.add_option("--resume", args.resume,
                 "Resume the epoch of a state written by --state-out (any world size, batch size or workers)");
  app.add_option("--demo-samples", args.demo_samples, "Samples in the generated demo dataset")
      ->check(whole_number(1))
      ->capture_default_str();
}

}  // namespace

std::string Args::data_name() const {
  if (mix.empty()) return data;
  std::string name = "mix(";
  for (const std::string& m : mix) name += (name.size() > 4 ? "," : "") + m;
  return name + ")";
}

Options Args::loader_options(const std::string& path) const {
  Options o = options;
  if (!mix.empty()) {
    for (const std::string& m : mix) o.mix.push_back(*parse_weighted(m));
  } else if (path.find(',') != std::string::npos && path.find('{') == std::string::npos &&
             !std::filesystem::exists(path)) {
    // "a.h5,b.h5": a list of shards (a path that exists as written is one dataset, commas and all;
    // so is a name with braces, whose commas are a brace list's: "https://h/{a,b}.h5").
    for (std::size_t at = 0;;) {
      const std::size_t comma = path.find(',', at);
      o.sources.push_back(path.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  } else {
    o.source = path;
  }
  o.num_workers = workers == "auto" ? kAuto : std::stoul(workers);
  o.prefetch = prefetch == "auto" ? kAuto : std::stoul(prefetch);
  o.timeout = std::chrono::milliseconds(std::llround(timeout_s * 1000));
  o.shutdown_grace = std::chrono::milliseconds(std::llround(shutdown_grace_s * 1000));
  o.fetch_timeout = std::chrono::milliseconds(std::llround(fetch_timeout_s * 1000));
  if (shard_from_env) o.shard = Shard::from_env();
  o.device = Device::parse(device);
  return o;
}

void add_bench_options(CLI::App& app, Args& args) {
  add_data_options(app, args);
  add_run_options(app, args);
  add_output_options(app, args);
}

}  // namespace stoker::tools
