"""The README's first training loop, run as written on the dataset people have first: a folder of
JPEGs packed by stoker-pack. Only what this machine lacks is changed (the GPU, ninety epochs), each
change checked to apply exactly once, so that the README cannot drift from what runs."""

import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def first_training_loop():
    text = open(README, encoding="utf-8").read()
    python = text[text.index("## From Python") :]
    return re.search(r"```python\n(.*?)```", python, re.S).group(1)


def changed(code, old, new):
    assert code.count(old) == 1, f"the README's loop no longer holds {old!r}"
    return code.replace(old, new)


def test_the_readme_loop_runs_on_a_packed_jpeg_folder(tmp_path):
    pack = os.environ.get("STOKER_PACK")
    if not pack or not os.access(pack, os.X_OK):
        pytest.skip("STOKER_PACK is not set: the README's test command sets it")
    torch = pytest.importorskip("torch")
    from PIL import Image

    rng = np.random.default_rng(3)
    for c, name in enumerate(["cat", "dog"]):
        os.makedirs(tmp_path / "train" / name)
        for i in range(6):
            pixels = (rng.random((40 + 8 * i, 56, 3)) * 255).astype(np.uint8)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, "JPEG", quality=85)
            (tmp_path / "train" / name / f"{c}{i}.jpg").write_bytes(out.getvalue())
    subprocess.run([pack, "--folder", "train", "train.lmdb", "--quiet"], cwd=tmp_path, check=True)

    code = first_training_loop()
    if not torch.cuda.is_available():
        code = changed(code, 'device="cuda"', 'device="cpu"')
        code = changed(code, ".cuda()", "")
    # Two epochs, then a run to three that resumes from the checkpoint: it trains epoch 2 only.
    for epochs, printed in (("2", 2), ("3", 1)):
        (tmp_path / "loop.py").write_text(changed(code, "range(start, 90)", f"range(start, {epochs})"))
        p = subprocess.run(
            [sys.executable, "loop.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ)
        )
        assert p.returncode == 0, p.stderr
        assert (tmp_path / "ckpt.pt").exists()
        verdicts = p.stdout.strip().splitlines()
        assert len(verdicts) == printed and all(verdicts), f"a verdict per epoch trained: {p.stdout!r}"
