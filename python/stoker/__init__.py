"""stoker: HDF5 and LMDB to training batches, through worker processes and shared memory.

    import stoker
    loader = stoker.Loader("train.h5", batch_size=256, num_workers=8, shuffle=True, seed=42)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:          # dict[str, torch.Tensor], zero copy
            ...

Workers are processes of the small program ``stoker/_bin/stoker-worker`` shipped with this
package (``STOKER_WORKER_EXECUTABLE`` names another): they run no Python, unless a Loader is given
``transform=``, a function of yours: its workers are then forked from an exec of this interpreter
(docs/transform.md).
"""

import atexit as _atexit
import os as _os
import threading as _threading

from . import _core
from ._errors import Error, StokerWarning

_core._set_types(Error, StokerWarning)


def _at_exit():
    """A thread still inside stoker when the interpreter exits (a daemon thread waiting for a batch)
    stays there until the process ends, instead of being ended where Python would abort it; the
    workers end with the process. What a daemon thread still holds is never freed, which is no leak
    of the package's: nanobind's report of it is then left out."""
    _core._at_exit()
    if any(t.daemon and t.is_alive() for t in _threading.enumerate()):
        _core._set_leak_warnings(False)


_atexit.register(_at_exit)


def _worker_path() -> str:
    override = _os.environ.get("STOKER_WORKER_EXECUTABLE")
    if override:
        return override
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "_bin", "stoker-worker")


_core.set_worker_executable(_worker_path())

from ._loader import Loader, split_bytes  # noqa: E402
from ._source import Source  # noqa: E402

__version__ = _core.version()
# The directory to add to CMAKE_PREFIX_PATH for find_package(stoker): a library of pipeline
# operations built against this package's libstoker, for Loader(op_libraries=[...]).
cmake_prefix_path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "share", "cmake")
__all__ = ["Loader", "Source", "Error", "StokerWarning", "split_bytes", "cmake_prefix_path", "__version__"]
