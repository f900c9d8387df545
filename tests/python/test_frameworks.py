"""stoker in the frameworks people train with, for real: PyTorch Lightning's Trainer with DDP over
gloo in two processes (examples/lightning_train.py), and Hugging Face Accelerate under `accelerate
launch` in two processes (examples/accelerate_train.py). Each rank reads its own shard, every
sample once per epoch, and a run stopped mid-epoch resumes from its checkpoint exactly."""

import json
import os
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
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
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


def test_lightning_ddp_trains_two_epochs_and_resumes_mid_epoch_exactly(tmp_path):
    pytest.importorskip("lightning")
    data = str(tmp_path / "data.h5")
    write_dataset(data)
    driver = os.path.join(HERE, "lightning_driver.py")
    ckpt = str(tmp_path / "mid.ckpt")
    for mode in ("full", "stop", "resume"):
        run([sys.executable, driver, data, str(tmp_path / mode), mode, ckpt], cwd=tmp_path)
    full = [records(tmp_path / "full", r) for r in (0, 1)]
    check_epochs(full)
    for r in (0, 1):
        stopped, resumed = records(tmp_path / "stop", r), records(tmp_path / "resume", r)
        assert len(full[r]) == 12 and len(stopped) == 9, (len(full[r]), len(stopped))
        assert stopped + resumed == full[r], (
            f"rank {r}: the stopped run and its resumption train on the full run's batches"
        )


def test_accelerate_launch_trains_two_processes_and_resumes_mid_epoch_exactly(tmp_path):
    pytest.importorskip("accelerate")
    data = str(tmp_path / "data.h5")
    write_dataset(data)
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    driver = os.path.join(HERE, "accelerate_driver.py")
    common = ["--data", data, "--epochs", "2", "--batch-size", "8", "--cpu"]
    state = str(tmp_path / "state")
    run([*launch, driver, str(tmp_path / "full"), *common], cwd=tmp_path)
    run([*launch, driver, str(tmp_path / "stop"), *common, "--max-steps", "9", "--save", state], cwd=tmp_path)
    run([*launch, driver, str(tmp_path / "resume"), *common, "--resume", state], cwd=tmp_path)
    full = [records(tmp_path / "full", r) for r in (0, 1)]
    check_epochs(full)
    for r in (0, 1):
        stopped, resumed = records(tmp_path / "stop", r), records(tmp_path / "resume", r)
        assert len(full[r]) == 12 and len(stopped) == 9, (len(full[r]), len(stopped))
        assert stopped + resumed == full[r], (
            f"rank {r}: the stopped run and its resumption train on the full run's batches"
        )
    with open(tmp_path / "full.params") as f:
        sums = json.load(f)
    assert sums[0] == sums[1], "the ranks' models stay equal: their gradients are averaged"
