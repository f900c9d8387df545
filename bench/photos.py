"""JPEG datasets made from the photographs scikit-image ships (no downloads).

Each sample is a crop of one of the photographs, of a size drawn per sample, re-encoded as JPEG at
a quality drawn per sample; everything follows from the seed.
"""

import io
import os

import numpy as np
from PIL import Image

# Colour photographs in scikit-image's wheel (skimage/data); read from the files, not through
# skimage.data's functions, which may fetch others over the network.
PHOTOS = [
    "astronaut.png",
    "coffee.png",
    "chelsea.png",
    "rocket.jpg",
    "retina.jpg",
    "motorcycle_left.png",
    "hubble_deep_field.jpg",
]


def photographs():
    import skimage.data

    root = os.path.dirname(skimage.data.__file__)
    out = []
    for name in PHOTOS:
        path = os.path.join(root, name)
        if os.path.exists(path):
            out.append(np.asarray(Image.open(path).convert("RGB")))
    if not out:
        raise SystemExit(f"no photographs found in {root}")
    return out


def encode(rgb, quality, subsampling=-1, progressive=False, mode="RGB"):
    b = io.BytesIO()
    img = Image.fromarray(rgb)
    if mode != "RGB":
        img = img.convert(mode)
    kwargs = {"quality": int(quality), "progressive": progressive}
    if subsampling >= 0:
        kwargs["subsampling"] = subsampling
    img.save(b, format="JPEG", **kwargs)
    return b.getvalue()


def random_crops(n, seed, min_side=160, max_side=500, fixed=None):
    """n JPEG byte strings: crops of the photographs (of `fixed` (h, w) if given, else of random
    sizes), at qualities 60..95, half 4:2:0 and a quarter each 4:4:4 and 4:2:2."""
    rng = np.random.default_rng(seed)
    photos = photographs()
    out = []
    for i in range(n):
        p = photos[int(rng.integers(len(photos)))]
        if fixed:
            h, w = fixed
        else:
            h = int(rng.integers(min_side, min(max_side, p.shape[0]) + 1))
            w = int(rng.integers(min_side, min(max_side, p.shape[1]) + 1))
        h, w = min(h, p.shape[0]), min(w, p.shape[1])
        y = int(rng.integers(0, p.shape[0] - h + 1))
        x = int(rng.integers(0, p.shape[1] - w + 1))
        crop = np.ascontiguousarray(p[y : y + h, x : x + w])
        out.append(encode(crop, rng.integers(60, 96), subsampling=[2, 2, 0, 1][i % 4]))
    return out
