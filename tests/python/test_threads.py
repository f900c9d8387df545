"""A Loader used from several Python threads: threads that pull from one iterator (a prefetching
thread) get each batch once, in order; stats(), state_dict(), worker_pids() and close() from another
thread while one waits; the interpreter exiting while a daemon thread is inside stoker; Ctrl-C while
a Loader is being built."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import stoker
from conftest import N
from test_faults import gone, shm_entries


def labels_of(batch):
    return [int(x) for x in np.asarray(batch["label"].cpu() if hasattr(batch["label"], "cpu") else batch["label"])]


def waits_for_a_batch_that_cannot_come(loader, waited_before):
    """Returns once the iterating thread has taken what was prefetched and waits on: more than a
    slice (100 ms) of its wait counted."""
    while loader.stats()["wait_seconds"] < waited_before + 0.15:
        time.sleep(0.01)


@pytest.mark.parametrize("framework,copy", [("numpy", False), ("numpy", True), ("torch", False), ("torch", True)])
def test_threads_pulling_from_one_iterator_get_each_batch_once_in_order(data, framework, copy):
    # Each of the three threads holds its last batch while it waits for the next.
    loader = stoker.Loader(data["fixed"], batch_size=2, num_workers=2, framework=framework, copy=copy, held_batches=3)
    want = [k * 3 - 50 for k in range(N)]
    for _ in range(4):
        it = iter(loader)
        taken = [[] for _ in range(3)]  # per thread: the labels of its batches, in the order it got them
        errors = []

        def pull(mine):
            try:
                for batch in it:
                    mine.append(labels_of(batch))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=pull, args=(mine,)) for mine in taken]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for mine in taken:
            assert mine == sorted(mine), "a thread's batches came out of order"
        assert sorted(x for mine in taken for batch in mine for x in batch) == want
        assert len([b for mine in taken for b in mine]) == len(loader)


def test_stats_state_and_worker_pids_answer_while_another_thread_waits(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=2, framework="numpy")
    it = iter(loader)
    next(it)
    pids = loader.worker_pids()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)  # the iterating thread waits for a batch that cannot come
    got = [1]

    def pull():
        for _ in it:
            got[0] += 1

    waited = loader.stats()["wait_seconds"]
    t = threading.Thread(target=pull)
    t.start()
    try:
        waits_for_a_batch_that_cannot_come(loader, waited)
        for _ in range(20):
            assert loader.worker_pids() == pids
            assert loader.stats()["workers"] == 2
            assert loader.state_dict()["epoch_finished"] is False
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    t.join()
    assert got[0] == len(loader) and loader.state_dict()["epoch_finished"] is True


def test_close_from_another_thread_ends_a_wait_and_the_workers(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=1, framework="numpy", shutdown_grace=0.1)
    it = iter(loader)
    next(it)
    pids = loader.worker_pids()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    caught = []

    def pull():
        try:
            for _ in it:
                pass
        except stoker.Error as e:
            caught.append(e)

    waited = loader.stats()["wait_seconds"]
    t = threading.Thread(target=pull)
    t.start()
    waits_for_a_batch_that_cannot_come(loader, waited)
    loader.close()
    t.join()
    assert len(caught) == 1 and caught[0].code == "invalid_option"
    assert "this epoch's Loader was destroyed" in str(caught[0])
    assert loader.closed
    for pid in pids:
        assert gone(pid)


EXIT_SCRIPT = """
    import os, signal, sys, threading, stoker
    source, framework, case = sys.argv[1:4]
    loader = stoker.Loader(source, batch_size=2, num_workers=2, framework=framework)
    print(" ".join(map(str, loader.worker_pids())), flush=True)
    it = iter(loader)
    inside = threading.Barrier({threads} + 1)

    # torch frees a tensor with the GIL released (THPVariable_clear), and a daemon thread that frees
    # one as finalization starts aborts the process, stoker or not (pytorch/pytorch#38228): with
    # torch, this thread keeps its batches, so that only stoker's own frames meet the exit.
    kept = [] if framework == "torch" else None

    def pull():
        inside.wait()
        if case == "waiting":
            for batch in it:
                pass
        while True:  # epoch after epoch: inside stoker or between its calls at exit
            for batch in loader:
                if kept is not None:
                    kept.append(batch)

    if case == "waiting":  # a batch that cannot come: the threads wait in stoker, one for its turn
        for pid in loader.worker_pids():
            os.kill(pid, signal.SIGSTOP)
    threads = [threading.Thread(target=pull, daemon=True) for _ in range({threads})]
    for t in threads:
        t.start()
    inside.wait()
    print("exiting", flush=True)
"""


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("case,threads", [("waiting", 2), ("busy", 1)])
def test_interpreter_exit_with_daemon_threads_inside_stoker_ends_quietly(data, tmp_path, framework, case, threads):
    """No abort (std::terminate when Python ends a waiting thread), no report of leaked objects, no
    worker and no /dev/shm entry left."""
    before = shm_entries()
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent(EXIT_SCRIPT.format(threads=threads)))
    for _ in range(3):
        p = subprocess.run(
            [sys.executable, str(script), str(data["fixed"]), framework, case],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )
        assert p.returncode == 0, p.stderr
        assert p.stderr == ""
        pids, said = p.stdout.splitlines()
        assert said == "exiting"
        for pid in pids.split():
            assert gone(int(pid)), f"worker {pid} outlived the interpreter"
    assert shm_entries() <= before


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def test_ctrl_c_while_a_loader_is_built_raises_keyboard_interrupt_and_leaves_nothing(tmp_path):
    """A dataset whose first read never ends (a FIFO nobody writes), with no limit on it (timeout=0):
    only Ctrl-C ends the constructor, and it does at once."""
    fifo = tmp_path / "never.h5"
    os.mkfifo(fifo)
    before = shm_entries()
    code = f"""
        import stoker, sys
        print("building", flush=True)
        try:
            stoker.Loader({str(fifo)!r}, num_workers=2, timeout=0)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        sys.exit(3)
    """
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "building"
    probe = None
    for _ in range(600):  # the probe that reads the file is started: the constructor waits for it
        kids = children_of(p.pid)
        if kids:
            probe = kids[0]
            break
        threading.Event().wait(0.05)
    assert probe is not None
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and out.strip() == "interrupted"
    assert gone(probe)
    assert shm_entries() <= before
