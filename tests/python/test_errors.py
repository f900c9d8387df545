"""Bad arguments and bad data: stoker.Error with the C++ message and code, or TypeError, before any
process starts; the extension links no LibTorch and no CUDA library."""

import os
import subprocess

import pytest
import stoker


def test_missing_file(tmp_path):
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(tmp_path / "nope.h5", num_workers=2)
    assert isinstance(e.value, RuntimeError) and e.value.code == "dataset"
    assert "nope.h5" in str(e.value)


def test_unknown_field_lists_the_fields(data):
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(data["fixed"], fields=["image", "nope"], num_workers=2)
    assert e.value.code == "invalid_option"
    msg = str(e.value)
    assert "nope" in msg and "label" in msg and "image" in msg


def test_bad_pipeline_text(data):
    with pytest.raises(stoker.Error) as e:
        stoker.Loader(data["jpegs"], pipeline="data=decode,frobnicate(3)", num_workers=1)
    assert e.value.code == "invalid_option" and "frobnicate" in str(e.value)


@pytest.mark.parametrize(
    "kwargs,exc,name",
    [
        (dict(batch_size="8"), TypeError, "batch_size"),
        (dict(batch_size=0), stoker.Error, "batch_size"),
        (dict(num_workers=-1), stoker.Error, "num_workers"),
        (dict(shuffle=1), TypeError, "shuffle"),
        (dict(fields="image"), TypeError, "fields"),
        (dict(order="backwards"), stoker.Error, "order"),
        (dict(device="tpu"), stoker.Error, "tpu"),
        (dict(shard=(3, 2)), stoker.Error, "shard"),
        (dict(timeout=-1), stoker.Error, "timeout"),
        (dict(framework="jax"), stoker.Error, "framework"),
        (dict(framework="numpy", device="cuda"), stoker.Error, "framework='torch', or device='cpu'"),
        (dict(held_batches=-1), stoker.Error, "held_batches"),
        (dict(shm_backing="disk"), stoker.Error, "shm_backing"),
    ],
)
def test_bad_arguments_name_the_argument(data, kwargs, exc, name):
    with pytest.raises(exc) as e:
        stoker.Loader(data["fixed"], **kwargs)
    assert name in str(e.value)


def test_error_pickles_with_its_code():
    import pickle

    e = pickle.loads(pickle.dumps(stoker.Error("x: y", "io")))
    assert str(e) == "x: y" and e.code == "io"


def test_extension_links_neither_torch_nor_cuda():
    import stoker._core as core

    out = subprocess.run(["readelf", "-d", core.__file__], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert any(n.startswith("libstoker") for n in needed), needed
    for bad in ("libtorch", "libc10", "libcudart", "libcuda"):
        assert not any(n.startswith(bad) for n in needed), needed


def test_worker_executable_is_the_package_s(data):
    import stoker._core as core

    path = core.worker_executable()
    assert os.access(path, os.X_OK)
    assert os.environ.get("STOKER_WORKER_EXECUTABLE") or path.endswith(os.path.join("stoker", "_bin", "stoker-worker"))


def test_numpy_framework_needs_no_torch(data):
    code = f"""
import sys
sys.modules["torch"] = None  # import torch fails
import stoker
loader = stoker.Loader({str(data["fixed"])!r}, batch_size=50, num_workers=1, framework="numpy")
print(sum(len(b["label"]) for b in loader))
try:
    stoker.Loader({str(data["fixed"])!r})
except stoker.Error as e:
    print("framework" in str(e))
"""
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["203", "True"]


def test_every_cpp_option_is_a_keyword_argument():
    """Each member of stoker::Options (include/stoker/options.h) is reachable from Python, by
    PyTorch's name where that differs; on_warning is Python's warnings module."""
    import inspect
    import re

    header = os.path.join(os.path.dirname(__file__), "..", "..", "include", "stoker", "options.h")
    with open(header) as f:
        text = f.read()
    body = text[text.index("struct Options {") + len("struct Options {") :]
    body = body[: body.index("\n};")]
    body = re.sub(r"//[^\n]*", "", body)
    # Each declaration is `TYPE NAME`, `TYPE NAME = VALUE` or `TYPE NAME{VALUE}`: its name is the
    # last word before the initializer.
    members = [
        re.search(r"(\w+)\s*(=.*|\{.*\})?$", d.strip(), flags=re.S).group(1) for d in body.split(";") if d.strip()
    ]
    assert {"source", "batch_size", "held_batches", "timeout", "on_warning"} <= set(members), members
    python_name = {"sources": "source", "mix": "sources", "prefetch": "prefetch_factor", "on_warning": None}
    keywords = inspect.signature(stoker.Loader.__init__).parameters
    missing = [m for m in members if python_name.get(m, m) is not None and python_name.get(m, m) not in keywords]
    assert not missing, missing


def test_contradictory_shuffle_and_order_are_an_error(data):
    with pytest.raises(stoker.Error, match="shuffle=True and order='sequential' contradict") as e:
        stoker.Loader(data["fixed"], shuffle=True, order="sequential")
    assert e.value.code == "invalid_option"
    stoker.Loader(data["fixed"], shuffle=True, order="quasi_random").close()  # a shuffled order: no contradiction


def test_far_more_workers_than_cpus_is_a_warning_said_once(data):
    import subprocess
    import sys
    import textwrap

    # In a process of its own: the warning is said once per process.
    code = f"""
        import os, warnings, stoker
        cpus = len(os.sched_getaffinity(0))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                stoker.Loader({str(data["fixed"])!r}, num_workers=2 * cpus + 1, batch_size=50).close()
        said = [str(w.message) for w in caught if issubclass(w.category, stoker.StokerWarning)]
        print(len(said))
        print(said[0] if said else "")
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == "1", r.stdout + r.stderr
    assert "workers are more than twice the" in lines[1] and "CPU" in lines[1] and "or fewer load as fast" in lines[1]


@pytest.mark.parametrize("workers", [0, 1])
def test_encoded_images_delivered_as_bytes_are_a_warning_naming_the_pipeline(data, workers):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stoker.Loader(data["jpegs"], num_workers=workers, framework="numpy").close()
        stoker.Loader(data["jpegs"], num_workers=workers, framework="numpy", pipeline="data=decode(16,20)").close()
    said = [str(w.message) for w in caught if issubclass(w.category, stoker.StokerWarning)]
    assert len(said) == 1, said
    assert "field 'data' holds JPEG images, delivered as their encoded bytes ('data' and 'data.offsets')" in said[0]
    assert "pipeline='data=decode,random_resized_crop(224)' decodes them" in said[0]
    with warnings.catch_warnings(record=True) as caught:  # bytes that are no image: no word
        warnings.simplefilter("always")
        stoker.Loader(data["plain_lmdb"], num_workers=workers, framework="numpy").close()
    assert not [w for w in caught if issubclass(w.category, stoker.StokerWarning)]
