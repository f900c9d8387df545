"""How often the consumer wakes per batch (docs/shm-layout.md: a worker wakes it only for the batch
whose turn it is), on small records where the wakes cost most: 3 KB values in an LMDB database, 2
workers, batch 32 and 256, three epochs each.

    .venv/bin/python bench/consumer_wakes.py [--build build] [--samples 60000]

Prints loader-bench's consumer_wakes per batch (Stats::consumer_wakes) and, where `perf` may count
system calls, the consumer's poll() calls per batch (its process alone, not the workers). Goal: at
most 1.1 per batch. Exit 1 when it is missed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import lmdb
import numpy as np


def run(bench, data, batch):
    """(batches, consumer_wakes, poll calls or None, samples/s per epoch) of one loader-bench run."""
    argv = [bench, "--data", data, "--workers", "2", "--batch-size", str(batch), "--epochs", "3", "--json"]
    polls = None
    with tempfile.NamedTemporaryFile(suffix=".perf") as counts:
        perf = shutil.which("perf")
        if perf:
            counted = [perf, "stat", "--no-inherit", "-x,", "-o", counts.name, "-e", "syscalls:sys_enter_poll"]
            done = subprocess.run(counted + argv, capture_output=True, text=True)
            if done.returncode == 0:
                for line in open(counts.name):
                    if "sys_enter_poll" in line and line.split(",")[0].isdigit():
                        polls = int(line.split(",")[0])
        if polls is None:
            done = subprocess.run(argv, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    batches = sum(r["batches"] for r in rows)
    wakes = sum(r["consumer_wakes"] for r in rows) if all("consumer_wakes" in r for r in rows) else None
    return batches, wakes, polls, [round(r["samples_per_s"]) for r in rows]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--samples", type=int, default=60000)
    a = p.parse_args()
    bench = os.path.join(a.build, "tools", "loader-bench")
    missed = False
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "small.lmdb")
        env = lmdb.open(data, map_size=1 << 31)
        rng = np.random.default_rng(0)
        with env.begin(write=True) as txn:
            for i in range(a.samples):
                txn.put(str(i).encode(), rng.integers(0, 256, 3072, dtype=np.uint8).tobytes())
        env.close()
        for batch in (32, 256):
            batches, wakes, polls, per_s = run(bench, data, batch)
            said = (
                [f"{wakes / batches:.2f} wakes per batch"] if wakes is not None else []
            )  # a build without the counter
            said += [f"{polls / batches:.2f} poll() calls per batch"] if polls is not None else []
            print(f"batch {batch:3d}: {', '.join(said)} (goal <= 1.1); samples/s per epoch {per_s}")
            missed |= any(n / batches > 1.1 for n in (wakes, polls) if n is not None)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
