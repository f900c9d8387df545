"""Transforms the tests hand to stoker.Loader(transform=...): module-level, so that they pickle by
reference and the workers' interpreter imports them from here."""

import os
import random
import time

import numpy as np


def noisy(sample, rng):
    """Changes a field's dtype, keeps one, adds one, drops one; draws from rng."""
    image = sample["image"].astype(np.float32) / 255 + rng.normal(size=sample["image"].shape).astype(np.float32)
    return {"image": image, "label": sample["label"], "weight": np.float32(0.5)}


def globals_drawn(sample, rng):
    """Draws from every global generator a worker seeds."""
    import torch

    return {
        "label": sample["label"],
        "np": np.float64(np.random.rand()),
        "py": random.random(),
        "torch": torch.rand(3),
        "rng": rng.integers(0, 1 << 30, size=2),
    }


def tokens(sample, rng):
    """A ragged field: label % 7 token ids."""
    n = int(sample["label"]) % 7
    return {"tokens": np.arange(n, dtype=np.int32) + int(sample["label"]), "label": sample["label"]}


def boxes(sample, rng):
    """A ragged field of rows: label % 4 boxes of 4 floats."""
    n = int(sample["label"]) % 4
    return {"boxes": np.full((n, 4), float(sample["label"]), dtype=np.float32)}


def pid(sample, rng):
    return {"pid": np.int64(os.getpid()), "label": sample["label"]}


def decoded_mean(sample, rng):
    """After a pipeline: the decoded image's channel means."""
    return {"mean": sample["data"].reshape(-1, 3).mean(axis=0)}


def raises_on_17(sample, rng):
    if int(sample["label"]) == 17 * 3 - 50:
        raise ValueError("sample seventeen is bad")
    return {"label": sample["label"]}


def shape_changes(sample, rng):
    n = 2 if int(sample["label"]) < 100 else 3
    return {"x": np.zeros(n, dtype=np.float32)}


def wrong_type(sample, rng):
    if int(sample["label"]) > 0:
        return [sample["label"]]
    return {"label": sample["label"]}


def returns_str_field(sample, rng):
    return {"label": sample["label"], "name": "a str"}


def exits_on_17(sample, rng):
    if int(sample["label"]) == 17 * 3 - 50:
        os._exit(3)
    return {"label": sample["label"]}


def slow(sample, rng):
    time.sleep(0.01)
    return {"label": sample["label"]}


class Scale:
    """A callable instance: pickles with its state."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, sample, rng):
        return {"x": sample["x"] * self.factor}


def sleeps_long(sample, rng):
    time.sleep(30)
    return {"label": sample["label"]}


def hangs_on_17(sample, rng):
    if int(sample["label"]) == 17 * 3 - 50:
        time.sleep(3600)
    return {"label": sample["label"]}


def token_count(sample, rng):
    """Token ids stored as vlen int32 arrive as a one-dimensional int32 array: cut to 4."""
    ids = sample["tokens"]
    if ids.dtype != np.int32 or ids.ndim != 1:
        raise TypeError(f"tokens arrived as {ids.dtype}{list(ids.shape)}")
    return {"ids": ids[:4], "n": np.int64(len(ids))}


def interrupted(sample, rng):
    raise KeyboardInterrupt


_kept = []


def keeps_its_input(sample, rng):
    _kept.append(sample["label"])
    return {"label": sample["label"]}


def draws_from_random(sample, rng):
    return {"label": sample["label"], "r": random.random()}


def torchvision_augment(sample, rng):
    """torchvision v2 transforms on the decoded image: every draw comes from torch's global
    generator, which the worker seeds per sample."""
    import torch
    from torchvision.transforms import v2

    image = torch.from_numpy(np.array(sample["data"])).permute(2, 0, 1)
    augment = v2.Compose(
        [v2.RandomResizedCrop(12, antialias=True), v2.RandomHorizontalFlip(), v2.ColorJitter(0.4, 0.4, 0.4)]
    )
    return {"image": augment(image)}


def says_hello_on_sample_0(sample, rng):
    """Prints once per call on sample 0 (the label of sample 0 is -50), in stoker's processes only."""
    if os.environ.get("STOKER_TRANSFORM_PROCESS") and int(sample["label"]) == -50:
        print("hello from sample 0")
    return {"label": sample["label"]}


_pool = []


def starts_a_thread(sample, rng):
    """Starts a thread (as a library's pool would) on its first call in a process."""
    import threading

    if not _pool:
        _pool.append(threading.Thread(target=time.sleep, args=(3600,), daemon=True))
        _pool[0].start()
    return {"label": sample["label"]}


def sleeps_in_stokers_processes(sample, rng):
    """Sleeps an hour in the workers' host and workers (where the call on sample 0 learns its fields)."""
    if os.environ.get("STOKER_TRANSFORM_PROCESS"):
        time.sleep(3600)
    return {"label": sample["label"]}
