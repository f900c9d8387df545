"""transform=: a Python function run in stoker's workers on every sample (docs/transform.md).

The trainer pickles the function and starts its host, an exec of this interpreter, which unpickles
it and runs it on the first sample to say what it returns (unless declared); the C++ Loader gets a
Runner (used without workers), that host and its argv. The host builds the Runner once, then forks
the workers, which share what it imported to answer.

This module is the trainer's side (configure: pickle, learn, configure); the seed rule is in
_transform_seeds, the Runner in _transform_runner, the host's side in _transform_host. The host's
argv runs ``_transform.host_main()`` and the docs name ``stoker._transform.seed_words`` and
``seed_generators``: those three are imported here, to stay where they are named."""

import json
import os
import pickle
import sys
import tempfile
import time

from ._errors import Error
from ._transform_host import _IN_WORKERS_ENV, host_main  # noqa: F401 - host_main: the host's argv runs it from here
from ._transform_runner import _NUMPY_TO_STOKER, Runner
from ._transform_seeds import seed_generators, seed_words  # noqa: F401 - stoker._transform's, as documented


def _interactive(fn):
    """Whether fn was defined where the workers cannot import it from: the __main__ of a session
    with no script (a notebook, python -c, the REPL)."""
    main = sys.modules.get("__main__")
    module = getattr(fn, "__module__", None) or getattr(getattr(fn, "func", None), "__module__", None)
    return module == "__main__" and not getattr(main, "__file__", None)


def _pickled(fn):
    """The function's pickle and the module that made it: pickle, or cloudpickle for what pickle
    cannot take (a lambda, a closure, a function of a notebook) where cloudpickle is installed."""
    if _interactive(fn):
        why = "it was defined in an interactive session (a notebook, python -c), which the workers cannot import"
    else:
        try:
            return pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL), "pickle"
        except Exception as e:  # noqa: BLE001 - pickle raises several kinds
            why = f"{type(e).__name__}: {e}"
    try:
        import cloudpickle
    except ImportError:
        raise TypeError(
            f"stoker: transform={fn!r} cannot be pickled ({why}), and the workers receive it "
            "by pickle: define it with def at the top level of a module (not a lambda, nor a function defined "
            "inside another), a callable class instance or functools.partial of one; or install cloudpickle, "
            "which stoker then uses for such functions"
        ) from None
    return cloudpickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL), "cloudpickle"


def _main_path(data):
    """The trainer's script, when the pickle names something of __main__: the host imports it as
    __mp_main__ (as multiprocessing's spawn does), so that its functions resolve."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path and b"__main__" in data else None


_READ_KEYS = (
    "source",
    "sources",
    "samples_per_epoch",
    "cache_dir",
    "cache_limit",
    "fetch_parallelism",
    "fetch_timeout",
    "fields",
    "group",
    "pipeline",
    "format",
    "lmdb_keys",
    "lmdb_count_key",
    "max_image_pixels",
    "on_decode_error",
    "max_open_shards",
    "op_libraries",
)


def _named(cfg):
    """The dataset names of a Loader's keywords: its source (a str or a list) or its mix's paths."""
    if cfg.get("sources") is not None:
        return [str(s.path) for s in cfg["sources"]]
    source = cfg["source"]
    return [str(s) for s in source] if isinstance(source, (list, tuple)) else [str(source)]


def _remote(name):
    return name.startswith(("http://", "https://", "s3://"))


def _learn(cfg, payload, timeout):
    """Starts the transform's host, which runs the transform on sample 0 and says what it returned:
    ([(name, dtype, shape, sample bytes)], the modules the call imported, the host or None). What
    the transform imported there (its modules, torch inside the function) stays imported for the
    workers the host then forks; a call that left threads running there gives no host (the Loader
    starts one afresh: workers are forked from a process of one thread)."""
    from . import _core

    deadline = time.monotonic() + timeout
    # What the call writes (a print, a C library's complaint, a crash's last words) goes to a file
    # of its own: shown here once, or in the error when the call fails.
    with tempfile.NamedTemporaryFile(prefix="stoker-transform-", suffix=".log") as log:
        host = _core.StartedHost.start(_python_argv("from stoker import _transform; _transform.host_main()"))
        try:
            question = {"payload": payload, "read": {k: cfg[k] for k in _READ_KEYS}, "log": log.name}
            host.ask(pickle.dumps(question), timeout)
            while (text := host.answer(0.1)) is None:  # in slices: Ctrl-C is seen here at once
                if time.monotonic() > deadline:
                    raise Error(
                        f"stoker: transform: learning what it returns from sample 0 took more than {timeout:g} s (in "
                        f"the workers' host, pid {host.pid}): declare its fields instead (transform_output=)",
                        "transform",
                    )
        except Error as e:
            host.discard()
            if e.code != "transform" or str(e).startswith("stoker: transform:"):
                raise
            why = str(e).removeprefix("stoker: ") + _tail(log)
            raise Error(f"stoker: transform: on sample 0, run to learn what it returns: {why}", "transform") from None
        except BaseException:
            host.discard()
            raise
        answer = json.loads(text.decode())
        if "error" in answer:
            host.discard()
            raise Error(
                f"stoker: transform: on sample 0 (run to learn what it returns): {answer['error']}" + _tail(log),
                answer.get("code", "transform"),
            )
        log.seek(0)
        if said := log.read():
            sys.stderr.write(said.decode(errors="replace"))
            sys.stderr.flush()
    if answer["threads"] > 1:
        import warnings

        warnings.warn(
            f"stoker: transform: its call on sample 0 left {answer['threads'] - 1} threads running in the workers' "
            "host (a library's thread pool): workers are forked from a process of one thread, so the Loader starts "
            "another host, which imports the transform's modules again",
            stacklevel=4,
        )
        host.discard()
        host = None
    return answer["fields"], answer["imports"], host


def _tail(log):
    """The last lines the call wrote, for an error."""
    log.seek(0)
    said = log.read().decode(errors="replace").strip()
    return f"\n{said[-4000:]}" if said else ""


def _python_argv(code):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {here!r}); {code}"]


def _declared(transform_output):
    if not isinstance(transform_output, dict) or not transform_output:
        raise TypeError("stoker: transform_output must be a non-empty dict {name: (dtype, shape)}")
    out = []
    for name, spec in transform_output.items():
        if not isinstance(name, str) or not isinstance(spec, (tuple, list)) or len(spec) != 2:
            raise TypeError(f"stoker: transform_output[{name!r}] must be (dtype, shape)")
        import numpy

        dtype = numpy.dtype(spec[0]).name
        if dtype not in _NUMPY_TO_STOKER:
            raise Error(f"stoker: transform_output[{name!r}]: dtype {dtype} cannot be delivered", "invalid_option")
        shape = list(spec[1])
        out.append((name, dtype, shape, None))
    return out


def configure(options, cfg, transform, seed_globals, ragged, transform_output, timeout):
    """Sets options' transform from the Loader's keyword arguments."""
    if os.environ.get(_IN_WORKERS_ENV):
        raise RuntimeError(
            "stoker: a Loader with a transform was built while stoker's workers imported your script to find "
            "the transform (as __mp_main__): build Loaders under if __name__ == '__main__':"
        )
    if not callable(transform):
        raise TypeError(f"stoker: transform must be callable (sample, rng) -> dict, not {type(transform).__name__}")
    if not isinstance(seed_globals, bool):
        raise TypeError("stoker: seed_globals must be a bool")
    if ragged is None:
        ragged = {}
    elif isinstance(ragged, (list, tuple)):
        ragged = {n: None for n in ragged}
    if not isinstance(ragged, dict) or not all(isinstance(n, str) for n in ragged):
        raise TypeError("stoker: ragged must be a list of field names, or a dict {name: most elements per sample}")
    data, pickler = _pickled(transform)
    payload = pickle.dumps(
        {
            "fn": data,
            "pickler": pickler,
            "sys_path": list(sys.path),
            "main": _main_path(data),
            "seed": cfg["seed"],
            "seed_globals": seed_globals,
        }
    )
    if transform_output is not None:
        learned, imports, started = _declared(transform_output), [], None
    else:
        # A remote dataset is fetched into the node's cache by the host's read of sample 0 (the
        # Loader then finds it there): each object's fetch has its own timeout, fetch_timeout.
        remote = any(_remote(n) for n in _named(cfg))
        learned, imports, started = _learn(cfg, payload, 2**31 if remote else timeout)
    try:
        _configure(options, cfg, transform, seed_globals, ragged, payload, learned, imports, started)
    except BaseException:
        if started is not None:
            started.discard()
        raise


def _configure(options, cfg, transform, seed_globals, ragged, payload, learned, imports, started):
    fields = []
    for name, dtype, shape, sample_bytes in learned:
        is_ragged = name in ragged or (shape and shape[0] is None)
        max_bytes = 0
        if is_ragged:
            if not shape:
                raise Error(f"stoker: transform: ragged field '{name}' is a scalar", "invalid_option")
            import numpy

            row = numpy.dtype(dtype).itemsize
            for d in shape[1:]:
                row *= int(d)
            most = ragged.get(name)
            if most is not None:
                max_bytes = int(most) * row
            else:  # learned: room for 8 times sample 0 per sample, over the batch
                max_bytes = max(8 * (sample_bytes or 0), 4096)
            shape = [1] + [int(d) for d in shape[1:]]
        fields.append((name, _NUMPY_TO_STOKER[dtype], [int(d) for d in shape], bool(is_ragged), max_bytes))
    unknown = [n for n in ragged if n not in [f[0] for f in fields]]
    if unknown:
        raise Error(
            f"stoker: ragged names {unknown}, which the transform does not return ({[f[0] for f in fields]})",
            "invalid_option",
        )
    names = [f[0] for f in fields]
    runner = Runner(transform, cfg["seed"], names, seed_globals, restore_globals=True)
    host = _python_argv("from stoker import _transform; _transform.host_main()")
    payload = pickle.dumps({**pickle.loads(payload), "names": names, "imports": imports})
    options.set_transform(runner, host, payload, fields, started)
