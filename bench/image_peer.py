"""The CPU peer of stoker's image pipeline: simplejpeg's DCT-scaled decode and pillow-simd's resize.

Run by bench/image_limit.py with the Python of its peers' venv (simplejpeg, pillow-simd built with
AVX2). For each image of a py-lmdb database, with the region and flip stoker's pipeline drew for it
(stoker-image-ceiling --regions): the header, a decode at the smallest DCT scale that keeps the
region at least SIZE x SIZE (what simplejpeg's min_height/min_width choose), the region resized to
SIZE x SIZE with PIL's bilinear filter (its box: no copy of the crop), mirrored when flipped, and
copied as CHW planes into a batch buffer: what a careful user writes with the fastest CPU libraries.
Timed in CPU time (time.process_time), the best of --rounds passes.

usage: image_peer.py DB REGIONS_JSON [--size 224] [--rounds 3]   (prints one JSON object)
"""

import argparse
import json
import math
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("regions")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()

    import lmdb
    import numpy as np
    import simplejpeg
    from PIL import Image

    env = lmdb.open(a.db, readonly=True, lock=False)
    with env.begin() as t:
        images = [bytes(v) for _, v in t.cursor()]
    env.close()
    with open(a.regions) as f:
        regions = json.load(f)
    if len(regions) != len(images):
        raise SystemExit(f"image_peer: {len(regions)} regions for {len(images)} images")
    size = a.size
    batch = np.empty((64, 3, size, size), np.uint8)

    def one_pass():
        t0 = time.process_time()
        for i, (data, (x, y, w, h, flip)) in enumerate(zip(images, regions)):
            height, width, _, _ = simplejpeg.decode_jpeg_header(data)
            # The smallest image whose region still covers size x size.
            arr = simplejpeg.decode_jpeg(
                data,
                colorspace="RGB",
                min_height=min(height, math.ceil(height * size / h)),
                min_width=min(width, math.ceil(width * size / w)),
            )
            fy, fx = arr.shape[0] / height, arr.shape[1] / width
            img = Image.fromarray(arr).resize(
                (size, size), Image.BILINEAR, box=(x * fx, y * fy, (x + w) * fx, (y + h) * fy)
            )
            if flip:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            batch[i % 64] = np.asarray(img).transpose(2, 0, 1)
        return time.process_time() - t0

    one_pass()  # warm
    best = min(one_pass() for _ in range(a.rounds))
    import PIL

    print(
        json.dumps(
            {
                "peer_samples_per_cpu_s": len(images) / best,
                "pillow": PIL.__version__,
                "simplejpeg": simplejpeg.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
