"""Faults and lifetimes: a killed worker, Ctrl-C, a forked child, held slots, tensors that outlive
their Loader, a small /dev/shm."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import stoker
from conftest import N
from test_contents import collect, same


def test_sigkilled_worker_is_replaced_with_one_warning_and_the_same_data(data):
    want = collect(stoker.Loader(data["fixed"], batch_size=8, shuffle=True, seed=6, framework="numpy"))
    loader = stoker.Loader(data["fixed"], batch_size=8, num_workers=3, shuffle=True, seed=6, framework="numpy")
    got = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        it = iter(loader)
        for k, batch in enumerate(it):
            got.append((list(it.indices), {f: np.array(v) for f, v in batch.items()}))
            if k == 2:
                os.kill(loader.worker_pids()[1], signal.SIGKILL)
    same(got, want)
    assert loader.stats()["respawns"] == 1
    ours = [w for w in caught if issubclass(w.category, stoker.StokerWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]


def test_every_slot_held_is_an_error_and_freeing_the_tensors_frees_them(data):
    loader = stoker.Loader(data["big"], batch_size=4, num_workers=1, prefetch_factor=2)
    held = []
    with pytest.raises(stoker.Error) as e:
        for batch in loader:
            held.append(batch)
    assert e.value.code == "slots_held" and "slots are held" in str(e.value)
    del held, batch
    gc.collect()
    assert sum(len(b["label"]) for b in loader) == N  # the next epoch has every slot


def test_tensors_outlive_their_loader(data):
    loader = stoker.Loader(data["fixed"], batch_size=16, num_workers=2)
    batches = [dict(b) for _, b in zip(range(2), loader)]
    copies = [{k: v.clone() for k, v in b.items()} for b in batches]
    del loader
    gc.collect()
    for b, c in zip(batches, copies):
        for k in b:
            assert (b[k] == c[k]).all()


def run_python(code, **kw):
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=60, **kw
    )


def test_forked_child_cannot_use_the_loader_and_leaves_the_parent_s_alone(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=2, framework="numpy")
    want = collect(loader)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: using the loader fails, destroying it touches nothing of the parent's
        code = 1
        try:
            iter(loader)
        except stoker.Error as e:
            code = 0 if e.code == "wrong_process" and str(os.getppid()) in str(e) else 2
        del loader
        gc.collect()
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"\x00"
    os.close(r)
    same(collect(loader), want)


def shm_entries():
    try:
        return {e for e in os.listdir("/dev/shm") if "stoker" in e}
    except FileNotFoundError:
        return set()


def test_ctrl_c_during_a_wait_raises_keyboard_interrupt_and_leaves_nothing(data):
    before = shm_entries()
    code = f"""
        import os, signal, sys, stoker
        loader = stoker.Loader({str(data["fixed"])!r}, batch_size=1, num_workers=1)
        pids = loader.worker_pids()
        print(" ".join(map(str, pids)), flush=True)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)  # no batch comes: the loop waits
        try:
            print("waiting", flush=True)
            for batch in loader:
                pass
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            del loader
            sys.exit(0)
        sys.exit(3)
    """
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in p.stdout.readline().split()]
    assert p.stdout.readline().strip() == "waiting"
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and "interrupted" in out
    for pid in pids:
        assert gone(pid), f"worker {pid} outlived its loader"
    assert shm_entries() <= before


def gone(pid):
    """Whether process `pid` has ended: no such process, or a zombie its new parent has not reaped
    yet (a container's init may never reap). The loader's shutdown is waited for, not timed."""
    for _ in range(200):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        import time

        time.sleep(0.05)
    return False


def test_small_dev_shm(data, tmp_path):
    """A 64 MiB /dev/shm, where this user may mount one (a private mount namespace)."""
    code = f"""
        import stoker
        loader = stoker.Loader({str(data["fixed"])!r}, batch_size=64, num_workers=2, framework="numpy")
        print(sum(len(b["label"]) for b in loader))
    """
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64m tmpfs /dev/shm"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip("cannot mount a private /dev/shm here")
    script = tmp_path / "small_shm.py"
    script.write_text(textwrap.dedent(code))
    r = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {sys.executable} {script}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(N)


def test_loaders_built_in_several_threads_at_once(data):
    import threading

    want = collect(stoker.Loader(data["fixed"], batch_size=30, framework="numpy"))
    results, errors = [None] * 3, []

    def run(k):
        try:
            results[k] = collect(stoker.Loader(data["fixed"], batch_size=30, num_workers=2, framework="numpy"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        same(r, want)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_loop_keeps_its_last_batch_in_a_slot_of_its_own(data, workers):
    """``for batch in loader`` keeps the last batch while it asks for the next: the ring holds a
    slot for it beyond num_workers * prefetch_factor, so that prefetch_factor=1 runs and, with
    held_batches=0, the same loop finds every slot held."""
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=workers, prefetch_factor=1, framework="numpy")
    assert loader.stats()["depth"] == max(workers, 1) + 1
    labels = [int(x) for batch in loader for x in batch["label"]]
    assert labels == [k * 3 - 50 for k in range(N)]
    bare = stoker.Loader(
        data["big"], batch_size=10, num_workers=workers, prefetch_factor=1, held_batches=0, framework="numpy"
    )
    with pytest.raises(stoker.Error) as e:
        for batch in bare:
            pass
    assert e.value.code == "slots_held"
    assert "all 1 batch slots are held by batches whose tensors or arrays are alive" in str(e.value)
    assert "raise held_batches to the number of batches you keep" in str(e.value)


def test_an_iterator_keeps_its_loader_alive(data):
    """Nothing but the iterator holds the Loader here: its batches still come, every one."""
    it = iter(stoker.Loader(data["fixed"], batch_size=10, num_workers=1, framework="numpy"))
    gc.collect()
    assert sum(len(batch["label"]) for batch in it) == N


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_loop_that_keeps_a_small_field_of_every_batch_never_runs_out_of_slots(data, framework):
    """labels.append(batch["label"]): a field of at most 64 KiB is a copy of its own, so keeping it
    holds no slot; a large field still aliases the slot."""
    if framework == "torch":
        pytest.importorskip("torch")
    loader = stoker.Loader(data["big"], batch_size=4, num_workers=1, prefetch_factor=1, framework=framework)
    labels, last = [], None
    for batch in loader:
        labels.append(batch["label"])
        last = batch["image"]
    assert [int(x) for b in labels for x in b] == [k * 3 - 50 for k in range(N)]
    assert int(last[-1][0]) == (N - 1) % 256
    kept = []
    with pytest.raises(stoker.Error) as e:  # keeping the large field of every batch is the error it was
        for batch in loader:
            kept.append(batch["image"])
    assert e.value.code == "slots_held"
