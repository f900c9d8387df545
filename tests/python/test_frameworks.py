"""stoker in the frameworks people train with, for real: PyTorch Lightning's Trainer with DDP over
gloo in two processes (examples/lightning_train.py), and Hugging Face Accelerate under `accelerate
launch` in two processes (examples/accelerate_train.py). Each rank reads its own shard, every
sample once per epoch, and a run stopped mid-epoch resumes from its checkpoint exactly."""

import json
import os
import socket
import subprocess
import sys

import h5py
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
N = 96  # 2 ranks x 6 batches of 8 an epoch


def write_dataset(path):
    rng = np.random.default_rng(11)
    with h5py.File(path, "w") as f:
        f["image"] = rng.integers(0, 256, size=(N, 3, 4, 4), dtype=np.uint8)
        f["label"] = np.arange(N, dtype=np.int64) % 4
        f["id"] = np.arange(N, dtype=np.int64)


def run(args, cwd, timeout=300):
    # The frameworks' caches and configuration (~/.cache/huggingface) are the test's own.
    env = dict(os.environ, HF_HOME=os.path.join(cwd, "hf-home"))
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-20000:]
    return p


def records(prefix, rank):
    """[(epoch, [ids of a step]), ...] in the order rank `rank` trained on them."""
    with open(f"{prefix}.rank{rank}") as f:
        return [tuple(json.loads(line)) for line in f]


def check_epochs(full):
    """Every sample once an epoch over the two ranks, none on both, and a new order each epoch."""
    orders = []
    for epoch in (0, 1):
        per_rank = [[i for e, ids in full[r] if e == epoch for i in ids] for r in (0, 1)]
        assert sorted(per_rank[0] + per_rank[1]) == list(range(N)), f"epoch {epoch}"
        orders.append(per_rank[0])
    assert orders[0] != orders[1], "each epoch is drawn anew"


def check_stopped_and_resumed(tmp_path):
    """The runs recorded as full, stop (9 steps) and resume: each epoch of the full run as
    check_epochs wants it, and on each rank the stopped run and its resumption train on exactly
    the full run's batches. Returns the full run's records per rank."""
    full = [records(tmp_path / "full", r) for r in (0, 1)]
    check_epochs(full)
    for r in (0, 1):
        stopped, resumed = records(tmp_path / "stop", r), records(tmp_path / "resume", r)
        assert len(full[r]) == 12 and len(stopped) == 9, (len(full[r]), len(stopped))
        assert stopped + resumed == full[r], (
            f"rank {r}: the stopped run and its resumption train on the full run's batches"
        )
    return full


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_lightning_ddp_trains_two_epochs_and_resumes_mid_epoch_exactly(tmp_path):
    pytest.importorskip("lightning")
    data = str(tmp_path / "data.h5")
    write_dataset(data)
    driver = os.path.join(HERE, "lightning_driver.py")
    ckpt = str(tmp_path / "mid.ckpt")
    for mode in ("full", "stop", "resume"):
        run([sys.executable, driver, data, str(tmp_path / mode), mode, ckpt], cwd=tmp_path)
    check_stopped_and_resumed(tmp_path)


def test_accelerate_launch_trains_two_processes_and_resumes_mid_epoch_exactly(tmp_path):
    pytest.importorskip("accelerate")
    data = str(tmp_path / "data.h5")
    write_dataset(data)
    driver = os.path.join(HERE, "accelerate_driver.py")
    common = ["--data", data, "--batch-size", "8", "--cpu"]

    def launch(record, *args):
        port = str(free_port())
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
        run([*launcher, "--main_process_port", port, driver, str(tmp_path / record), *common, *args], cwd=tmp_path)

    state, epoch_end = str(tmp_path / "state"), str(tmp_path / "epoch-end")
    launch("full", "--epochs", "2")
    launch("stop", "--epochs", "2", "--max-steps", "9", "--save", state)
    launch("resume", "--epochs", "2", "--resume", state)
    # Saved at the end of epoch 0: the resumed run trains epoch 1 only.
    launch("first", "--epochs", "1", "--save", epoch_end)
    launch("second", "--epochs", "2", "--resume", epoch_end)
    full = check_stopped_and_resumed(tmp_path)
    for r in (0, 1):
        first, second = records(tmp_path / "first", r), records(tmp_path / "second", r)
        assert first + second == full[r], f"rank {r}: a run resumed from the end of epoch 0 trains epoch 1 only"
    with open(tmp_path / "full.params") as f:
        sums = json.load(f)
    assert sums[0] == sums[1], "the ranks' models stay equal: their gradients are averaged"


def test_lightning_on_one_device_draws_each_epoch_anew(tmp_path):
    """Unsharded, the Loader's passes are its epochs: Lightning's own check that the loader is
    iterable (an iterator made and dropped) must not count as one."""
    pytest.importorskip("lightning")
    data = str(tmp_path / "data.h5")
    write_dataset(data)
    run(
        [sys.executable, os.path.join(HERE, "lightning_driver.py"), data, str(tmp_path / "one"), "one", ""],
        cwd=tmp_path,
    )
    seen = records(tmp_path / "one", 0)
    orders = [[i for e, ids in seen if e == epoch for i in ids] for epoch in (0, 1)]
    assert all(sorted(o) == list(range(N)) for o in orders), "every sample once an epoch"
    assert orders[0] != orders[1], "each epoch is drawn anew"
