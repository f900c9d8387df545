"""The Loader's keyword arguments checked: each one's type (TypeError) and the values Python
decides (stoker.Error naming the argument), before any process starts, and the C++ Options they
make (_core.Options is stoker::Options itself: its defaults are the library's, and an enum's names
come from stoker/option_values.h); the values themselves are checked by the C++ Loader, which names
them."""

import numbers
import os

from . import _core
from ._errors import Error

_FRAMEWORKS = ("torch", "numpy")


def _bad(name, message):
    return Error(f"stoker: {name}: {message}", "invalid_option")


def _int(name, value, minimum=0, maximum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"stoker: {name} must be an int, not {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise _bad(name, f"must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise _bad(name, f"must be at most {maximum}, not {value}")
    return value


def _bool(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"stoker: {name} must be a bool, not {type(value).__name__}")
    return value


def _str(name, value):
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"stoker: {name} must be a str, not {type(value).__name__}")
    return value


def _device(value):
    """The device as stoker spells it: a torch.device (or anything with its type and index, as
    Accelerate's accelerator.device is) becomes its text, and torch's "cpu:0" is "cpu"."""
    if not isinstance(value, (str, os.PathLike)) and hasattr(value, "type") and hasattr(value, "index"):
        value = value.type if value.index is None else f"{value.type}:{value.index}"
    value = _str("device", value)
    return "cpu" if value.startswith("cpu:") and value[4:].isdigit() else value


def _seconds(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"stoker: {name} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if not 0 <= value <= 2**31:
        raise _bad(name, f"must be a number of seconds from 0 to 2**31, not {value}")
    return value


def _mix(sources):
    """A mix's [(path, weight)], each entry a stoker.Source."""
    from ._source import Source

    if isinstance(sources, (str, os.PathLike)) or not hasattr(sources, "__iter__"):
        raise TypeError("stoker: sources must be a list of stoker.Source")
    mix = []
    for k, s in enumerate(sources):
        if not isinstance(s, Source):
            raise TypeError(
                f"stoker: sources[{k}] is a {type(s).__name__}, not a stoker.Source (a list of shards is source=[...])"
            )
        path = _str(f"sources[{k}].path", s.path)
        if isinstance(s.weight, bool) or not isinstance(s.weight, numbers.Real):
            raise TypeError(f"stoker: sources[{k}].weight must be a number, not {type(s.weight).__name__}")
        mix.append((path, float(s.weight)))
    if not mix:
        raise _bad("sources", "is an empty list: a mix needs at least one stoker.Source")
    return mix


def _options(cfg):
    """The C++ Options for a Loader's keyword arguments, every type checked before any process
    starts; the values themselves are checked by the C++ Loader, which names them."""
    o = _core.Options()
    source = cfg["source"]
    if cfg["sources"] is not None:
        if source is not None:
            raise _bad("sources", "a mix names its datasets itself: pass source or sources, not both")
        o.mix = _mix(cfg["sources"])
        if cfg["samples_per_epoch"] is not None:
            o.samples_per_epoch = _int("samples_per_epoch", cfg["samples_per_epoch"], 1, 2**64 - 1)
    elif source is None:
        raise TypeError("stoker: Loader needs source (a dataset) or sources (a mix of stoker.Source)")
    elif isinstance(source, (list, tuple)):
        if not source:
            raise _bad("source", "is an empty list of shards")
        o.sources = [_str("source", os.fspath(s) if isinstance(s, os.PathLike) else s) for s in source]
    else:
        o.source = _str("source", source)
    if cfg["sources"] is None and cfg["samples_per_epoch"] is not None:
        raise _bad("samples_per_epoch", "applies to a mix (sources=[stoker.Source(...), ...]), not to one dataset")
    o.max_open_shards = _int("max_open_shards", cfg["max_open_shards"], 1)
    if cfg["cache_dir"] is not None:
        o.cache_dir = _str("cache_dir", cfg["cache_dir"])
    o.cache_limit = _int("cache_limit", cfg["cache_limit"], 0, 2**64 - 1)
    o.fetch_parallelism = _int("fetch_parallelism", cfg["fetch_parallelism"], 1, 256)
    o.fetch_timeout_s = _seconds("fetch_timeout", cfg["fetch_timeout"])
    o.format = _str("format", cfg["format"])
    fields = cfg["fields"]
    if fields is not None:
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise TypeError("stoker: fields must be a list of str")
        o.fields = list(fields)
    o.group = _str("group", cfg["group"])
    lmdb_keys = cfg["lmdb_keys"]
    if lmdb_keys is not None:
        if isinstance(lmdb_keys, dict):
            lmdb_keys = ",".join(f"{_str('lmdb_keys', k)}={_str('lmdb_keys', v)}" for k, v in lmdb_keys.items())
        o.lmdb_keys = _str("lmdb_keys", lmdb_keys)
    if cfg["lmdb_count_key"] is not None:
        o.lmdb_count_key = _str("lmdb_count_key", cfg["lmdb_count_key"])
    pipeline = cfg["pipeline"]
    if pipeline is not None:
        if not isinstance(pipeline, str):
            pipeline = ";".join(_str("pipeline", p) for p in pipeline)
        o.pipeline = pipeline
    libraries = cfg["op_libraries"]
    if libraries is not None:
        if isinstance(libraries, (str, os.PathLike)) or not hasattr(libraries, "__iter__"):
            raise TypeError("stoker: op_libraries must be a list of paths")
        o.op_libraries = [_str("op_libraries", os.fspath(p) if isinstance(p, os.PathLike) else p) for p in libraries]
    if cfg["trace"] is not None:
        o.trace = _str("trace", os.fspath(cfg["trace"]) if isinstance(cfg["trace"], os.PathLike) else cfg["trace"])
    o.max_image_pixels = _int("max_image_pixels", cfg["max_image_pixels"], 1, 2**64 - 1)
    o.on_decode_error = _str("on_decode_error", cfg["on_decode_error"])
    o.batch_size = _int("batch_size", cfg["batch_size"], 1)
    if cfg["num_workers"] == "auto":
        o.num_workers = _core.AUTO
    else:
        o.num_workers = _int("num_workers", cfg["num_workers"], 0)
    if cfg["prefetch_factor"] == "auto":
        o.prefetch = _core.AUTO
    else:
        o.prefetch = _int("prefetch_factor", cfg["prefetch_factor"], 1)
    o.held_batches = _int("held_batches", cfg["held_batches"], 0)
    order = cfg["order"]
    if order is not None:
        order = _str("order", order)
        o.order = order
    o.shuffle = _bool("shuffle", cfg["shuffle"])
    if o.shuffle and order == "sequential":
        raise _bad("shuffle", "shuffle=True and order='sequential' contradict each other: pass one of them")
    o.seed = _int("seed", cfg["seed"], 0, 2**64 - 1)
    o.drop_last = _bool("drop_last", cfg["drop_last"])
    shard = cfg["shard"]
    if shard == "env":
        o.shard_from_env()
    elif shard is not None:
        if isinstance(shard, str) or not hasattr(shard, "__len__") or len(shard) != 2:
            raise TypeError("stoker: shard must be None, (rank, world_size) or 'env'")
        world = _int("shard world_size", shard[1], 1, 2**32 - 1)
        o.shard_rank = _int("shard rank", shard[0], 0, world - 1)
        o.shard_world_size = world
    if cfg["shm_budget"] is not None:
        o.shm_budget = _int("shm_budget", cfg["shm_budget"], 1, 2**64 - 1)
    if isinstance(cfg["shm_fraction"], bool) or not isinstance(cfg["shm_fraction"], numbers.Real):
        raise TypeError("stoker: shm_fraction must be a float")
    o.shm_fraction = float(cfg["shm_fraction"])
    o.shm_backing = _str("shm_backing", cfg["shm_backing"])
    if cfg["timeout"] is not None:
        o.timeout_s = _seconds("timeout", cfg["timeout"])
    o.max_respawns = _int("max_respawns", cfg["max_respawns"], 0, 2**32 - 1)
    o.worker_oom_score_adj = _int("worker_oom_score_adj", cfg["worker_oom_score_adj"], 0, 1000)
    o.shutdown_grace_s = _seconds("shutdown_grace", cfg["shutdown_grace"])
    o.device = _str("device", cfg["device"])
    o.prefetch_to_device = _int("prefetch_to_device", cfg["prefetch_to_device"], 1)
    o.staging = _str("staging", cfg["staging"])
    return o


def _framework(framework, device):
    """The framework named and, for torch on a GPU, the function giving torch's current stream
    (None otherwise); torch is imported here, so that its absence is an error naming the argument."""
    framework = _str("framework", framework)
    if framework not in _FRAMEWORKS:
        raise _bad("framework", f"'{framework}' is not one of 'torch', 'numpy'")
    if framework == "numpy" and device.startswith("cuda"):
        raise _bad(
            "framework",
            f"'numpy' holds no GPU memory, and device is '{device}': pass framework='torch', or device='cpu'",
        )
    current_stream = None
    if framework == "torch":
        try:
            import torch
        except ImportError as e:
            raise _bad(
                "framework", f"'torch' needs torch, which is not installed ({e}): pass framework='numpy'"
            ) from None
        if device.startswith("cuda"):
            where = None if device == "cuda" else device
            current_stream = lambda: torch.cuda.current_stream(where).cuda_stream  # noqa: E731
    return framework, current_stream
