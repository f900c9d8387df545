"""A module that notes each import of itself (one line per process that imports it) in the file
STOKER_TEST_IMPORTS names: the workers must share the host's import, not make their own."""

import os

import numpy as np

_log = os.environ.get("STOKER_TEST_IMPORTS")
if _log:
    with open(_log, "a") as f:
        f.write(f"{os.getpid()}\n")


def label_and_threads(sample, rng):
    import torch

    return {"label": sample["label"], "threads": np.int64(torch.get_num_threads())}
