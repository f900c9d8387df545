"""Weighted mixes, Loader(sources=[stoker.Source(...), ...]): the order equals docs/sampler.md's
Python text (bench/stoker_order.py) epoch after epoch, the samples are the sources' own, the
proportions hold over a long run, and a state saved in the middle resumes exactly."""

import pathlib
import sys

import h5py
import numpy as np
import pytest
import stoker
import torch
from conftest import indices_and_labels as epoch_of

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from stoker_order import mix_order  # noqa: E402  (docs/sampler.md, in Python)

WEB, BOOKS = (37, 25), 19  # web: two shards; books: one file


@pytest.fixture(scope="module")
def mix_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("stoker-mix")
    (d / "web").mkdir()
    for k, n in enumerate(WEB):
        with h5py.File(d / "web" / f"web-{k}.h5", "w") as f:
            f["label"] = np.arange(n, dtype=np.int64) + 1000 * (k + 1)
            f["x"] = np.full((n, 2), k, dtype=np.float32)
    with h5py.File(d / "books.h5", "w") as f:
        f["label"] = np.arange(BOOKS, dtype=np.int64) + 3000
        f["x"] = np.full((BOOKS, 2), 7, dtype=np.float32)
    with h5py.File(d / "odd.h5", "w") as f:
        f["label"] = np.arange(5, dtype=np.int32)
        f["x"] = np.zeros((5, 2), dtype=np.float32)
    return d


def label_of(g):
    """The label stored for global index g of the mix (web's two shards, then books)."""
    if g < WEB[0]:
        return 1000 + g
    if g < sum(WEB):
        return 2000 + g - WEB[0]
    return 3000 + g - sum(WEB)


def sources(d, weights):
    return [stoker.Source(d / "web", weight=weights[0]), stoker.Source(str(d / "books.h5"), weight=weights[1])]


@pytest.mark.parametrize("weights,shuffle,workers", [((3, 1.5), True, 2), ((2, 1), False, 0), ((0.7, 0.3), True, 0)])
def test_the_order_is_the_documented_one_epoch_after_epoch(mix_data, weights, shuffle, workers):
    loader = stoker.Loader(
        sources=sources(mix_data, weights),
        samples_per_epoch=100,
        batch_size=16,
        num_workers=workers,
        shuffle=shuffle,
        seed=5,
        framework="numpy",
    )
    assert len(loader) == 7
    for epoch in range(3):
        loader.set_epoch(epoch)
        indices, labels = epoch_of(loader)
        assert indices == mix_order([sum(WEB), BOOKS], list(weights), 5, shuffle, 100, epoch)
        assert labels == [label_of(g) for g in indices]


def test_the_proportions_hold_over_a_long_run(mix_data):
    loader = stoker.Loader(
        sources=sources(mix_data, (0.7, 0.3)), samples_per_epoch=20000, batch_size=500, shuffle=True, framework="numpy"
    )
    indices, _ = epoch_of(loader)
    web = sum(1 for g in indices if g < sum(WEB))
    # Within one draw of the share (the weights are 45875 and 19661 of 65536).
    assert abs(web - 20000 * 45875 / 65536) < 1
    # Every pass of books (19 samples) draws each of its samples once.
    books = [g for g in indices if g >= sum(WEB)]
    for q in range(len(books) // BOOKS):
        assert sorted(books[q * BOOKS : (q + 1) * BOOKS]) == list(range(sum(WEB), sum(WEB) + BOOKS))


def test_a_state_saved_in_the_middle_resumes_exactly(mix_data, tmp_path):
    def make(workers, batch):
        return stoker.Loader(
            sources=sources(mix_data, (3, 1)), samples_per_epoch=90, batch_size=batch, num_workers=workers, shuffle=True
        )

    full, _ = epoch_of(make(0, 10))
    loader = make(2, 10)
    first, _ = epoch_of(loader, stop_after=4)
    sd = loader.state_dict()
    assert sd["consumed"] == 40 and sd["drawn"] == [30, 10]
    torch.save({"loader": sd}, tmp_path / "ckpt.pt")
    resumed = make(1, 7)
    resumed.load_state_dict(torch.load(tmp_path / "ckpt.pt", weights_only=True)["loader"])
    rest, _ = epoch_of(resumed)
    assert first + rest == full
    # The next epoch goes on where this one stopped: books' draws continue its pass.
    assert resumed.state_dict()["drawn"] == [68, 22]


def test_mistakes_are_named(mix_data):
    with pytest.raises(TypeError, match=r"sources\[1\] is a str, not a stoker.Source"):
        stoker.Loader(sources=[stoker.Source(mix_data / "books.h5"), str(mix_data / "books.h5")])
    with pytest.raises(stoker.Error, match="pass source or sources, not both"):
        stoker.Loader(mix_data / "books.h5", sources=[stoker.Source(mix_data / "books.h5")])
    with pytest.raises(stoker.Error, match="samples_per_epoch: applies to a mix"):
        stoker.Loader(mix_data / "books.h5", samples_per_epoch=10)
    with pytest.raises(stoker.Error, match=r"sources\[0\] \('.*books.h5'\) has weight -1"):
        stoker.Loader(sources=[stoker.Source(mix_data / "books.h5", weight=-1)])
    with pytest.raises(stoker.Error, match=r"order is quasi_random, which a mix does not offer.*use order='random'"):
        stoker.Loader(sources=sources(mix_data, (1, 1)), order="quasi_random")
    with pytest.raises(stoker.Error, match=r"odd.h5: shard 3 of 4 has fields label: i32\[\]"):
        stoker.Loader(sources=sources(mix_data, (1, 1)) + [stoker.Source(mix_data / "odd.h5")])
