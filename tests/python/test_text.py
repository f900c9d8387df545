"""Text and token data as h5py writes it: fixed-length strings (S16), variable-length strings
(string_dtype()) and variable-length integer arrays (vlen int32) arrive as bytes fields, readable by
a transform."""

import h5py
import numpy as np
import pytest
import stoker
import transforms

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


@pytest.mark.parametrize("workers", [0, 2])
def test_strings_and_vlen_numbers_arrive_with_their_values(text_h5, workers):
    loader = stoker.Loader(text_h5, batch_size=5, num_workers=workers, framework="numpy")
    kinds = {name: (kind, dtype) for name, kind, dtype, _ in loader.schema}
    assert kinds["fixed"] == kinds["vlen_str"] == kinds["tokens"] == kinds["scores"] == ("bytes", "u8")
    with h5py.File(text_h5) as f:
        it = iter(loader)
        for batch in it:
            for name in ("fixed", "vlen_str", "tokens", "scores"):
                got = stoker.split_bytes(batch, name)
                for k, i in enumerate(it.indices):
                    value = f[name][i]
                    if name == "vlen_str":
                        want = value if isinstance(value, bytes) else value.encode()
                    elif name == "fixed":
                        want = value
                    elif name == "tokens":
                        want = value.astype("<i4").tobytes()
                    else:  # stored big-endian (which h5py reads back unswapped): the values written
                        want = np.linspace(0, 1, i % 4).astype("<f8").tobytes()
                    assert got[k].tobytes() == want, f"{name} of sample {i}"


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
