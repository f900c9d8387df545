"""stoker-pack from an ImageFolder tree and from manifests, checked independently.

usage: pack_check.py STOKER_PACK LOADER_BENCH SCRATCH_DIR
Generates a small ImageFolder tree (PIL JPEGs and PNGs) and CSV / JSON Lines manifests, packs
them, then checks (1) every record read back with py-lmdb as docs/lmdb-layout.md describes (and
with h5py from an HDF5 output) equals
the file's bytes and its labels, (2) the stored class names and string mappings, (3) loader-bench
delivers exactly those samples (its content_digest against docs/digest.md computed here), (4)
a bad manifest is an error naming the file and line that leaves no dataset behind (a file that
cannot be read keeps the work so far in OUTPUT.partial, for --resume), (5) each sample's source
path is recorded by its index (LMDB's sub-database `paths`, HDF5's dataset `stoker/paths`), and
(6) --verify=decode refuses a JPEG whose header is sound and whose data is cut short, naming it, or
with --on-error skip leaves out and lists every such file, (7) file names that are not UTF-8 or hold
a newline or a backslash are recorded exactly (LMDB) or as UTF-8 escapes undone exactly (HDF5), and
(8) a label named `stoker` is refused for HDF5 output, whose group of that name is the pack's.
"""

import io
import json
import os
import shutil
import struct
import subprocess
import sys

import h5py
import lmdb
import numpy as np
import xxhash
from PIL import Image

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def image_bytes(rng, fmt):
    pixels = rng.integers(0, 256, size=(int(rng.integers(4, 24)), int(rng.integers(4, 24)), 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def read_lmdb(path):
    """Every sample's fields (docs/lmdb-layout.md, layout 2), the schema and the stored labels."""
    env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=2)
    meta = env.open_db(b"stoker", create=False)
    samples = env.open_db(b"samples", create=False)
    with env.begin() as txn:
        schema = json.loads(txn.get(b"schema", db=meta))
        labels = json.loads(txn.get(b"labels", db=meta))
        fields = schema["fields"]
        out = []
        for key, rec in txn.cursor(db=samples):
            i = struct.unpack(">Q", key)[0]
            assert i == len(out), f"key {i} out of order"
            fixed, pos, sample = [f for f in fields if f.get("kind", "fixed") != "bytes"], 0, {}
            for f in fixed:
                sample[f["name"]] = struct.unpack("<q" if f["dtype"] == "i64" else "<d", rec[pos : pos + 8])[0]
                pos += 8
            nbytes = [f for f in fields if f.get("kind") == "bytes"]
            lengths = struct.unpack(f"<{len(nbytes)}Q", rec[pos : pos + 8 * len(nbytes)])
            pos += 8 * len(nbytes)
            for f, n in zip(nbytes, lengths):
                sample[f["name"]] = bytes(rec[pos : pos + n])
                pos += n
            assert pos == len(rec), f"record {i}: {len(rec)} bytes, the layout accounts for {pos}"
            out.append(sample)
    env.close()
    return schema, labels, out


def read_paths(path, raw=False):
    """The sub-database `paths`: sample i's source under its 8-byte big-endian key (the path's
    bytes, decoded as UTF-8 unless `raw`)."""
    env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=3)
    paths = env.open_db(b"paths", create=False)
    with env.begin() as txn:
        out = []
        for key, value in txn.cursor(db=paths):
            assert struct.unpack(">Q", key)[0] == len(out), "paths out of order"
            out.append(bytes(value) if raw else bytes(value).decode())
    env.close()
    return out


def unescape(entry):
    """An HDF5 `stoker/paths` element back to the path's bytes: one holding a backslash is
    stoker::printable's escape of them (README's stoker-pack section), any other the path itself."""
    if "\\" not in entry:
        return entry.encode()
    out, i = bytearray(), 0
    while i < len(entry):
        if entry[i] != "\\":
            out += entry[i].encode()
            i += 1
            continue
        n = entry[i + 1]
        if n in "\\nrt0":
            out += {"\\": b"\\", "n": b"\n", "r": b"\r", "t": b"\t", "0": b"\0"}[n]
            i += 2
        elif n == "x":
            out.append(int(entry[i + 2 : i + 4], 16))
            i += 4
        else:
            width = 4 if n == "u" else 8
            out += chr(int(entry[i + 2 : i + 2 + width], 16)).encode()
            i += 2 + width
    return bytes(out)


def content_digest(samples, names):
    """docs/digest.md: fields in alphabetical order, a bytes field its bytes, i64 / f64 little-endian."""
    total = 0
    for i, s in enumerate(samples):
        b = b""
        for name in sorted(names):
            v = s[name]
            b += v if isinstance(v, bytes) else struct.pack("<q" if isinstance(v, int) else "<d", v)
        total = (total + xxhash.xxh64_intdigest(b, seed=i)) % 2**64
    return f"{total:016x}"


def bench_digest(bench, path, workers):
    r = subprocess.run(
        [
            bench,
            "--data",
            path,
            "--workers",
            str(workers),
            "--batch-size",
            "5",
            "--epochs",
            "1",
            "--shuffle",
            "--digest",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"loader-bench on {path} failed: {r.stderr}")
    return json.loads(r.stdout.splitlines()[0])["content_digest"]


def main():
    pack, bench, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    rng = np.random.default_rng(5)

    # An ImageFolder tree: 3 classes (made in an unsorted order), JPEGs and PNGs, a nested folder, and
    # a non-image file that is skipped.
    root = os.path.join(scratch, "train")
    files = {}
    for cls, count in (("zebra", 4), ("ant", 3), ("moth", 5)):
        os.makedirs(os.path.join(root, cls, "more"))
        for k in range(count):
            name = os.path.join(root, cls, "more" if k == 0 else "", f"{k:03d}." + ("png" if k % 2 else "jpg"))
            data = image_bytes(rng, "PNG" if k % 2 else "JPEG")
            with open(name, "wb") as f:
                f.write(data)
            files[name] = (cls, data)
        with open(os.path.join(root, cls, "notes.txt"), "w") as f:
            f.write("not an image")
    classes = sorted({c for c, _ in files.values()})
    want = [
        {"image": files[p][1], "label": classes.index(files[p][0])}
        for c in classes
        for p in sorted(q for q in files if files[q][0] == c)
    ]

    out = os.path.join(scratch, "folder.lmdb")
    r = subprocess.run([pack, "--folder", root, out], capture_output=True, text=True)
    check(r.returncode == 0, f"stoker-pack --folder exits 0 ({r.stderr.strip()})")
    schema, labels, got = read_lmdb(out)
    check(schema.get("complete") is True, "the schema says complete")
    check(got == want, f"py-lmdb reads the {len(want)} files byte for byte with labels 0..2 in sorted class order")
    check(labels == {"label": classes}, f"the class names are stored: {labels}")
    sources = [os.path.relpath(p, root) for c in classes for p in sorted(q for q in files if files[q][0] == c)]
    got_paths = read_paths(out)
    check(
        got_paths == sources, f"the sub-database 'paths' holds each sample's file relative to the folder: {got_paths}"
    )
    want_digest = content_digest(want, ["image", "label"])
    for workers in (0, 2):
        check(
            bench_digest(bench, out, workers) == want_digest,
            f"loader-bench with {workers} workers delivers exactly those bytes and labels ({want_digest})",
        )
    check(not os.path.exists(out + ".partial"), "no .partial left")

    # The same tree as HDF5: a variable-length u8 dataset and a label dataset, read back with h5py.
    out = os.path.join(scratch, "folder.h5")
    r = subprocess.run([pack, "--folder", root, out], capture_output=True, text=True)
    check(r.returncode == 0, f"stoker-pack --folder to HDF5 exits 0 ({r.stderr.strip()})")
    with h5py.File(out, "r") as f:
        images = [bytes(np.asarray(x, dtype=np.uint8)) for x in f["image"]]
        got = [{"image": b, "label": int(v)} for b, v in zip(images, f["label"][:])]
        stored = json.loads(f.attrs["labels"])
        check(f["label"].dtype == np.int64, f"the label dataset is i64 ({f['label'].dtype})")
        got_paths = list(f["stoker/paths"].asstr()[:])
        check(got_paths == sources, f"the dataset 'stoker/paths' holds each sample's file: {got_paths}")
    check(got == want, "h5py reads the files byte for byte and their labels")
    check(stored == {"label": classes}, f"the class names are the root attribute 'labels': {stored}")
    check(bench_digest(bench, out, 2) == want_digest, "loader-bench delivers the HDF5 file's samples")
    check(not os.path.exists(out + ".partial"), "no .partial left")

    # A CSV manifest: paths relative to it, an integer, a float and a string label column, and quoted
    # cells (a comma and a doubled quote inside one).
    rows = [(p, i, 0.5 * i - 1, files[p][0]) for i, p in enumerate(sorted(files))]
    csv = os.path.join(root, "labels.csv")
    with open(csv, "w") as f:
        f.write('path,"score",note,weight,species\n')
        for p, i, w, s in rows:
            f.write(f'{os.path.relpath(p, root)},{i},"a, ""quoted"" note",{w},"{s}"\n')
    out = os.path.join(scratch, "csv.lmdb")
    r = subprocess.run(
        [pack, "--manifest", csv, "--label", "score", "--label", "weight", "--label", "species", out],
        capture_output=True,
        text=True,
    )
    check(r.returncode == 0, f"stoker-pack --manifest CSV exits 0 ({r.stderr.strip()})")
    schema, labels, got = read_lmdb(out)
    types = {f["name"]: f.get("dtype", f["kind"]) for f in schema["fields"]}
    check(
        types == {"image": "bytes", "score": "i64", "weight": "f64", "species": "i64"},
        f"integers as i64, numbers as f64, strings as i64: {types}",
    )
    want = [{"image": files[p][1], "score": i, "weight": w, "species": classes.index(s)} for p, i, w, s in rows]
    check(got == want, "py-lmdb reads every row's file and labels")
    check(labels == {"species": classes}, f"the string mapping is stored: {labels}")
    check(
        read_paths(out) == [os.path.relpath(p, root) for p, _, _, _ in rows],
        "a manifest's paths are recorded as it writes them",
    )
    check(
        bench_digest(bench, out, 2) == content_digest(want, want[0].keys()), "loader-bench delivers the CSV's samples"
    )

    # JSON Lines, absolute paths.
    jsonl = os.path.join(scratch, "labels.jsonl")
    with open(jsonl, "w") as f:
        for p, i, _, s in rows:
            f.write(json.dumps({"file": p, "label": s, "id": i}) + "\n")
    out = os.path.join(scratch, "jsonl.lmdb")
    r = subprocess.run(
        [pack, "--manifest", jsonl, "--path-column", "file", "--label", "label,id", out], capture_output=True, text=True
    )
    check(r.returncode == 0, f"stoker-pack --manifest JSONL exits 0 ({r.stderr.strip()})")
    _, labels, got = read_lmdb(out)
    check(
        got == [{"image": files[p][1], "label": classes.index(s), "id": i} for p, i, _, s in rows],
        "JSON Lines rows packed",
    )
    check(labels == {"label": classes}, "its mapping is stored")

    # --verify=decode: two JPEGs whose headers are sound and whose data stops halfway (noise: the
    # scan is most of the file).
    broken = os.path.join(scratch, "broken")
    whole = {}
    for cls in ("a", "b"):
        os.makedirs(os.path.join(broken, cls))
        for k in range(3):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)).save(buf, "JPEG", quality=95)
            data = buf.getvalue()
            whole[f"{cls}/{k}.jpg"] = data
            with open(os.path.join(broken, cls, f"{k}.jpg"), "wb") as f:
                f.write(data[: len(data) // 2] if (cls, k) in (("a", 1), ("b", 2)) else data)
    out = os.path.join(scratch, "broken.lmdb")
    r = subprocess.run([pack, "--folder", broken, "--verify", out], capture_output=True, text=True)
    check(
        r.returncode == 0 and len(read_paths(out)) == 6,
        f"without decoding, a cut JPEG with a sound header is packed ({r.stderr.strip()})",
    )
    r = subprocess.run([pack, "--folder", broken, "--verify=decode", "--force", out], capture_output=True, text=True)
    bad_a = os.path.join(broken, "a", "1.jpg")
    check(
        r.returncode == 1 and f"{bad_a}: corrupt JPEG" in r.stderr and "--on-error skip" in r.stderr,
        f"--verify=decode stops at the first file that does not decode, naming it: {r.stderr.strip()}",
    )
    shutil.rmtree(out + ".partial", ignore_errors=True)
    if os.path.exists(out + ".partial"):
        os.unlink(out + ".partial")
    r = subprocess.run(
        [pack, "--folder", broken, "--verify=decode", "--on-error", "skip", "--force", out],
        capture_output=True,
        text=True,
    )
    bad_b = os.path.join(broken, "b", "2.jpg")
    check(
        r.returncode == 0
        and "2 of 6 files skipped" in r.stderr
        and f"{bad_a}: corrupt JPEG" in r.stderr
        and f"{bad_b}: corrupt JPEG" in r.stderr
        and "decoded and verified" in r.stderr,
        f"with --on-error skip every file that does not decode is listed: {r.stderr.strip()}",
    )
    kept = ["a/0.jpg", "a/2.jpg", "b/0.jpg", "b/1.jpg"]
    _, _, got = read_lmdb(out)
    check(
        read_paths(out) == kept and [s["image"] for s in got] == [whole[k] for k in kept],
        "and left out, the others stored with their paths",
    )
    r = subprocess.run([pack, "--folder", broken, "--verify=all", "--force", out], capture_output=True, text=True)
    check(r.returncode != 0 and "--verify" in r.stderr, f"--verify takes digest or decode: {r.stderr.strip()}")

    # File names are bytes: one that is not UTF-8 (Latin-1), one holding a newline, one a backslash.
    # LMDB records each path's exact bytes; HDF5 (UTF-8 strings) the path itself where it is UTF-8
    # without a backslash, else its escape, undone exactly; h5py's asstr() reads every element.
    odd = os.path.join(scratch, "odd").encode()
    os.makedirs(os.path.join(odd, b"c"))
    odd_files = {}
    for name in (b"caf\xe9.jpg", b"new\nline.jpg", b"back\\slash.png", b"plain.jpg"):
        data = image_bytes(rng, "PNG" if name.endswith(b".png") else "JPEG")
        with open(os.path.join(odd, b"c", name), "wb") as f:
            f.write(data)
        odd_files[b"c/" + name] = data
    out = os.path.join(scratch, "odd.lmdb")
    r = subprocess.run([pack, "--folder", odd, out], capture_output=True)
    check(r.returncode == 0, f"stoker-pack packs files whose names are not UTF-8 ({r.stderr.strip()!r})")
    _, _, got = read_lmdb(out)
    raw = read_paths(out, raw=True)
    check(
        sorted(raw) == sorted(odd_files) and all(odd_files[p] == g["image"] for p, g in zip(raw, got)),
        f"LMDB's 'paths' holds each file name's exact bytes, beside its image: {raw}",
    )
    out = os.path.join(scratch, "odd.h5")
    r = subprocess.run([pack, "--folder", odd, out], capture_output=True)
    check(r.returncode == 0, f"stoker-pack packs them to HDF5 ({r.stderr.strip()!r})")
    with h5py.File(out, "r") as f:
        entries = list(f["stoker/paths"].asstr()[:])
        images = [bytes(np.asarray(x, dtype=np.uint8)) for x in f["image"]]
    check(
        sorted(entries) == sorted(["c/caf\\xe9.jpg", "c/new\nline.jpg", "c/back\\\\slash.png", "c/plain.jpg"]),
        f"HDF5's 'stoker/paths' is UTF-8: a name as it is, or escaped where it is not UTF-8 or holds a "
        f"backslash: {entries}",
    )
    check(
        [unescape(e) for e in entries] == raw and all(odd_files[unescape(e)] == g for e, g in zip(entries, images)),
        "and each escape is undone to the file name's bytes, in the LMDB's order, beside its image",
    )

    # In an HDF5 output the group `stoker` is the pack's: a label of that name is refused before
    # anything is written (in LMDB it is a field like any other).
    reserved = os.path.join(scratch, "reserved.csv")
    with open(reserved, "w") as f:
        f.write("path,stoker\n")
        f.write(f"{rows[0][0]},1\n")
    out = os.path.join(scratch, "reserved.h5")
    r = subprocess.run([pack, "--manifest", reserved, "--label", "stoker", out], capture_output=True, text=True)
    check(
        r.returncode == 1
        and "--label stoker: in an HDF5 output the group 'stoker' holds each sample's source "
        "path (stoker/paths); rename the manifest's column, or write LMDB"
        in r.stderr,
        f"--label stoker is refused for HDF5 output: {r.stderr.strip()}",
    )
    check(not os.path.exists(out) and not os.path.exists(out + ".partial"), "before anything is written")
    out = os.path.join(scratch, "reserved.lmdb")
    r = subprocess.run([pack, "--manifest", reserved, "--label", "stoker", out], capture_output=True, text=True)
    check(
        r.returncode == 0 and read_lmdb(out)[2] == [{"image": files[rows[0][0]][1], "stoker": 1}],
        f"and packed to LMDB ({r.stderr.strip()})",
    )

    # Errors name the file and line, and leave nothing behind.
    bad = os.path.join(scratch, "bad.csv")
    with open(bad, "w") as f:
        f.write("path,label\n")
        f.write(f"{rows[0][0]},1\n")
        f.write(f"{os.path.join(scratch, 'missing.jpg')},2\n")
    out = os.path.join(scratch, "bad.lmdb")
    r = subprocess.run([pack, "--manifest", bad, "--label", "label", out], capture_output=True, text=True)
    check(
        r.returncode == 1 and "bad.csv:3" in r.stderr and "missing.jpg" in r.stderr,
        f"a missing file names the manifest's line and the file: {r.stderr.strip()}",
    )
    check(
        not os.path.exists(out) and "--resume" in r.stderr,
        "and leaves no dataset, its work kept in .partial for --resume",
    )
    shutil.rmtree(out + ".partial", ignore_errors=True)
    if os.path.exists(out + ".partial"):
        os.unlink(out + ".partial")
    with open(bad, "w") as f:
        f.write("path,label\n")
        f.write(f"{rows[0][0]},1,extra\n")
    r = subprocess.run([pack, "--manifest", bad, "--label", "label", out], capture_output=True, text=True)
    check(
        r.returncode == 1 and "bad.csv:2" in r.stderr and "3 columns" in r.stderr,
        f"a row of the wrong width names its line: {r.stderr.strip()}",
    )
    r = subprocess.run([pack, "--manifest", bad, "--label", "nope", out], capture_output=True, text=True)
    check(r.returncode == 1 and "no column 'nope'" in r.stderr, f"an unknown column is named: {r.stderr.strip()}")
    r = subprocess.run([pack, "--folder", root, os.path.join(scratch, "folder.lmdb")], capture_output=True, text=True)
    check(
        r.returncode == 1 and "--force" in r.stderr, f"an existing output is kept without --force: {r.stderr.strip()}"
    )
    r = subprocess.run([pack, "--help"], capture_output=True, text=True)
    check(r.returncode == 0 and "--folder" in r.stdout and "--manifest" in r.stdout, "--help describes both inputs")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
