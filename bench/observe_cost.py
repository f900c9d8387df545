"""What measuring where the time goes costs (docs/observability.md), measured in one run.

The workers time each pipeline operation with one clock read per operation and sample, and the read
and writes with two per batch. This script measures the clock read (stoker-micro-bench's
BM_SteadyClockRead), runs loader-bench on two datasets, and states the reads' cost as a share of the
workers' time per sample:
  - photographs (JPEG crops, bench/photos.py) through decode, random_resized_crop(224), flip, to_chw;
  - 3 KB records with no pipeline (only the per-batch reads).
Goal: at most 1 % on both.

    PYTHONPATH=build/python .venv/bin/python bench/observe_cost.py [--build build] [--samples 2000]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def clock_read_ns(build):
    out = subprocess.run(
        [
            os.path.join(build, "bench", "stoker-micro-bench"),
            "--benchmark_filter=SteadyClockRead",
            "--benchmark_format=json",
            "--benchmark_repetitions=5",
            "--benchmark_report_aggregates_only=true",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    runs = json.loads(out)["benchmarks"]
    return min(r["cpu_time"] for r in runs if r.get("aggregate_name") == "median")


def bench(build, data, pipeline, batch):
    argv = [os.path.join(build, "tools", "loader-bench"), "--data", data, "--json", "--epochs", "2"]
    argv += ["--batch-size", str(batch), "--workers", "2"]
    if pipeline:
        argv += ["--pipeline", pipeline]
    lines = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.splitlines()
    run = json.loads(lines[-1])  # the second epoch, its stages summed over both
    run["stages"] = {t["name"]: t["seconds"] for t in run["stages"]}
    return run


def report(name, run, reads_per_sample, clock_ns):
    samples = 2 * run["samples"]
    worker_ns = 1e9 * sum(run["stages"].values()) / samples
    cost_ns = reads_per_sample * clock_ns
    share = cost_ns / worker_ns
    stages = ", ".join(f"{k} {v:.3f}s" for k, v in run["stages"].items() if v > 0)
    print(f"{name}: {run['samples_per_s']:.0f} samples/s; workers' time per sample {worker_ns / 1e3:.2f} us ({stages})")
    print(
        f"  clock reads per sample {reads_per_sample:g} x {clock_ns:.1f} ns = {cost_ns:.0f} ns: "
        f"{100 * share:.3f} % of it (goal <= 1 %)"
    )
    return share <= 0.01


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--samples", type=int, default=2000)
    args = ap.parse_args()
    clock_ns = clock_read_ns(args.build)
    print(f"steady_clock::now(): {clock_ns:.1f} ns a read")
    ok = True
    with tempfile.TemporaryDirectory() as d:
        import photos

        path = os.path.join(d, "photos.h5")
        with h5py.File(path, "w") as f:
            ds = f.create_dataset("jpeg", (args.samples,), dtype=h5py.vlen_dtype(np.uint8))
            for i, jpeg in enumerate(photos.random_crops(args.samples, 1)):
                ds[i] = np.frombuffer(jpeg, np.uint8)
        pipeline = "jpeg=decode,random_resized_crop(224),flip,to_chw"
        run = bench(args.build, path, pipeline, 64)
        operations = len([k for k in run["stages"] if k.startswith("jpeg: ")])
        ok &= report("JPEG pipeline", run, operations + 1 + 4 / 64, clock_ns)

        small = os.path.join(d, "small.h5")
        with h5py.File(small, "w") as f:
            f["x"] = np.random.default_rng(0).integers(0, 256, (10 * args.samples, 3072), dtype=np.uint8)
        ok &= report("3 KB records", bench(args.build, small, None, 256), 4 / 256, clock_ns)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
