"""stoker-pack against the obvious Python script on the same ImageFolder tree: files/s and MiB/s.

usage: pack_compare.py STOKER_PACK SCRATCH_DIR [--files N] [--side S]
Writes N JPEGs of about S x S pixels (random colours, 10 classes) under SCRATCH_DIR/tree, then packs
them with stoker-pack and with a one-process py-lmdb script (what users write by hand: walk the
tree, read each file, put it under a decimal key with its label in a second key), best of 3 runs,
the page cache warm for both; then both re-encoding to a longer side of S/2 (stoker-pack --max-side,
and the script with PIL's resize(BILINEAR) and save(JPEG, quality=90)); and the disk's write speed
(the tree's bytes written to one file and fsynced), the ceiling of a copy. Prints one line per row.
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


def python_pack(root, out, max_side=0):
    """The obvious script: one process, py-lmdb, labels from the sorted class folders; with
    max_side, images larger than that resized (PIL, bilinear) and saved as JPEG of quality 90."""
    classes = sorted(os.listdir(root))
    env = lmdb.open(out, map_size=1 << 36, subdir=False, lock=False)
    n = 0
    txn = env.begin(write=True)
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, c))):
            with open(os.path.join(root, c, name), "rb") as f:
                data = f.read()
            if max_side:
                img = Image.open(io.BytesIO(data))
                w, h = img.size
                if max(w, h) > max_side:
                    scale = max_side / max(w, h)
                    img = img.convert("RGB").resize(
                        (max(1, round(w * scale)), max(1, round(h * scale))), Image.BILINEAR
                    )
                    buf = io.BytesIO()
                    img.save(buf, format="JPEG", quality=90)
                    data = buf.getvalue()
            txn.put(f"image-{n:09d}".encode(), data)
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

    def stoker(*extra):
        out = os.path.join(a.scratch, "stoker.lmdb")
        subprocess.run([a.pack, "--folder", root, out, "--force", "--quiet", *extra], check=True)

    def python(max_side=0):
        out = os.path.join(a.scratch, "python.lmdb")
        if os.path.exists(out):
            os.remove(out)
        python_pack(root, out, max_side)

    def disk():
        out = os.path.join(a.scratch, "disk-write")
        chunk = os.urandom(1 << 20)
        with open(out, "wb") as f:
            for _ in range(max(1, total >> 20)):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.remove(out)

    half = max(1, a.side // 2)
    rows = (
        ("copy", "stoker-pack", lambda: stoker()),
        ("copy", "python py-lmdb", python),
        (f"re-encode {half}", "stoker-pack", lambda: stoker("--max-side", str(half))),
        (f"re-encode {half}", "python PIL", lambda: python(half)),
        ("disk write", "write + fsync", disk),
    )
    times = {}
    for case, name, fn in rows:
        s = best_of(fn)
        times[(case, name)] = s
        print(
            f"{case:<14} {name:<16} {a.files:>8} files {total / 2**20:>9.1f} MiB {s:>8.2f} s "
            f"{a.files / s:>10.0f} files/s {total / 2**20 / s:>8.1f} MiB/s"
        )
    copy, script, ceiling = (
        times[("copy", "stoker-pack")],
        times[("copy", "python py-lmdb")],
        times[("disk write", "write + fsync")],
    )
    re_s, re_p = times[(f"re-encode {half}", "stoker-pack")], times[(f"re-encode {half}", "python PIL")]
    print(
        f"copy: stoker-pack {script / copy:.1f}x the script, {ceiling / copy * 100:.0f}% of the disk's write "
        f"speed; re-encode: {re_p / re_s:.1f}x the script ({os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
