"""A soak of real faults: loader-bench loads many shuffled epochs while its workers are SIGKILLed,
stopped and continued at random, and the whole job is suspended and resumed (Ctrl-Z, scontrol
suspend, docker pause); then every epoch's digests must equal an undisturbed run's, no process of
the job may be left, no /dev/shm entry, and the workers' resident memory must stay flat.

usage: soak.py LOADER_BENCH SCRATCH_DIR [--seconds S] [--seed N]
Runs about S seconds (default 60) of disturbed loading; exits 1 with what failed. Deterministic in
what it checks: the faults' timing varies, the data delivered may not.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import h5py
import numpy as np


def make_dataset(path):
    if os.path.exists(path):
        return
    rng = np.random.default_rng(5)
    with h5py.File(path + ".partial", "w") as f:
        f.create_dataset(
            "image",
            data=rng.integers(0, 255, (20000, 3, 16, 16), dtype=np.uint8),
            chunks=(256, 3, 16, 16),
            compression="gzip",
            compression_opts=1,
        )
        f.create_dataset("label", data=np.arange(20000, dtype=np.int64))
    os.rename(path + ".partial", path)


def bench_args(bench, data, epochs):
    return [
        bench,
        "--data",
        data,
        "--epochs",
        str(epochs),
        "--digest",
        "--json",
        "--workers",
        "3",
        "--batch-size",
        "64",
        "--shuffle",
        "--seed",
        "7",
        "--max-respawns",
        "1000000",
        "--timeout",
        "60",
    ]


def digests(stdout):
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [(r["epoch"], r["content_digest"], r["order_digest"]) for r in rows]


def workers_of(pid):
    """The workers: the children of pid's children (the fork server's). The fork server itself is
    not a target: it is the loader's, like the trainer, and its death ends the loader."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    return [w for server in parents.get(pid, []) for w in parents.get(server, [])]


def session_members(sid):
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    members.append(int(entry))
            except OSError:
                pass
    return members


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def stoker_shm():
    return {e for e in os.listdir("/dev/shm") if e.startswith("stoker-")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench")
    p.add_argument("scratch")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    os.makedirs(a.scratch, exist_ok=True)
    data = os.path.join(a.scratch, "soak.h5")
    make_dataset(data)
    rng = random.Random(a.seed)

    # The undisturbed run sizes the disturbed one: as many epochs as fit in the time with faults.
    t0 = time.monotonic()
    ref = subprocess.run(bench_args(a.bench, data, 3), capture_output=True, text=True, check=True)
    per_epoch = (time.monotonic() - t0) / 3
    epochs = max(4, min(400, int(a.seconds / max(per_epoch, 0.05) / 1.5)))
    ref = subprocess.run(bench_args(a.bench, data, epochs), capture_output=True, text=True, check=True)
    want = digests(ref.stdout)

    shm_before = stoker_shm()
    job = subprocess.Popen(
        bench_args(a.bench, data, epochs),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    counts = {"worker SIGKILL": 0, "worker SIGSTOP/SIGCONT": 0, "job SIGSTOP/SIGCONT": 0}
    rss = []  # (time, worker pid, KiB)
    done = threading.Event()

    def disturb():
        while not done.is_set():
            time.sleep(rng.uniform(0.05, 0.2))
            workers = [w for w in workers_of(job.pid) if rss_kib(w) is not None]
            now = time.monotonic()
            for w in workers:
                k = rss_kib(w)
                if k:
                    rss.append((now, w, k))
            action = rng.random()
            try:
                if action < 0.3 and workers:
                    os.kill(rng.choice(workers), signal.SIGKILL)
                    counts["worker SIGKILL"] += 1
                elif action < 0.6 and workers:
                    w = rng.choice(workers)
                    os.kill(w, signal.SIGSTOP)
                    time.sleep(rng.uniform(0.02, 0.2))
                    os.kill(w, signal.SIGCONT)
                    counts["worker SIGSTOP/SIGCONT"] += 1
                elif action < 0.75:
                    os.killpg(job.pid, signal.SIGSTOP)
                    time.sleep(rng.uniform(0.05, 0.3))
                    os.killpg(job.pid, signal.SIGCONT)
                    counts["job SIGSTOP/SIGCONT"] += 1
            except ProcessLookupError:
                pass

    thread = threading.Thread(target=disturb, daemon=True)
    thread.start()
    try:
        out, err = job.communicate(timeout=a.seconds * 10 + 120)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        out, err = job.communicate()
        print(f"FAIL the disturbed run did not finish in {a.seconds * 10 + 120:.0f} s", file=sys.stderr)
        return 1
    finally:
        done.set()
        thread.join()
    failures = []
    if job.returncode != 0:
        failures.append(f"the disturbed run exited {job.returncode}: {err.strip()[-2000:]}")
    got = digests(out)
    if got != want:
        bad = [(w, g) for w, g in zip(want, got) if w != g][:3]
        failures.append(f"digests differ from the undisturbed run's ({len(got)} epochs of {len(want)}): {bad}")
    time.sleep(0.5)
    left = [p for p in session_members(job.pid) if p != job.pid]
    if left:
        failures.append(f"processes of the job left after it ended: {left}")
    leaked = stoker_shm() - shm_before
    if leaked:
        failures.append(f"/dev/shm entries left: {sorted(leaked)}")
    # Resident memory: the workers' largest in the last third of the run against the first third.
    if rss:
        start, end = rss[0][0], rss[-1][0]
        third = (end - start) / 3
        first = max((k for t, _, k in rss if t <= start + third), default=0)
        last = max((k for t, _, k in rss if t >= end - third), default=0)
        if first and last > first * 1.25 + 4096:
            failures.append(f"worker resident memory grew: {first} KiB at most in the first third, {last} in the last")
    respawns = max(
        (json.loads(line).get("respawns", 0) for line in out.splitlines() if line.startswith("{")), default=0
    )
    print(
        f"soak: {epochs} epochs; faults: "
        + ", ".join(f"{n} {k}" for k, n in counts.items())
        + f"; workers replaced: {respawns}"
    )
    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    if not failures:
        print(
            "soak: every epoch's digests equal the undisturbed run's; no process or /dev/shm entry left; "
            "worker memory flat"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
