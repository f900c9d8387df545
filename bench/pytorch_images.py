"""PyTorch's DataLoader on a JPEG dataset with the ImageNet training transforms, for image_compare.py.

The dataset is an LMDB database as py-lmdb users write one (key str(i), value the JPEG bytes),
opened lazily in each worker. Each sample: PIL decode (converted to RGB), RandomResizedCrop(size)
(scale 0.08-1, ratio 3/4-4/3, bilinear, antialiased), RandomHorizontalFlip, then a uint8 CHW tensor
(PILToTensor): torchvision's transforms when a torchvision wheel matching the installed torch is
there, else the same steps written with PIL (torchvision's get_params, crop, resize, transpose).

usage: pytorch_images.py --data DB [--size 224] [--batch-size 64] [--workers 2] [--prefetch 2]
                         [--epochs 2] [--seed 0]
Prints one JSON object per epoch: samples, seconds, samples_per_s, cpu_s (this process and its
workers), transforms ("torchvision" or "pil").
"""

import argparse
import io
import json
import math
import os
import random
import time

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

try:
    import torchvision.transforms as T

    TRANSFORMS = "torchvision"
except Exception:  # no wheel for this torch: the same steps with PIL
    T = None
    TRANSFORMS = "pil"


class PilRandomResizedCrop:
    """torchvision.transforms.RandomResizedCrop on a PIL image, written out."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        self.size, self.scale, self.ratio = size, scale, ratio

    def params(self, img):
        width, height = img.size
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * random.uniform(*self.scale)
            aspect = math.exp(random.uniform(*log_ratio))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img):
        i, j, h, w = self.params(img)
        return img.crop((j, i, j + w, i + h)).resize((self.size, self.size), Image.BILINEAR)


def pil_transform(size):
    crop = PilRandomResizedCrop(size)

    def apply(img):
        img = crop(img)
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(img)).permute(2, 0, 1).contiguous()

    return apply


class JpegLmdb(Dataset):
    def __init__(self, path, transform):
        import lmdb

        env = lmdb.open(path, subdir=os.path.isdir(path), readonly=True, lock=False)
        self.n = env.stat()["entries"]
        env.close()
        self.path, self.transform, self.env = path, transform, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.env is None:  # opened lazily, in the worker that uses it
            import lmdb

            self.env = lmdb.open(self.path, subdir=os.path.isdir(self.path), readonly=True, lock=False, readahead=False)
        with self.env.begin(buffers=True) as txn:
            data = bytes(txn.get(str(i).encode()))
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return self.transform(img), i


def process_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    if TRANSFORMS == "torchvision":
        transform = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.PILToTensor()])
    else:
        transform = pil_transform(a.size)
    ds = JpegLmdb(a.data, transform)
    extra = {"prefetch_factor": a.prefetch, "persistent_workers": True} if a.workers > 0 else {}
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers, **extra)
    for epoch in range(a.epochs):
        it = iter(loader)
        workers = [w.pid for w in getattr(it, "_workers", [])]
        cpu0 = time.process_time() + sum(process_cpu(w) for w in workers)
        t0 = time.perf_counter()
        samples = 0
        for images, _ in it:
            samples += images.shape[0]
        seconds = time.perf_counter() - t0
        cpu = time.process_time() + sum(process_cpu(w) for w in workers) - cpu0
        print(
            json.dumps(
                {
                    "epoch": epoch,
                    "samples": samples,
                    "seconds": seconds,
                    "samples_per_s": samples / seconds,
                    "cpu_s": cpu,
                    "transforms": TRANSFORMS,
                    "workers": a.workers,
                    "prefetch": a.prefetch,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
