"""stoker against PyTorch's DataLoader on the standard datasets, in one run.

Runs by bench/compare.sh, which builds stoker and makes the datasets first. For every dataset and
format: PyTorch's DataLoader with 0, 1 and 2 workers (its best is the baseline, 2 epochs each) and
stoker with 1 and 2 workers and prefetch 2 and 4 (its best, 3 epochs each), shuffled; the best epoch
counts (the data is page-cached; this machine's timings vary by some 20% from run to run).
Also measured in the same run: single-core memcpy bandwidth, and the raw LMDB read ceiling
(random mdb_get + memcpy in as many processes as there are cores).
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def best(rows):
    return max(rows, key=lambda r: r["samples_per_s"])


def main():
    build, data = sys.argv[1], sys.argv[2]
    bench = os.path.join(build, "tools", "loader-bench")
    ceilings = os.path.join(build, "bench", "stoker-ceilings")
    py = os.path.join(ROOT, ".venv", "bin", "python")
    pt = os.path.join(ROOT, "bench", "pytorch_dataloader.py")
    ncpu = os.cpu_count()

    ceil = run_json([ceilings, "--memcpy", "--lmdb", os.path.join(data, "small.lmdb"), "--seconds", "3"])[0]
    # name, file, batch size, batches per epoch cap for slow PyTorch configurations (0: none)
    rows = [
        ("small LMDB", "small.lmdb", 256, 0),
        ("small HDF5 chunked", "small.h5", 256, 100),
        ("small HDF5 gzip", "small-gzip.h5", 256, 20),
        ("large LMDB", "large.lmdb", 32, 0),
        ("large HDF5 chunked", "large.h5", 32, 0),
    ]
    results = []
    for name, file, batch, cap in rows:
        path = os.path.join(data, file)
        common = ["--data", path, "--batch-size", str(batch), "--shuffle", "--json"]
        capped = ["--max-batches", str(cap)] if cap else []
        epochs = ["--epochs", "1" if cap else "2"]
        torch_runs = []
        for w in (0, 1, 2):
            torch_runs += run_json([py, pt, *common, "--workers", str(w), *epochs, *capped])
            print(f"  {name}: PyTorch workers={w}: {best(torch_runs[-1:])['samples_per_s']:.0f} samples/s",
                  file=sys.stderr, flush=True)
        stoker_runs = []
        for w in (1, 2):
            for prefetch in (2, 4):
                stoker_runs += run_json([bench, *common, "--workers", str(w), "--prefetch", str(prefetch),
                                         "--epochs", "1" if cap else "3", *capped])
                print(f"  {name}: stoker workers={w} prefetch={prefetch}: "
                      f"{best(stoker_runs[-3:])['samples_per_s']:.0f} samples/s", file=sys.stderr, flush=True)
        results.append((name, best(torch_runs), best(stoker_runs), cap))

    print()
    print(f"memcpy, one core: {ceil['memcpy_gb_per_s']:.2f} GB/s; raw LMDB read ceiling (mdb_get + memcpy, "
          f"{ceil['lmdb_procs']} processes): {ceil['lmdb_samples_per_s']:.0f} samples/s, {ceil['lmdb_mb_per_s']:.0f} MB/s")
    print()
    print(f"{'dataset':<20} {'PyTorch best':>22} {'stoker best':>26} {'stoker/PyTorch':>15} {'stoker MB/s':>12} "
          f"{'of memcpy':>10}")
    for name, t, s, cap in results:
        ratio = s["samples_per_s"] / t["samples_per_s"]
        frac = s["mb_per_s"] / (ceil["memcpy_gb_per_s"] * 1e3)
        tw = f"{t['samples_per_s']:.0f}/s (w={t['workers']})"
        sw = f"{s['samples_per_s']:.0f}/s (w={s['workers']},p={s['prefetch']})"
        print(f"{name:<20} {tw:>22} {sw:>26} {ratio:>14.1f}x {s['mb_per_s']:>12.0f} {frac:>9.0%}"
              + (f"  (first {cap} batches)" if cap else ""))
    print()
    by = {name: (t, s) for name, t, s, _ in results}
    t, s = by["small LMDB"]
    checks = [
        ("small LMDB >= 70% of the LMDB read ceiling", s["samples_per_s"] / ceil["lmdb_samples_per_s"], 0.70, "%"),
        ("small LMDB >= 5x PyTorch", s["samples_per_s"] / t["samples_per_s"], 5, "x"),
        ("small HDF5 chunked >= 20x PyTorch", by["small HDF5 chunked"][1]["samples_per_s"] / by["small HDF5 chunked"][0]["samples_per_s"], 20, "x"),
        ("large LMDB >= 3x PyTorch", by["large LMDB"][1]["samples_per_s"] / by["large LMDB"][0]["samples_per_s"], 3, "x"),
        ("large HDF5 >= 3x PyTorch", by["large HDF5 chunked"][1]["samples_per_s"] / by["large HDF5 chunked"][0]["samples_per_s"], 3, "x"),
    ]
    for label, value, goal, unit in checks:
        shown = f"{value:.0%}" if unit == "%" else f"{value:.1f}x"
        print(f"{'met ' if value >= goal else 'MISS'}  {label}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
