"""The package as pip installed it (tools/install-deps.sh puts it in the project's .venv), not the
build tree's that the other tests import: it is built apart (scikit-build-core, Release), so a
package that imports but delivers nothing, or other data, is found here rather than by a user."""

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

SCRIPT = r"""
import sys
import numpy as np
import stoker
print(stoker.__file__)
path = sys.argv[1]
for workers in (0, 2):
    loader = stoker.Loader(path, batch_size=7, num_workers=workers, shuffle=True, seed=3, framework="numpy")
    loader.set_epoch(1)
    seen = []
    for batch in loader:
        assert (batch["x"] == batch["label"][:, None] * 2).all(), "contents"
        seen.extend(batch["label"].tolist())
    assert sorted(seen) == list(range(50)), f"{workers} workers: {len(seen)} samples"
    assert len(loader) == 8
    loader.close()
print("ok")
"""


def installed_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STOKER_WORKER")}
    return env


FIND = r"""
import importlib.util
spec = importlib.util.find_spec("stoker")
print(spec.origin if spec else "")
"""


def test_the_installed_package_delivers_every_sample_with_and_without_workers(tmp_path):
    env = installed_env()
    # Whether one is installed is asked without importing it: an installed package that fails to
    # import is a failure below, not a reason to skip.
    where = subprocess.run(
        [sys.executable, "-c", FIND], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    origin = where.stdout.strip()
    if where.returncode != 0 or not origin or not any(d in origin for d in ("site-packages", "dist-packages")):
        pytest.skip("no stoker package is installed in this interpreter (tools/install-deps.sh installs one)")
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["label"] = np.arange(50, dtype=np.int64)
        f["x"] = (np.arange(50, dtype=np.int64)[:, None] * 2).repeat(3, axis=1)
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


OP_SCRIPT = r"""
import sys

import numpy as np
import stoker


def mean_and_x(sample, rng):
    return {"mean": np.float32(sample["x"].mean()), "x": sample["x"]}


if __name__ == "__main__":
    path, library = sys.argv[1], sys.argv[2]
    for workers in (0, 2):
        loader = stoker.Loader(path, batch_size=7, num_workers=workers, framework="numpy", pipeline="x=gain(2,2)",
                               op_libraries=[library], transform=mean_and_x, fields=["x"])
        it = iter(loader)
        for batch in it:
            want = np.minimum((np.asarray(it.indices)[:, None] % 100) * 2, 255).repeat(3, axis=1)
            assert (batch["x"] == want).all(), (workers, batch["x"], want)
            assert np.allclose(batch["mean"], want.mean(axis=1)), workers
        loader.close()
    print("ok")
"""


def test_an_operation_library_builds_against_the_installed_package_and_runs_in_its_workers(tmp_path):
    import shutil

    env = installed_env()
    where = subprocess.run(
        [sys.executable, "-c", FIND], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    origin = where.stdout.strip()
    if where.returncode != 0 or not origin or not any(d in origin for d in ("site-packages", "dist-packages")):
        pytest.skip("no stoker package is installed in this interpreter (tools/install-deps.sh installs one)")
    cmake_dir = subprocess.run(
        [sys.executable, "-m", "stoker", "--cmake-dir"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert cmake_dir.returncode == 0, cmake_dir.stderr
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "user_op")
    build = tmp_path / "op"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (
        ["cmake", "-S", example, "-B", str(build), *generator, f"-DCMAKE_PREFIX_PATH={cmake_dir.stdout.strip()}"],
        ["cmake", "--build", str(build)],
    ):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["x"] = (np.arange(50, dtype=np.uint8)[:, None] % 100).repeat(3, axis=1)
    script = tmp_path / "train.py"
    script.write_text(OP_SCRIPT)
    r = subprocess.run(
        [sys.executable, str(script), str(path), str(build / "libstoker_user_op.so")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
