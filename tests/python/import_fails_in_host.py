"""A module that imports in the trainer but fails to import where STOKER_TEST_HOST_IMPORT_FAILS
is set (the transform's host, which inherits the variable set after the trainer imported it)."""

import os

if os.environ.get("STOKER_TEST_HOST_IMPORT_FAILS"):
    raise ImportError("this module refuses to import here")


def label(sample, rng):
    return {"label": sample["label"]}
