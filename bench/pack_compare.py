"""stoker-pack against the obvious Python script on the same ImageFolder tree: files/s and MiB/s.

usage: pack_compare.py STOKER_PACK SCRATCH_DIR [--files N] [--side S]
Writes N JPEGs of about S x S pixels (random colours, 10 classes) under SCRATCH_DIR/tree, then packs
them with stoker-pack and with a one-process py-lmdb script (what users write by hand: walk the
tree, read each file, put it under a decimal key with its label in a second key), best of 3 runs,
the page cache warm for both. Prints one line per tool.
"""
import argparse
import io
import os
import shutil
import subprocess
import time

import lmdb
import numpy as np
from PIL import Image


def make_tree(root, files, side):
    if os.path.isdir(root) and sum(len(f) for _, _, f in os.walk(root)) == files:
        return
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(1)
    for i in range(files):
        d = os.path.join(root, f"class{i % 10:02d}")
        os.makedirs(d, exist_ok=True)
        small = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((side, side), Image.BILINEAR)
        out = io.BytesIO()
        img.save(out, format="JPEG", quality=90)
        with open(os.path.join(d, f"{i:07d}.jpg"), "wb") as f:
            f.write(out.getvalue())


def python_pack(root, out):
    """The obvious script: one process, py-lmdb, labels from the sorted class folders."""
    classes = sorted(os.listdir(root))
    env = lmdb.open(out, map_size=1 << 36, subdir=False, lock=False)
    n = 0
    txn = env.begin(write=True)
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, c))):
            with open(os.path.join(root, c, name), "rb") as f:
                txn.put(f"image-{n:09d}".encode(), f.read())
            txn.put(f"label-{n:09d}".encode(), str(label).encode())
            n += 1
            if n % 1000 == 0:
                txn.commit()
                txn = env.begin(write=True)
    txn.put(b"num-samples", str(n).encode())
    txn.commit()
    env.close()


def best_of(fn, runs=3):
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("pack")
    p.add_argument("scratch")
    p.add_argument("--files", type=int, default=5000)
    p.add_argument("--side", type=int, default=256)
    a = p.parse_args()
    root = os.path.join(a.scratch, "tree")
    make_tree(root, a.files, a.side)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)

    def stoker():
        out = os.path.join(a.scratch, "stoker.lmdb")
        subprocess.run([a.pack, "--folder", root, out, "--force", "--quiet"], check=True)

    def python():
        out = os.path.join(a.scratch, "python.lmdb")
        if os.path.exists(out):
            os.remove(out)
        python_pack(root, out)

    for name, fn in (("stoker-pack", stoker), ("python py-lmdb", python)):
        s = best_of(fn)
        print(f"{name:<16} {a.files:>8} files {total / 2**20:>9.1f} MiB {s:>8.2f} s "
              f"{a.files / s:>10.0f} files/s {total / 2**20 / s:>8.1f} MiB/s")


if __name__ == "__main__":
    main()
