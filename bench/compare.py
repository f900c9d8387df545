"""stoker against PyTorch's DataLoader on the standard datasets, in one run, on equal terms.

Run by bench/compare.sh, which builds stoker and makes the datasets first.

Fairness rules (the script must not flatter stoker):
  - Both sides run the same grid of configurations: workers 0 (loading in the training process),
    and workers 1 and 2 with 2 and 4 batches in flight per worker (PyTorch's prefetch_factor,
    stoker's prefetch). PyTorch runs the grid twice, in the per-sample style its documentation
    shows and in the batched style a careful user writes (bench/pytorch_dataloader.py): twice the
    tries, which can only help PyTorch. The ratio is against PyTorch's best over all of them.
  - Every configuration runs 2 shuffled epochs on both sides and the second is measured: neither
    side's figure includes start-up (forking workers, opening files, warming the page cache).
  - Rows whose PyTorch configurations are slow are capped to their first batches, on both sides.
  - "of memcpy" compares stoker's best configuration with memcpy in as many processes as it had
    workers (1 for 0 workers), measured in the same run; the LMDB ceiling likewise.
  - Units are binary (MiB = 2^20 bytes).
Exits 1 when a goal is missed; the table is printed either way.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRID = [(0, 2), (1, 2), (1, 4), (2, 2), (2, 4)]
MEASURED_EPOCH = 1  # the second: both sides warm


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def measured(rows):
    return next(r for r in rows if r["epoch"] == MEASURED_EPOCH)


def best(rows):
    return max(rows, key=lambda r: r["samples_per_s"])


def describe(r):
    style = {"per-sample": "ps", "batched": "b"}.get(r.get("style"), "")
    config = f"w={r['workers']}" + (f",p={r['prefetch']}" if r["workers"] else "")
    return f"{r['samples_per_s']:.0f}/s ({style + ',' if style else ''}{config})"


def main():
    build, data = sys.argv[1], sys.argv[2]
    bench = os.path.join(build, "tools", "loader-bench")
    ceilings = os.path.join(build, "bench", "stoker-ceilings")
    py = os.path.join(ROOT, ".venv", "bin", "python")
    pt = os.path.join(ROOT, "bench", "pytorch_dataloader.py")
    max_workers = max(w for w, _ in GRID)

    ceil = run_json(
        [
            ceilings,
            "--memcpy",
            "--procs",
            str(max_workers),
            "--lmdb",
            os.path.join(data, "small.lmdb"),
            "--seconds",
            "3",
        ]
    )[0]
    memcpy = {int(k): v for k, v in ceil["memcpy_gib_per_s"].items()}
    # name, file, batch size, batches per epoch cap (0: the whole epoch)
    datasets = [
        ("small LMDB", "small.lmdb", 256, 0),
        ("small HDF5 chunked", "small.h5", 256, 100),
        ("small HDF5 gzip", "small-gzip.h5", 256, 20),
        ("large LMDB", "large.lmdb", 32, 0),
        ("large HDF5 chunked", "large.h5", 32, 0),
    ]
    results = []
    for name, file, batch, cap in datasets:
        path = os.path.join(data, file)
        common = ["--data", path, "--batch-size", str(batch), "--shuffle", "--json", "--epochs", "2"]
        if cap:
            common += ["--max-batches", str(cap)]
        torch_runs, stoker_runs = [], []
        for workers, prefetch in GRID:
            config = ["--workers", str(workers), "--prefetch", str(prefetch)]
            for style in ("per-sample", "batched"):
                r = measured(run_json([py, pt, *common, *config, "--style", style]))
                torch_runs.append(r)
                print(f"  {name}: PyTorch {describe(r)}", file=sys.stderr, flush=True)
            r = measured(run_json([bench, *common, *config]))
            stoker_runs.append(r)
            print(f"  {name}: stoker {describe(r)}", file=sys.stderr, flush=True)
        results.append((name, best(torch_runs), best(stoker_runs), cap))

    print()
    print(
        "memcpy (page-cache-sized source): "
        + ", ".join(f"{p} process{'es' if p > 1 else ''} {g:.1f} GiB/s" for p, g in sorted(memcpy.items()))
        + f"; raw LMDB read ceiling (random mdb_get + memcpy, {ceil['lmdb_procs']} processes): "
        f"{ceil['lmdb_samples_per_s']:.0f} samples/s, {ceil['lmdb_mib_per_s']:.0f} MiB/s"
    )
    print(
        "each side's best of the same (workers, prefetch) grid, second epoch, shuffled; PyTorch in both styles "
        "(ps: per-sample, b: batched)"
    )
    print()
    print(
        f"{'dataset':<20} {'PyTorch best':>26} {'stoker best':>22} {'stoker/PyTorch':>15} {'stoker MiB/s':>13} "
        f"{'of memcpy':>10}"
    )
    for name, t, s, cap in results:
        ratio = s["samples_per_s"] / t["samples_per_s"]
        cores = max(1, s["workers"])
        frac = s["mib_per_s"] / 1024 / memcpy[cores]
        print(
            f"{name:<20} {describe(t):>26} {describe(s):>22} {ratio:>14.1f}x {s['mib_per_s']:>13.0f} "
            f"{frac:>9.0%}  ({cores} core{'s' if cores > 1 else ''})" + (f"  first {cap} batches" if cap else "")
        )
    print()
    by = {name: (t, s) for name, t, s, _ in results}

    def ratio(name):
        t, s = by[name]
        return s["samples_per_s"] / t["samples_per_s"]

    checks = [
        (
            "small LMDB >= 70% of the LMDB read ceiling",
            by["small LMDB"][1]["samples_per_s"] / ceil["lmdb_samples_per_s"],
            0.70,
            "%",
        ),
        ("small LMDB >= 5x PyTorch", ratio("small LMDB"), 5, "x"),
        ("small HDF5 chunked >= 20x PyTorch", ratio("small HDF5 chunked"), 20, "x"),
        ("large LMDB >= 3x PyTorch", ratio("large LMDB"), 3, "x"),
        ("large HDF5 >= 3x PyTorch", ratio("large HDF5 chunked"), 3, "x"),
    ]
    missed = 0
    for label, value, goal, unit in checks:
        shown = f"{value:.1%}" if unit == "%" else f"{value:.2f}x"
        met = value >= goal
        missed += not met
        print(f"{'met ' if met else 'MISS'}  {label}: {shown}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
