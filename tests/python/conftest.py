"""Small datasets made once per test session, with h5py and py-lmdb; the tests read them back with
stoker and compare with an independent read of the same files."""

import io
import os
import shutil
import struct
import subprocess

import h5py
import lmdb
import numpy as np
import pytest

N = 203  # not a multiple of any batch size used: every test sees a partial last batch


def h5_to_lmdb():
    """stoker's converter, from the build tree (the test command sets STOKER_H5_TO_LMDB)."""
    path = os.environ.get("STOKER_H5_TO_LMDB")
    return path if path and os.access(path, os.X_OK) else None


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("stoker-data")
    rng = np.random.default_rng(7)
    out = {}

    fixed = d / "fixed.h5"
    with h5py.File(fixed, "w") as f:
        f["image"] = rng.integers(0, 256, size=(N, 3, 8, 8), dtype=np.uint8)
        f["label"] = np.arange(N, dtype=np.int64) * 3 - 50
        f["x"] = rng.standard_normal((N, 4)).astype(np.float32)
        g = f.create_group("train")
        g["image"] = rng.integers(0, 256, size=(N, 2, 5), dtype=np.uint8)
        g["label"] = np.arange(N, dtype=np.int64)
    out["fixed"] = fixed

    big = d / "big.h5"  # a field of 20 KB per sample: a batch of 4 holds more than stoker copies
    with h5py.File(big, "w") as f:
        f["image"] = np.broadcast_to(np.arange(N, dtype=np.uint8)[:, None], (N, 20000))
        f["label"] = np.arange(N, dtype=np.int64) * 3 - 50
    out["big"] = big

    vlen = d / "vlen.h5"
    with h5py.File(vlen, "w") as f:
        ds = f.create_dataset("blob", (N,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(N):
            ds[i] = rng.integers(0, 256, size=int(rng.integers(0, 40)), dtype=np.uint8)
        f["label"] = np.arange(N, dtype=np.int64)
    out["vlen"] = vlen

    groups = d / "groups.h5"
    with h5py.File(groups, "w") as f:
        g = f.create_group("train/images")
        for i in range(N):
            g[str(i)] = rng.integers(0, 256, size=1 + i % 17, dtype=np.uint8)
        f["train/labels"] = np.arange(N, dtype=np.int64) + 1000
    out["groups"] = groups

    plain = d / "plain.lmdb"
    env = lmdb.open(str(plain), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(N):
            txn.put(str(i).encode(), rng.integers(0, 256, size=i % 23, dtype=np.uint8).tobytes())
    env.close()
    out["plain_lmdb"] = plain

    # JPEGs in a py-lmdb database, for the decode pipeline against PIL.
    from PIL import Image

    jpegs = d / "jpegs.lmdb"
    env = lmdb.open(str(jpegs), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(24):
            img = rng.integers(0, 256, size=(16, 20, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=90)
            txn.put(str(i).encode(), buf.getvalue())
    env.close()
    out["jpegs"] = jpegs

    conv = h5_to_lmdb()
    if conv:
        stoker_lmdb = d / "fixed.lmdb"
        subprocess.run([conv, str(fixed), str(stoker_lmdb), "--fields", "image,label,x", "--quiet"], check=True)
        out["stoker_lmdb"] = stoker_lmdb
        stoker_lmdb2 = d / "vlen.lmdb"
        subprocess.run([conv, str(vlen), str(stoker_lmdb2), "--quiet"], check=True)
        out["stoker_lmdb_v2"] = stoker_lmdb2
    yield out
    shutil.rmtree(d, ignore_errors=True)


def read_lmdb_records(path):
    """The records of a stoker-layout database by sample index (docs/lmdb-layout.md)."""
    env = lmdb.open(str(path), subdir=os.path.isdir(path), readonly=True, lock=False, max_dbs=2)
    db = env.open_db(b"samples", create=False)
    records = {}
    with env.begin(db=db) as txn:
        for k, v in txn.cursor():
            records[struct.unpack(">Q", k)[0]] = bytes(v)
    env.close()
    return records


def indices_and_labels(loader, stop_after=None):
    """One pass of `loader` (its first `stop_after` batches): the dataset indices and the "label"
    field's values of its samples, in order."""
    indices, labels = [], []
    it = iter(loader)
    for k, batch in enumerate(it):
        indices += it.indices
        labels += [int(v) for v in batch["label"]]
        if stop_after is not None and k + 1 == stop_after:
            break
    return indices, labels
