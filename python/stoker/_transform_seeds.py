"""transform='s seed rule (docs/transform.md): the four words sample ``index`` of ``epoch`` is
seeded from, the generators a worker seeds from them before each call, where the C++ side may seed
numpy's PCG64 and Python's ``random`` directly instead, and the global generators' states saved and
put back around a call in the training process. ``stoker._transform`` re-exports seed_words and
seed_generators, as the docs name them."""

import random
import sys

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
