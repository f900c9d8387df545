"""The automatic tuner (--workers auto --prefetch auto) against the hand-picked grid.

    .venv/bin/python bench/tuner_compare.py BUILD_DIR DATA_DIR [--runs 3]

DATA_DIR gets the standard datasets (loader-bench --make-data) when they are missing. On 3 KB
records (small.lmdb, batch 256) and 150 KB records (large.lmdb, batch 32), shuffled, 8 epochs each
run: the grid workers {1, 2} x prefetch {2, 4} and the tuner, each `--runs` times, in turns. A run's
pace is the mean of its last 3 epochs; each configuration's is its best run's. Reported: the tuner's
pace against the best of the grid (goal >= 0.95), what it chose, and the batches it took to settle
(counted to the end of the first epoch that ended settled: an upper bound).
"""

import argparse
import json
import os
import subprocess
import sys


def run(bench, data, batch, workers, prefetch):
    out = subprocess.run(
        [bench, "--data", data, "--batch-size", str(batch), "--workers", str(workers), "--prefetch", str(prefetch),
         "--shuffle", "--epochs", "8", "--json"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    pace = sum(r["samples_per_s"] for r in rows[-3:]) / 3
    settled_at = None
    for i, r in enumerate(rows):
        if "settled" in r.get("auto_tuning", ""):
            settled_at = (i + 1) * r["batches"]
            break
    return pace, rows[-1].get("auto_tuning", ""), settled_at


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build")
    p.add_argument("data")
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    bench = os.path.join(a.build, "tools", "loader-bench")
    if not os.path.exists(os.path.join(a.data, "large.lmdb")):
        subprocess.run([bench, "--make-data", a.data], check=True, stdout=subprocess.DEVNULL)
    missed = False
    for name, batch in (("small.lmdb", 256), ("large.lmdb", 32)):
        data = os.path.join(a.data, name)
        grid = {(w, f): 0.0 for w in (1, 2) for f in (2, 4)}
        tuned = []
        for _ in range(a.runs):
            for w, f in grid:
                grid[(w, f)] = max(grid[(w, f)], run(bench, data, batch, w, f)[0])
            tuned.append(run(bench, data, batch, "auto", "auto"))
        best_config, best = max(grid.items(), key=lambda kv: kv[1])
        pace, chose, settled = max(tuned)
        ratio = pace / best
        missed |= ratio < 0.95
        settles = [t[2] for t in tuned]
        print(f"{name} batch {batch}: grid best {best:,.0f} samples/s (workers {best_config[0]}, prefetch "
              f"{best_config[1]}); tuner {pace:,.0f} = {ratio:.2f}x (goal >= 0.95), chose {chose}; settled by batch "
              f"{', '.join(str(s) if s else 'never' for s in settles)} over {a.runs} runs")  # fmt: skip
        for (w, f), v in sorted(grid.items()):
            print(f"    workers {w} prefetch {f}: {v:,.0f} samples/s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
