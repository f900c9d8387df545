"""transform='s Runner: the user's function called on one sample, in a worker (or in the training
process without workers), and what it returned made the declared fields: C-contiguous numpy arrays
of dtypes stoker delivers, or the text of what went wrong."""

import random
import sys
import traceback

from ._transform_seeds import (
    _direct_pcg_state,
    _direct_python_random,
    _global_states,
    _set_global_states,
    seed_generators,
)

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
