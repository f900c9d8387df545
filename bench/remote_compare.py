"""A shard set in an S3-compatible store (moto's server on 127.0.0.1, a process of its own), read by
stoker through the node's cache, against:
  local      the same shards read from the local disk (the same Loader options: the quasi-random
             order, which reads a few shards at a time);
  ceiling    a plain parallel download of the same objects (4 at once, each read and dropped): the
             most any loader can fetch from this server here (the store runs on this machine's
             cores too: each row says the CPU time it took);
  mosaic     Mosaic's StreamingDataset over the same samples written as MDS in the same store, with
             the same cache limit (in its own venv, DATA_DIR/mosaic-venv, made on the first run;
             --no-mosaic leaves it out).
The shards are stored with their index (stoker-index.json, Loader.write_index) under train/, and
alone under plain/. stoker's cold epoch starts with an empty cache and the index, so it reads the
shards as they arrive; "cold, no index" first fetches the set whole to count it; the warm epoch
finds the cache full. Each row: samples per second over the epoch (construction included: the cold
epoch's downloads), the time to the first batch, the bytes downloaded, and the CPU time of the store
and of the reader (this process and its children: a loader's workers, Mosaic's process). The store
and the reader share this machine's cores, so an epoch lasts at least their CPU time over the
cores: the cold epoch is shown against that bound too.

Then a cache of a quarter of the set, and one of half (order quasi_random, which reads a few shards
at a time), of plain/: a cold loader (it learns the set that much at a time, then reads its epoch
through the cache) and a second
one on the same node, which finds what the first learned; for each, the shards its epoch fetched
against Belady's count for the epoch's order (computed here from the batches' indices, from the
cache's content at the start) and an LRU cache's.

The first five rows (local to ceiling) are each the median run, by its seconds, of --repeats (3)
taken in turns: on a shared machine one run of the ceiling varied from 0.38 to 0.55 s.

--store-cpus N runs the store on the last N of the CPUs this process may use and every reader
(each row's) on the others, as a store in object storage runs on machines of its own: the store's
CPU time then no longer comes out of the reader's, and the ceiling is the store's own. (CPUs, not
cores: where they are hyperthreads, the last N may share cores with the others.)

usage: remote_compare.py DATA_DIR [--shards 8] [--samples 1024] [--workers 2] [--repeats 3] [--no-mosaic]
                         [--store-cpus 0]
(with samples a multiple of 1024, each batch of 256 lies in one window of the quasi-random order,
which reads at most 4 shards: the least a cache may hold)
"""

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_shards(local, shards, samples):
    import h5py
    import numpy as np

    os.makedirs(local, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(shards):
        path = os.path.join(local, f"train-{k:05d}.h5")
        if os.path.exists(path):
            continue
        with h5py.File(path + ".tmp", "w") as f:
            # Chunks of 256 rows: the quasi-random order's groups (4 to a window of 1024 samples).
            image = rng.integers(0, 256, size=(samples, 3, 64, 64), dtype=np.uint8)
            f.create_dataset("image", data=image, chunks=(min(256, samples), 3, 64, 64))
            f.create_dataset(
                "label", data=np.arange(samples, dtype=np.int64) + k * samples, chunks=(min(256, samples),)
            )
        os.rename(path + ".tmp", path)
    import stoker

    stoker.Loader(local).write_index()  # stoker-index.json beside them


def start_store(local, python, cpus=None):
    """moto's server in a process of its own (on `cpus` alone, when given), holding s3://bench/train/
    (the local shards and their index) and s3://bench/plain/ (the shards alone)."""
    import boto3

    port = free_port()
    pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []  # execs: the same pid
    server = subprocess.Popen(
        pin + [python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    for _ in range(300):
        try:
            s3.create_bucket(Bucket="bench")
            break
        except Exception:  # noqa: BLE001 - not listening yet
            time.sleep(0.1)
    for name in sorted(os.listdir(local)):
        s3.upload_file(os.path.join(local, name), "bench", f"train/{name}")
        if name.endswith(".h5"):
            s3.upload_file(os.path.join(local, name), "bench", f"plain/{name}")
    return server, endpoint, s3


def quasi_random_loader(source, workers, cache, **more):
    import stoker

    return stoker.Loader(
        source,
        batch_size=256,
        num_workers=workers,
        order="quasi_random",
        seed=1,
        framework="numpy",
        cache_dir=cache,
        **more,
    )


def stoker_epoch(source, workers, cache=None):
    """An epoch in the quasi-random order, which shuffles and reads a few shards at a time (as
    Mosaic's shuffle does): a fully random order reads every shard for every batch, so its first
    batch waits for the whole set."""
    os.sync()  # no dirty pages of an earlier row are written back during this one
    t0 = time.perf_counter()
    loader = quasi_random_loader(source, workers, cache)
    first = None
    n = 0
    for batch in loader:
        n += len(batch["label"])
        if first is None:
            first = time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    downloaded = loader.stats()["download_bytes"]
    loader.close()  # its workers reaped: their CPU time counted in the row's
    return {"samples_per_s": n / seconds, "ttfb_s": first, "seconds": seconds, "downloaded": downloaded}


def simulate(reads, capacity, cached, policy):
    """Fetches of a cache of `capacity` shards from `cached` over `reads` (each batch's shards):
    Belady's policy evicts the shard read again furthest ahead, LRU the one read longest ago."""
    cache, fetches, last = set(cached), 0, {s: -1 for s in cached}
    for b, shards in enumerate(reads):
        for s in shards:
            if s not in cache:
                if len(cache) == capacity:
                    others = [c for c in cache if c not in shards]
                    if policy == "belady":
                        ahead = {
                            c: next((k for k in range(b, len(reads)) if c in reads[k]), len(reads)) for c in others
                        }
                        victim = max(others, key=lambda c: ahead[c])
                    else:
                        victim = min(others, key=lambda c: last[c])
                    cache.remove(victim)
                cache.add(s)
                fetches += 1
        for s in shards:
            last[s] = b
    return fetches


def small_cache_epoch(source, workers, cache, limit, samples, shards, capacity, cached):
    os.sync()  # as stoker_epoch
    t0 = time.perf_counter()
    loader = quasi_random_loader(source, workers, cache, cache_limit=limit)
    built = loader.stats()
    first, n, reads = None, 0, []
    for batch in loader:
        n += len(batch["label"])
        reads.append(sorted({int(i) // samples for i in batch["label"]}))
        if first is None:
            first = time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    s = loader.stats()
    loader.close()
    return {
        "samples_per_s": n / seconds,
        "ttfb_s": first,
        "seconds": seconds,
        "downloaded": s["download_bytes"],
        "built_downloads": built["downloads"],
        "epoch_downloads": s["downloads"] - built["downloads"],
        "belady": simulate(reads, capacity, cached, "belady"),
        "lru": simulate(reads, capacity, cached, "lru"),
        "evictions": s["evictions"],
        "fetch_wait_s": s["fetch_wait_seconds"],
    }


def ceiling(endpoint, names, parallel):
    """Seconds to download every object, `parallel` at once, each read and dropped in 1 MiB pieces."""
    import http.client
    import urllib.parse
    from concurrent.futures import ThreadPoolExecutor

    host = urllib.parse.urlsplit(endpoint)
    os.sync()  # as stoker_epoch

    def get(name):
        conn = http.client.HTTPConnection(host.hostname, host.port)
        conn.request("GET", f"/bench/train/{name}")
        answer, buf = conn.getresponse(), bytearray(1 << 20)
        while answer.readinto(buf):
            pass
        conn.close()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(get, names))
    return time.perf_counter() - t0


def mosaic_python(data):
    """Mosaic's venv's Python, the venv made on the first run."""
    venv = os.path.join(data, "mosaic-venv")
    python = os.path.join(venv, "bin", "python")
    if subprocess.run([python, "-c", "import streaming, h5py"], capture_output=True).returncode != 0:
        print("remote_compare: making Mosaic's venv (mosaicml-streaming)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
        # It sees this venv's packages (torch, h5py, boto3) through a .pth file, so that pip adds
        # Mosaic and what it needs beyond them, not a second torch.
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        with open(os.path.join(site, "stoker-venv.pth"), "w") as f:
            f.write(sysconfig.get_path("purelib") + "\n")
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", python, "install", "-q", "mosaicml-streaming"], check=True
        )
    return python


def mosaic(python, endpoint, local, cache, limit):
    out = subprocess.run(
        [python, os.path.join(HERE, "remote_peer.py"), endpoint, local, cache, str(limit)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "S3_ENDPOINT_URL": endpoint},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-mosaic", action="store_true")
    p.add_argument("--store-cpus", type=int, default=0)
    a = p.parse_args()
    if a.repeats < 1:
        p.error("--repeats must be at least 1")
    cpus = sorted(os.sched_getaffinity(0))
    if not 0 <= a.store_cpus < len(cpus):
        p.error(f"--store-cpus must leave the reader a CPU: this process may use {len(cpus)}")
    store_cpus = set(cpus[len(cpus) - a.store_cpus :]) if a.store_cpus else None
    if store_cpus:  # the reader (this process, every thread and child it starts) on the others
        os.sched_setaffinity(0, set(cpus) - store_cpus)
    local = os.path.join(a.data, f"remote-shards-{a.shards}x{a.samples}")
    make_shards(local, a.shards, a.samples)
    names = sorted(n for n in os.listdir(local) if n.endswith(".h5"))
    total = sum(os.path.getsize(os.path.join(local, n)) for n in names)
    server, endpoint, _ = start_store(local, sys.executable, store_cpus)
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", AWS_REGION="us-east-1"
    )

    def server_cpu():
        """The store's CPU seconds so far: it runs on this machine's cores, beside the loader."""
        with open(f"/proc/{server.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def own_cpu():
        """This process's CPU seconds so far, and its reaped children's (a loader's workers, once
        it is closed; Mosaic's process): the reader's side of a row."""
        me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime

    def row(run):
        before, mine = server_cpu(), own_cpu()
        r = run()
        r["server_cpu_s"] = server_cpu() - before
        r["reader_cpu_s"] = own_cpu() - mine
        return r

    try:
        cache = os.path.join(a.data, "remote-cache")

        def cold(source):
            shutil.rmtree(cache, ignore_errors=True)
            return stoker_epoch(source, a.workers, cache)

        def downloaded():
            seconds = ceiling(endpoint, names, 4)
            return {"samples_per_s": a.shards * a.samples / seconds, "seconds": seconds, "downloaded": total}

        runs = {
            "local": lambda: stoker_epoch(local, a.workers),
            "stoker cold": lambda: cold("s3://bench/train/"),
            "stoker warm": lambda: stoker_epoch("s3://bench/train/", a.workers, cache),  # the cold one's cache
            "cold, no index": lambda: cold("s3://bench/plain/"),
            "ceiling": downloaded,
        }
        tries = {name: [] for name in runs}
        for _ in range(a.repeats):  # in turns: load that drifts over a minute touches every row alike
            for name, run in runs.items():
                tries[name].append(row(run))
        rows = {name: sorted(t, key=lambda r: r["seconds"])[len(t) // 2] for name, t in tries.items()}
        shutil.rmtree(cache, ignore_errors=True)
        down = rows["ceiling"]["seconds"]
        if not a.no_mosaic:
            mosaic_cache = os.path.join(a.data, "mosaic-cache")
            python = mosaic_python(a.data)  # made before the row: its making is no reader's CPU
            rows["mosaic cold"] = row(lambda: mosaic(python, endpoint, local, mosaic_cache, total))
        # A quarter and a half of the set (the labels say each sample's shard: shard * samples + row).
        for part, capacity in (("quarter", max(1, a.shards // 4)), ("half", max(1, a.shards // 2))):
            limit = capacity * os.path.getsize(os.path.join(local, names[0]))
            small = os.path.join(a.data, f"remote-cache-{part}")
            shutil.rmtree(small, ignore_errors=True)
            last_window = list(range((a.shards - 1) // capacity * capacity, a.shards))
            rows[f"{part} cold"] = small_cache_epoch(
                "s3://bench/plain/", a.workers, small, limit, a.samples, a.shards, capacity, last_window
            )
            rows[f"{part} cold"]["capacity"] = capacity
            # The next loader finds the set learned, and starts with the shards the first one left
            # in the cache (the first `capacity` of them in the set's order).
            found = sorted(
                int(f[len("train-") : -len(".h5")]) for _, _, fs in os.walk(small) for f in fs if f.endswith(".h5")
            )
            rows[f"{part} again"] = small_cache_epoch(
                "s3://bench/plain/", a.workers, small, limit, a.samples, a.shards, capacity, found[:capacity]
            )
            rows[f"{part} again"]["capacity"] = capacity
    finally:
        server.kill()
        server.wait()
    print(f"{a.shards} shards x {a.samples} samples, {total / 2**20:.1f} MiB, {a.workers} workers")
    header = f"{'':16}{'samples/s':>12}{'ttfb s':>10}{'seconds':>10}{'MiB down':>10}{'store CPU s':>13}"
    print(header + f"{'reader CPU s':>14}")
    for name, r in rows.items():
        ttfb = f"{r['ttfb_s']:.2f}" if r.get("ttfb_s") is not None else "-"
        cpu = f"{r['server_cpu_s']:.2f}" if "server_cpu_s" in r else "-"
        reader = f"{r['reader_cpu_s']:.2f}" if "reader_cpu_s" in r else "-"
        print(
            f"{name:16}{r['samples_per_s']:>12.0f}{ttfb:>10}{r['seconds']:>10.2f}{r['downloaded'] / 2**20:>10.1f}"
            f"{cpu:>13}{reader:>14}"
        )
    cold = rows["stoker cold"]
    if store_cpus:
        # Each side on CPUs of its own: an epoch takes at least the longer of their CPU times over
        # their CPUs (a lower bound: moto's Python may not use more than one).
        reader_cpus = len(cpus) - len(store_cpus)
        bound = max(cold["server_cpu_s"] / len(store_cpus), cold["reader_cpu_s"] / reader_cpus)
        where = f"the store on {len(store_cpus)} of the {len(cpus)} CPUs, the reader on {reader_cpus}"
    else:
        # The store and the reader share the CPUs: an epoch takes at least their CPU time over the
        # CPUs, however well the reader overlaps its downloads with its reading.
        bound = (cold["server_cpu_s"] + cold["reader_cpu_s"]) / len(cpus)
        where = f"the store and the reader sharing {len(cpus)} CPUs"
    print(
        f"cold epoch: {down / cold['seconds']:.0%} of the download ceiling's speed ({where}; the store took "
        f"{rows['ceiling']['server_cpu_s'] / down:.1f} CPUs for that download); "
        f"{bound / cold['seconds']:.0%} of the CPU bound: the store's {cold['server_cpu_s']:.2f} s and the loader's "
        f"{cold['reader_cpu_s']:.2f} s of CPU, {bound:.2f} s; warm epoch: "
        f"{rows['stoker warm']['samples_per_s'] / rows['local']['samples_per_s']:.0%} of local"
    )
    for name in ("quarter cold", "quarter again", "half cold", "half again"):
        r = rows[name]
        print(
            f"{name}: a cache of {r['capacity']} of {a.shards} shards; before the first batch {r['built_downloads']} "
            f"fetched; the epoch fetched {r['epoch_downloads']} (Belady's count {r['belady']}, LRU's {r['lru']}), "
            f"waited {r['fetch_wait_s']:.2f} s for them"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
