"""Text and token data as h5py writes it: fixed-length strings (S16), variable-length strings
(string_dtype()) and variable-length integer arrays (vlen int32) arrive as bytes fields, the numbers
with their dtype, readable by a transform."""

import subprocess

import h5py
import numpy as np
import pytest
import stoker
import transforms
from conftest import h5_to_lmdb

N = 37


def words(i):
    return ("sample" + "-x" * (i % 5) + ("é" if i % 3 == 0 else "")).encode() if i % 7 else b""


@pytest.fixture(scope="module")
def text_h5(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.h5"
    with h5py.File(path, "w") as f:
        # numpy's S16 is NUL-padded: a NUL inside a string is the string's own (sample 5)
        f["fixed"] = np.array([words(i)[:16] if i != 5 else b"a\x00b" for i in range(N)], dtype="S16")
        ds = f.create_dataset("vlen_str", (N,), dtype=h5py.string_dtype())
        for i in range(N):
            ds[i] = words(i).decode()
        ds = f.create_dataset("tokens", (N,), dtype=h5py.vlen_dtype(np.int32))
        for i in range(N):
            ds[i] = np.arange(i % 9, dtype=np.int32) * 1000 - i
        ds = f.create_dataset("scores", (N,), dtype=h5py.vlen_dtype(np.dtype(">f8")))
        for i in range(N):
            ds[i] = np.linspace(0, 1, i % 4)
        f["label"] = np.arange(N, dtype=np.int64)
    return path


def check_text_values(loader, text_h5):
    kinds = {name: (kind, dtype) for name, kind, dtype, _ in loader.schema}
    assert kinds["fixed"] == kinds["vlen_str"] == ("bytes", "u8")
    assert kinds["tokens"] == ("bytes", "i32") and kinds["scores"] == ("bytes", "f64")  # their values' dtype
    with h5py.File(text_h5) as f:
        it = iter(loader)
        for batch in it:
            assert batch["tokens"].dtype == np.int32 and batch["scores"].dtype == np.float64
            assert batch["tokens.offsets"][-1] == len(batch["tokens"])  # counting values, not bytes
            for name in ("fixed", "vlen_str", "tokens", "scores"):
                got = stoker.split_bytes(batch, name)
                for k, i in enumerate(it.indices):
                    value = f[name][i]
                    if name == "vlen_str":
                        want = np.frombuffer(value if isinstance(value, bytes) else value.encode(), np.uint8)
                    elif name == "fixed":
                        want = np.frombuffer(value, np.uint8)
                    elif name == "tokens":
                        want = value
                    else:  # stored big-endian (which h5py reads back unswapped): the values written
                        want = np.linspace(0, 1, i % 4)
                    assert got[k].dtype == want.dtype and np.array_equal(got[k], want), f"{name} of sample {i}"


@pytest.mark.parametrize("workers", [0, 2])
def test_strings_and_vlen_numbers_arrive_with_their_values(text_h5, workers):
    check_text_values(stoker.Loader(text_h5, batch_size=5, num_workers=workers, framework="numpy"), text_h5)


def test_vlen_numbers_keep_their_dtype_through_the_lmdb_converter(text_h5, tmp_path):
    if h5_to_lmdb() is None:
        pytest.skip("STOKER_H5_TO_LMDB is not set: the README's test command sets it")
    out = tmp_path / "text.lmdb"
    subprocess.run([h5_to_lmdb(), str(text_h5), str(out), "--quiet"], check=True)
    check_text_values(stoker.Loader(out, batch_size=5, num_workers=1, framework="numpy"), text_h5)


def test_vlen_numbers_arrive_as_torch_tensors_of_their_dtype(text_h5):
    torch = pytest.importorskip("torch")
    batch = next(iter(stoker.Loader(text_h5, batch_size=5, fields=["tokens"], framework="torch")))
    assert batch["tokens"].dtype == torch.int32
    with h5py.File(text_h5) as f:
        want = np.concatenate([f["tokens"][i] for i in range(5)])
    np.testing.assert_array_equal(batch["tokens"].numpy(), want)
    np.testing.assert_array_equal(batch["tokens.offsets"].numpy(), np.cumsum([0] + [i % 9 for i in range(5)]))


def test_a_transform_reads_tokens_as_their_dtype(text_h5):
    loader = stoker.Loader(
        text_h5,
        batch_size=6,
        num_workers=2,
        framework="numpy",
        fields=["tokens", "label"],
        transform=transforms.token_count,
        ragged=["ids"],
    )
    with h5py.File(text_h5) as f:
        it = iter(loader)
        for batch in it:
            offsets = batch["ids.offsets"]
            for k, i in enumerate(it.indices):
                np.testing.assert_array_equal(batch["ids"][offsets[k] : offsets[k + 1]], f["tokens"][i][:4])
                assert batch["n"][k] == len(f["tokens"][i])
