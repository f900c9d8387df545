"""Checks stoker's image pipeline against an independent decode (PIL) and across worker counts.

usage: image_check.py LOADER_BENCH SCRATCH_DIR
  1. decode alone is bit-exact with PIL for baseline, progressive, 4:2:0 / 4:2:2 / 4:4:4 and
     greyscale JPEGs of photographs, read from a py-lmdb database and from an HDF5 sample group
     (content_digest of docs/digest.md computed here from PIL's pixels);
  2. decode + random_resized_crop + flip + to_chw gives the same digest with 0, 1 and 2 workers;
  3. decode + center_crop (which decodes only the region) equals PIL's decode, cropped, exactly;
     decode + resize is within 1 of PIL's Image.resize(BILINEAR) (loader-bench --save-batch);
  4. a truncated image is an error naming the field and the sample (exit 1); a bad pipeline is a
     usage error (exit 2);
  5. 4-component JPEGs equal PIL's Image.open(f).convert("RGB") byte for byte: CMYK as Pillow writes
     it (Adobe's inverted CMYK, baseline and progressive), the same without its Adobe marker, and
     YCCK with 4:2:0 chroma (written by TurboJPEG, which Pillow cannot write); whole and as a region
     (center_crop), and the DCT-scaled region of random_resized_crop gives one digest for 0 and 2
     workers;
  6. against torchvision (tests/tools/torchvision_ref.py: torchvision itself when it is installed
     for this torch, else a transcription of its kernels in torch), on photographs of several
     shapes: resize(S) + center_crop, whose sizes equal Resize(S) + CenterCrop's and whose pixels
     are within 1 of them (PIL's bilinear resize), padded with zeros where the crop is larger; and
     color_jitter after flip, whose draws this script makes again from docs/pipeline.md's
     generator: within 1 of ColorJitter.transform with the same permutation and factors, at every
     value.
"""

import ctypes
import io
import json
import os
import struct
import subprocess
import sys

import h5py
import lmdb
import numpy as np
import xxhash
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from photos import encode, photographs  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchvision_ref  # noqa: E402

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


def without_adobe_marker(jpeg):
    """The JPEG with its APP14 "Adobe" segment left out (libjpeg then takes 4 components for CMYK)."""
    out, at = bytearray(jpeg[:2]), 2
    while at + 4 <= len(jpeg) and jpeg[at] == 0xFF and jpeg[at + 1] != 0xDA:
        end = at + 2 + int.from_bytes(jpeg[at + 2 : at + 4], "big")
        if jpeg[at + 1] != 0xEE:
            out += jpeg[at:end]
        at = end
    return bytes(out + jpeg[at:])


def ycck_jpeg(cmyk, quality):
    """A YCCK JPEG (Adobe marker, transform 2) of 4:2:0 chroma: TurboJPEG writes CMYK pixels so."""
    tj = ctypes.CDLL("libturbojpeg.so.0")
    tj.tjInitCompress.restype = ctypes.c_void_p
    tj.tjCompress2.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_ulong),
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
    ]
    tj.tjFree.argtypes = [ctypes.c_void_p]
    tj.tjDestroy.argtypes = [ctypes.c_void_p]
    handle, buf, size = tj.tjInitCompress(), ctypes.c_void_p(), ctypes.c_ulong(0)
    try:
        tjpf_cmyk, tjsamp_420 = 11, 2
        h, w = cmyk.shape[:2]
        if (
            tj.tjCompress2(
                handle,
                cmyk.ctypes.data,
                w,
                0,
                h,
                tjpf_cmyk,
                ctypes.byref(buf),
                ctypes.byref(size),
                tjsamp_420,
                quality,
                0,
            )
            != 0
        ):
            raise SystemExit("tjCompress2 failed")
        return ctypes.string_at(buf, size.value)
    finally:
        if buf:
            tj.tjFree(buf)
        tj.tjDestroy(handle)


def check_cmyk(bench, scratch, photos, rng):
    images = []
    for i in range(16):
        p = photos[i % len(photos)]
        y = int(rng.integers(0, p.shape[0] - H + 1))
        x = int(rng.integers(0, p.shape[1] - W + 1))
        crop = np.ascontiguousarray(p[y : y + H, x : x + W])
        kind = i % 4
        if kind == 3:
            images.append(ycck_jpeg(np.asarray(Image.fromarray(crop).convert("CMYK")), 60 + i))
            continue
        b = encode(crop, 60 + i, progressive=kind == 1, mode="CMYK")
        images.append(without_adobe_marker(b) if kind == 2 else b)
    modes = [(Image.open(io.BytesIO(b)).mode, Image.open(io.BytesIO(b)).info.get("adobe_transform")) for b in images]
    check(
        modes[:4] == [("CMYK", 0), ("CMYK", 0), ("CMYK", None), ("CMYK", 2)],
        f"the CMYK test images are Adobe CMYK, progressive, marker-less CMYK and YCCK: {modes[:4]}",
    )
    pil = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images]
    want = f"{sum(xxhash.xxh64_intdigest(p.tobytes(), seed=i) for i, p in enumerate(pil)) % 2**64:016x}"
    db = os.path.join(scratch, "cmyk.lmdb")
    env = lmdb.open(db, map_size=1 << 26, subdir=True)
    with env.begin(write=True) as t:
        for i, b in enumerate(images):
            t.put(str(i).encode(), b)
    env.close()
    for workers in ("0", "2"):
        got = digest_of(bench, "--data", db, "--pipeline", f"data=decode({H},{W})", "--workers", workers)
        check(
            got == want,
            f"decode of CMYK and YCCK JPEGs equals PIL's convert('RGB'), {workers} workers ({got} vs {want})",
        )
    out = os.path.join(scratch, "saved-cmyk")
    r = run(
        bench,
        "--data",
        db,
        "--pipeline",
        "data=decode,center_crop(40,56)",
        "--batch-size",
        str(len(images)),
        "--epochs",
        "1",
        "--save-batch",
        out,
    )
    if r.returncode != 0:
        raise SystemExit(f"loader-bench --save-batch failed: {r.stderr}")
    crops, idx = np.load(os.path.join(out, "data.npy")), np.load(os.path.join(out, "indices.npy"))
    top, left = round((H - 40) / 2), round((W - 56) / 2)
    bad = [int(i) for k, i in enumerate(idx) if not np.array_equal(crops[k], pil[i][top : top + 40, left : left + 56])]
    check(not bad, f"decode + center_crop of CMYK and YCCK JPEGs (the region only) equals PIL's, cropped {bad}")
    aug = "data=decode,random_resized_crop(24),flip,to_chw"
    digests = {
        w: digest_of(bench, "--data", db, "--pipeline", aug, "--workers", w, "--shuffle", "--seed", "4")
        for w in ("0", "2")
    }
    check(len(set(digests.values())) == 1, f"CMYK through a DCT-scaled crop: one digest for 0 and 2 workers {digests}")


class SampleRandom:
    """docs/pipeline.md's generator of one (sample, field): SplitMix64 from XXH64 of
    (seed, epoch, index, field position)."""

    MASK = (1 << 64) - 1

    def __init__(self, seed, epoch, index, field):
        self.state = xxhash.xxh64_intdigest(struct.pack("<4Q", seed, epoch, index, field), seed=0)

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & self.MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.MASK
        return z ^ (z >> 31)

    def uniform(self, lo=0.0, hi=1.0):
        return lo + (hi - lo) * ((self.next() >> 11) * 2.0**-53)

    def integer(self, lo, hi):
        return lo if hi <= lo else lo + int((hi - lo + 1) * self.uniform())


def jitter_draws(random, b, c, s, h):
    """color_jitter(b, c, s, h)'s draws: the permutation, then each factor whose argument is not 0."""
    order = [0, 1, 2, 3]
    for i in (3, 2, 1):
        j = random.integer(0, i)
        order[i], order[j] = order[j], order[i]
    ranges = [(max(0.0, 1 - b), 1 + b), (max(0.0, 1 - c), 1 + c), (max(0.0, 1 - s), 1 + s), (-h, h)]
    factors = {
        name: None if arg == 0 else random.uniform(lo, hi)  # drawn in this order
        for name, arg, (lo, hi) in zip(torchvision_ref.ADJUST, (b, c, s, h), ranges)
    }
    return order, factors


def check_against_torchvision(bench, scratch, photos):
    """resize(S) + center_crop and color_jitter against torchvision, on photographs of several shapes."""
    shapes = [(96, 128), (128, 96), (75, 200), (200, 75), (50, 60), (61, 61), (120, 91), (64, 250), (300, 320)]
    rng = np.random.default_rng(11)
    images = []
    for i in range(27):
        h, w = shapes[i % len(shapes)]
        p = photos[i % len(photos)]
        y, x = int(rng.integers(0, p.shape[0] - h + 1)), int(rng.integers(0, p.shape[1] - w + 1))
        images.append(encode(np.ascontiguousarray(p[y : y + h, x : x + w]), 70 + i))
    # Every hue and its edges: random colours, greys (no hue), and colours with two channels equal.
    colours = rng.integers(0, 256, (64, 72, 3), dtype=np.uint8)
    colours[16:24] = colours[16:24, :, :1]  # (within the 48 x 48 centre compared)
    colours[24:32, :, 1] = colours[24:32, :, 0]
    colours[32:40, :, 2] = colours[32:40, :, 1]
    colours[40:48, :, 0] = colours[40:48, :, 2]
    for rgb in (colours, np.ascontiguousarray(colours[::-1, :, ::-1])):
        b = io.BytesIO()
        Image.fromarray(rgb).save(b, format="PNG")
        images.append(b.getvalue())
    pil = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images]
    db = os.path.join(scratch, "shapes.lmdb")
    env = lmdb.open(db, map_size=1 << 26, subdir=True)
    with env.begin(write=True) as t:
        for i, b in enumerate(images):
            t.put(str(i).encode(), b)
    env.close()
    source = (
        f"torchvision {torchvision_ref.TORCHVISION}"
        if torchvision_ref.TORCHVISION
        else "torchvision's kernels transcribed (torchvision is not installed for this torch)"
    )
    print(f"     (reference: {source})")

    def saved(pipeline, *args):
        out = os.path.join(scratch, "saved-shapes")
        r = run(
            bench,
            "--data",
            db,
            "--pipeline",
            pipeline,
            "--batch-size",
            str(len(images)),
            "--epochs",
            "1",
            "--save-batch",
            out,
            *args,
        )
        if r.returncode != 0:
            raise SystemExit(f"loader-bench --save-batch {pipeline} failed: {r.stderr}")
        return np.load(os.path.join(out, "data.npy")), np.load(os.path.join(out, "indices.npy"))

    # The validation transform: Resize(S) then CenterCrop; with S below the crop, padded.
    for size, ch, cw in [(64, 56, 56), (48, 56, 64)]:
        got, idx = saved(f"data=decode,resize({size}),center_crop({ch},{cw})")
        worst, pad_ok = 0, True
        for k, i in enumerate(idx):
            want = torchvision_ref.resize_then_center_crop(pil[i], size, ch, cw)
            worst = max(worst, int(np.abs(got[k].astype(int) - want.astype(int)).max()))
            # The padding, where torchvision's crop of an image of ones is 0, holds zeros exactly.
            oh, ow = torchvision_ref.resized_size(*pil[i].shape[:2], size)
            pad = torchvision_ref.center_crop(np.ones((oh, ow, 3), np.uint8), ch, cw) == 0
            pad_ok &= bool(pad.any() == (size < max(ch, cw)) and not got[k][pad].any())
        check(
            worst <= 1 and pad_ok,
            f"resize({size}) + center_crop({ch},{cw}) is within 1 of torchvision's "
            f"Resize({size}) + CenterCrop on 9 shapes (largest difference {worst}), "
            f"its padding zeros: {pad_ok}",
        )
    r = run(bench, "--data", db, "--pipeline", "data=decode,resize(64)")
    check(
        r.returncode == 1 and "'resize(64)' keeps each image's aspect ratio" in r.stderr,
        f"resize(S) last is refused: the batch needs one shape (exit {r.returncode}: {r.stderr.strip()[:160]})",
    )

    # color_jitter after flip: the same draws made here, then torchvision's ColorJitter.transform.
    seed = 5
    for args in [
        (0.4, 0.4, 0.4, 0.1),
        (0.9, 0.9, 0.9, 0.5),
        (0, 0, 0, 0.5),
        (0.8, 0, 0, 0),
        (0, 0.8, 0, 0),
        (0, 0, 0.8, 0),
    ]:
        text = ",".join(str(a) for a in args)
        got, idx = saved(f"data=decode,flip,color_jitter({text}),center_crop(48)", "--seed", str(seed))
        worst, differ, total = 0, 0, 0
        for k, i in enumerate(idx):
            random = SampleRandom(seed, 0, int(i), 0)
            image = pil[i][:, ::-1] if random.uniform() < 0.5 else pil[i]
            order, factors = jitter_draws(random, *args)
            want = torchvision_ref.center_crop(torchvision_ref.color_jitter(image, order, factors), 48, 48)
            d = np.abs(got[k].astype(int) - want.astype(int))
            worst, differ, total = max(worst, int(d.max())), differ + int((d > 0).sum()), total + d.size
        check(
            worst <= 1,
            f"color_jitter({text}) is within 1 of torchvision's ColorJitter with the same draws "
            f"(largest difference {worst}; {differ} of {total} values differ)",
        )
    digests = {
        w: digest_of(
            bench,
            "--data",
            db,
            "--pipeline",
            "data=decode,color_jitter(0.4,0.4,0.4,0.1),resize(64),center_crop(56)",
            "--workers",
            w,
            "--shuffle",
            "--seed",
            "3",
        )
        for w in ("0", "2")
    }
    check(len(set(digests.values())) == 1, f"color_jitter gives one digest for 0 and 2 workers {digests}")


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
        crop = np.ascontiguousarray(p[y : y + H, x : x + W])
        kind = i % 6
        images.append(
            encode(
                crop,
                50 + i,
                subsampling=[2, 1, 0, 2, 2, 0][kind],
                progressive=kind == 3,
                mode="L" if kind == 4 else "RGB",
            )
        )
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
        r = run(
            bench,
            "--data",
            db,
            "--pipeline",
            pipeline,
            "--batch-size",
            str(len(images)),
            "--epochs",
            "1",
            "--save-batch",
            out,
        )
        if r.returncode != 0:
            raise SystemExit(f"loader-bench --save-batch failed: {r.stderr}")
        return np.load(os.path.join(out, "data.npy")), np.load(os.path.join(out, "indices.npy"))

    pil = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images]
    crops, idx = saved("data=decode,center_crop(64,80)")
    top, left = round((H - 64) / 2), round((W - 80) / 2)
    same = all(np.array_equal(crops[k], pil[i][top : top + 64, left : left + 80]) for k, i in enumerate(idx))
    check(same, "decode + center_crop (the region only) equals PIL's decode, cropped")
    resized, idx = saved("data=decode,resize(48,64)")
    worst = max(
        int(
            np.abs(
                resized[k].astype(int)
                - np.asarray(Image.fromarray(pil[i]).resize((64, 48), Image.BILINEAR)).astype(int)
            ).max()
        )
        for k, i in enumerate(idx)
    )
    check(worst <= 1, f"decode + resize is within 1 of PIL's bilinear resize (largest difference {worst})")

    aug = "data=decode,random_resized_crop(64),flip,to_chw"
    digests = {
        w: digest_of(bench, "--data", db, "--pipeline", aug, "--workers", w, "--shuffle", "--seed", "9")
        for w in ("0", "1", "2")
    }
    check(len(set(digests.values())) == 1, f"random augmentation gives one digest for 0, 1, 2 workers: {digests}")

    bad = os.path.join(scratch, "bad.lmdb")
    env = lmdb.open(bad, map_size=1 << 26, subdir=True)
    with env.begin(write=True) as t:
        for i, b in enumerate(images[:12]):
            t.put(str(i).encode(), b[: len(b) // 2] if i == 5 else b)
    env.close()
    r = run(bench, "--data", bad, "--pipeline", "data=decode,center_crop(32)", "--batch-size", "4")
    check(
        r.returncode == 1 and "field 'data', sample 5: corrupt JPEG" in r.stderr,
        f"a truncated JPEG: exit 1 naming field and sample (exit {r.returncode}: {r.stderr.strip()})",
    )
    r = run(bench, "--data", bad, "--pipeline", "data=decode,blur(3)")
    check(
        r.returncode == 2 and "unknown operation 'blur'" in r.stderr,
        f"an unknown operation: exit 2 (exit {r.returncode}: {r.stderr.strip()[:200]})",
    )
    r = run(bench, "--data", bad, "--pipeline", "data=decode")
    check(
        r.returncode == 1 and "whose size differs per sample" in r.stderr,
        f"a pipeline of no fixed size: exit 1 (exit {r.returncode}: {r.stderr.strip()[:200]})",
    )
    check_cmyk(bench, scratch, photos, rng)
    check_against_torchvision(bench, scratch, photos)
    print(f"{len(passes)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
