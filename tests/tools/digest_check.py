"""Checks loader-bench's digests against an independent computation (h5py + xxhash + numpy).

usage: digest_check.py LOADER_BENCH SCRATCH_DIR
Writes an HDF5 file with h5py, then compares loader-bench --digest with docs/digest.md and
docs/sampler.md implemented here from scratch.
"""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import xxhash

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from stoker_order import permutation, quasi_random, quasi_random_shards  # noqa: E402  (docs/sampler.md, in Python)


def main():
    bench, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    path = os.path.join(scratch, "py.h5")
    rng = np.random.default_rng(7)
    n = 500
    arrays = {  # alphabetical: the default field order
        "a_image": rng.integers(0, 256, size=(n, 3, 4, 4), dtype=np.uint8),
        "b_label": rng.integers(-(2**40), 2**40, size=(n,), dtype=np.int64),
        "c_half": rng.standard_normal(size=(n, 5)).astype(np.float16),
        "d_big_endian": rng.integers(-1000, 1000, size=(n, 2)).astype(">i4"),
        "e_bool": rng.integers(0, 2, size=(n, 3)).astype(np.bool_),  # h5py: an enum FALSE/TRUE over int8
        "f_u32": rng.integers(0, 2**32, size=(n,), dtype=np.uint32),
        "g_u64": rng.integers(0, 2**63, size=(n, 2), dtype=np.uint64),
    }
    with h5py.File(path, "w") as f:
        for name, a in arrays.items():
            f.create_dataset(name, data=a, chunks=(32,) + a.shape[1:])

    seed, epoch = 11, 0
    order = permutation(n, seed, epoch)
    total = 0
    for i in range(n):
        b = b"".join(np.ascontiguousarray(a[i]).astype(a.dtype.newbyteorder("<")).tobytes() for a in arrays.values())
        total = (total + xxhash.xxh64_intdigest(b, seed=i)) % 2**64
    want_content = f"{total:016x}"
    want_order = f"{xxhash.xxh64_intdigest(np.asarray(order, dtype='<u8').tobytes(), seed=0):016x}"

    out = subprocess.run(
        [
            bench,
            "--data",
            path,
            "--shuffle",
            "--seed",
            str(seed),
            "--workers",
            "2",
            "--batch-size",
            "64",
            "--epochs",
            "1",
            "--digest",
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    got = json.loads(out.splitlines()[0])
    ok = got["content_digest"] == want_content and got["order_digest"] == want_order
    print(f"content_digest: loader-bench {got['content_digest']}, python {want_content}")
    print(f"order_digest:   loader-bench {got['order_digest']}, python {want_order}")

    # The quasi-random order (docs/sampler.md), from its description: groups of the chunk rows (32).
    quasi = quasi_random(n, 32, seed, 3)
    want_quasi = f"{xxhash.xxh64_intdigest(np.asarray(quasi, dtype='<u8').tobytes(), seed=0):016x}"
    out = subprocess.run(
        [
            bench,
            "--data",
            path,
            "--order",
            "quasi-random",
            "--seed",
            str(seed),
            "--workers",
            "2",
            "--batch-size",
            "64",
            "--epochs",
            "4",
            "--digest",
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    got_quasi = json.loads(out.splitlines()[3])["order_digest"]
    print(f"quasi-random order_digest (epoch 3): loader-bench {got_quasi}, python {want_quasi}")
    ok = ok and got_quasi == want_quasi

    # A shard set (a directory of HDF5 files): the shard-aware quasi-random order, from its
    # description, over shards of unequal sizes (two blocks of interleaved shards).
    sizes = [70, 33, 100, 45, 64, 32, 90, 37, 300, 41]
    shard_dir = os.path.join(scratch, "shards")
    os.makedirs(shard_dir, exist_ok=True)
    for k, size in enumerate(sizes):
        with h5py.File(os.path.join(shard_dir, f"part-{k:02d}.h5"), "w") as f:
            f.create_dataset("x", data=np.arange(size, dtype=np.int64) + sum(sizes[:k]), chunks=(32,))
    quasi = quasi_random_shards(sizes, 32, seed, 1)
    want_shards = f"{xxhash.xxh64_intdigest(np.asarray(quasi, dtype='<u8').tobytes(), seed=0):016x}"
    out = subprocess.run(
        [
            bench,
            "--data",
            shard_dir,
            "--order",
            "quasi-random",
            "--seed",
            str(seed),
            "--workers",
            "2",
            "--batch-size",
            "50",
            "--epochs",
            "2",
            "--digest",
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    got_shards = json.loads(out.splitlines()[1])["order_digest"]
    print(f"quasi-random order_digest of a shard set (epoch 1): loader-bench {got_shards}, python {want_shards}")
    ok = ok and got_shards == want_shards
    print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
