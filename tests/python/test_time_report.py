"""Where the time goes, from Python: stats()' stages, step_seconds and verdict
(docs/observability.md)."""

import json
import time

import pytest
import stoker
import transforms


def test_stats_say_where_the_time_goes(data):
    loader = stoker.Loader(
        data["fixed"],
        batch_size=10,
        num_workers=2,
        framework="numpy",
        fields=["label"],
        transform=transforms.slow,  # 10 ms a sample
    )
    for batch in loader:
        time.sleep(0.002)
    s = loader.stats()
    assert list(s["stages"]) == ["read", "transform", "write"]
    assert s["stages"]["transform"] >= 203 * 0.01, "every sample's 10 ms, in whichever worker"
    assert s["step_seconds"] >= 21 * 0.002
    assert 0 < s["first_wait_seconds"] <= s["wait_seconds"]
    assert isinstance(s["verdict"], str) and s["verdict"]


def test_a_slow_step_is_the_verdict(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=1, framework="numpy")
    for batch in loader:
        time.sleep(0.05)
    assert loader.stats()["verdict"].startswith("the training step limits throughput"), loader.stats()["verdict"]


def test_pipeline_operations_are_stages(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=0, framework="numpy", pipeline="image=to_chw")
    for batch in loader:
        pass
    assert list(loader.stats()["stages"]) == ["read", "transform", "write", "image: to_chw"]


def test_a_trace_file_loads_and_holds_each_batch(data, tmp_path):
    path = tmp_path / "run.json"
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=2, framework="numpy", trace=path)
    batches = sum(1 for _ in loader)
    assert batches == len(loader)
    loader.close()  # the trace written out
    events = json.loads(path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {0: "consumer", 1: "worker 0", 2: "worker 1"}
    spans = [e for e in events if e["ph"] == "X" and e["name"].startswith("batch ")]
    assert len(spans) == batches
    assert sorted(int(e["name"].split()[1]) for e in spans) == list(range(batches))


def test_torch_profiler_sees_each_wait_as_a_named_range(data):
    torch = pytest.importorskip("torch")
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=1, framework="torch")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        batches = sum(1 for _ in loader)
    waits = [e.count for e in prof.key_averages() if e.key == "stoker.wait"]
    assert waits == [batches + 1], "each call of the iterator, the one that ends the epoch included"
    assert loader.stats()["batches"] == batches


def test_a_thread_the_profiler_does_not_record_opens_no_range(data, monkeypatch):
    """torch's flag that a profiler records is the whole process's; whether it records a thread is
    asked of torch, so that a loop in another thread pays for no range nobody sees."""
    torch = pytest.importorskip("torch")
    import threading

    opened = []
    real = torch.autograd.profiler.record_function

    def counted(name):
        opened.append(threading.get_ident())
        return real(name)

    monkeypatch.setattr(torch.autograd.profiler, "record_function", counted)  # as the Loader finds it
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=1, framework="torch")
    counts = {}

    def iterate(key):
        counts[key] = sum(1 for _ in loader)

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        other = threading.Thread(target=iterate, args=("other",))
        other.start()
        other.join()
        iterate("profiled")
    assert counts["other"] == counts["profiled"] > 0
    assert opened == [threading.get_ident()] * (counts["profiled"] + 1), "the profiled thread's calls alone"


def test_a_trace_file_that_cannot_be_written_is_named(data, tmp_path):
    path = tmp_path / "no-such-dir" / "run.json"
    with pytest.raises(stoker.Error, match=f"the trace file {path} \\(trace\\)") as e:
        stoker.Loader(data["fixed"], num_workers=0, trace=path)
    assert e.value.code == "io"
