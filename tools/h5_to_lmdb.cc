// h5-to-lmdb: converts an HDF5 dataset into stoker's LMDB layout (docs/lmdb-layout.md),
// streaming, atomically, resumably, and optionally verified (tools/h5_to_lmdb/conversion.h).
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <string>

#include "stoker/options.h"
#include "tools/common/cli.h"
#include "tools/h5_to_lmdb/conversion.h"

namespace {

using stoker::tools::Args;

void add_options(CLI::App& app, Args& a) {
  app.add_option("INPUT", a.input,
                 "HDF5 file to read; or a shard set, a directory of them or a glob ('train-*.h5'), converted "
                 "shard by shard")
      ->required();
  app.add_option("OUTPUT", a.output,
                 "LMDB database file to write; for a shard set, the directory of LMDB shards "
                 "(OUTPUT/<shard>.lmdb)")
      ->required();
  app.add_option("--fields", a.fields,
                 "Datasets to convert, in this order, by name or path (train/images); "
                 "default: every dataset and sample group (members 0 .. N-1, a bytes field) "
                 "of the root group or --group, alphabetical, all of which must be "
                 "convertible")
      ->delimiter(',');
  app.add_option("--group", a.group, "The group the fields are in (names relative to it)");
  app.add_option("--commit-every", a.commit_every, "Samples per transaction (also bounded to 32 MiB)")
      ->check(stoker::tools::whole_number(1))
      ->capture_default_str();
  app.add_option("--map-size", a.map_size,
                 "Initial LMDB map size (binary units: 4g = 4 GiB; grows when full; default: estimated)")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--resume", a.resume, "Continue an interrupted conversion of the same INPUT and fields");
  app.add_flag("--verify", a.verify, "Re-read every sample of the output and compare it with INPUT");
  app.add_flag("--force", a.force,
               "Replace an existing OUTPUT (atomically) or an interrupted conversion: only an LMDB database or a "
               "directory of them, never other files");
  app.add_flag("--quiet", a.quiet, "No progress and no summary");
}

// Everything but the catch-all: usage errors exit 2 (parse_or_exit), runtime errors 1.
int h5_to_lmdb(int argc, char** argv) {
  stoker::set_option_spelling(stoker::OptionSpelling::command_line);  // messages name --flags
  // LMDB mallocs every large record's overflow pages and frees them at commit. Above glibc's mmap
  // threshold each would be a fresh mapping, zero-filled page by page (measured: most of the time
  // for 150 KB records); keep them in the heap for reuse instead. Memory stays bounded by the
  // transaction size.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 128 << 20);
  Args a;
  CLI::App app{
      "h5-to-lmdb: converts an HDF5 dataset into stoker's LMDB layout (docs/lmdb-layout.md), streaming with\n"
      "bounded memory. OUTPUT appears only when complete: the work goes into OUTPUT.partial, which --resume\n"
      "continues after an interruption.",
      "h5-to-lmdb"};
  add_options(app, a);
  if (int rc = stoker::tools::parse_or_exit(app, argc, argv); rc >= 0) return rc;
  // OUTPUT/ names OUTPUT (a directory of shards, say): its .partial goes beside it, not into it.
  while (a.output.size() > 1 && a.output.back() == '/') a.output.pop_back();
  if (stoker::tools::names_a_shard_set(a.input)) {
    stoker::tools::convert_set(a);
  } else {
    stoker::tools::convert(a);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return stoker::tools::run_tool("h5-to-lmdb", h5_to_lmdb, argc, argv); }
