// stoker-pack: writes a stoker dataset (LMDB layout 2, docs/lmdb-layout.md, or HDF5: a
// variable-length u8 dataset and label datasets, docs/hdf5.md), or a shard set of them, from a folder
// of images or a manifest of paths and labels (tools/pack/pack_plan.h). Files are read and checked (and
// re-encoded, with --max-side) by several threads and stored in the plan's order
// (tools/pack/pack_queue.h), atomically and resumably (tools/pack/pack_output.h), with errors that name the
// file and the manifest's line.
//
// The class names and string mappings are stored with the dataset, in the `stoker` sub-database
// under the key `labels` (HDF5: the root group's attribute `labels`): {"label": ["cat", "dog"]}
// (label k is the k-th name). Each sample's source file is recorded by its index in the dataset (or
// shard): the sub-database `paths` (HDF5: the dataset `stoker/paths`), relative to --folder or as
// the manifest writes it.
#include <fmt/format.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "formats/hdf5/hdf5_reader.h"
#include "formats/lmdb/lmdb_reader.h"
#include "stoker/digest.h"
#include "stoker/error.h"
#include "stoker/options.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"
#include "tools/pack/pack_image.h"
#include "tools/pack/pack_output.h"
#include "tools/pack/pack_plan.h"
#include "tools/pack/pack_queue.h"

namespace {

using nlohmann::json;
using stoker::Error;
using stoker::tools::PackPlan;

struct Args {
  std::string folder, manifest, output;
  stoker::tools::ManifestColumns columns;
  stoker::Format format = stoker::Format::auto_detect;
  std::uint64_t shard_size = 0, commit_every = 0;
  stoker::tools::ImageRules rules{0, 90, stoker::kDefaultMaxImagePixels};
  std::string on_error = "stop";
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  std::string verify;  // "", "digest" (--verify) or "decode" (--verify=decode)
  bool resume = false, force = false, quiet = false;
};

bool hdf5_output(const Args& a) {
  if (a.format != stoker::Format::auto_detect) return a.format == stoker::Format::hdf5;
  return a.output.ends_with(".h5") || a.output.ends_with(".hdf5");
}

// The mean size of up to 64 of the files, spread over the list: the progress line's MiB/s.
std::uint64_t typical_file_bytes(const PackPlan& plan) {
  const std::size_t n = std::min<std::size_t>(64, plan.items.size());
  std::uint64_t sum = 0, seen = 0;
  for (std::size_t k = 0; k < n; ++k) {
    struct stat st;
    if (::stat(plan.items[k * plan.items.size() / n].path.c_str(), &st) == 0) {
      sum += static_cast<std::uint64_t>(st.st_size);
      ++seen;
    }
  }
  return seen ? sum / seen : 0;
}

// The stored fields, alphabetical by name (the loader's default order): the image and the labels.
// by_name[s]: stored field s is plan field by_name[s] (0 the image, 1 + l label l). Checked before
// anything is written: a label may not take the image field's name, nor (HDF5) the pack's group.
stoker::Schema pack_schema(const PackPlan& plan, bool hdf5, std::vector<std::size_t>& by_name) {
  std::vector<stoker::Field> fields{stoker::Field::bytes_field("image")};
  for (const auto& l : plan.labels) {
    if (l.name == "image") throw Error("--label image: the name of the image field; rename the manifest's column");
    const std::string_view group = stoker::tools::kHdf5PackGroup;
    if (hdf5 && l.name.starts_with(group) && (l.name.size() == group.size() || l.name[group.size()] == '/')) {
      throw Error(
          fmt::format("--label {}: in an HDF5 output the group '{}' holds each sample's source path "
                      "({}); rename the manifest's column, or write LMDB",
                      stoker::printable(l.name), group, stoker::tools::kHdf5Paths));
    }
    fields.push_back(stoker::Field{l.name, stoker::FieldKind::fixed, l.dtype, {}});
  }
  by_name.resize(fields.size());
  for (std::size_t f = 0; f < fields.size(); ++f) by_name[f] = f;
  std::sort(by_name.begin(), by_name.end(),
            [&](std::size_t x, std::size_t y) { return fields[x].name < fields[y].name; });
  stoker::Schema schema;
  schema.num_samples = plan.items.size();
  for (std::size_t f : by_name) schema.fields.push_back(fields[f]);
  return schema;
}

// What a resumed pack must have been started with: the plan, and every option that shapes the
// stored bytes (not --on-error, nor --verify: a pack stopped by a bad file is resumed with
// --on-error skip); "paths": its datasets record each sample's source.
std::string pack_fingerprint(const Args& a, const PackPlan& plan) {
  return fmt::format("{} {} max_side={} quality={} max_pixels={} shard_size={} paths",
                     stoker::tools::plan_fingerprint(plan), hdf5_output(a) ? "hdf5" : "lmdb", a.rules.max_side,
                     a.rules.quality, a.rules.max_pixels, a.shard_size);
}

// Re-reads every sample of each dataset and checks its content digest against the one computed as
// it was written.
void verify(const std::vector<stoker::tools::PackedDataset>& datasets, bool hdf5, bool quiet) {
  std::uint64_t total = 0;
  for (const auto& d : datasets) total += d.samples;
  stoker::tools::Progress progress("verify", total, 0, quiet);
  std::uint64_t done = 0;
  for (const auto& d : datasets) {
    std::unique_ptr<stoker::formats::Reader> reader;
    if (hdf5) {
      reader = std::make_unique<stoker::formats::Hdf5Reader>(d.path, std::vector<std::string>{},
                                                             stoker::formats::Hdf5Path::automatic, "");
    } else {
      reader = std::make_unique<stoker::formats::LmdbReader>(d.path, std::vector<std::string>{}, true);
    }
    const stoker::Schema& schema = reader->schema();
    if (schema.num_samples != d.samples)
      throw Error(fmt::format("verify: {}: holds {} samples, {} were written", d.path, schema.num_samples, d.samples));
    std::vector<stoker::formats::VarBytes> bytes(schema.fields.size());
    std::vector<std::vector<std::byte>> fixed(schema.fields.size());
    std::vector<stoker::formats::FieldOut> out(schema.fields.size());
    std::vector<std::byte> sample;
    stoker::ContentDigest digest;
    constexpr std::uint64_t kBlock = 256;
    std::vector<std::uint64_t> indices;
    for (std::uint64_t start = 0; start < schema.num_samples; start += kBlock) {
      const std::uint64_t n = std::min(kBlock, schema.num_samples - start);
      indices.resize(n);
      for (std::uint64_t k = 0; k < n; ++k) indices[k] = start + k;
      for (std::size_t f = 0; f < schema.fields.size(); ++f) {
        if (schema.fields[f].is_bytes()) {
          bytes[f].clear();
          out[f] = {nullptr, &bytes[f]};
        } else {
          fixed[f].resize(n * schema.fields[f].bytes_per_sample());
          out[f] = {fixed[f].data(), nullptr};
        }
      }
      reader->read(indices, out);
      for (std::uint64_t k = 0; k < n; ++k) {
        sample.clear();
        for (std::size_t f = 0; f < schema.fields.size(); ++f) {
          if (schema.fields[f].is_bytes()) {
            const auto s = bytes[f].sample(k);
            sample.insert(sample.end(), s.begin(), s.end());
          } else {
            const std::size_t b = schema.fields[f].bytes_per_sample();
            sample.insert(sample.end(), fixed[f].begin() + static_cast<std::ptrdiff_t>(k * b),
                          fixed[f].begin() + static_cast<std::ptrdiff_t>((k + 1) * b));
          }
        }
        digest.add(start + k, sample);
      }
      progress.update(done + start + n);
    }
    if (digest.hex() != d.content_digest)
      throw Error(fmt::format("verify: {}: its samples hash to content_digest {}, but {} was written", d.path,
                              digest.hex(), d.content_digest));
    done += schema.num_samples;
  }
  progress.finish();
}

void report_skipped(const PackPlan& plan, const std::vector<stoker::tools::SkippedFile>& skipped) {
  if (skipped.empty()) return;
  std::cerr << fmt::format("stoker-pack: {} of {} files skipped (--on-error skip):\n", skipped.size(),
                           plan.items.size());
  for (const auto& s : skipped) std::cerr << "  " << s.reason << '\n';
}

// Stores items [out.next_item(), N) in order; a file that cannot be stored stops the pack or is
// skipped. Returns the bytes stored and how many files were re-encoded.
std::pair<std::uint64_t, std::uint64_t> store_items(const Args& a, const PackPlan& plan,
                                                    const std::vector<std::size_t>& by_name,
                                                    stoker::tools::PackOutput& out) {
  const std::uint64_t first = out.next_item();
  stoker::tools::Progress progress(a.output, plan.items.size(), typical_file_bytes(plan), a.quiet, first);
  stoker::tools::PrepareQueue queue(plan, a.rules, a.jobs, first);
  std::vector<std::array<std::byte, 8>> label_bytes(plan.labels.size());
  std::vector<std::span<const std::byte>> parts(by_name.size());
  std::uint64_t bytes = 0, reencoded = 0;
  for (std::uint64_t i = first; i < plan.items.size(); ++i) {
    const auto prepared = queue.wait(i);
    if (!prepared.error.empty()) {
      if (a.on_error == "stop") {
        out.commit();  // a --resume after the fix starts at this file
        throw Error(stoker::ErrorCode::dataset,
                    prepared.error + " (--on-error skip leaves such files out; --resume continues this pack)");
      }
      out.skip(i, prepared.error);
    } else {
      const auto& item = plan.items[i];
      for (std::size_t l = 0; l < plan.labels.size(); ++l)
        std::visit([&](auto v) { std::memcpy(label_bytes[l].data(), &v, 8); }, item.labels[l]);
      for (std::size_t s = 0; s < by_name.size(); ++s) {
        const std::size_t f = by_name[s];
        parts[s] = f == 0 ? prepared.bytes : std::span<const std::byte>(label_bytes[f - 1]);
      }
      out.append(i, parts, item.source);
      bytes += prepared.bytes.size();
      reencoded += prepared.reencoded ? 1 : 0;
    }
    queue.release(i);
    progress.update(i + 1);
  }
  progress.finish();
  return {bytes, reencoded};
}

void pack(const Args& a) {
  const PackPlan plan =
      a.folder.empty() ? stoker::tools::manifest(a.manifest, a.columns) : stoker::tools::image_folder(a.folder);
  std::vector<std::size_t> by_name;
  json names = json::object();
  for (const auto& l : plan.labels) {
    if (!l.names.empty()) names[l.name] = l.names;
  }
  const bool hdf5 = hdf5_output(a);
  stoker::tools::PackOutputSpec spec{
      a.output,      hdf5, a.shard_size, pack_schema(plan, hdf5, by_name), names.dump(), pack_fingerprint(a, plan),
      a.commit_every};
  stoker::tools::PackOutput out(spec, a.resume, a.force);
  if (out.resumed() && !a.quiet)
    std::cerr << fmt::format("stoker-pack: resuming {}.partial at file {} of {}\n", a.output, out.next_item() + 1,
                             plan.items.size());
  const std::uint64_t first = out.next_item();
  const auto started = std::chrono::steady_clock::now();
  const auto [bytes, reencoded] = store_items(a, plan, by_name, out);
  out.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!a.verify.empty()) verify(out.datasets(), hdf5, a.quiet);
  out.move_into_place();
  report_skipped(plan, out.skipped());
  if (a.quiet) return;
  const std::uint64_t files = plan.items.size() - first;
  std::string what = out.datasets().size() == 1 ? fmt::format("content_digest {}", out.datasets()[0].content_digest)
                                                : fmt::format("{} shards", out.datasets().size());
  std::cerr << fmt::format(
      "stoker-pack: {} files, {} stored in {:.2f} s ({}, {:.0f} files/s{}{}) -> {} ({} samples, {})\n", files,
      stoker::tools::binary_size(static_cast<double>(bytes)), seconds,
      stoker::tools::binary_rate(static_cast<double>(bytes) / std::max(seconds, 1e-9)),
      static_cast<double>(files) / std::max(seconds, 1e-9),
      reencoded ? fmt::format(", {} re-encoded", reencoded) : std::string(),
      a.verify.empty()       ? ""
      : a.verify == "decode" ? ", decoded and verified"
                             : ", verified",
      a.output, out.samples(), what);
}

// How the pack is made: the output's format and shards, the images' rules, errors, threads,
// commits, resume, verification.
void add_pack_options(CLI::App& app, Args& a) {
  stoker::tools::add_choice(
      app, "--format", a.format,
      "lmdb, hdf5, or auto (hdf5 for an OUTPUT ending .h5 or .hdf5, a shard set's directory included)");
  app.add_option("--shard-size", a.shard_size,
                 "Write a shard set: a new shard before the file that would take one past this size (binary "
                 "units: 512MiB, 1GiB); the loader reads the directory as one dataset")
      ->transform(CLI::AsSizeValue(false))
      ->check(stoker::tools::whole_number(1));
  app.add_option("--max-side", a.rules.max_side,
                 "Resize images whose longer side is larger than N (antialiased bilinear, aspect kept) and store "
                 "them as JPEG of --quality; smaller ones are stored as they are")
      ->check(stoker::tools::whole_number(1, 65500));
  app.add_option("--quality", a.rules.quality, "JPEG quality of re-encoded images (with --max-side)")
      ->check(stoker::tools::whole_number(1, 100))
      ->capture_default_str();
  app.add_option("--max-image-pixels", a.rules.max_pixels,
                 "Refuse an image of more pixels than this (the loader's limit, against decompression bombs)")
      ->check(stoker::tools::whole_number(1))
      ->capture_default_str();
  app.add_option("--on-error", a.on_error,
                 "A file that is unreadable or not a JPEG or PNG image (with --verify=decode: or does not decode): "
                 "stop (the pack fails naming it; --resume continues after a fix) or skip (it is left out; the "
                 "skipped files are listed at the end)")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->capture_default_str();
  app.add_option("--jobs", a.jobs, "Threads that read, check and re-encode files (default: every core)")
      ->check(stoker::tools::whole_number(1, 1024));
  app.add_option("--commit-every", a.commit_every,
                 "LMDB: commit every N files (a killed pack resumes from the last commit; default: every 8 MiB)")
      ->check(stoker::tools::whole_number(1));
  app.add_flag("--resume", a.resume,
               "Continue an interrupted pack of the same folder or manifest and options (OUTPUT.partial)");
  app.add_flag("--verify{digest}", a.verify,
               "Re-read every stored sample and check the content digest before finishing; --verify=decode also "
               "decodes every image whole as the loader's `decode` does before it is stored, so that a file "
               "corrupt past its header is refused now (--on-error says what then), not in training")
      ->check(CLI::IsMember({"digest", "decode"}));
  app.add_flag("--force", a.force,
               "Replace an existing OUTPUT (and discard an interrupted pack): only an LMDB or HDF5 dataset or a "
               "directory of them, never other files");
  app.add_flag("--quiet", a.quiet, "No progress and no summary");
}

int stoker_pack(int argc, char** argv) {
  stoker::set_option_spelling(stoker::OptionSpelling::command_line);
  Args a;
  CLI::App app{
      "stoker-pack: writes a stoker dataset (LMDB layout 2, or HDF5: an `image` bytes field holding each file, and\n"
      "fixed label fields) from an ImageFolder tree or a manifest. Files are copied byte for byte, or with\n"
      "--max-side re-encoded when larger. OUTPUT appears only when complete; a killed pack continues with --resume.\n\n"
      "  stoker-pack --folder train/ train.lmdb            ROOT/<class>/<file>; labels 0..C-1, classes sorted\n"
      "  stoker-pack --manifest train.csv --label label train.lmdb\n"
      "                                                    CSV with a header row, or .jsonl: a path column and\n"
      "                                                    label columns (integers, numbers, or strings mapped\n"
      "                                                    to integers)\n"
      "  stoker-pack --folder train/ --max-side 512 --shard-size 1GiB train-shards\n"
      "                                                    images larger than 512 px resized and re-encoded\n"
      "                                                    (JPEG, --quality 90); a directory of shards of at\n"
      "                                                    most 1 GiB: shard-00000.lmdb, shard-00001.lmdb, ...\n\n"
      "Class names and string labels' names are stored with the dataset: LMDB's `stoker` sub-database under\n"
      "`labels`, HDF5's root attribute `labels` (JSON: {\"label\": [\"cat\", \"dog\"]}). Each sample's file is\n"
      "recorded under its index: LMDB's sub-database `paths` (key: the index, 8 bytes big-endian), HDF5's\n"
      "dataset `stoker/paths`; relative to --folder, or as the manifest writes it.",
      "stoker-pack"};
  auto* folder = app.add_option("--folder", a.folder, "An ImageFolder tree: ROOT/<class>/<file>");
  auto* man = app.add_option("--manifest", a.manifest, "A CSV (header row) or JSON Lines (.jsonl) manifest");
  folder->excludes(man);
  man->excludes(folder);
  app.add_option("--path-column", a.columns.path_column, "The manifest's column of file paths")->capture_default_str();
  // One value per --label (a,b for several): a following OUTPUT is never taken for a column.
  app.add_option("--label", a.columns.label_columns, "A manifest column to store as a label field (repeat, or a,b)")
      ->delimiter(',')
      ->allow_extra_args(false);
  app.add_option("--root", a.columns.root,
                 "Where the manifest's relative paths start (default: the manifest's folder)");
  app.add_option("OUTPUT", a.output,
                 "The dataset to write: LMDB, or HDF5 for a name ending .h5 or .hdf5; with --shard-size, a "
                 "directory of shards")
      ->required();
  add_pack_options(app, a);
  if (int rc = stoker::tools::parse_or_exit(app, argc, argv); rc >= 0) return rc;
  // OUTPUT/ names OUTPUT (a directory of shards, say): its .partial goes beside it, not into it.
  while (a.output.size() > 1 && a.output.back() == '/') a.output.pop_back();
  a.rules.decode = a.verify == "decode";
  if (a.folder.empty() && a.manifest.empty()) {
    std::cerr << "stoker-pack: give --folder ROOT or --manifest FILE\nRun with --help for more information.\n";
    return 2;
  }
  pack(a);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return stoker::tools::run_tool("stoker-pack", stoker_pack, argc, argv); }
