"""examples/train on data of its user's: the dataset is checked against the model before training,
and what does not fit is an error that says what the example expects and what to do.

usage: train_check.py TRAIN STOKER_PACK SCRATCH_DIR
(1) fields of other names are named beside what is expected, (2) a folder of JPEGs packed by
stoker-pack is refused without a decoding pipeline, naming one, and trains with it, its twelve
classes counted from the class names the pack stored, (3) a label past the classes is an error
naming it and --classes, which makes it train, (4) a flag's bad value is named.
"""

import io
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
from PIL import Image

failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        print("     " + detail.replace("\n", "\n     "))
        failures.append(what)


def train(*args):
    return subprocess.run(
        [TRAIN, "--epochs", "1", "--workers", "1", *args], capture_output=True, text=True, timeout=300
    )


TRAIN, PACK, SCRATCH = sys.argv[1:4]
shutil.rmtree(SCRATCH, ignore_errors=True)
os.makedirs(SCRATCH)
rng = np.random.default_rng(5)

# (1) Other names.
other = os.path.join(SCRATCH, "other.h5")
with h5py.File(other, "w") as f:
    f["pixels"] = rng.integers(0, 256, size=(16, 3, 4, 4), dtype=np.uint8)
    f["label"] = np.zeros(16, dtype=np.int64)
p = train("--data", other)
check(
    p.returncode == 1 and "this example trains on 'image'" in p.stderr and "pixels: u8[3,4,4]" in p.stderr,
    "a dataset without 'image' is named with its fields beside what the example expects",
    p.stderr,
)
check("terminate" not in p.stderr and "c10::" not in p.stderr, "no LibTorch stack trace", p.stderr)

# (2) A packed JPEG folder of twelve classes.
folder = os.path.join(SCRATCH, "folder")
for c in range(12):
    os.makedirs(os.path.join(folder, f"class{c:02d}"))
    for i in range(2):
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, size=(12, 10, 3), dtype=np.uint8)).save(out, "JPEG")
        with open(os.path.join(folder, f"class{c:02d}", f"{i}.jpg"), "wb") as fh:
            fh.write(out.getvalue())
packed = os.path.join(SCRATCH, "packed.lmdb")
subprocess.run([PACK, "--folder", folder, packed, "--quiet"], check=True)
p = train("--data", packed)
check(
    p.returncode == 1 and "--pipeline 'image=decode,resize(32,32),to_chw'" in p.stderr,
    "encoded images without a pipeline: the error names the pipeline that decodes them",
    p.stderr,
)
p = train("--data", packed, "--pipeline", "image=decode,resize(8,8),to_chw")
check(
    p.returncode == 0 and "epoch 0: loss" in p.stdout,
    "with the pipeline it trains, labels 0..11 fitting the twelve class names the pack stored",
    p.stdout + p.stderr,
)

# (3) Labels past the classes, without class names.
past = os.path.join(SCRATCH, "past.h5")
with h5py.File(past, "w") as f:
    f["image"] = rng.integers(0, 256, size=(32, 3, 4, 4), dtype=np.uint8)
    f["label"] = np.arange(32, dtype=np.int32) % 15
p = train("--data", past)
check(
    p.returncode == 1
    and "holds label 14, not a class of 0 .. 9: give the number of classes with --classes N" in p.stderr,
    "a label past the 10 classes is named, with --classes",
    p.stderr,
)
p = train("--data", past, "--classes", "15")
check(
    p.returncode == 0 and "epoch 0: loss" in p.stdout, "--classes 15 trains on it (int32 labels)", p.stdout + p.stderr
)

# (4) A flag's bad value.
p = train("--epochs", "two")
check(
    p.returncode == 1 and "--epochs needs a whole number of at least 1, not 'two'" in p.stderr,
    "a bad value names its flag",
    p.stderr,
)

shutil.rmtree(SCRATCH, ignore_errors=True)
sys.exit(1 if failures else 0)
