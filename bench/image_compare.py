"""stoker's image pipeline against PyTorch's DataLoader with the ImageNet training transforms.

Both read the same JPEGs (crops of scikit-image's photographs at assorted sizes and qualities, in a
py-lmdb database) with the same number of workers, shuffled, batch 64, and make uint8 CHW 224x224
tensors: stoker `decode,random_resized_crop(224),flip,to_chw` in its workers; PyTorch PIL decode,
RandomResizedCrop(224), RandomHorizontalFlip, PILToTensor (bench/pytorch_images.py). Each side runs
every configuration of the grid (prefetch 2 and 4) for 2 epochs; the second epoch counts (workers
warm, files in the page cache) and each side's best configuration is compared.

usage: image_compare.py BUILD_DIR DATA_DIR [--samples N] [--workers W]
Exits 1 when stoker is under 2x PyTorch's samples/s.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from photos import random_crops  # noqa: E402


def make_db(path, n):
    import lmdb

    if os.path.exists(os.path.join(path, "data.mdb")):
        env = lmdb.open(path, readonly=True, lock=False)
        ok = env.stat()["entries"] == n
        env.close()
        if ok:
            return
    images = random_crops(n, seed=1)
    env = lmdb.open(path, map_size=4 << 30)
    with env.begin(write=True) as t:
        t.drop(env.open_db(), delete=False)
        for i, b in enumerate(images):
            t.put(str(i).encode(), b)
    env.close()
    total = sum(len(b) for b in images)
    print(f"image_compare: {n} JPEGs, {total / n / 1024:.0f} KiB on average, in {path}", file=sys.stderr)


def stoker(build, db, workers, prefetch):
    out = subprocess.run(
        [
            os.path.join(build, "tools", "loader-bench"),
            "--data",
            db,
            "--pipeline",
            "data=decode,random_resized_crop(224),flip,to_chw",
            "--workers",
            str(workers),
            "--prefetch",
            str(prefetch),
            "--batch-size",
            "64",
            "--shuffle",
            "--epochs",
            "2",
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    e = json.loads(out.splitlines()[1])
    return e["samples_per_s"], (e["worker_cpu_s"] + e["consumer_cpu_s"]) / e["samples"]


def pytorch(db, workers, prefetch):
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "pytorch_images.py"),
            "--data",
            db,
            "--workers",
            str(workers),
            "--prefetch",
            str(prefetch),
            "--batch-size",
            "64",
            "--epochs",
            "2",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    e = json.loads(out.splitlines()[1])
    return e["samples_per_s"], e["cpu_s"] / e["samples"], e["transforms"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build")
    p.add_argument("data")
    p.add_argument("--samples", type=int, default=3000)
    p.add_argument("--workers", type=int, default=min(os.cpu_count() or 2, 8))
    a = p.parse_args()
    db = os.path.join(a.data, "photos.lmdb")
    make_db(db, a.samples)
    rows = []
    for prefetch in (2, 4):
        s_rate, s_cpu = stoker(a.build, db, a.workers, prefetch)
        t_rate, t_cpu, transforms = pytorch(db, a.workers, prefetch)
        rows.append((prefetch, s_rate, s_cpu, t_rate, t_cpu))
        print(
            f"prefetch {prefetch}: stoker {s_rate:8.0f} samples/s {s_cpu * 1e3:6.2f} ms CPU/sample   "
            f"PyTorch ({transforms}) {t_rate:8.0f} samples/s {t_cpu * 1e3:6.2f} ms CPU/sample",
            flush=True,
        )
    best_s = max(rows, key=lambda r: r[1])
    best_t = max(rows, key=lambda r: r[3])
    ratio = best_s[1] / best_t[3]
    print(f"\n{a.samples} JPEGs, {a.workers} workers, batch 64, 224x224 uint8 CHW, shuffled, second epoch")
    print(f"{'':10} {'samples/s':>10} {'CPU ms/sample':>14}  best config")
    print(f"{'stoker':10} {best_s[1]:10.0f} {best_s[2] * 1e3:14.2f}  prefetch {best_s[0]}")
    print(f"{'PyTorch':10} {best_t[3]:10.0f} {best_t[4] * 1e3:14.2f}  prefetch {best_t[0]}")
    print(
        f"{'met ' if ratio >= 2 else 'MISS'}  stoker >= 2x PyTorch's samples/s: {ratio:.2f}x; CPU per sample "
        f"{best_t[4] / best_s[2]:.2f}x less"
    )
    return 0 if ratio >= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
