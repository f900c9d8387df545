"""on_decode_error: a JPEG that does not decode fails its batch by default, naming file, field and
index; with "skip" it arrives as zeros, the epoch keeps every batch, the batch's "skipped" (and the
iterator's ``skipped``) and ``stats()`` name it, and one StokerWarning gives the decoder's reason."""

import io
import pickle
import threading
import warnings

import h5py
import numpy as np
import pytest
import stoker
from PIL import Image

N, BAD = 10, 6


def _jpegs(path, bad):
    rng = np.random.default_rng(11)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("jpeg", (N,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(N):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8)).save(buf, format="JPEG")
            data = np.frombuffer(buf.getvalue(), dtype=np.uint8)
            ds[i] = data[: len(data) // 2] if i in bad else data
        f["label"] = np.arange(N, dtype=np.int64)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("decode-errors")
    return _jpegs(d / "good.h5", ()), _jpegs(d / "bad.h5", (BAD,))


def _loader(path, workers, **kwargs):
    return stoker.Loader(
        path,
        batch_size=4,
        num_workers=workers,
        shuffle=True,
        seed=5,
        framework="numpy",
        pipeline="jpeg=decode,center_crop(16)",
        **kwargs,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_skip_delivers_every_batch_with_zeros_in_place_of_the_bad_sample(files, workers):
    good, bad = files
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = _loader(bad, workers, on_decode_error="skip")
        reference = _loader(good, workers)
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            reference.set_epoch(epoch)
            it, ref = iter(loader), iter(reference)
            batches = 0
            for batch, expected in zip(it, ref):
                batches += 1
                indices = list(it.indices)
                assert indices == list(ref.indices)
                assert np.array_equal(batch["label"], np.array(indices))
                at = [k for k, i in enumerate(indices) if i == BAD]
                assert batch["skipped"].dtype == np.int64
                assert batch["skipped"].tolist() == at
                assert list(it.skipped) == at
                assert list(batch) == ["jpeg", "label", "skipped"]
                for k in range(len(indices)):
                    want = np.zeros_like(expected["jpeg"][k]) if k in at else expected["jpeg"][k]
                    assert np.array_equal(batch["jpeg"][k], want), (epoch, k)
            assert batches == len(loader) == 3
            s = loader.stats()
            assert s["skipped_samples"] == epoch + 1 and s["skipped_indices"] == [BAD]
        loader.close()
        reference.close()
    ours = [str(w.message) for w in caught if issubclass(w.category, stoker.StokerWarning)]
    assert len(ours) == 1, ours
    assert f"{bad}: field 'jpeg', sample {BAD}: corrupt JPEG" in ours[0]
    assert "skipped (on_decode_error='skip'): the field holds zeros" in ours[0]


def test_by_default_the_bad_sample_fails_its_batch_naming_it(files):
    _, bad = files
    loader = stoker.Loader(bad, batch_size=4, num_workers=2, framework="numpy", pipeline="jpeg=decode,center_crop(16)")
    it = iter(loader)
    next(it)
    with pytest.raises(stoker.Error) as e:
        next(it)
    assert e.value.code == "dataset"
    assert f"batch 1 of epoch 0: {bad}: field 'jpeg', sample {BAD}: corrupt JPEG" in str(e.value)
    assert loader.stats()["skipped_samples"] == 0 and loader.stats()["skipped_indices"] == []
    loader.close()


def test_a_batch_carries_its_own_skipped_positions_whichever_thread_takes_it(files):
    """Two threads share one iterator: each batch's mask comes with it, not with the iterator."""
    _, bad = files
    for epoch in range(3):
        loader = _loader(bad, 2, on_decode_error="skip", copy=True)
        loader.set_epoch(epoch)
        it = iter(loader)
        got, errors = [], []

        def take():
            try:
                for batch in it:
                    got.append(batch)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stoker.StokerWarning)
            threads = [threading.Thread(target=take) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        loader.close()
        assert errors == []
        assert sorted(i for b in got for i in b["label"].tolist()) == list(range(N))
        for batch in got:
            labels = batch["label"].tolist()
            assert batch["skipped"].tolist() == [k for k, i in enumerate(labels) if i == BAD]


def test_without_skip_a_batch_has_no_skipped_key(files):
    good, _ = files
    loader = _loader(good, 0)
    assert all("skipped" not in batch for batch in loader)
    loader.close()


def test_a_field_named_skipped_is_refused_with_skip(tmp_path):
    path = tmp_path / "skipped.h5"
    with h5py.File(path, "w") as f:
        f["skipped"] = np.arange(4, dtype=np.int64)
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(path, framework="numpy", on_decode_error="skip")
    assert e.value.code == "dataset"
    assert (
        f"{path}: field 'skipped' has the name under which a batch's skipped samples are delivered with "
        "on_decode_error='skip' (a batch's 'skipped' in Python): leave it out with fields, or rename it in "
        "the dataset"
    ) in str(e.value)
    loader = stoker.Loader(path, framework="numpy")
    assert [b["skipped"].tolist() for b in loader] == [[0], [1], [2], [3]]
    loader.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_warning_that_raises_loses_no_batch(files, workers):
    """python -W error::stoker.StokerWarning: the warning raises from next(), and the next call
    returns the batch it came with."""
    _, bad = files
    loader = _loader(bad, workers, on_decode_error="skip")
    it = iter(loader)
    labels, raised = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error", stoker.StokerWarning)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                break
            except stoker.StokerWarning as w:
                raised.append(str(w))
                continue
            labels.append(batch["label"].tolist())
            if BAD in labels[-1]:
                assert batch["skipped"].tolist() == [labels[-1].index(BAD)]
    assert len(raised) == 1 and f"sample {BAD}: corrupt JPEG" in raised[0]
    assert sorted(i for b in labels for i in b) == list(range(N))
    assert loader.stats()["batches"] == 3 and loader.stats()["skipped_samples"] == 1
    loader.close()


def test_the_policy_is_checked_and_pickled(files):
    good, _ = files
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(good, on_decode_error="ignore")
    assert e.value.code == "invalid_option"
    assert "on_decode_error='ignore' is not one of 'fail', 'skip'" in str(e.value)
    with pytest.raises(TypeError):
        stoker.Loader(good, on_decode_error=True)
    original = _loader(good, 0, on_decode_error="skip")
    loader = pickle.loads(pickle.dumps(original))
    original.close()
    assert loader._config["on_decode_error"] == "skip"
    loader.close()
