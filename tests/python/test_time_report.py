"""Where the time goes, from Python: stats()' stages, step_seconds and verdict
(docs/observability.md)."""

import time

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
    assert isinstance(s["verdict"], str) and s["verdict"]


def test_a_slow_step_is_the_verdict(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=1, framework="numpy")
    for batch in loader:
        time.sleep(0.01)
    assert loader.stats()["verdict"].startswith("the training step limits throughput"), loader.stats()["verdict"]


def test_pipeline_operations_are_stages(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=0, framework="numpy", pipeline="image=to_chw")
    for batch in loader:
        pass
    assert list(loader.stats()["stages"]) == ["read", "transform", "write", "image: to_chw"]
