"""The straightforward conversion users write today: h5py + py-lmdb, sample by sample, into
stoker's LMDB layout (docs/lmdb-layout.md). The baseline h5-to-lmdb is measured against.

usage: h5py_lmdb_convert.py INPUT.h5 OUTPUT.lmdb [--commit-every N]
"""

import argparse
import json

import h5py
import lmdb
import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--commit-every", type=int, default=10000)
    a = p.parse_args()
    with h5py.File(a.input, "r") as f:
        names = sorted(k for k, v in f.items() if isinstance(v, h5py.Dataset) and v.dtype.kind in "iuf")
        dsets = [f[n] for n in names]
        n = dsets[0].shape[0]
        record = sum(int(np.prod(d.shape[1:])) * d.dtype.itemsize for d in dsets)
        env = lmdb.open(a.output, subdir=False, map_size=max(1 << 30, n * (record + 64) * 2), max_dbs=2, lock=False)
        samples = env.open_db(b"samples")
        meta = env.open_db(b"stoker")
        txn = env.begin(write=True)
        for i in range(n):
            value = b"".join(np.ascontiguousarray(d[i]).astype(d.dtype.newbyteorder("<")).tobytes() for d in dsets)
            txn.put(i.to_bytes(8, "big"), value, db=samples, append=True)
            if (i + 1) % a.commit_every == 0:
                txn.commit()
                txn = env.begin(write=True)
        fields = [
            {
                "name": nm,
                "kind": "fixed",
                "dtype": {
                    "u1": "u8",
                    "i1": "i8",
                    "u2": "u16",
                    "i2": "i16",
                    "i4": "i32",
                    "i8": "i64",
                    "f2": "f16",
                    "f4": "f32",
                    "f8": "f64",
                }[d.dtype.kind + str(d.dtype.itemsize)],
                "shape": list(d.shape[1:]),
            }
            for nm, d in zip(names, dsets)
        ]
        schema = {"format": "stoker", "version": 1, "num_samples": n, "complete": True, "fields": fields}
        txn.put(b"schema", json.dumps(schema).encode(), db=meta)
        txn.commit()
        env.sync()
        env.close()


if __name__ == "__main__":
    main()
