"""PyTorch's DataLoader over the same HDF5 / LMDB files, in two styles:

  per-sample  the way its documentation recommends: the file or environment is opened lazily, once
              per worker process, samples are read one at a time in __getitem__, and batches are
              made by default_collate. h5py is used with its defaults, as users usually do.
  batched     the fast way a careful user writes it: a BatchSampler hands each worker a whole batch
              of indices, read in one pass in sorted order (each HDF5 chunk it touches read once, as
              one slice; one LMDB transaction with the gets in key order) into one array per field,
              then put back in the sampler's order.

usage: pytorch_dataloader.py --data PATH [--format auto|hdf5|lmdb] [--style per-sample|batched]
                             [--batch-size N] [--workers N] [--prefetch N] [--shuffle] [--seed S]
                             [--epochs E] [--max-batches N] [--json]
Prints one line (or JSON object) per epoch: samples, seconds, samples/s, MiB/s.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from stoker_order import quasi_random
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

MIB = 1024 * 1024


def detect(path):
    if os.path.isdir(path):
        return "lmdb"
    with open(path, "rb") as f:
        head = f.read(8)
    return "hdf5" if head == b"\x89HDF\r\n\x1a\n" else "lmdb"


class H5Dataset(Dataset):
    def __init__(self, path):
        import h5py

        self.path = path
        with h5py.File(path, "r") as f:
            self.names = sorted(k for k, v in f.items() if isinstance(v, h5py.Dataset) and v.dtype.kind in "iuf")
            self.n = f[self.names[0]].shape[0]
        self.file = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.file is None:  # opened lazily, in the worker that uses it
            import h5py

            self.file = h5py.File(self.path, "r")
        return {name: torch.from_numpy(np.asarray(self.file[name][i])) for name in self.names}


class LmdbDataset(Dataset):
    def __init__(self, path):
        self.path = path
        env = self._open()
        with env.begin() as txn:
            meta = env.open_db(b"stoker", txn=txn, create=False)
            schema = json.loads(bytes(txn.get(b"schema", db=meta)))
        env.close()
        self.n = schema["num_samples"]
        self.fields = []
        offset = 0
        for f in schema["fields"]:
            dtype = np.dtype(
                {
                    "u8": "u1",
                    "i8": "i1",
                    "u16": "<u2",
                    "i16": "<i2",
                    "i32": "<i4",
                    "i64": "<i8",
                    "f16": "<f2",
                    "f32": "<f4",
                    "f64": "<f8",
                    "bool": "?",
                    "u32": "<u4",
                    "u64": "<u8",
                    "bf16": "<u2",
                }[f["dtype"]]
            )  # numpy has no bfloat16
            count = int(np.prod(f["shape"])) if f["shape"] else 1
            self.fields.append((f["name"], dtype, tuple(f["shape"]), offset, count))
            offset += count * dtype.itemsize
        self.fields.sort()
        self.env = None

    def _open(self):
        import lmdb

        return lmdb.open(
            self.path,
            subdir=os.path.isdir(self.path),
            readonly=True,
            lock=False,
            readahead=False,
            meminit=False,
            max_dbs=2,
        )

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.env is None:  # opened lazily, in the worker that uses it
            self.env = self._open()
            self.db = self.env.open_db(b"samples", create=False)
        with self.env.begin(db=self.db, buffers=True) as txn:
            value = txn.get(int(i).to_bytes(8, "big"))
            out = {}
            for name, dtype, shape, offset, count in self.fields:
                a = np.frombuffer(value, dtype=dtype, count=count, offset=offset).reshape(shape).copy()
                out[name] = torch.from_numpy(a)
            return out


def sorted_order(indices):
    """The indices sorted, and the permutation that puts values read in that order back."""
    idx = np.asarray(indices, dtype=np.int64)
    order = np.argsort(idx, kind="stable")
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return idx[order], inverse


class H5BatchDataset(H5Dataset):
    """Reads each chunk a batch touches once, as one slice from its first to its last wanted row
    (h5py's fancy indexing selects point by point and is no faster than per-sample reads)."""

    def __getitem__(self, indices):
        if self.file is None:
            import h5py

            self.file = h5py.File(self.path, "r")
        keys, inverse = sorted_order(indices)
        out = {}
        for name in self.names:
            dset = self.file[name]
            window = dset.chunks[0] if dset.chunks else 256
            parts = []
            group = keys // window
            starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
            for a, b in zip(starts, np.r_[starts[1:], len(keys)]):
                lo, hi = int(keys[a]), int(keys[b - 1])
                parts.append(dset[lo : hi + 1][keys[a:b] - lo])
            out[name] = torch.from_numpy(np.concatenate(parts)[inverse])
        return out


class LmdbBatchDataset(LmdbDataset):
    def __getitem__(self, indices):
        if self.env is None:
            self.env = self._open()
            self.db = self.env.open_db(b"samples", create=False)
        keys, inverse = sorted_order(indices)
        out = {name: np.empty((len(keys),) + shape, dtype=dtype) for name, dtype, shape, _, _ in self.fields}
        with self.env.begin(db=self.db, buffers=True) as txn:
            for row, i in enumerate(keys):
                value = txn.get(int(i).to_bytes(8, "big"))
                for name, dtype, shape, offset, count in self.fields:
                    out[name][row] = np.frombuffer(value, dtype=dtype, count=count, offset=offset).reshape(shape)
        return {name: torch.from_numpy(a[inverse]) for name, a in out.items()}


class QuasiRandomSampler(torch.utils.data.Sampler):
    def __init__(self, n, group, seed):
        self.n, self.group, self.seed, self.epoch = n, group, seed, 0

    def __len__(self):
        return self.n

    def __iter__(self):
        order = quasi_random(self.n, self.group, self.seed, self.epoch)
        self.epoch += 1
        return iter(order)


def locality_group(path, fmt, ds):
    """Chunk rows of the largest chunked HDF5 dataset, else ~64 KiB of records (as stoker)."""
    if fmt == "hdf5":
        import h5py

        with h5py.File(path, "r") as f:
            sets = [f[n] for n in ds.names]
            chunked = [d for d in sets if d.chunks]
            if chunked:
                return max(chunked, key=lambda d: d.dtype.itemsize * int(np.prod(d.shape[1:]))).chunks[0]
            per_sample = sum(d.dtype.itemsize * int(np.prod(d.shape[1:])) for d in sets)
    else:
        per_sample = sum(count * dtype.itemsize for _, dtype, _, _, count in ds.fields)
    return max(1, 65536 // per_sample)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--format", default="auto", choices=["auto", "hdf5", "lmdb"])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--style", default="per-sample", choices=["per-sample", "batched"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2, help="batches in flight per worker (prefetch_factor)")
    p.add_argument("--shuffle", action="store_true")
    p.add_argument(
        "--order",
        choices=["sequential", "random", "quasi-random"],
        default=None,
        help="quasi-random: stoker's order, for a comparison on the same order (--shuffle: random)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--max-batches", type=int, default=0, help="stop each epoch after N batches (0: all)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    fmt = detect(a.data) if a.format == "auto" else a.format
    torch.manual_seed(a.seed)
    extra = {"prefetch_factor": a.prefetch} if a.workers > 0 else {}
    if a.style == "per-sample":
        ds = H5Dataset(a.data) if fmt == "hdf5" else LmdbDataset(a.data)
        loader = DataLoader(
            ds,
            batch_size=a.batch_size,
            shuffle=a.shuffle,
            num_workers=a.workers,
            persistent_workers=a.workers > 0,
            **extra,
        )
    else:
        ds = H5BatchDataset(a.data) if fmt == "hdf5" else LmdbBatchDataset(a.data)
        if a.order == "quasi-random":
            base = QuasiRandomSampler(len(ds), locality_group(a.data, fmt, ds), a.seed)
        else:
            base = RandomSampler(ds) if a.shuffle or a.order == "random" else SequentialSampler(ds)
        loader = DataLoader(
            ds,
            batch_size=None,
            sampler=BatchSampler(base, a.batch_size, drop_last=False),
            num_workers=a.workers,
            persistent_workers=a.workers > 0,
            **extra,
        )
    for epoch in range(a.epochs):
        samples = nbytes = batches = 0
        t0 = time.perf_counter()
        for batch in loader:
            batches += 1
            samples += next(iter(batch.values())).shape[0]
            nbytes += sum(t.numel() * t.element_size() for t in batch.values())
            if a.max_batches and batches >= a.max_batches:
                break
        seconds = time.perf_counter() - t0
        row = {
            "epoch": epoch,
            "samples": samples,
            "batches": batches,
            "seconds": seconds,
            "samples_per_s": samples / seconds,
            "mib_per_s": nbytes / seconds / MIB,
            "workers": a.workers,
            "prefetch": a.prefetch if a.workers > 0 else None,
            "style": a.style,
        }
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"epoch {epoch}: {samples} samples in {seconds:.3f} s, {row['samples_per_s']:.0f} samples/s, "
                f"{row['mib_per_s']:.1f} MiB/s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
