"""stoker's image pipeline against its decode-only ceiling and against the fastest CPU peer.

On the same JPEGs (bench/photos.py's crops of photographs, in a py-lmdb database), with the same
crop regions and flips, `decode,random_resized_crop(224),flip,to_chw` is measured, in alternating
rounds:
  ceiling    libjpeg-turbo's decode of each region alone, at the DCT scale stoker chooses
             (bench/image_ceiling.cc): what the pipeline cannot beat;
  pipeline   stoker's pipeline in one process (the same code a worker runs), per CPU-second;
  peer       simplejpeg's DCT-scaled decode + pillow-simd's resize (AVX2), flip, CHW
             (bench/image_peer.py), per CPU-second;
  loader     loader-bench with W workers, shuffled, batch 64 (its second epoch), against the
             ceiling run in W processes at once.
Goals: the pipeline >= 85 % of the ceiling, and >= 2x the peer per CPU-second.

The peer needs its own venv (pillow-simd replaces Pillow): DATA_DIR/peers-venv, made on the first
run with Debian's python3 (pip: numpy, lmdb, simplejpeg; pillow-simd built from source with
CC="cc -mavx2", which needs libjpeg and zlib headers: install-deps has them).

usage: image_limit.py BUILD_DIR DATA_DIR [--samples N] [--workers W] [--rounds R]
Exits 1 when a goal is missed.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from image_compare import make_db, stoker  # noqa: E402


def peers_python(data):
    venv = os.path.join(data, "peers-venv")
    python = os.path.join(venv, "bin", "python")
    # pillow-simd's versions are Pillow's with a .postN suffix: plain Pillow is not the peer.
    probe = "import lmdb, numpy, simplejpeg, PIL; assert 'post' in PIL.__version__"
    if os.path.exists(python) and subprocess.run([python, "-c", probe], capture_output=True).returncode == 0:
        return python
    print("image_limit: making the peers' venv (pillow-simd with AVX2, simplejpeg)", file=sys.stderr)
    steps = [
        (["/usr/bin/python3", "-m", "venv", venv], None),
        ([python, "-m", "pip", "install", "-q", "numpy", "lmdb", "simplejpeg"], None),
        # From source, for AVX2: it needs libjpeg's and zlib's headers (tools/install-deps.sh).
        ([python, "-m", "pip", "install", "-q", "--no-binary", "pillow-simd", "pillow-simd"], {"CC": "cc -mavx2"}),
    ]
    for cmd, env in steps:
        if subprocess.run(cmd, env={**os.environ, **(env or {})}).returncode != 0:
            sys.exit(f"image_limit: {' '.join(cmd)} failed; remove {venv} and run again once that is fixed")
    return python


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def loader(build, db, workers):
    """loader-bench's samples/s and samples per CPU-second (its workers' and its consumer's)."""
    rate, cpu_per_sample = stoker(build, db, workers, 2)
    return rate, 1 / cpu_per_sample


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build")
    p.add_argument("data")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--workers", type=int, default=min(os.cpu_count() or 2, 8))
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    os.makedirs(a.data, exist_ok=True)
    db = os.path.join(a.data, "photos.lmdb")
    make_db(db, a.samples)
    regions = os.path.join(a.data, "photos-regions.json")
    peer_python = peers_python(a.data)
    ceiling_tool = os.path.join(a.build, "bench", "stoker-image-ceiling")
    best = {}

    def keep(name, value):
        best[name] = max(best.get(name, 0.0), value)

    for r in range(a.rounds):
        c = run_json([ceiling_tool, "--lmdb", db, "--rounds", "1", "--procs", str(a.workers), "--regions", regions])
        keep("ceiling", c["ceiling_samples_per_cpu_s"])
        keep("pipeline", c["pipeline_samples_per_cpu_s"])
        keep("ceiling_procs", c["ceiling_samples_per_s"])
        peer = run_json([peer_python, os.path.join(HERE, "image_peer.py"), db, regions, "--rounds", "1"])
        keep("peer", peer["peer_samples_per_cpu_s"])
        rate, per_cpu = loader(a.build, db, a.workers)
        keep("loader", rate)
        keep("loader_per_cpu", per_cpu)
        print(
            f"round {r + 1}: ceiling {c['ceiling_samples_per_cpu_s']:7.0f}"
            f"  pipeline {c['pipeline_samples_per_cpu_s']:7.0f}"
            f"  peer {peer['peer_samples_per_cpu_s']:7.0f} samples/CPU-s;  loader {rate:7.0f} samples/s against "
            f"{c['ceiling_samples_per_s']:7.0f} decoding in {a.workers} processes",
            flush=True,
        )
    of_ceiling = best["pipeline"] / best["ceiling"]
    over_peer = best["pipeline"] / best["peer"]
    print(f"\n{a.samples} JPEGs, crops to 224x224 u8 CHW, best of {a.rounds} alternating rounds")
    print(f"{'':34} {'samples/CPU-s':>14}")
    print(f"{'ceiling (ROI + DCT-scaled decode)':34} {best['ceiling']:14.0f}")
    print(f"{'stoker pipeline':34} {best['pipeline']:14.0f}")
    print(f"{'simplejpeg + pillow-simd':34} {best['peer']:14.0f}  ({peer['pillow']}, simplejpeg {peer['simplejpeg']})")
    print(
        f"loader-bench, {a.workers} workers: {best['loader']:.0f} samples/s ({best['loader_per_cpu']:.0f} per CPU-s), "
        f"{best['loader'] / best['ceiling_procs']:.0%} of the ceiling in {a.workers} processes"
    )
    print(f"{'met ' if of_ceiling >= 0.85 else 'MISS'}  pipeline >= 85% of the decode-only ceiling: {of_ceiling:.0%}")
    print(
        f"{'met ' if over_peer >= 2 else 'MISS'}  pipeline >= 2x simplejpeg + pillow-simd per CPU-second: "
        f"{over_peer:.2f}x"
    )
    return 0 if of_ceiling >= 0.85 and over_peer >= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
