"""The cost of stoker's transform hook: CPU time per sample of an identity transform against no
transform, with every generator seeded (seed_globals=True, the default) and with rng alone.

    python bench/python_transform_compare.py [--samples 20000] [--workers 1]

Workers' CPU time comes from Loader.stats() (the workers' CPU seconds), so the number is what the
hook costs the workers, whatever the trainer does. Goals: <= 10 us per sample seeded, <= 5 us with
rng alone."""
import argparse
import os
import sys
import tempfile

import h5py
import numpy as np
import stoker


def identity(sample, rng):
    return sample


def worker_cpu_per_sample(path, n, workers, **kwargs):
    loader = stoker.Loader(path, batch_size=256, num_workers=workers, framework="numpy", **kwargs)
    best = None
    for epoch in range(3):  # the best of three epochs: the least disturbed by the machine's other work
        before = loader.stats()["worker_cpu_seconds"]
        loader.set_epoch(epoch)
        for _ in loader:
            pass
        spent = loader.stats()["worker_cpu_seconds"] - before
        best = spent if best is None else min(best, spent)
    loader.close()
    return best / n


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=20000)
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "light.h5")
        with h5py.File(path, "w") as f:
            f["x"] = np.random.default_rng(0).integers(0, 256, size=(a.samples, 3072), dtype=np.uint8)
            f["label"] = np.arange(a.samples, dtype=np.int64)
        base = worker_cpu_per_sample(path, a.samples, a.workers)
        seeded = worker_cpu_per_sample(path, a.samples, a.workers, transform=identity)
        rng_only = worker_cpu_per_sample(path, a.samples, a.workers, transform=identity, seed_globals=False)
    print(f"worker CPU per sample: none {base * 1e6:.2f} us, identity seeded {seeded * 1e6:.2f} us, "
          f"identity rng only {rng_only * 1e6:.2f} us")
    print(f"hook cost: seeded {(seeded - base) * 1e6:.2f} us (goal <= 10), rng only {(rng_only - base) * 1e6:.2f} us "
          "(goal <= 5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
