"""Mosaic's StreamingDataset on the samples of bench/remote_compare.py: the local HDF5 shards
written as MDS into s3://bench/mds/ of the same S3-compatible store (S3_ENDPOINT_URL), then one cold
epoch read from there through a PyTorch DataLoader with a cache of its own and the same cache limit.
Run in its own venv (remote_compare.py makes it). Prints one JSON line: samples_per_s, ttfb_s,
seconds, downloaded.

usage: remote_peer.py ENDPOINT LOCAL_SHARDS CACHE_DIR CACHE_LIMIT [--workers W]
"""

import json
import os
import shutil
import sys
import time

import h5py
import numpy as np
from streaming import MDSWriter, StreamingDataset
from torch.utils.data import DataLoader


def main():
    endpoint, local, cache, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 2
    os.environ.setdefault("S3_ENDPOINT_URL", endpoint)
    staging = cache + "-mds"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    columns = {"image": "ndarray:uint8", "label": "int"}
    with MDSWriter(out=(staging, "s3://bench/mds"), columns=columns, keep_local=True) as out:
        for name in sorted(n for n in os.listdir(local) if n.endswith(".h5")):
            with h5py.File(os.path.join(local, name), "r") as f:
                images, labels = f["image"][:], f["label"][:]
            for image, label in zip(images, labels):
                out.write({"image": np.ascontiguousarray(image), "label": int(label)})
    downloaded = sum(os.path.getsize(os.path.join(staging, n)) for n in os.listdir(staging))
    t0 = time.perf_counter()
    dataset = StreamingDataset(
        remote="s3://bench/mds", local=cache, shuffle=True, batch_size=256, cache_limit=max(limit, downloaded)
    )
    first, n = None, 0
    for batch in DataLoader(dataset, batch_size=256, num_workers=workers):
        n += len(batch["label"])
        if first is None:
            first = time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    print(json.dumps({"samples_per_s": n / seconds, "ttfb_s": first, "seconds": seconds, "downloaded": downloaded}))


if __name__ == "__main__":
    main()
