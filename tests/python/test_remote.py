"""Shards in an S3-compatible store (moto's server, on 127.0.0.1, a bucket the test fills): a
Loader on "s3://bucket/prefix/" or a brace range of keys reads through the node's cache what a
Loader on the same files read locally delivers, for every rank and across a resume; through a
proxy that resets transfers and answers 500 and SlowDown, the same; mistakes are named."""

import os
import pathlib
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import stoker
from conftest import indices_and_labels as epoch

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

SIZES = (40, 25, 35)
FAULT_SERVER = pathlib.Path(__file__).resolve().parents[1] / "remote" / "fault_server.py"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A moto S3 server holding s3://data/train/train-00{0,1,2}.h5 and a README, and the same shards
    in a local directory."""
    local = tmp_path_factory.mktemp("shards")
    for k, n in enumerate(SIZES):
        with h5py.File(local / f"train-00{k}.h5", "w") as f:
            f["label"] = np.arange(n, dtype=np.int64) + 1000 * k
            f["x"] = np.random.default_rng(k).standard_normal((n, 16)).astype(np.float32)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    s3.create_bucket(Bucket="data")
    for k in range(len(SIZES)):
        s3.upload_file(str(local / f"train-00{k}.h5"), "data", f"train/train-00{k}.h5")
    s3.put_object(Bucket="data", Key="train/README.txt", Body=b"not a shard")
    # Neither is part of the prefix's set, as neither would be of a directory's.
    s3.upload_file(str(local / "train-000.h5"), "data", "train/old/train-009.h5")
    s3.upload_file(str(local / "train-000.h5"), "data", "train/.train-010.h5")
    yield {"endpoint": endpoint, "local": local}
    server.stop()


@pytest.fixture
def aws(store, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL", store["endpoint"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws of the machine's
    return store


def make(source, cache, **kw):
    return stoker.Loader(
        source, batch_size=8, shuffle=True, seed=3, framework="numpy", cache_dir=cache, fetch_timeout=30, **kw
    )


def test_a_prefix_reads_as_the_local_shards_and_the_next_loader_finds_the_cache(aws, tmp_path):
    local = epoch(stoker.Loader(str(aws["local"]), batch_size=8, shuffle=True, seed=3, framework="numpy"))
    remote = make("s3://data/train/", tmp_path / "cache", num_workers=2)
    assert epoch(remote) == local
    stats = remote.stats()
    assert (stats["downloads"], stats["cache_hits"]) == (3, 0)
    assert stats["download_bytes"] == sum(os.path.getsize(aws["local"] / f"train-00{k}.h5") for k in range(3))
    again = make("s3://data/train/train-{000..002}.h5", tmp_path / "cache")
    assert (again.stats()["downloads"], again.stats()["cache_hits"]) == (0, 3)
    assert epoch(again) == local


def test_ranks_and_a_resume_are_those_of_the_local_shards(aws, tmp_path):
    for rank in (0, 1):
        local = stoker.Loader(str(aws["local"]), batch_size=8, shuffle=True, seed=3, shard=(rank, 2), framework="numpy")
        assert epoch(make("s3://data/train/", tmp_path / "cache", shard=(rank, 2))) == epoch(local)
    whole = epoch(make("s3://data/train/", tmp_path / "cache"))
    first = make("s3://data/train/", tmp_path / "cache", num_workers=2)
    before = epoch(first, stop_after=5)
    resumed = make("s3://data/train/", tmp_path / "cache")
    resumed.load_state_dict(first.state_dict())
    after = epoch(resumed)
    assert before[0] + after[0] == whole[0]


def test_resets_errors_and_slowdowns_between_the_store_and_the_loader_change_nothing(aws, tmp_path, monkeypatch):
    port_file = tmp_path / "port"
    faults = '{"train-001.h5": ["ok", "reset:3000"], "train-002.h5": ["slowdown", "status:500", "ok", "reset:100"]}'
    proxy = subprocess.Popen(
        [sys.executable, str(FAULT_SERVER), str(tmp_path), str(port_file), "--faults", faults]
        + ["--upstream", aws["endpoint"], "--log", str(tmp_path / "log")]
    )
    try:
        for _ in range(500):
            if port_file.exists():
                break
            time.sleep(0.01)
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port_file.read_text()}")
        local = epoch(stoker.Loader(str(aws["local"]), batch_size=8, shuffle=True, seed=3, framework="numpy"))
        loader = make("s3://data/train/train-{000..002}.h5", tmp_path / "cache", fetch_parallelism=1)
        assert epoch(loader) == local
        assert loader.stats()["fetch_retries"] >= 4
        log = (tmp_path / "log").read_text()
        assert "GET train-001.h5 bytes=3000-" in log and "GET train-002.h5 bytes=100-" in log
    finally:
        proxy.kill()
        proxy.wait()


def transform(sample, rng):
    return {"label": sample["label"] * 2}


def test_a_transform_reads_the_remote_set_too(aws, tmp_path):
    local = epoch(stoker.Loader(str(aws["local"]), batch_size=8, shuffle=True, seed=3, framework="numpy"))
    remote = make("s3://data/train/", tmp_path / "cache", num_workers=1, transform=transform)
    indices, labels = epoch(remote)
    assert indices == local[0] and labels == [2 * v for v in local[1]]


def test_an_http_url_with_a_password_reads_the_set_and_never_shows_the_password(aws, tmp_path):
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, str(FAULT_SERVER), str(aws["local"]), str(port_file)])
    try:
        for _ in range(500):
            if port_file.exists():
                break
            time.sleep(0.01)
        url = f"http://user:secret@127.0.0.1:{port_file.read_text()}/train-{{000..002}}.h5"
        local = epoch(stoker.Loader(str(aws["local"]), batch_size=8, shuffle=True, seed=3, framework="numpy"))
        loader = make(url, tmp_path / "cache")
        assert epoch(loader) == local
        assert "secret" not in repr(loader) and "://***@127.0.0.1" in repr(loader)
        with pytest.raises(stoker.Error) as e:
            make(url.replace("{000..002}", "missing"), tmp_path / "cache")
        assert "secret" not in str(e.value) and "HTTP 404" in str(e.value)
    finally:
        server.kill()
        server.wait()


def test_mistakes_are_named(aws, tmp_path):
    with pytest.raises(stoker.Error, match=r"s3://data/nothing/: holds no shard"):
        make("s3://data/nothing/", tmp_path / "cache")
    with pytest.raises(stoker.Error, match=r"s3://data/train/train-003.h5: the server answered HTTP 404 \(NoSuchKey\)"):
        make("s3://data/train/train-{002..003}.h5", tmp_path / "cache")
    with pytest.raises(stoker.Error, match=r"cache_limit is 1000 B, and shard s3://data/train/train-000.h5 alone"):
        make("s3://data/train/", tmp_path / "small", cache_limit=1000)


def test_a_set_larger_than_the_cache_is_read_through_it_for_every_rank_and_across_a_resume(aws, tmp_path):
    largest = sorted(os.path.getsize(aws["local"] / f"train-00{k}.h5") for k in range(3))
    limit = largest[2] + largest[1]  # two shards of the three at once

    def through_cache(**kw):
        return stoker.Loader(
            "s3://data/train/", batch_size=8, framework="numpy", cache_dir=tmp_path / "cache", cache_limit=limit, **kw
        )

    def local(**kw):
        return stoker.Loader(str(aws["local"]), batch_size=8, framework="numpy", **kw)

    loader = through_cache(num_workers=2)
    built = loader.stats()  # the set read window by window: shards 0 and 1, then 2 in their place
    assert (built["downloads"], built["evictions"]) == (3, 2)
    assert epoch(loader) == epoch(local())
    stats = loader.stats()
    # In order through a cache of two from {2}: 0 beside it, then 1 in place of 0, 2 still there.
    assert (stats["downloads"] - 3, stats["evictions"] - 2) == (2, 1)
    assert stats["fetch_wait_seconds"] <= stats["wait_seconds"]
    for rank in (0, 1):
        assert epoch(through_cache(shard=(rank, 2))) == epoch(local(shard=(rank, 2)))
    first = through_cache(num_workers=2)
    assert first.stats()["downloads"] == 0  # the set as the first loader learned it
    before = epoch(first, stop_after=5)
    resumed = through_cache()
    resumed.load_state_dict(first.state_dict())
    assert before[0] + epoch(resumed)[0] == epoch(local())[0]
    # A batch that reads all three shards cannot be read through a cache of two.
    with pytest.raises(stoker.Error, match=r"reads 3 shards, and the cache holds 2 at once \(cache_limit is "):
        epoch(through_cache(shuffle=True, seed=3))


def test_a_set_stored_with_its_index_starts_without_fetching_it_and_reads_as_the_local_shards(aws, tmp_path):
    shards = tmp_path / "indexed"
    shards.mkdir()
    for k in range(len(SIZES)):
        (shards / f"train-00{k}.h5").write_bytes((aws["local"] / f"train-00{k}.h5").read_bytes())
    local = stoker.Loader(str(shards), batch_size=8, shuffle=True, seed=3, framework="numpy")
    assert local.write_index() == str(shards / "stoker-index.json")
    s3 = boto3.client("s3", endpoint_url=aws["endpoint"], region_name="us-east-1")
    for name in sorted(os.listdir(shards)):
        s3.upload_file(str(shards / name), "data", f"indexed/{name}")
    remote = make("s3://data/indexed/", tmp_path / "cache", num_workers=2)
    assert remote.stats()["downloads"] == 0  # nothing fetched to count the samples
    assert epoch(remote) == epoch(local)
    assert remote.stats()["downloads"] == 3
