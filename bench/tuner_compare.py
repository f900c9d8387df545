"""The automatic tuner (--workers auto --prefetch auto) against the hand-picked grid.

    .venv/bin/python bench/tuner_compare.py BUILD_DIR DATA_DIR [--runs 5] [--pairs 25] [--epochs 40]

DATA_DIR gets the standard datasets (loader-bench --make-data) when they are missing. On 3 KB
records (small.lmdb, batch 256) and 150 KB records (large.lmdb, batch 32), shuffled, `--epochs`
each run. A run's pace is its samples over its seconds, every epoch: the tuner's steps (in the
first) and the workers' first passes, slower, are counted.

An epoch here lasts 25 to 80 ms, and on a shared 2-core machine runs of one configuration vary by
15% and more, so one comparison of medians says little: 16 epochs and 5 runs of each missed the goal
by chance as often as not. Hence two phases. First the grid, workers {1, 2} x prefetch {2, 4}, each
`--runs` times in rotating turns: its best configuration is the one with the best median. Then
`--pairs` pairs of runs, the tuner's and that configuration's, back to back, by turns first: the
median of the pairs' ratios is the goal (>= 0.95), as load that drifts over minutes cancels out
within a pair. A pair's ratio still varies (where the tuner chose the same configuration, the
quartiles lay 3 to 10% from the median), and the median of 15 moved by up to 6% from one run of this
script to the next: hence 25. Reported too: the ratio of the two medians, the pairs' quartiles, the tuner's choices,
and the batches it took to settle (as it says, "auto: settled after N batches"; goal <= 200).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def run(bench, data, batch, epochs, workers, prefetch):
    out = subprocess.run(
        [bench, "--data", data, "--batch-size", str(batch), "--workers", str(workers), "--prefetch", str(prefetch),
         "--shuffle", "--epochs", str(epochs), "--json"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    pace = sum(r["samples"] for r in rows) / sum(r["seconds"] for r in rows)
    found = re.search(r"settled after (\d+) batches", rows[-1].get("auto_tuning", ""))
    settled_at = int(found.group(1)) if found else None
    return pace, rows[-1].get("auto_tuning", ""), settled_at


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build")
    p.add_argument("data")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--pairs", type=int, default=25)
    p.add_argument("--epochs", type=int, default=40)
    a = p.parse_args()
    if a.runs < 1 or a.pairs < 2:
        p.error("--runs must be at least 1, --pairs at least 2")
    bench = os.path.join(a.build, "tools", "loader-bench")
    if not os.path.exists(os.path.join(a.data, "large.lmdb")):
        subprocess.run([bench, "--make-data", a.data], check=True, stdout=subprocess.DEVNULL)
    missed = False
    for name, batch in (("small.lmdb", 256), ("large.lmdb", 32)):
        data = os.path.join(a.data, name)
        configs = [(w, f) for w in (1, 2) for f in (2, 4)]
        grid = {c: [] for c in configs}
        for turn in range(a.runs):
            # Each turn starts one configuration later: none always runs first.
            for c in configs[turn % len(configs) :] + configs[: turn % len(configs)]:
                grid[c].append(run(bench, data, batch, a.epochs, *c)[0])
        best = max(grid, key=lambda c: statistics.median(grid[c]))
        tuned, paired = [], []
        for k in range(a.pairs):
            if k % 2:
                tuned.append(run(bench, data, batch, a.epochs, "auto", "auto"))
                paired.append(run(bench, data, batch, a.epochs, *best)[0])
            else:
                paired.append(run(bench, data, batch, a.epochs, *best)[0])
                tuned.append(run(bench, data, batch, a.epochs, "auto", "auto"))
        paces = [t[0] for t in tuned]
        settles = [t[2] for t in tuned]
        chosen = sorted({t[1].split(" (")[0] for t in tuned})
        print(f"{name} batch {batch}: the tuner chose {' or '.join(chosen)}")
        after = ", ".join(str(s) if s else "never" for s in settles)
        print(f"    settled after {after} batches in its {a.pairs} runs (goal <= 200)")
        missed |= any(s is None or s > 200 for s in settles)
        for (w, f), v in sorted(grid.items()):
            print(f"    workers {w} prefetch {f}: median {statistics.median(v):,.0f}, best {max(v):,.0f} samples/s")
        ratios = [t / g for t, g in zip(paces, paired)]
        quartiles = statistics.quantiles(ratios, n=4)
        median = statistics.median(ratios)
        missed |= median < 0.95
        print(f"    the tuner against workers {best[0]} prefetch {best[1]}, {a.pairs} pairs of runs: median ratio "
              f"{median:.2f}x (goal >= 0.95), quartiles {quartiles[0]:.2f}x and {quartiles[2]:.2f}x; medians "
              f"{statistics.median(paces):,.0f} against {statistics.median(paired):,.0f} samples/s "
              f"({statistics.median(paces) / statistics.median(paired):.2f}x)")  # fmt: skip
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
