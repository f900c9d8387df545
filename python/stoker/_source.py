"""stoker.Source: one dataset of a weighted mix (docs/sampler.md, "Mixes")."""

import dataclasses
import os
from typing import Union


@dataclasses.dataclass(frozen=True)
class Source:
    """One dataset of a weighted mix, for ``Loader(sources=[...])``: an HDF5 file, an LMDB
    database, or a shard set (a glob or a directory), drawn ``weight / (the weights' sum)`` of the
    time::

        loader = stoker.Loader(sources=[stoker.Source("web/", weight=3), stoker.Source("books.lmdb")],
                               samples_per_epoch=1_000_000, shuffle=True, batch_size=256)

    Each source is drawn in passes, every one of its samples once per pass in a new shuffle; a
    source that runs out starts its next pass. Every source must have the same fields."""

    path: Union[str, "os.PathLike[str]"]
    weight: float = 1.0
