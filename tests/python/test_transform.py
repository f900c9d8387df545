"""transform=: a Python function in the workers. Its output is compared, sample for sample, with the
same function applied in a plain loop to h5py / py-lmdb reads seeded by the documented rule."""

import functools
import os
import signal
import warnings

import h5py
import lmdb
import numpy as np
import pytest
import stoker
import transforms
from conftest import N
from stoker import _transform


def reference(fn, sample, seed, epoch, index, seed_globals=True):
    """fn applied as the docs say a worker applies it."""
    bits = np.random.PCG64()
    _transform.seed_generators(_transform.seed_words(seed, epoch, index), bits, seed_globals)
    return fn(sample, np.random.Generator(bits))


def fixed_sample(f, i):
    return {"image": f["image"][i], "label": f["label"][i], "x": f["x"][i]}


def label_loader(data, transform, workers, batch_size=8, **kwargs):
    """A Loader of the fixed dataset's labels through `transform`, as numpy arrays."""
    return stoker.Loader(
        data["fixed"],
        batch_size=batch_size,
        num_workers=workers,
        framework="numpy",
        fields=["label"],
        transform=transform,
        **kwargs,
    )


def same_for_1_and_3_workers(source, epoch, names, **kwargs):
    """The batches of `epoch` from 1 and from 3 workers, checked equal (order and `names`)."""
    runs = []
    for workers in (1, 3):
        loader = stoker.Loader(source, num_workers=workers, shuffle=True, framework="numpy", **kwargs)
        runs.append(collect(loader, epoch=epoch))
    assert [i for i, _ in runs[0]] == [i for i, _ in runs[1]]
    for (_, a), (_, b) in zip(*runs):
        for name in names:
            np.testing.assert_array_equal(a[name], b[name])
    return runs


def collect(loader, epoch=0):
    loader.set_epoch(epoch)
    it = iter(loader)
    out = []
    for batch in it:
        out.append((list(it.indices), {k: np.array(v) for k, v in batch.items()}))
    return out


def test_the_seed_rule_in_python_equals_the_one_in_cpp():
    from stoker import _core

    for seed, epoch, index in [(0, 0, 0), (1, 2, 3), (2**64 - 1, 7, 10**12)]:
        assert tuple(_core._transform_seed_words(seed, epoch, index)) == _transform.seed_words(seed, epoch, index)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_output_equals_a_plain_loop_sample_for_sample(data, workers):
    loader = stoker.Loader(
        data["fixed"],
        batch_size=16,
        num_workers=workers,
        shuffle=True,
        seed=5,
        framework="numpy",
        transform=transforms.noisy,
        fields=["image", "label"],
    )
    assert [(n, k, d, list(s)) for n, k, d, s in loader.schema] == [
        ("image", "fixed", "f32", [3, 8, 8]),
        ("label", "fixed", "i64", []),
        ("weight", "fixed", "f32", []),
    ]
    seen = []
    with h5py.File(data["fixed"]) as f:
        for indices, batch in collect(loader, epoch=2):
            for k, i in enumerate(indices):
                want = reference(transforms.noisy, {"image": f["image"][i], "label": f["label"][i]}, 5, 2, i)
                for name in ("image", "label", "weight"):
                    np.testing.assert_array_equal(batch[name][k], want[name], err_msg=f"{name} of sample {i}")
            seen += indices
    assert sorted(seen) == list(range(N))


def test_the_global_generators_give_the_same_batches_for_1_and_3_workers(data):
    pytest.importorskip("torch")
    runs = same_for_1_and_3_workers(
        data["fixed"],
        1,
        ("np", "py", "torch", "rng", "label"),
        batch_size=10,
        seed=9,
        transform=transforms.globals_drawn,
        fields=["label"],
    )
    # and as the plain loop seeds them
    import torch  # noqa: F401 - torch's generator is seeded only where torch is imported

    indices, batch = runs[0][0]
    with h5py.File(data["fixed"]) as f:
        want = reference(transforms.globals_drawn, {"label": f["label"][indices[0]]}, 9, 1, indices[0])
    for name in ("np", "py", "torch", "rng"):
        np.testing.assert_array_equal(batch[name][0], np.asarray(want[name]))


def test_torchvision_transforms_give_the_same_batches_for_1_and_3_workers_and_the_plain_loop(data):
    pytest.importorskip("torchvision")
    import torch

    runs = same_for_1_and_3_workers(
        data["jpegs"],
        3,
        ("image",),
        pipeline="data=decode(16,20)",
        batch_size=5,
        seed=4,
        transform=transforms.torchvision_augment,
    )
    assert sorted(i for indices, _ in runs[0] for i in indices) == list(range(24))
    # the plain loop: stoker's decode without workers, then the documented seeds
    plain = stoker.Loader(data["jpegs"], pipeline="data=decode(16,20)", batch_size=24, framework="numpy")
    decoded = next(iter(plain))["data"]
    crops = set()
    for indices, batch in runs[0]:
        for k, i in enumerate(indices):
            want = reference(transforms.torchvision_augment, {"data": decoded[i]}, 4, 3, i)["image"]
            assert isinstance(want, torch.Tensor)
            np.testing.assert_array_equal(batch["image"][k], want.numpy(), err_msg=f"sample {i}")
            crops.add(batch["image"][k].tobytes())
    assert len(crops) == 24  # the draws differ per sample


def test_a_pipeline_runs_before_the_transform(data):
    loader = stoker.Loader(
        data["jpegs"],
        pipeline="data=decode(16,20)",
        batch_size=5,
        num_workers=2,
        framework="numpy",
        transform=transforms.decoded_mean,
    )
    plain = stoker.Loader(data["jpegs"], pipeline="data=decode(16,20)", batch_size=5, framework="numpy")
    got = collect(loader)
    for (indices, batch), (_, decoded) in zip(got, collect(plain)):
        np.testing.assert_allclose(batch["mean"], decoded["data"].reshape(len(indices), -1, 3).mean(axis=1), rtol=1e-6)


def test_an_lmdb_bytes_field_arrives_as_a_read_only_array(data):
    seen = []
    loader = stoker.Loader(
        data["plain_lmdb"], batch_size=7, num_workers=2, framework="numpy", transform=functools.partial(_length_and_sum)
    )
    env = lmdb.open(str(data["plain_lmdb"]), readonly=True, lock=False)
    with env.begin() as txn:
        for indices, batch in collect(loader):
            for k, i in enumerate(indices):
                value = np.frombuffer(txn.get(str(i).encode()), dtype=np.uint8)
                assert batch["n"][k] == len(value)
                assert batch["sum"][k] == int(value.sum())
                seen.append(i)
    assert sorted(seen) == list(range(N))


def _length_and_sum(sample, rng):
    value = next(iter(sample.values()))
    assert not value.flags.writeable
    return {"n": np.int64(len(value)), "sum": np.int64(value.sum())}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_ragged_field_arrives_as_values_and_offsets(data, workers):
    loader = stoker.Loader(
        data["fixed"],
        batch_size=8,
        num_workers=workers,
        framework="numpy",
        transform=transforms.tokens,
        ragged=["tokens"],
        fields=["label"],
    )
    with h5py.File(data["fixed"]) as f:
        for indices, batch in collect(loader):
            assert batch["tokens"].dtype == np.int32
            offsets = batch["tokens.offsets"]
            assert len(offsets) == len(indices) + 1 and offsets[0] == 0
            for k, i in enumerate(indices):
                want = transforms.tokens({"label": f["label"][i]}, None)["tokens"]
                np.testing.assert_array_equal(batch["tokens"][offsets[k] : offsets[k + 1]], want)


def test_a_ragged_field_of_rows_counts_its_offsets_in_rows(data):
    loader = stoker.Loader(
        data["fixed"],
        batch_size=8,
        num_workers=1,
        framework="numpy",
        transform=transforms.boxes,
        ragged={"boxes": 3},
        fields=["label"],
    )
    with h5py.File(data["fixed"]) as f:
        for indices, batch in collect(loader):
            assert batch["boxes"].shape[1:] == (4,)
            offsets = batch["boxes.offsets"]
            for k, i in enumerate(indices):
                want = transforms.boxes({"label": f["label"][i]}, None)["boxes"]
                np.testing.assert_array_equal(batch["boxes"][offsets[k] : offsets[k + 1]], want)


def test_declared_fields_skip_the_learning_and_a_callable_instance_pickles(data):
    loader = stoker.Loader(
        data["fixed"],
        batch_size=9,
        num_workers=2,
        framework="numpy",
        fields=["x"],
        transform=transforms.Scale(3.0),
        transform_output={"x": ("float32", (4,))},
    )
    with h5py.File(data["fixed"]) as f:
        for indices, batch in collect(loader):
            for k, i in enumerate(indices):
                np.testing.assert_array_equal(batch["x"][k], f["x"][i] * 3)


def test_the_transform_runs_in_the_workers(data):
    loader = label_loader(data, transforms.pid, workers=2, batch_size=50)
    pids = {int(p) for _, batch in collect(loader) for p in batch["pid"]}
    assert pids <= set(loader.worker_pids()) and os.getpid() not in pids


def test_resume_with_other_workers_and_batch_size_gives_the_rest_transformed_alike(data):
    kwargs = dict(shuffle=True, seed=4, framework="numpy", transform=transforms.noisy, fields=["image", "label"])
    whole = {
        i: b
        for indices, batch in collect(stoker.Loader(data["fixed"], batch_size=10, num_workers=1, **kwargs))
        for i, b in zip(indices, batch["image"])
    }
    first = stoker.Loader(data["fixed"], batch_size=10, num_workers=1, **kwargs)
    it = iter(first)
    delivered = []
    for _ in range(5):
        next(it)
        delivered += list(it.indices)
    state = first.state_dict()
    first.close()
    second = stoker.Loader(data["fixed"], batch_size=7, num_workers=3, **kwargs)
    second.load_state_dict(state)
    it = iter(second)
    rest = []
    for batch in it:
        for i, image in zip(it.indices, batch["image"]):
            np.testing.assert_array_equal(image, whole[i])
            rest.append(i)
    assert sorted(delivered + rest) == list(range(N))


def test_an_exception_names_the_sample_and_carries_its_traceback(data):
    loader = label_loader(data, transforms.raises_on_17, workers=2, batch_size=8)
    with pytest.raises(stoker.Error) as e:
        collect(loader)
    assert e.value.code == "transform"
    text = str(e.value)
    assert "sample 17" in text and "ValueError: sample seventeen is bad" in text
    assert "transforms.py" in text and "in raises_on_17" in text


def test_a_lambda_is_a_type_error_saying_what_to_do(data):
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        with pytest.raises(TypeError, match="cannot be pickled.*top level of a module.*cloudpickle"):
            stoker.Loader(data["fixed"], num_workers=1, transform=lambda s, r: s)
    else:
        loader = stoker.Loader(
            data["fixed"],
            num_workers=1,
            framework="numpy",
            fields=["label"],
            transform=lambda s, r: {"twice": s["label"] * 2},
        )
        assert collect(loader)[0][1]["twice"][0] == -100


def test_a_shape_that_changes_is_named(data):
    loader = label_loader(data, transforms.shape_changes, workers=1, batch_size=8)
    with pytest.raises(
        stoker.Error, match=r"sample 50: the transform returned field 'x' as f32\[3\], not f32\[2\] as declared"
    ):
        collect(loader)


def test_a_wrong_return_type_is_named(data):
    loader = label_loader(data, transforms.wrong_type, workers=1)
    with pytest.raises(stoker.Error, match="sample 17: the transform returned list, not a dict of fields"):
        collect(loader)
    with pytest.raises(stoker.Error, match="field 'name' is str: return numpy arrays"):
        stoker.Loader(data["fixed"], num_workers=1, fields=["label"], transform=transforms.returns_str_field)


def test_a_transform_that_exits_is_a_worker_death_and_the_sample_is_named(data):
    loader = label_loader(data, transforms.exits_on_17, workers=2, batch_size=8, max_respawns=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(stoker.Error) as e:
            collect(loader)
    assert e.value.code == "worker_died"
    assert "batch 2" in str(e.value)
    # Each of the three workers died on the same sample: it is named, not just its batch.
    assert f"sample 17 of {data['fixed']} killed 3 workers" in str(e.value)
    assert str(e.value).count("while loading sample 17 of") == 1 + 3  # the last death, then all three


def test_a_killed_worker_is_replaced_and_the_data_is_the_same(data):
    kwargs = dict(batch_size=4, framework="numpy", fields=["label"], transform=transforms.slow, shuffle=True, seed=2)
    want = collect(stoker.Loader(data["fixed"], num_workers=2, **kwargs))
    loader = stoker.Loader(data["fixed"], num_workers=2, **kwargs)
    it = iter(loader)
    got = []
    with pytest.warns(stoker.StokerWarning, match="respawn|died|killed"):
        for n, batch in enumerate(it):
            if n == 3:
                os.kill(loader.worker_pids()[1], signal.SIGKILL)
            got.append((list(it.indices), np.array(batch["label"])))
    assert [i for i, _ in got] == [i for i, _ in want]
    for (_, a), (_, b) in zip(got, want):
        np.testing.assert_array_equal(a, b["label"])


def test_a_transform_that_kills_its_host_on_sample_0_is_named(data):
    with pytest.raises(
        stoker.Error,
        match=r"on sample 0, run to learn what it returns: the transform's host \(pid \d+\) exited with status 3",
    ) as e:
        stoker.Loader(data["fixed"], num_workers=1, fields=["label"], transform=_exits_at_once)
    assert e.value.code == "transform"


def _exits_at_once(sample, rng):
    os._exit(3)


def test_a_transform_stuck_past_timeout_is_a_stuck_worker(data):
    loader = label_loader(data, transforms.hangs_on_17, workers=1, batch_size=8, timeout=1, max_respawns=0)
    with pytest.raises(stoker.Error) as e:
        collect(loader)
    assert e.value.code == "worker_stuck"
    assert f"on sample 17 of {data['fixed']} while loading batch 2" in str(e.value)


def test_ctrl_c_during_a_slow_transform_raises_keyboard_interrupt_and_leaves_nothing(data):
    import subprocess
    import sys
    import textwrap

    from test_faults import gone, shm_entries

    before = shm_entries()
    code = f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import stoker, transforms
        loader = stoker.Loader({str(data["fixed"])!r}, batch_size=1, num_workers=1, fields=["label"],
                               transform=transforms.sleeps_long, transform_output={{"label": ("int64", ())}})
        pids = loader.worker_pids()
        host = int(open(f"/proc/{{pids[0]}}/stat").read().rsplit(")", 1)[1].split()[1])
        print(" ".join(map(str, pids + [host])), flush=True)
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
        assert gone(pid), f"process {pid} (a worker or the transform's host) outlived its loader"
    assert shm_entries() <= before


def test_ctrl_c_while_the_host_learns_the_fields_raises_keyboard_interrupt_and_ends_the_host(data):
    import subprocess
    import sys
    import textwrap
    import time

    from test_faults import gone
    from test_threads import children_of

    code = f"""
        import sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import stoker, transforms
        print("constructing", flush=True)
        try:
            stoker.Loader({str(data["fixed"])!r}, batch_size=1, num_workers=1, fields=["label"],
                          transform=transforms.sleeps_in_stokers_processes)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        sys.exit(3)
    """
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "constructing"
    hosts, deadline = [], time.monotonic() + 60
    while not hosts and time.monotonic() < deadline:  # the host, asleep in the call on sample 0
        time.sleep(0.2)
        hosts = [c for c in children_of(p.pid) if "host_main" in _cmdline(c)]
    assert hosts, "no transform host started"
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and "interrupted" in out
    assert gone(hosts[0]), "the host that was learning outlived the interrupted constructor"


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def test_a_loader_with_a_transform_pickles_and_runs_where_it_is_unpickled(data):
    import pickle

    loader = stoker.Loader(
        data["fixed"],
        batch_size=16,
        num_workers=1,
        shuffle=True,
        seed=5,
        framework="numpy",
        transform=transforms.noisy,
        fields=["image", "label"],
    )
    again = pickle.loads(pickle.dumps(loader))
    for (i, a), (j, b) in zip(collect(loader), collect(again)):
        assert i == j
        np.testing.assert_array_equal(a["image"], b["image"])


def test_memfd_in_place_of_a_small_dev_shm_and_the_workers_rss(data):
    loader = stoker.Loader(
        data["fixed"],
        batch_size=16,
        num_workers=2,
        framework="numpy",
        shm_backing="memfd",
        transform=transforms.noisy,
        fields=["image", "label"],
    )
    assert sorted(i for indices, _ in collect(loader) for i in indices) == list(range(N))
    rss = loader.stats()["worker_rss_bytes"]
    assert len(rss) == 2 and all(r > 1 << 20 for r in rss)


@pytest.mark.parametrize("declared", [True, False])
def test_the_users_module_is_imported_once_for_all_workers_and_torch_runs_one_thread(
    data, tmp_path, monkeypatch, declared
):
    """Learnt from sample 0 or declared, the module (and torch) is imported by the workers' host
    alone: the process that ran the transform on sample 0 is the one the workers are forked from."""
    pytest.importorskip("torch")
    import import_counter

    log = tmp_path / "imports"
    monkeypatch.setenv("STOKER_TEST_IMPORTS", str(log))
    output = {"transform_output": {"label": ("int64", ()), "threads": ("int64", ())}} if declared else {}
    loader = label_loader(data, import_counter.label_and_threads, workers=3, batch_size=16, **output)
    batches = collect(loader)
    assert all((b["threads"] == 1).all() for _, b in batches), "torch's pool in a worker is one thread"
    imports = log.read_text().split()
    assert len(imports) == 1, f"imported by {len(imports)} processes: the host alone should"
    assert int(imports[0]) not in loader.worker_pids()
    assert all(_parent(w) == int(imports[0]) for w in loader.worker_pids()), "the workers are the host's children"


def _parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _children():
    """This process's child processes."""
    from test_threads import children_of

    return set(children_of(os.getpid()))


def test_the_host_that_learnt_is_ended_when_no_worker_needs_it_or_the_loader_fails(data):
    before = _children()
    loader = label_loader(data, transforms.pid, workers=0)
    assert _children() == before, "without workers the host that learnt the fields is ended"
    assert sum(len(i) for i, _ in collect(loader)) == N
    with pytest.raises(stoker.Error, match="ragged names"):
        label_loader(data, transforms.pid, workers=2, ragged=["nope"])
    with pytest.raises(stoker.Error, match="batch_size"):
        label_loader(data, transforms.pid, workers=2, batch_size=N + 1, drop_last=True)
    assert _children() == before, "a Loader that failed to build leaves no host"


def test_a_call_that_leaves_a_thread_in_the_host_gets_a_host_started_afresh(data):
    with pytest.warns(UserWarning, match="left 1 threads running in the workers' host"):
        loader = label_loader(data, transforms.starts_a_thread, workers=2)
    got = collect(loader)
    assert sorted(i for indices, _ in got for i in indices) == list(range(N))
    for indices, batch in got:
        np.testing.assert_array_equal(batch["label"], np.array(indices) * 3 - 50)


def test_what_the_transform_prints_is_shown_once_for_the_learning_and_once_per_worker_call(data, capfd):
    loader = label_loader(data, transforms.says_hello_on_sample_0, workers=2)
    collect(loader)
    loader.close()
    out, err = capfd.readouterr()
    assert err.count("hello from sample 0") == 1, "the call that learnt the fields, shown by the trainer"
    assert out.count("hello from sample 0") == 1, "the worker's call, written by the line"


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_share_the_samples_and_transform_them_alike(data, world):
    got = {}
    for rank in range(world):
        loader = stoker.Loader(
            data["fixed"],
            batch_size=8,
            num_workers=1,
            shuffle=True,
            seed=6,
            framework="numpy",
            shard=(rank, world),
            transform=transforms.noisy,
            fields=["image", "label"],
        )
        for indices, batch in collect(loader, epoch=1):
            for k, i in enumerate(indices):
                if i in got:  # a sample repeated to even out the ranks' shares: transformed alike
                    np.testing.assert_array_equal(batch["image"][k], got[i])
                got[i] = batch["image"][k]
    assert sorted(got) == list(range(N))
    with h5py.File(data["fixed"]) as f:
        for i, image in got.items():
            want = reference(transforms.noisy, {"image": f["image"][i], "label": f["label"][i]}, 6, 1, i)
            np.testing.assert_array_equal(image, want["image"])


def test_a_function_of_an_interactive_session_says_what_to_do(data):
    import subprocess
    import sys
    import textwrap

    code = f"""
        import numpy as np, stoker
        def f(sample, rng):
            return {{"label": sample["label"]}}
        try:
            stoker.Loader({str(data["fixed"])!r}, num_workers=1, fields=["label"], transform=f)
        except TypeError as e:
            print(e)
        else:
            print("built")
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        assert "defined in an interactive session" in r.stdout and "install cloudpickle" in r.stdout, r.stdout
    else:
        assert r.stdout.strip() == "built", r.stdout + r.stderr


def test_ctrl_c_in_a_transform_run_here_is_keyboard_interrupt(data):
    loader = label_loader(
        data, transforms.interrupted, workers=0, batch_size=4, transform_output={"label": ("int64", ())}
    )
    with pytest.raises(KeyboardInterrupt):
        collect(loader)


def test_a_transform_that_keeps_its_input_is_told_to_copy(data):
    loader = label_loader(
        data, transforms.keeps_its_input, workers=1, batch_size=4, transform_output={"label": ("int64", ())}
    )
    with pytest.raises(stoker.Error, match=r"sample \d+: the transform kept field 'label' .* keep a copy") as e:
        collect(loader)
    assert e.value.code == "transform"


@pytest.mark.parametrize("declared", [True, False])
def test_a_host_that_cannot_rebuild_the_transform_says_so(data, monkeypatch, declared):
    import import_fails_in_host

    monkeypatch.setenv("STOKER_TEST_HOST_IMPORT_FAILS", "1")
    output = {"transform_output": {"label": ("int64", ())}} if declared else {}
    with pytest.raises(stoker.Error, match="(?s)could not rebuild the transform.*refuses to import here") as e:
        stoker.Loader(data["fixed"], num_workers=1, fields=["label"], transform=import_fails_in_host.label, **output)
    assert e.value.code == "transform"


def test_without_workers_the_trainers_own_generators_go_on_untouched(data):
    import random

    random.seed(11)
    want = [random.random() for _ in range(3)]
    random.seed(11)
    got = [random.random()]
    loader = label_loader(data, transforms.draws_from_random, workers=0, batch_size=8)
    batches = collect(loader)
    got += [random.random() for _ in range(2)]
    assert got == want
    with h5py.File(data["fixed"]) as f:  # and the transform drew as the rule says
        indices, batch = batches[0]
        assert (
            batch["r"][0]
            == reference(transforms.draws_from_random, {"label": f["label"][indices[0]]}, 0, 0, indices[0])["r"]
        )


def test_a_script_that_builds_its_loader_outside_a_main_guard_is_told(data, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "import numpy as np, stoker\n"
        "def f(sample, rng):\n"
        "    return {'label': sample['label']}\n"
        f"loader = stoker.Loader({str(data['fixed'])!r}, num_workers=1, fields=['label'], transform=f)\n"
        "print('built')\n"
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "build Loaders under if __name__ == '__main__'" in r.stderr, r.stderr[-2000:]
