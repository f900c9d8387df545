"""The automatic tuner (--workers auto --prefetch auto) against the hand-picked grid.

    .venv/bin/python bench/tuner_compare.py BUILD_DIR DATA_DIR [--runs 5]

DATA_DIR gets the standard datasets (loader-bench --make-data) when they are missing. On 3 KB
records (small.lmdb, batch 256) and 150 KB records (large.lmdb, batch 32), shuffled, 16 epochs each
run: the grid workers {1, 2} x prefetch {2, 4} and the tuner, each `--runs` times, in turns. A run's
pace is the mean of its last 12 epochs (an epoch here lasts 15 to 40 ms: fewer are noise). Reported:
the tuner's median run against the median run of the grid's best configuration (goal >= 0.95; the
best runs too, for contrast: a maximum over four configurations' runs against one's is biased
towards the grid by the noise alone), what it chose, and the batches it took to settle (as the
tuner says, "auto: settled after N batches"; goal <= 200).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def run(bench, data, batch, workers, prefetch):
    out = subprocess.run(
        [bench, "--data", data, "--batch-size", str(batch), "--workers", str(workers), "--prefetch", str(prefetch),
         "--shuffle", "--epochs", "16", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    pace = sum(r["samples_per_s"] for r in rows[-12:]) / 12
    found = re.search(r"settled after (\d+) batches", rows[-1].get("auto_tuning", ""))
    settled_at = int(found.group(1)) if found else None
    return pace, rows[-1].get("auto_tuning", ""), settled_at


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build")
    p.add_argument("data")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    bench = os.path.join(a.build, "tools", "loader-bench")
    if not os.path.exists(os.path.join(a.data, "large.lmdb")):
        subprocess.run([bench, "--make-data", a.data], check=True, stdout=subprocess.DEVNULL)
    missed = False
    for name, batch in (("small.lmdb", 256), ("large.lmdb", 32)):
        data = os.path.join(a.data, name)
        grid = {(w, f): [] for w in (1, 2) for f in (2, 4)}
        tuned = []
        for _ in range(a.runs):
            for w, f in grid:
                grid[(w, f)].append(run(bench, data, batch, w, f)[0])
            tuned.append(run(bench, data, batch, "auto", "auto"))
        paces = [t[0] for t in tuned]
        settles = [t[2] for t in tuned]
        print(f"{name} batch {batch}: the tuner chose {tuned[-1][1]}")
        after = ", ".join(str(s) if s else "never" for s in settles)
        print(f"    settled after {after} batches in its {a.runs} runs (goal <= 200)")
        missed |= any(s is None or s > 200 for s in settles)
        for label, pick in (("median", statistics.median), ("best", max)):
            best_config = max(grid, key=lambda c: pick(grid[c]))
            ratio = pick(paces) / pick(grid[best_config])
            missed |= label == "median" and ratio < 0.95
            print(f"    {label} run: tuner {pick(paces):,.0f} samples/s = {ratio:.2f}x the grid's best, workers "
                  f"{best_config[0]} prefetch {best_config[1]} at {pick(grid[best_config]):,.0f}"
                  f"{' (goal >= 0.95)' if label == 'median' else ''}")  # fmt: skip
        for (w, f), v in sorted(grid.items()):
            print(f"    workers {w} prefetch {f}: median {statistics.median(v):,.0f}, best {max(v):,.0f} samples/s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
