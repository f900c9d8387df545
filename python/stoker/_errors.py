"""stoker.Error and stoker.StokerWarning."""


class Error(RuntimeError):
    """A failure of stoker's, with the C++ library's message unchanged.

    ``code`` says what kind of failure it is, as stoker::ErrorCode names it: "invalid_option",
    "dataset", "io", "shm", "worker_died", "worker_stuck", "slots_held", "device",
    "state_mismatch", "interrupted", "wrong_process", "internal" or "transform" (the
    ``transform=`` function raised, or returned what it did not declare).
    """

    def __init__(self, message: str, code: str = "internal"):
        super().__init__(message)
        self.code = code

    def __reduce__(self):
        return (type(self), (str(self), self.code))


class StokerWarning(UserWarning):
    """What stoker reports without failing: a lowered ring depth, a respawned worker, memfd in
    place of a small /dev/shm."""


Error.__module__ = "stoker"
StokerWarning.__module__ = "stoker"
