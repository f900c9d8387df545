"""Checks stoker's image pipeline against an independent decode (PIL) and across worker counts.

usage: image_check.py LOADER_BENCH SCRATCH_DIR
  1. decode alone is bit-exact with PIL for baseline, progressive, 4:2:0 / 4:2:2 / 4:4:4 and
     greyscale JPEGs of photographs, read from a py-lmdb database and from an HDF5 sample group
     (content_digest of docs/digest.md computed here from PIL's pixels);
  2. decode + random_resized_crop + flip + to_chw gives the same digest with 0, 1 and 2 workers;
  3. decode + center_crop (which decodes only the region) equals PIL's decode, cropped, exactly;
     decode + resize is within 1 of PIL's Image.resize(BILINEAR) (loader-bench --save-batch);
  4. a truncated image is an error naming the field and the sample (exit 1); a bad pipeline is a
     usage error (exit 2).
"""
import io
import json
import os
import subprocess
import sys

import h5py
import lmdb
import numpy as np
import xxhash
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from photos import encode, photographs  # noqa: E402

H, W = 96, 128
failures = []
passes = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    (passes if ok else failures).append(what)


def run(bench, *args):
    return subprocess.run([bench, *args], capture_output=True, text=True)


def digest_of(bench, *args):
    r = run(bench, *args, "--digest", "--json", "--epochs", "1", "--batch-size", "8")
    if r.returncode != 0:
        raise SystemExit(f"loader-bench {' '.join(args)} failed: {r.stderr}")
    return json.loads(r.stdout.splitlines()[0])["content_digest"]


def main():
    bench, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    rng = np.random.default_rng(3)
    photos = photographs()
    images = []
    for i in range(36):
        p = photos[i % len(photos)]
        y = int(rng.integers(0, p.shape[0] - H + 1))
        x = int(rng.integers(0, p.shape[1] - W + 1))
        crop = np.ascontiguousarray(p[y:y + H, x:x + W])
        kind = i % 6
        images.append(encode(crop, 50 + i, subsampling=[2, 1, 0, 2, 2, 0][kind], progressive=kind == 3,
                             mode="L" if kind == 4 else "RGB"))
    # docs/digest.md from PIL's decode (converted to RGB as torchvision does).
    total = 0
    for i, b in enumerate(images):
        pixels = np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))
        total = (total + xxhash.xxh64_intdigest(pixels.tobytes(), seed=i)) % 2**64
    want = f"{total:016x}"

    db = os.path.join(scratch, "photos.lmdb")
    env = lmdb.open(db, map_size=1 << 26, subdir=True)
    with env.begin(write=True) as t:
        for i, b in enumerate(images):
            t.put(str(i).encode(), b)
    env.close()
    h5 = os.path.join(scratch, "photos.h5")
    with h5py.File(h5, "w") as f:
        for i, b in enumerate(images):
            f.create_dataset(f"train/images/{i}", data=np.frombuffer(b, np.uint8))
        f.create_dataset("train/labels", data=np.arange(len(images)))

    for workers in ("0", "2"):
        got = digest_of(bench, "--data", db, "--pipeline", f"data=decode({H},{W})", "--workers", workers)
        check(got == want, f"decode of a py-lmdb database equals PIL's pixels, {workers} workers ({got} vs {want})")
    got = digest_of(bench, "--data", h5, "--fields", "train/images", "--pipeline", f"train/images=decode({H},{W})")
    check(got == want, f"decode of an HDF5 sample group equals PIL's pixels ({got} vs {want})")

    def saved(pipeline):
        out = os.path.join(scratch, "saved")
        r = run(bench, "--data", db, "--pipeline", pipeline, "--batch-size", str(len(images)), "--epochs", "1",
                "--save-batch", out)
        if r.returncode != 0:
            raise SystemExit(f"loader-bench --save-batch failed: {r.stderr}")
        return np.load(os.path.join(out, "data.npy")), np.load(os.path.join(out, "indices.npy"))

    pil = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images]
    crops, idx = saved("data=decode,center_crop(64,80)")
    top, left = round((H - 64) / 2), round((W - 80) / 2)
    same = all(np.array_equal(crops[k], pil[i][top:top + 64, left:left + 80]) for k, i in enumerate(idx))
    check(same, "decode + center_crop (the region only) equals PIL's decode, cropped")
    resized, idx = saved("data=decode,resize(48,64)")
    worst = max(int(np.abs(resized[k].astype(int) -
                           np.asarray(Image.fromarray(pil[i]).resize((64, 48), Image.BILINEAR)).astype(int)).max())
                for k, i in enumerate(idx))
    check(worst <= 1, f"decode + resize is within 1 of PIL's bilinear resize (largest difference {worst})")

    aug = "data=decode,random_resized_crop(64),flip,to_chw"
    digests = {w: digest_of(bench, "--data", db, "--pipeline", aug, "--workers", w, "--shuffle", "--seed", "9")
               for w in ("0", "1", "2")}
    check(len(set(digests.values())) == 1, f"random augmentation gives one digest for 0, 1, 2 workers: {digests}")

    bad = os.path.join(scratch, "bad.lmdb")
    env = lmdb.open(bad, map_size=1 << 26, subdir=True)
    with env.begin(write=True) as t:
        for i, b in enumerate(images[:12]):
            t.put(str(i).encode(), b[: len(b) // 2] if i == 5 else b)
    env.close()
    r = run(bench, "--data", bad, "--pipeline", "data=decode,center_crop(32)", "--batch-size", "4")
    check(r.returncode == 1 and "field 'data', sample 5: corrupt JPEG" in r.stderr,
          f"a truncated JPEG: exit 1 naming field and sample (exit {r.returncode}: {r.stderr.strip()})")
    r = run(bench, "--data", bad, "--pipeline", "data=decode,blur(3)")
    check(r.returncode == 2 and "unknown operation 'blur'" in r.stderr,
          f"an unknown operation: exit 2 (exit {r.returncode}: {r.stderr.strip()[:200]})")
    r = run(bench, "--data", bad, "--pipeline", "data=decode")
    check(r.returncode == 1 and "whose size differs per sample" in r.stderr,
          f"a pipeline of no fixed size: exit 1 (exit {r.returncode}: {r.stderr.strip()[:200]})")
    print(f"{len(passes)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
