"""transform='s host, an exec of the trainer's interpreter (stoker/transform.h): it answers what the
transform returns on sample 0 when asked, builds the Runner once, then forks the workers, which
share what it imported. Its entry, host_main, is run as ``_transform.host_main()``."""

import importlib
import json
import os
import pickle
import sys

from ._errors import Error
from ._transform_runner import Runner, _array, _failure, _Refused
from ._transform_seeds import seed_generators, seed_words

# Set in the transform's host: a Loader with a transform
# built there is the user's script run again at import (as __mp_main__), not a training job.
_IN_WORKERS_ENV = "STOKER_TRANSFORM_PROCESS"


# The function the host unpickled to answer (its pickle, and it): _build takes it rather than
# unpickle it again.
_answered = (None, None)


def _function(cfg):
    """The function a payload carries, unpickled in this process (once)."""
    global _answered
    if _answered[0] == cfg["fn"]:
        return _answered[1]
    sys.path[:] = cfg["sys_path"]
    if cfg["main"] and "__mp_main__" not in sys.modules:
        import multiprocessing.spawn

        multiprocessing.spawn.import_main_path(cfg["main"])
    if cfg["pickler"] == "cloudpickle":
        import cloudpickle  # noqa: F401 - what its pickles load with
    _answered = (cfg["fn"], pickle.loads(cfg["fn"]))
    return _answered[1]


def _build(payload):
    """The Runner a payload describes, its function unpickled in this process."""
    cfg = pickle.loads(payload)
    fn = _function(cfg)
    for module in cfg.get("imports", ()):
        try:  # what the function imported when it ran on sample 0, for a host that did not run it
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the function imports it again, and says why if it cannot
            pass
    _one_thread_torch()
    return Runner(fn, cfg["seed"], cfg.get("names", ()), cfg["seed_globals"])


def _one_thread_torch():
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)  # as DataLoader's workers: one thread each


def _one_thread_pools():
    # The host forks the workers: no pool may have started threads in it, whatever the trainer's
    # environment asks for its own process.
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[v] = "1"
    os.environ[_IN_WORKERS_ENV] = "1"


def host_main():
    """The transform host's whole life (stoker/transform.h): answers what the transform returns on
    sample 0 when asked (_answer), then forks the workers; never returns."""
    _one_thread_pools()
    # Workers end with _exit, which flushes nothing: what the transform prints goes out by the line.
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    from . import _core

    _core._serve_transform_host(_build, _answer)


def _answer(question):
    """Reads sample 0 without workers and runs the transform on it: its fields, the modules the
    call imported and the threads it left, as JSON. What the call writes goes to the trainer's log."""
    request = pickle.loads(question)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    log = request.get("log")
    if log is not None:
        log = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        os.dup2(log, 1)
        os.dup2(log, 2)
    try:
        answer = _run_on_sample_0(request)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + ([log] if log is not None else []):
            os.close(fd)
    answer["threads"] = len(os.listdir("/proc/self/task"))
    return json.dumps(answer).encode()


def _run_on_sample_0(request):
    try:
        from ._loader import Loader

        read = request["read"]
        loader = Loader(**read, batch_size=1, num_workers=0, shard=(0, 1), framework="numpy", copy=True)
        batch = next(iter(loader))
        sample = {}
        for name, kind, _dtype, _shape in loader.schema:
            if kind == "bytes":
                o = batch[name + ".offsets"]
                sample[name] = batch[name][o[0] : o[1]]
            else:
                sample[name] = batch[name][0]
            sample[name].setflags(write=False)
        loader.close()
        del loader, batch
        cfg = pickle.loads(request["payload"])
        try:
            fn = _function(cfg)
        except Exception as e:  # noqa: BLE001 - the user's pickle or modules
            return {"error": f"the workers' host could not rebuild the transform: {_failure(e)}"}
        runner = Runner(fn, cfg["seed"], (), cfg["seed_globals"])
        seed_generators(seed_words(runner.seed, 0, 0), runner._bits, runner.seed_globals)
        _one_thread_torch()
        before = set(sys.modules)
        try:
            result = runner.fn(sample, runner.rng)
        except Exception as e:  # noqa: BLE001
            return {"error": _failure(e)}
        _one_thread_torch()
        if not isinstance(result, dict):
            return {"error": f"the transform returned {type(result).__name__}, not a dict of fields"}
        import numpy

        fields = []
        for name, value in result.items():
            a = _array(numpy, name, value)
            fields.append((name, a.dtype.name, list(a.shape), a.nbytes))
        # What the call imported (torch inside the function, say): a host started afresh (this one
        # left threads, or a fork server was replaced) imports it before it forks its workers.
        imported = sorted({m.split(".")[0] for m in set(sys.modules) - before if not m.startswith("_")})
        return {"fields": fields, "imports": imported}
    except _Refused as e:
        return {"error": str(e)}
    except Error as e:
        return {"error": str(e), "code": e.code}
