"""What stoker.Loader delivers equals an independent read of the file with h5py or py-lmdb, sample
by sample, in the same order for any number of workers, as torch tensors or numpy arrays."""

import io
import json

import h5py
import lmdb
import numpy as np
import pytest
import stoker
import torch
from conftest import N, read_lmdb_records


def host_copy(v):
    return v.cpu().numpy().copy() if isinstance(v, torch.Tensor) else np.array(v)


def collect(loader):
    """Every batch of one epoch: (dataset indices, {field: numpy copy})."""
    out = []
    it = iter(loader)
    for batch in it:
        out.append((list(it.indices), {k: host_copy(v) for k, v in batch.items()}))
    return out


def same(a, b):
    assert len(a) == len(b)
    for (ia, ba), (ib, bb) in zip(a, b):
        assert ia == ib
        assert list(ba) == list(bb)
        for k in ba:
            np.testing.assert_array_equal(ba[k], bb[k])


def test_fixed_hdf5_equals_h5py_in_field_order(data):
    loader = stoker.Loader(data["fixed"], batch_size=16, fields=["x", "label", "image"], framework="numpy")
    with h5py.File(data["fixed"]) as f:
        want = {k: f[k][()] for k in ("x", "label", "image")}
    batches = collect(loader)
    assert len(batches) == len(loader) == (N + 15) // 16
    for idx, b in batches:
        assert list(b) == ["x", "label", "image"]
        for k in b:
            np.testing.assert_array_equal(b[k], want[k][idx])
    assert [i for idx, _ in batches for i in idx] == list(range(N))


def test_group_and_shuffle_deliver_every_sample_once(data):
    loader = stoker.Loader(data["fixed"], group="train", batch_size=10, shuffle=True, seed=3, framework="numpy")
    with h5py.File(data["fixed"]) as f:
        image, label = f["train/image"][()], f["train/label"][()]
    batches = collect(loader)
    seen = [i for idx, _ in batches for i in idx]
    assert sorted(seen) == list(range(N)) and seen != list(range(N))
    for idx, b in batches:
        np.testing.assert_array_equal(b["image"], image[idx])
        np.testing.assert_array_equal(b["label"], label[idx])


@pytest.mark.parametrize("name,field", [("vlen", "blob"), ("groups", "images")])
def test_bytes_fields_equal_h5py(data, name, field):
    group = "train" if name == "groups" else ""
    loader = stoker.Loader(data[name], group=group, batch_size=7, framework="numpy")
    with h5py.File(data[name]) as f:
        src = f[f"{group}/{field}" if group else field]
        want = [np.asarray(src[i][()] if name == "vlen" else src[str(i)][()]) for i in range(N)]
    it = iter(loader)
    for batch in it:
        offsets = batch[field + ".offsets"]
        assert offsets.dtype == np.int64 and len(offsets) == len(it.indices) + 1
        assert batch[field].dtype == np.uint8 and batch[field].ndim == 1
        for k, sample in zip(it.indices, stoker.split_bytes(batch, field)):
            np.testing.assert_array_equal(sample, want[k])


def test_py_lmdb_database_equals_its_values(data):
    env = lmdb.open(str(data["plain_lmdb"]), readonly=True, lock=False)
    with env.begin() as txn:
        want = [txn.get(str(i).encode()) for i in range(N)]
    env.close()
    loader = stoker.Loader(data["plain_lmdb"], batch_size=32, num_workers=2, shuffle=True, seed=1)
    it = iter(loader)
    seen = []
    for batch in it:
        for k, sample in zip(it.indices, stoker.split_bytes(batch, "data")):
            assert bytes(sample.numpy()) == want[k]
        seen += it.indices
    assert sorted(seen) == list(range(N))


def test_stoker_lmdb_records_equal_py_lmdb(data):
    if "stoker_lmdb" not in data:
        pytest.skip("h5-to-lmdb is not built (STOKER_H5_TO_LMDB)")
    records = read_lmdb_records(data["stoker_lmdb"])
    loader = stoker.Loader(data["stoker_lmdb"], batch_size=25, num_workers=1, shuffle=True, seed=9, framework="numpy")
    it = iter(loader)
    for batch in it:
        for j, k in enumerate(it.indices):
            # Version 1: the fields' bytes back to back in schema order (image, label, x).
            got = b"".join(batch[f][j].tobytes() for f in ("image", "label", "x"))
            assert got == records[k]
    # And the same samples as the HDF5 file it was converted from.
    same(
        collect(stoker.Loader(data["stoker_lmdb"], batch_size=25, framework="numpy")),
        collect(stoker.Loader(data["fixed"], fields=["image", "label", "x"], batch_size=25, framework="numpy")),
    )


def test_stoker_lmdb_with_bytes_fields_equals_the_hdf5_it_came_from(data):
    if "stoker_lmdb_v2" not in data:
        pytest.skip("h5-to-lmdb is not built (STOKER_H5_TO_LMDB)")
    same(
        collect(stoker.Loader(data["stoker_lmdb_v2"], batch_size=9, num_workers=1, framework="numpy")),
        collect(stoker.Loader(data["vlen"], batch_size=9, framework="numpy")),
    )


@pytest.mark.parametrize("name", ["fixed", "vlen", "plain_lmdb"])
def test_same_batches_for_zero_one_and_three_workers(data, name):
    runs = [
        collect(stoker.Loader(data[name], batch_size=12, num_workers=w, shuffle=True, seed=5, framework="numpy"))
        for w in (0, 1, 3)
    ]
    same(runs[0], runs[1])
    same(runs[0], runs[2])


def test_numpy_equals_torch(data):
    a = stoker.Loader(data["fixed"], batch_size=20, num_workers=1, framework="numpy")
    t = stoker.Loader(data["fixed"], batch_size=20, num_workers=1, framework="torch")
    for bn, bt in zip(a, t):
        assert list(bn) == list(bt)
        for k in bn:
            assert isinstance(bn[k], np.ndarray) and isinstance(bt[k], torch.Tensor)
            assert bt[k].dtype == torch.from_numpy(bn[k]).dtype
            np.testing.assert_array_equal(bn[k], bt[k].numpy())


def test_tensors_alias_the_slot_and_copy_owns_its_memory(data):
    for copy in (False, True):
        loader = stoker.Loader(data["fixed"], batch_size=8, copy=copy)
        batch = next(iter(loader))
        ptrs = {batch[k].data_ptr() for k in batch}
        assert len(ptrs) == len(batch)
        t = batch["image"]
        assert t.is_contiguous() and t.shape == (8, 3, 8, 8) and t.dtype == torch.uint8
        t += 0  # writable either way: a slot is the batch's alone until it is freed


def test_decode_pipeline_equals_pil(data):
    from PIL import Image

    loader = stoker.Loader(data["jpegs"], pipeline="data=decode(16,20)", batch_size=1, framework="numpy")
    env = lmdb.open(str(data["jpegs"]), readonly=True, lock=False)
    it = iter(loader)
    with env.begin() as txn:
        for batch in it:
            k = it.indices[0]
            want = np.asarray(Image.open(io.BytesIO(txn.get(str(k).encode()))).convert("RGB"))
            np.testing.assert_array_equal(batch["data"][0], want)
    env.close()


def test_sharded_ranks_cover_the_epoch_once(data):
    seen = []
    for rank in range(3):
        loader = stoker.Loader(
            data["fixed"], batch_size=10, shuffle=True, seed=2, shard=(rank, 3), drop_last=True, framework="numpy"
        )
        it = iter(loader)
        for _ in it:
            seen += it.indices
    # drop_last: N // 3 = 67 samples a rank, 6 whole batches of 10; no sample on two ranks.
    assert len(seen) == len(set(seen)) == 3 * 60


def test_stats_and_schema(data):
    loader = stoker.Loader(data["fixed"], batch_size=50, num_workers=2)
    for _ in loader:
        pass
    s = loader.stats()
    assert s["batches"] == 5 and s["samples"] == N and s["workers"] == 2 and s["shm_bytes"] > 0
    assert [f[0] for f in loader.schema] == ["image", "label", "x"]
    assert loader.schema[0] == ("image", "fixed", "u8", (3, 8, 8))
    assert loader.num_samples == N and loader.samples_per_epoch() == N


def test_shard_env_reads_torchrun_s_variables(data, monkeypatch):
    for var in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    env = stoker.Loader(data["fixed"], batch_size=10, shuffle=True, seed=2, shard="env", framework="numpy")
    explicit = stoker.Loader(data["fixed"], batch_size=10, shuffle=True, seed=2, shard=(1, 3), framework="numpy")
    assert len(env) == len(explicit) == 7  # ceil(203 / 3) = 68 samples, padded: 7 batches
    same(collect(env), collect(explicit))


def test_a_list_or_glob_of_shards_reads_as_the_file_they_were_cut_from(data, tmp_path):
    with h5py.File(data["fixed"]) as f:
        whole = {k: f[k][()] for k in ("image", "label", "x")}
    cuts = [0, 40, 41, 100, N]
    paths = []
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        p = tmp_path / f"part-{k:02d}.h5"
        with h5py.File(p, "w") as f:
            for name, v in whole.items():
                f[name] = v[a:b]
        paths.append(p)
    reference = collect(
        stoker.Loader(
            data["fixed"],
            batch_size=16,
            shuffle=True,
            seed=5,
            num_workers=2,
            fields=["image", "label", "x"],
            framework="numpy",
        )
    )
    for source in (paths, str(tmp_path / "part-*.h5"), str(tmp_path)):
        loader = stoker.Loader(
            source,
            batch_size=16,
            shuffle=True,
            seed=5,
            num_workers=2,
            fields=["image", "label", "x"],
            framework="numpy",
        )
        assert loader.num_samples == N
        same(collect(loader), reference)
        assert "4 shards" in loader.state_dict()["shards"]


def test_a_paired_key_lmdb_reads_as_py_lmdb_wrote_it(tmp_path):
    # As the widely copied create_lmdb_dataset.py writes a text-recognition dataset: keys from 1.
    path = str(tmp_path / "text.lmdb")
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, int(rng.integers(5, 60)), dtype=np.uint8).tobytes() for _ in range(41)]
    labels = [f"word {i * 7}" for i in range(41)]
    with lmdb.open(path, subdir=False, map_size=1 << 24) as env, env.begin(write=True) as txn:
        for i, (im, lb) in enumerate(zip(images, labels), start=1):
            txn.put(f"image-{i:09d}".encode(), im)
            txn.put(f"label-{i:09d}".encode(), lb.encode())
            txn.put(f"id-{i:09d}".encode(), str(1000 + i).encode())
        txn.put(b"num-samples", b"41")
    loader = stoker.Loader(
        path,
        batch_size=8,
        num_workers=2,
        shuffle=True,
        framework="numpy",
        lmdb_keys={"image": "image-{:09d}", "label": "label-{:09d}", "id": "id-{:09d}:i64"},
        lmdb_count_key="num-samples",
    )
    assert len(loader) == 6
    seen = {}
    it = iter(loader)
    for batch in it:
        for k, i in enumerate(it.indices):
            seen[i] = (
                stoker.split_bytes(batch, "image")[k].tobytes(),
                stoker.split_bytes(batch, "label")[k].tobytes(),
                int(batch["id"][k]),
            )
    assert seen == {i: (images[i], labels[i].encode(), 1001 + i) for i in range(41)}
    with pytest.raises(stoker.Error, match=r"key b'label-000000042' is there"):
        with lmdb.open(path, subdir=False, map_size=1 << 24) as env, env.begin(write=True) as txn:
            txn.put(b"label-000000042", b"extra")
        stoker.Loader(path, lmdb_keys="image=image-{:09d},label=label-{:09d}")


def test_metadata_is_what_the_file_stores_beside_its_samples(tmp_path):
    path = str(tmp_path / "attrs.h5")
    classes = ["cat", "dog", "emu"]
    with h5py.File(path, "w") as f:
        f["label"] = np.arange(6, dtype=np.int64) % 3
        f.attrs["labels"] = json.dumps({"label": classes})  # as stoker-pack stores its class names
        f.attrs["source"] = "camera 2"
        f.attrs["note"] = np.bytes_(b"fixed-length")
        f.attrs["version"] = 3  # not text: left out
    for workers in (0, 2):
        loader = stoker.Loader(path, batch_size=2, num_workers=workers, framework="numpy")
        assert loader.metadata == {"labels": {"label": classes}, "source": "camera 2", "note": "fixed-length"}
        names = [loader.metadata["labels"]["label"][int(k)] for b in loader for k in b["label"]]
        assert names == ["cat", "dog", "emu"] * 2
    plain = str(tmp_path / "plain.h5")
    with h5py.File(plain, "w") as f:
        f["x"] = np.zeros(4, dtype=np.float32)
    assert stoker.Loader(plain, batch_size=2, num_workers=0).metadata == {}
