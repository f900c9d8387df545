"""Names the Loader is given or finds: a NUL in a path or field name, a field named as the offsets
of a bytes field beside it, field names that hold a NUL. Each is refused when the Loader is built,
naming what is wrong, instead of a different file read or two fields merged into one key."""

import json
import shutil

import h5py
import lmdb
import numpy as np
import pytest
import stoker


@pytest.mark.parametrize("workers", [0, 2])
def test_a_nul_in_a_path_or_field_name_is_refused_not_cut(data, workers):
    source = str(data["fixed"])
    # Cut at the NUL, each of these names something that exists.
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(source + "\0.old", num_workers=workers, framework="numpy")
    assert e.value.code == "invalid_option"
    assert f"options: source holds a NUL character at byte {len(source)} ('{source}\\0.old')" in str(e.value)
    with pytest.raises(stoker.Error) as e:
        stoker.Loader([source, source + "\0x"], num_workers=workers, framework="numpy")
    assert "options: source[1] holds a NUL character" in str(e.value)
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(source, fields=["label", "image\0x"], num_workers=workers, framework="numpy")
    assert "options: fields[1] holds a NUL character at byte 5 ('image\\0x')" in str(e.value)
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(source, group="\0train", num_workers=workers, framework="numpy")
    assert "options: group holds a NUL character at byte 0" in str(e.value)
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(source, format="hdf5\0", framework="numpy")
    assert "format='hdf5\\0' is not one of" in str(e.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_field_named_as_the_offsets_of_a_bytes_field_is_refused(tmp_path, workers):
    path = tmp_path / "jpeg.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("jpeg", (6,), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(6):
            ds[i] = np.full(i + 1, i, dtype=np.uint8)
        f["jpeg.offsets"] = np.arange(6, dtype=np.int64) + 100
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(path, batch_size=3, num_workers=workers, framework="numpy")
    assert e.value.code == "dataset"
    assert (
        f"{path}: field 'jpeg.offsets' has the name under which the offsets of bytes field 'jpeg' are delivered"
    ) in str(e.value)
    assert "select one of the two with fields" in str(e.value)
    # Either alone is delivered, under its own name.
    batch = next(
        iter(stoker.Loader(path, batch_size=3, fields=["jpeg.offsets"], num_workers=workers, framework="numpy"))
    )
    assert list(batch) == ["jpeg.offsets"] and list(batch["jpeg.offsets"]) == [100, 101, 102]
    batch = next(iter(stoker.Loader(path, batch_size=3, fields=["jpeg"], num_workers=workers, framework="numpy")))
    assert list(batch) == ["jpeg", "jpeg.offsets"] and list(batch["jpeg.offsets"]) == [0, 1, 3, 6]


def test_field_names_holding_a_nul_are_refused_not_merged(data, tmp_path):
    if "stoker_lmdb" not in data:
        pytest.skip("needs h5-to-lmdb (STOKER_H5_TO_LMDB)")
    path = tmp_path / "renamed.lmdb"
    shutil.copyfile(data["stoker_lmdb"], path)
    env = lmdb.open(str(path), subdir=False, max_dbs=2, lock=False)
    meta = env.open_db(b"stoker")
    with env.begin(write=True, db=meta) as txn:
        schema = json.loads(txn.get(b"schema"))
        for field in schema["fields"]:
            field["name"] = "x\0" + field["name"]  # "x" to whatever stops at the NUL
        txn.put(b"schema", json.dumps(schema).encode())
    env.close()
    for workers in (0, 2):
        with pytest.raises(stoker.Error) as e:
            stoker.Loader(path, num_workers=workers, framework="numpy")
        assert e.value.code == "dataset"
        assert "has a name that holds a NUL character ('x\\0" in str(e.value) and str(path) in str(e.value)
