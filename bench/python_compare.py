"""stoker's Python Loader against loader-bench (the same C++ loader, no Python) and PyTorch's
DataLoader, with one consumer loop for the two Python sides.

usage: .venv/bin/python bench/python_compare.py BUILD_DIR DATA_DIR [--quick]

BUILD_DIR holds tools/loader-bench and python/stoker (the ordinary build); DATA_DIR gets the
standard datasets (loader-bench --make-data) when they are missing. Rules, as bench/compare.py's:
  - every side runs the same (workers, prefetch) grid; the best of each side is compared;
  - shuffled epochs: one to start (no start-up, a warm page cache on every side), then the measured
    ones, together: enough for a third of a second or more per run (an epoch of the 150 KB records
    takes ~30 ms here, of the small ones ~60 ms: a run of one or two swung by 10 % between runs);
  - PyTorch both as its documentation shows (per-sample, files opened lazily in each worker) and in
    the batched style of bench/pytorch_dataloader.py;
  - the consumer loop is the same for stoker and PyTorch: count the samples and the bytes of every
    tensor of the batch, then drop it;
  - each file is read once before its row (a warm page cache for every side, whichever runs first),
    and the grid runs three times, the order of the sides reversed each time: each side's best of
    three alternating runs (two left a 5 % swing between runs of the whole benchmark here).
Two more rows:
  - the JPEG pipeline (decode, random_resized_crop(224), flip, to_chw on photographs in a py-lmdb
    database, batch 64): stoker's Python Loader, loader-bench, and PyTorch's DataLoader with
    torchvision's transforms (PIL where no torchvision wheel matches the installed torch;
    bench/pytorch_images.py);
  - the seeds' case: batch 512 of 3x224x224 uint8 images in a 64 MiB /dev/shm (Docker's default,
    made with a private mount namespace where this user may make one): PyTorch's DataLoader's
    outcome beside stoker's samples/s.
Goals (printed, exit 1 when missed): the Python Loader >= 95% of loader-bench's samples/s on small
LMDB records at batch 256, >= 98% on 150 KB records and on the JPEG pipeline.
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
MIB = 1024 * 1024


def consume(iterable, max_batches):
    """The training loop that does nothing: samples, bytes and seconds of one pass."""
    samples = nbytes = batches = 0
    t0 = time.perf_counter()
    for batch in iterable:
        batches += 1
        samples += next(iter(batch.values())).shape[0]
        nbytes += sum(t.numel() * t.element_size() for t in batch.values())
        if max_batches and batches >= max_batches:
            break
    return samples, nbytes, time.perf_counter() - t0


def measured_epochs(make_iterable, max_batches, epochs, set_epoch=None):
    """samples/s and MiB/s over `epochs` epochs after a first one that is not measured."""
    samples = nbytes = seconds = 0
    for epoch in range(1 + epochs):
        if set_epoch:
            set_epoch(epoch)
        n, b, s = consume(make_iterable(), max_batches)
        if epoch:
            samples, nbytes, seconds = samples + n, nbytes + b, seconds + s
    return samples / seconds, nbytes / seconds / MIB


JPEG_PIPELINE = "data=decode,random_resized_crop(224),flip,to_chw"


def run_stoker(path, batch, workers, prefetch, epochs, pipeline=None):
    import stoker

    loader = stoker.Loader(
        path, batch_size=batch, num_workers=workers, prefetch_factor=prefetch, shuffle=True, seed=1, pipeline=pipeline
    )
    try:
        return measured_epochs(lambda: loader, 0, epochs, loader.set_epoch)
    finally:
        loader.close()


def run_bench(bench, path, batch, workers, prefetch, epochs, pipeline=None):
    cmd = [
        bench,
        "--data",
        path,
        "--batch-size",
        str(batch),
        "--workers",
        str(workers),
        "--prefetch",
        str(prefetch),
        "--shuffle",
        "--seed",
        "1",
        "--epochs",
        str(1 + epochs),
        "--json",
    ]
    if pipeline:
        cmd += ["--pipeline", pipeline]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")][1:]
    seconds = sum(r["seconds"] for r in rows)
    return sum(r["samples"] for r in rows) / seconds, sum(r["mib_per_s"] * r["seconds"] for r in rows) / seconds


def run_torch(path, fmt, style, batch, workers, prefetch, cap):
    import pytorch_dataloader as pt
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    torch.manual_seed(1)
    extra = {"prefetch_factor": prefetch, "persistent_workers": True} if workers else {}
    if style == "per-sample":
        ds = pt.H5Dataset(path) if fmt == "hdf5" else pt.LmdbDataset(path)
        loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, **extra)
    else:
        ds = pt.H5BatchDataset(path) if fmt == "hdf5" else pt.LmdbBatchDataset(path)
        loader = DataLoader(
            ds,
            batch_size=None,
            sampler=BatchSampler(RandomSampler(ds), batch, drop_last=False),
            num_workers=workers,
            **extra,
        )
    try:
        return measured_epochs(lambda: loader, cap, 1)
    finally:
        loader = None  # its workers end before the next row starts


def run_torch_images(path, batch, workers, prefetch):
    """PyTorch's DataLoader with the ImageNet training transforms (bench/pytorch_images.py)."""
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "pytorch_images.py"),
            "--data",
            path,
            "--workers",
            str(workers),
            "--prefetch",
            str(prefetch),
            "--batch-size",
            str(batch),
            "--epochs",
            "2",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    e = json.loads(out.splitlines()[1])
    return e["samples_per_s"], 0.0


# Run in a private mount namespace whose /dev/shm is a 64 MiB tmpfs: one batch of 512 images of
# 3x224x224 uint8 is 73.5 MiB, more than /dev/shm holds.
SEEDS_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
import numpy as np, torch
import stoker
from torch.utils.data import DataLoader, Dataset
path = sys.argv[1]
out = {}
loader = stoker.Loader(path, batch_size=512, num_workers=2, shuffle=True, seed=1)
t0 = time.perf_counter(); n = 0
for b in loader:
    n += b["image"].shape[0]
out["stoker_samples_per_s"] = n / (time.perf_counter() - t0)
out["stoker_backing"] = loader.stats()["shm_backing"]
loader.close()
class Images(Dataset):
    def __init__(self):
        self.f = None
    def __len__(self):
        return 2048
    def __getitem__(self, i):
        if self.f is None:
            import h5py
            self.f = h5py.File(path, "r")
        return torch.from_numpy(self.f["image"][i])
try:
    t0 = time.perf_counter(); n = 0
    for b in DataLoader(Images(), batch_size=512, shuffle=True, num_workers=2):
        n += b.shape[0]
    out["torch"] = f"ran: {n / (time.perf_counter() - t0):.0f} samples/s"
except Exception as e:
    lines = [l for l in str(e).splitlines() if l.strip()]  # a worker's error ends with its own reason
    out["torch"] = f"failed: {type(e).__name__}: {(lines or [''])[-1].strip()[:200]}"
print(json.dumps(out))
"""


def seeds_case(build, data):
    """stoker and PyTorch's DataLoader in Docker's 64 MiB /dev/shm, or why it could not be made."""
    import h5py
    import numpy as np

    path = os.path.join(data, "seeds-224.h5")
    if not os.path.exists(path):
        rng = np.random.default_rng(1)
        with h5py.File(path + ".partial", "w") as f:
            d = f.create_dataset("image", (2048, 3, 224, 224), dtype="u1")
            for i in range(0, 2048, 256):
                d[i : i + 256] = rng.integers(0, 255, (256, 3, 224, 224), dtype=np.uint8)
        os.rename(path + ".partial", path)
    script = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" "$@"'
    cmd = [
        "unshare",
        "-rm",
        "sh",
        "-c",
        script,
        sys.executable,
        "-c",
        SEEDS_SCRIPT,
        path,
        os.path.join(build, "python"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return None, (r.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def warm(path):
    """Reads every file of the dataset once, into the page cache."""
    files = [os.path.join(path, f) for f in os.listdir(path)] if os.path.isdir(path) else [path]
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def main():
    build, data = sys.argv[1], sys.argv[2]
    quick = "--quick" in sys.argv
    sys.path.insert(0, os.path.join(build, "python"))
    bench = os.path.join(build, "tools", "loader-bench")
    if not os.path.exists(os.path.join(data, "large.lmdb")):
        subprocess.run([bench, "--make-data", data], check=True)
    grid = [(1, 2), (2, 2), (2, 4)] if quick else [(0, 2), (1, 2), (1, 4), (2, 2), (2, 4)]
    from image_compare import make_db

    photos = os.path.join(data, "photos.lmdb")
    make_db(photos, 3000)  # 47 batches an epoch: fewer make a row of start-up and noise
    # name, file, format, batch size, stoker's measured epochs (whole ones), PyTorch's batches (one
    # epoch, or this many of it: it is slower by far; 0: the whole epoch). --quick runs a smaller
    # grid, and one JPEG epoch (0.6 s) rather than two.
    datasets = [
        ("small LMDB", "small.lmdb", "lmdb", 256, 6, 0),
        ("small HDF5", "small.h5", "hdf5", 256, 4, 50),
        ("large LMDB (150 KB)", "large.lmdb", "lmdb", 32, 12, 0),
        ("JPEG pipeline", "photos.lmdb", "jpeg", 64, 2 if not quick else 1, 0),
    ]
    rows = []
    for name, file, fmt, batch, epochs, torch_cap in datasets:
        path = os.path.join(data, file)
        warm(path)
        best = {}
        for workers, prefetch, reverse in [(w, p, r) for r in (False, True, False) for w, p in grid]:
            config = f"w={workers},p={prefetch}"
            if fmt == "jpeg":
                if workers == 0:
                    continue
                tries = {
                    "stoker (Python)": lambda: run_stoker(path, batch, workers, prefetch, epochs, JPEG_PIPELINE),
                    "loader-bench": lambda: run_bench(bench, path, batch, workers, prefetch, epochs, JPEG_PIPELINE),
                    "PyTorch per-sample": lambda: run_torch_images(path, batch, workers, prefetch),
                }
            else:
                tries = {
                    "stoker (Python)": lambda: run_stoker(path, batch, workers, prefetch, epochs),
                    "loader-bench": lambda: run_bench(bench, path, batch, workers, prefetch, epochs),
                    "PyTorch per-sample": lambda: run_torch(path, fmt, "per-sample", batch, workers, prefetch, 20),
                    "PyTorch batched": lambda: run_torch(path, fmt, "batched", batch, workers, prefetch, torch_cap),
                }
            for side, run in reversed(list(tries.items())) if reverse else tries.items():
                sps, mibs = run()
                print(f"  {name}: {side} {config}: {sps:.0f} samples/s", file=sys.stderr, flush=True)
                if side not in best or sps > best[side][0]:
                    best[side] = (sps, mibs, config)
        rows.append((name, best))

    print(
        f"\n{'dataset':<20} {'stoker (Python)':>24} {'loader-bench':>24} {'Python/C++':>11} "
        f"{'PyTorch best':>24} {'stoker/PyTorch':>15}"
    )
    ratios = {}
    for name, best in rows:
        s, b = best["stoker (Python)"], best["loader-bench"]
        t = max((best[k] for k in ("PyTorch per-sample", "PyTorch batched") if k in best), key=lambda r: r[0])
        ratios[name] = s[0] / b[0]
        print(
            f"{name:<20} {s[0]:>14.0f}/s ({s[2]}) {b[0]:>14.0f}/s ({b[2]}) {s[0] / b[0]:>10.0%} "
            f"{t[0]:>14.0f}/s ({t[2]}) {s[0] / t[0]:>14.1f}x"
        )
    seeds, why = seeds_case(build, data)
    print()
    if seeds is None:
        print(f"seeds' case (batch 512 of 3x224x224 in a 64 MiB /dev/shm): not run here ({why})")
    else:
        print(
            f"seeds' case (batch 512 of 3x224x224 in a 64 MiB /dev/shm): stoker {seeds['stoker_samples_per_s']:.0f} "
            f"samples/s (ring in {seeds['stoker_backing']}); PyTorch's DataLoader {seeds['torch']}"
        )
    goals = [("small LMDB", 0.95), ("large LMDB (150 KB)", 0.98), ("JPEG pipeline", 0.98)]
    missed = 0
    print()
    for name, goal in goals:
        met = ratios[name] >= goal
        missed += not met
        print(
            f"{'met ' if met else 'MISSED'} {name}: Python Loader {ratios[name]:.0%} of loader-bench (goal {goal:.0%})"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
