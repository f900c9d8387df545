"""stoker-pack's shards, re-encoding, skipped files and resume, checked independently.

usage: pack_resume_check.py STOKER_PACK LOADER_BENCH SCRATCH_DIR
Generates images of several sizes (PIL) and a file that is not an image, then checks that
  (1) the bad file stops a pack, naming it, and --resume --on-error skip finishes it with the same
      samples as a pack that skipped it from the start, the skip listed;
  (2) --max-side stores images within the side byte for byte and re-encodes the others as JPEGs of
      the expected size, which the loader's pipeline decodes;
  (3) --shard-size writes a directory of shards within the size that the loader reads as the
      single dataset (the same content_digest, computed here from the files);
  (4) a pack SIGKILLed mid-way (it blocks on a FIFO in its manifest once its records up to the FIFO
      are committed) and resumed equals an uninterrupted one: one LMDB, LMDB shards, HDF5 shards.
"""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import lmdb
import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pack_check import bench_digest, check, content_digest, failures, read_lmdb, read_paths  # noqa: E402

SIZES = [(20, 12), (90, 30), (33, 70), (64, 64), (120, 100), (41, 10), (16, 16), (200, 50)]


def make_images(scratch):
    """Files of several sizes, JPEG and PNG, in two classes; their paths in plan order."""
    rng = np.random.default_rng(7)
    root = os.path.join(scratch, "tree")
    paths = []
    for cls in ("bird", "fish"):
        os.makedirs(os.path.join(root, cls))
        for k, (w, h) in enumerate(SIZES):
            pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            name = os.path.join(root, cls, f"{k:02d}." + ("png" if k % 2 else "jpg"))
            Image.fromarray(pixels).save(name, format="PNG" if k % 2 else "JPEG", quality=90)
            paths.append(name)
    return root, paths


def read_h5(path):
    """Each sample's image and label, and the path recorded for it."""
    with h5py.File(path, "r") as f:
        return [
            {"image": bytes(np.asarray(x, dtype=np.uint8)), "label": int(v), "path": p}
            for x, v, p in zip(f["image"], f["label"][:], f["stoker/paths"].asstr()[:])
        ]


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def check_skip_and_resume(pack, bench, scratch, root, paths):
    bad = os.path.join(root, "fish", "03b.jpg")  # between fish/03 and fish/04
    with open(bad, "wb") as f:
        f.write(b"this is not an image")
    out = os.path.join(scratch, "skip.lmdb")
    r = run([pack, "--folder", root, out, "--commit-every", "1"])
    check(
        r.returncode == 1
        and "03b.jpg" in r.stderr
        and "not a JPEG or PNG image" in r.stderr
        and "--on-error skip" in r.stderr,
        f"a file that is not an image stops the pack, naming it: {r.stderr.strip()}",
    )
    check(not os.path.exists(out) and os.path.exists(out + ".partial"), "the work so far is kept in .partial")
    r = run([pack, "--folder", root, out, "--resume", "--on-error", "skip"])
    check(
        r.returncode == 0 and "resuming" in r.stderr and "at file 13 of 17" in r.stderr,
        f"--resume continues at the bad file: {r.stderr.strip()}",
    )
    check(
        "1 of 17 files skipped" in r.stderr and "03b.jpg: not a JPEG or PNG image" in r.stderr,
        "the skipped file is listed with its reason",
    )
    _, _, resumed = read_lmdb(out)
    whole = os.path.join(scratch, "skip-whole.lmdb")
    r = run([pack, "--folder", root, whole, "--on-error", "skip", "--quiet"])
    _, _, uninterrupted = read_lmdb(whole)
    want = [{"image": open(p, "rb").read(), "label": 0 if "/bird/" in p else 1} for p in paths]
    check(resumed == uninterrupted == want, "stopped and resumed equals skipping from the start: the 16 images")
    sources = [os.path.relpath(p, root) for p in paths]
    check(
        read_paths(out) == read_paths(whole) == sources, "and records the same paths, the skipped file's not among them"
    )
    os.unlink(bad)
    return want


def check_max_side(pack, bench, scratch, root, paths):
    out = os.path.join(scratch, "small.h5")
    r = run([pack, "--folder", root, out, "--max-side", "48", "--quality", "80", "--verify"])
    check(
        r.returncode == 0 and "re-encoded" in r.stderr and "verified" in r.stderr,
        f"--max-side 48 to HDF5 with --verify exits 0 ({r.stderr.strip().splitlines()[-1]})",
    )
    got = read_h5(out)
    ok = len(got) == len(paths)
    for s, p in zip(got, paths):
        src = Image.open(p)
        w, h = src.size
        if max(w, h) <= 48:
            ok = ok and s["image"] == open(p, "rb").read()
        else:
            im = Image.open(io.BytesIO(s["image"]))
            scale = 48 / max(w, h)
            want = (max(1, round(w * scale)), max(1, round(h * scale)))
            ok = ok and im.format == "JPEG" and im.size == want
    check(ok, "images within 48 px are stored byte for byte, larger ones as JPEGs whose longer side is 48")
    r = run(
        [
            bench,
            "--data",
            out,
            "--pipeline",
            "image=decode,resize(24,24)",
            "--workers",
            "2",
            "--batch-size",
            "4",
            "--epochs",
            "1",
        ]
    )
    check(r.returncode == 0, f"the loader decodes every stored image ({r.stderr.strip()[-200:]})")


def check_shards(pack, bench, scratch, root, want):
    out = os.path.join(scratch, "shards")
    limit = 12 * 1024
    r = run([pack, "--folder", root, out, "--shard-size", "12KiB", "--verify"])
    check(r.returncode == 0, f"--shard-size 12KiB exits 0 ({r.stderr.strip()})")
    names = sorted(os.listdir(out))
    check(
        len(names) > 2 and names == [f"shard-{k:05d}.lmdb" for k in range(len(names))],
        f"a directory of numbered shards and nothing else: {names}",
    )
    got, within = [], True
    for n in names:
        _, _, samples = read_lmdb(os.path.join(out, n))
        size = sum(len(s["image"]) + 8 for s in samples)
        within = within and (size <= limit or len(samples) == 1)
        got += samples
    check(within, "every shard holds at most 12 KiB of samples (or one sample)")
    check(got == want, "the shards hold the images in order")
    check(
        bench_digest(bench, out, 2) == content_digest(want, ["image", "label"]),
        "the loader reads the directory as the one dataset (its content_digest)",
    )


def committed_next_item(partial):
    """The `pack` record's next_item of a single LMDB being written, or -1 (read while it may commit)."""
    try:
        env = lmdb.open(partial, subdir=False, readonly=True, lock=False, max_dbs=2)
        try:
            with env.begin() as txn:
                rec = txn.get(b"pack", db=env.open_db(b"stoker", txn=txn, create=False))
            return json.loads(rec)["next_item"] if rec else -1
        finally:
            env.close()
    except Exception:  # noqa: BLE001 - mid-commit or not yet created: ask again
        return -1


def finished_shards(partial):
    try:
        with open(os.path.join(partial, "pack.json")) as f:
            return len(json.load(f)["shards"])
    except (OSError, ValueError):
        return 0


def check_kill_and_resume(pack, scratch, paths, extra, label, ready, reader):
    """Packs a manifest whose 12th file is a FIFO (the pack blocks opening it), kills the pack once
    `ready(partial)` holds, puts the real file there and resumes; compares with an uninterrupted pack."""
    work = os.path.join(scratch, "kill-" + label)
    os.makedirs(work)
    manifest = os.path.join(work, "m.csv")
    files = []
    for i, p in enumerate(paths):
        files.append(os.path.join(work, f"{i:02d}" + os.path.splitext(p)[1]))
        shutil.copyfile(p, files[-1])
    with open(manifest, "w") as f:
        f.write("path,label\n")
        for i, p in enumerate(files):
            f.write(f"{os.path.basename(p)},{i % 3}\n")
    whole = os.path.join(work, "whole")
    r = run([pack, "--manifest", manifest, "--label", "label", whole, "--quiet"] + extra)
    check(r.returncode == 0, f"{label}: the uninterrupted pack exits 0 ({r.stderr.strip()})")
    fifo_at = 11
    real = files[fifo_at] + ".real"
    os.rename(files[fifo_at], real)
    os.mkfifo(files[fifo_at])
    out = os.path.join(work, "out")
    proc = subprocess.Popen(
        [pack, "--manifest", manifest, "--label", "label", out, "--quiet", "--jobs", "1"] + extra,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60  # a guard against a hang, not a measurement
        while not ready(out + ".partial") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        reached = ready(out + ".partial")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    check(reached, f"{label}: the pack committed the files before the FIFO and blocked there")
    os.unlink(files[fifo_at])
    os.rename(real, files[fifo_at])
    r = run([pack, "--manifest", manifest, "--label", "label", out, "--resume"] + extra)
    check(
        r.returncode == 0 and "resuming" in r.stderr, f"{label}: --resume finishes the killed pack ({r.stderr.strip()})"
    )
    check(os.path.exists(out) and not os.path.exists(out + ".partial"), f"{label}: the output is in place")
    check(
        reader(out) == reader(whole),
        f"{label}: killed and resumed equals uninterrupted, sample for sample (and shard for shard)",
    )


def shard_reader(read):
    """Each shard's name and samples: equal sets have the same samples cut at the same places."""

    def read_all(d):
        return [(n, read(os.path.join(d, n))) for n in sorted(os.listdir(d))]

    return read_all


def main():
    pack, bench, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    root, paths = make_images(scratch)
    want = check_skip_and_resume(pack, bench, scratch, root, paths)
    check_max_side(pack, bench, scratch, root, paths)
    check_shards(pack, bench, scratch, root, want)

    def lmdb_samples(p):
        """The samples and the paths recorded for them (committed with them)."""
        return read_lmdb(p)[2], read_paths(p)

    check_kill_and_resume(
        pack,
        scratch,
        paths,
        ["--commit-every", "1"],
        "one LMDB",
        lambda partial: committed_next_item(partial) == 11,
        lmdb_samples,
    )
    check_kill_and_resume(
        pack,
        scratch,
        paths,
        ["--commit-every", "1", "--shard-size", "40KiB"],
        "LMDB shards",
        lambda partial: (
            finished_shards(partial) >= 1
            and committed_next_item(os.path.join(partial, f"shard-{finished_shards(partial):05d}.lmdb.partial")) == 11
        ),
        shard_reader(lmdb_samples),
    )
    check_kill_and_resume(
        pack,
        scratch,
        paths,
        ["--shard-size", "40KiB", "--format", "hdf5"],
        "HDF5 shards",
        lambda partial: finished_shards(partial) >= 1,
        shard_reader(read_h5),
    )

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
