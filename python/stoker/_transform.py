"""transform=: a Python function run in stoker's workers on every sample (docs/transform.md).

The trainer pickles the function and starts its host, an exec of this interpreter, which unpickles
it and runs it on the first sample to say what it returns (unless declared); the C++ Loader gets a
Runner (used without workers), that host and its argv. The host builds the Runner once, then forks
the workers, which share what it imported to answer."""

import importlib
import json
import os
import pickle
import random
import sys
import tempfile
import time
import traceback

from ._errors import Error

_MASK = (1 << 64) - 1
_STREAM = 0x7472616E73666F72  # "transfor"


def _mix(z):
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def seed_words(seed: int, epoch: int, index: int) -> tuple:
    """The four 64-bit words sample ``index`` of ``epoch`` is seeded from (docs/transform.md)."""
    key = _mix(_mix(_mix(seed ^ _STREAM) ^ epoch) ^ index)
    return tuple(_mix((key + i) & _MASK) for i in range(4))


def seed_generators(words, bit_generator=None, seed_globals=True, python_random=True):
    """Seeds as a worker does before each call: ``bit_generator`` (a numpy PCG64) from words 0-3,
    and with ``seed_globals`` torch's default generator (when torch is imported), numpy's global
    generator and Python's ``random``."""
    w0, w1, w2, w3 = words
    if bit_generator is not None:
        bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": (w0 << 64) | w1, "inc": (w2 << 64) | w3 | 1},
            "has_uint32": 0,
            "uinteger": 0,
        }
    if seed_globals:
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.default_generator.manual_seed(w0)
        import numpy

        numpy.random.seed(w1 & 0xFFFFFFFF)
        if python_random:
            random.seed(w2 & 0xFFFFFFFF)  # a 32-bit seed: half the cost of a 64-bit one
        else:  # its generator seeded by the C++ side: what random.seed does besides
            random._inst.gauss_next = None


_NUMPY_TO_STOKER = {
    "uint8": "u8",
    "int8": "i8",
    "uint16": "u16",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "bool": "bool",
    "uint32": "u32",
    "uint64": "u64",
}


def _failure(e):
    """The exception's type, message and traceback without the Runner's own frame."""
    tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
    lines = traceback.format_exception(type(e), e, tb)
    return (
        "the transform raised "
        + "".join(traceback.format_exception_only(type(e), e)).strip()
        + "\n"
        + "".join(lines).rstrip()
    )


class Runner:
    """The user's function, called on one sample: seeds the generators from the words the C++ side
    computed, calls it, and returns its fields in the declared order as C-contiguous numpy arrays,
    or the text of what went wrong."""

    def __init__(self, fn, seed, names, seed_globals, restore_globals=False):
        import numpy

        self.fn = fn
        self.seed = seed
        self.names = tuple(names)
        self.seed_globals = seed_globals
        self._np = numpy
        self._bits = numpy.random.PCG64()
        self.rng = numpy.random.Generator(self._bits)
        self.pcg_state_address = _direct_pcg_state(self._bits)  # the C++ side seeds rng there (0: here)
        # And random's, there, in a worker; in the training process random is seeded by the Runner,
        # after it saved the trainer's state (restore_globals).
        self.python_random_address = _direct_python_random() if seed_globals and not restore_globals else 0
        self._fast = bool(self.pcg_state_address and (self.python_random_address or not seed_globals))
        # In the training process (no workers), the global generators the call seeds are put back
        # after it: the trainer's own draws (dropout, its shuffles) go on as if it had not run.
        self._restore = restore_globals and seed_globals
        # What the C++ side calls per sample (the bound method itself: no call in between).
        self.call = self._call_restoring if self._restore else self._call
        torch = sys.modules.get("torch")
        self._torch_generator = torch.default_generator if torch is not None else None  # seeded where imported
        self._numpy_seed = numpy.random.seed
        self._random = random._inst
        self._name_set = frozenset(self.names)
        self._ndarray = numpy.ndarray

    def __call__(self, sample, w0, w1, w2, w3):
        return self.call(sample, w0, w1, w2, w3)

    def _call_restoring(self, sample, w0, w1, w2, w3):
        saved = _global_states()
        try:
            return self._call(sample, w0, w1, w2, w3)
        finally:
            _set_global_states(saved)

    def _call(self, sample, w0, w1, w2, w3):
        for v in sample.values():
            v.setflags(write=False)  # views of the worker's memory
        try:
            if self._fast:  # rng and random seeded by the C++ side already: the rest, inline
                if self.seed_globals:
                    if self._torch_generator is not None:
                        self._torch_generator.manual_seed(w0)
                    self._numpy_seed(w1 & 0xFFFFFFFF)
                    self._random.gauss_next = None  # what random.seed does besides
                out = self.fn(sample, self.rng)
            else:
                seed_generators(
                    (w0, w1, w2, w3),
                    None if self.pcg_state_address else self._bits,
                    self.seed_globals,
                    not self.python_random_address,
                )
                out = self.fn(sample, self.rng)
            if self.seed_globals and self._torch_generator is None and "torch" in sys.modules:
                # The call imported torch, after its generator would have been seeded: again,
                # seeded, so that this sample draws as every other (rng too: it drew).
                self._torch_generator = sys.modules["torch"].default_generator
                seed_generators((w0, w1, w2, w3), self._bits, self.seed_globals)
                out = self.fn(sample, self.rng)
        except Exception as e:  # noqa: BLE001 - the user's, reported with its traceback
            return _failure(e)
        try:
            return self.fields(out)
        except _Refused as e:
            return str(e)

    def fields(self, out):
        if type(out) is dict and out.keys() == self._name_set:  # the common case, quickly
            arrays = [out[n] for n in self.names]
            if all(type(a) is self._ndarray and a.flags.c_contiguous for a in arrays):
                return arrays  # their dtypes are checked where they are copied
        if not isinstance(out, dict):
            raise _Refused(f"the transform returned {type(out).__name__}, not a dict of fields")
        if out.keys() != self._name_set:
            missing = [n for n in self.names if n not in out]
            extra = [n for n in out if n not in self.names]
            raise _Refused(
                f"the transform returned fields {list(out)}, not {list(self.names)} as declared (or "
                f"learned from the first sample): missing {missing}, extra {extra}"
            )
        return [_array(self._np, n, out[n]) for n in self.names]


def _direct_pcg_state(bits):
    """The address of numpy's PCG64 state where the C++ side may write the seed rule's state
    directly, or 0 when writing there does not give what assigning PCG64.state does. The layout is
    first checked by reading (the pointer, then the state words it points to, against bits.state),
    so that a numpy laid out otherwise is never written into."""
    import ctypes

    import numpy

    from . import _core

    try:
        address = bits.ctypes.state_address
        numpy.random.Generator(bits).integers(0, 2**32, dtype=numpy.uint32)  # has_uint32 set, to be cleared
        pcg = ctypes.c_void_p.from_address(address).value
        words = (ctypes.c_uint64 * 4).from_address(pcg)
        has_uint32 = ctypes.c_int.from_address(address + ctypes.sizeof(ctypes.c_void_p)).value
        state = bits.state
        read = {"state": words[0] | (words[1] << 64), "inc": words[2] | (words[3] << 64)}
        if read != state["state"] or has_uint32 != state["has_uint32"] or has_uint32 != 1:
            return 0
        seeds = (0x0123456789ABCDEF, 0xFEDCBA9876543210, 0x0F1E2D3C4B5A6978, 0x8796A5B4C3D2E1F1)
        _core._write_pcg_state(address, *seeds)
        got = bits.state
        want_state, want_inc = (seeds[0] << 64) | seeds[1], (seeds[2] << 64) | seeds[3] | 1
        ok = got["state"] == {"state": want_state, "inc": want_inc} and got["has_uint32"] == 0
    except Exception:  # noqa: BLE001 - no ctypes interface: assign the state instead
        return 0
    return address if ok else 0


def _direct_python_random():
    """The address of random's generator where the C++ side may seed it as random.seed(n) does, or
    0 when doing so does not give random.seed's state. The object's size and its state words are
    checked by reading before anything is written; the generator's state is put back after."""
    import ctypes

    from . import _core

    inst = random._inst
    saved = random.getstate()
    try:
        import _random

        if _random.Random.__basicsize__ != _core._mt_random_size():
            return 0
        words = (ctypes.c_uint32 * 624).from_address(id(inst) + _core._mt_random_state_offset())
        if tuple(words) != saved[1][:624]:
            return 0
        ok = True
        for n in (0, 1, 0x9E3779B9, 0xFFFFFFFF):
            random.seed(n)
            want = random.getstate()
            random.random()
            _core._seed_python_random(id(inst), n)
            ok = ok and random.getstate()[1] == want[1]
    except Exception:  # noqa: BLE001 - another Python: random.seed instead
        return 0
    finally:
        random.setstate(saved)  # the trainer's own draws go on as they were
    return id(inst) if ok else 0


def _global_states():
    import numpy

    torch = sys.modules.get("torch")
    return random.getstate(), numpy.random.get_state(), torch.get_rng_state() if torch is not None else None


def _set_global_states(saved):
    import numpy

    random.setstate(saved[0])
    numpy.random.set_state(saved[1])
    torch = sys.modules.get("torch")
    if saved[2] is not None and torch is not None:
        torch.set_rng_state(saved[2])


class _Refused(Exception):
    pass


def _array(np, name, value):
    """A field's value as a C-contiguous numpy array: numpy arrays and scalars, CPU torch tensors,
    Python numbers."""
    if isinstance(value, np.ndarray):
        a = value
    elif type(value).__module__ == "torch" and hasattr(value, "numpy"):
        if value.device.type != "cpu":
            raise _Refused(
                f"the transform's field '{name}' is a tensor on {value.device}: return CPU tensors "
                "(workers never touch the GPU)"
            )
        a = value.detach().numpy()
    elif isinstance(value, (bool, int, float, np.generic)):
        a = np.asarray(value)
    else:
        raise _Refused(
            f"the transform's field '{name}' is {type(value).__name__}: return numpy arrays, CPU torch "
            "tensors or numbers"
        )
    if a.dtype.name not in _NUMPY_TO_STOKER:
        raise _Refused(f"the transform's field '{name}' has dtype {a.dtype}, which stoker cannot deliver")
    return a if a.flags.c_contiguous else a.copy(order="C")  # ascontiguousarray makes a scalar 1-D


# ---- in the trainer: pickle, learn, configure ---------------------------------------------------


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


# Set in the transform's host: a Loader with a transform
# built there is the user's script run again at import (as __mp_main__), not a training job.
_IN_WORKERS_ENV = "STOKER_TRANSFORM_PROCESS"


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
        learned, imports, started = _learn(cfg, payload, timeout)
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


# ---- in the host ---------------------------------------------------------------------------------


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
