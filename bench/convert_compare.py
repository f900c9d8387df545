"""h5-to-lmdb against the h5py + py-lmdb script (bench/h5py_lmdb_convert.py), same file, same run,
with the disk's sequential write speed measured alongside: both converters write the same LMDB
bytes there, so that is the ceiling for the ratio.

usage: convert_compare.py BUILD_DIR DATA_DIR [OUTPUT_DIR]
(OUTPUT_DIR defaults to DATA_DIR; /dev/shm takes the disk out and compares the converters' CPU.)
Converts DATA_DIR/small.h5, DATA_DIR/large.h5 and a ~2 GB DATA_DIR/big.h5 (made here once) with
both, printing MB/s, the ratio, and each converter's peak anonymous memory (RssAnon, sampled every
20 ms: mapped file pages inflate plain RSS).
"""

import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def peak_rss_anon(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            peak = max(peak, int(line.split()[1]) * 1024)
            except OSError:
                pass
            time.sleep(0.02)

    t = threading.Thread(target=sample)
    t.start()
    t0 = time.perf_counter()
    _, err = proc.communicate()
    seconds = time.perf_counter() - t0
    done.set()
    t.join()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {err}")
    return seconds, peak


def disk_write_mb_per_s(directory):
    """Sequential write with fdatasync, the ceiling for any converter writing there."""
    path = os.path.join(directory, "write-ceiling.tmp")
    block = os.urandom(4 << 20)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(128):
            os.write(fd, block)
        os.fdatasync(fd)
    finally:
        os.close(fd)
        os.remove(path)
    return 512 * (1 << 20) / 1e6 / (time.perf_counter() - t0)


def make_big(path):
    import h5py
    import numpy as np

    n, side = 14000, 224  # 14000 x 150 KB = 2.1 GB
    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as f:
        img = f.create_dataset("image", (n, 3, side, side), dtype="u1", chunks=(32, 3, side, side))
        lab = f.create_dataset("label", (n,), dtype="<i8", chunks=(1024,))
        for s in range(0, n, 512):
            e = min(n, s + 512)
            img[s:e] = rng.integers(0, 16, size=(e - s, 3, side, side), dtype=np.uint8)
            lab[s:e] = np.arange(s, e) % 1000


def main():
    build, data = sys.argv[1], sys.argv[2]
    out_dir = sys.argv[3] if len(sys.argv) > 3 else data
    tool = os.path.join(build, "tools", "h5-to-lmdb")
    py = os.path.join(ROOT, ".venv", "bin", "python")
    script = os.path.join(ROOT, "bench", "h5py_lmdb_convert.py")
    big = os.path.join(data, "big.h5")
    if not os.path.exists(big):
        print(f"making {big} (~2 GB)", file=sys.stderr, flush=True)
        make_big(big)
    print(f"write ceiling in {out_dir} (4 MiB writes + fdatasync): {disk_write_mb_per_s(out_dir):.0f} MB/s")
    print(
        f"{'input':<10} {'MB':>8} {'LMDB MB':>8} {'h5-to-lmdb MB/s':>16} {'script MB/s':>12} {'ratio':>7} "
        f"{'h5-to-lmdb RssAnon':>19} {'script RssAnon':>15}"
    )
    for name in ("small.h5", "large.h5", "big.h5"):
        src = os.path.join(data, name)
        mb = os.path.getsize(src) / 1e6
        outs = [os.path.join(out_dir, f"convert-{name}.{who}.lmdb") for who in ("stoker", "script")]
        for o in outs:
            for p in (o, o + ".partial"):
                if os.path.exists(p):
                    os.remove(p)
        s_sec, s_rss = peak_rss_anon([tool, src, outs[0], "--quiet"])
        lmdb_mb = os.path.getsize(outs[0]) / 1e6
        p_sec, p_rss = peak_rss_anon([py, script, src, outs[1]])
        for o in outs:
            os.remove(o)
        print(
            f"{name:<10} {mb:>8.0f} {lmdb_mb:>8.0f} {mb / s_sec:>16.0f} {mb / p_sec:>12.0f} {p_sec / s_sec:>6.1f}x "
            f"{s_rss / 2**20:>15.0f} MiB {p_rss / 2**20:>11.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
