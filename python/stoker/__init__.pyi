import dataclasses
import os
from typing import Any, Callable, Dict, Iterator, Literal, Optional, Sequence, Tuple, Union

__version__: str
cmake_prefix_path: str

class Error(RuntimeError):
    code: str
    def __init__(self, message: str, code: str = ...) -> None: ...

class StokerWarning(UserWarning): ...

# torch.Tensor or numpy.ndarray per field (a bytes field also as "NAME.offsets"); with
# on_decode_error="skip", also "skipped": the int64 positions in the batch of its samples skipped.
Batch = dict[str, Any]

class _EpochIterator(Iterator[Batch]):
    # Dataset indices of the samples of the batch last returned (to whichever thread asked).
    indices: list[int]
    # Positions in that batch of the samples whose decode was skipped (on_decode_error="skip"); a
    # batch's own "skipped" holds the same, and is the one to use when threads share the iterator.
    skipped: list[int]
    def __next__(self) -> Batch: ...

class _EpochSetter:
    def set_epoch(self, epoch: int) -> None: ...

@dataclasses.dataclass(frozen=True)
class Source:
    path: Union[str, os.PathLike[str]]
    weight: float = 1.0

class Loader:
    def __init__(
        self,
        source: Union[str, os.PathLike[str], Sequence[Union[str, os.PathLike[str]]], None] = None,
        batch_size: int = 1,
        num_workers: Union[int, Literal["auto"]] = 0,
        prefetch_factor: Union[int, Literal["auto"]] = 2,
        shuffle: bool = False,
        seed: int = 0,
        order: Optional[Literal["sequential", "random", "quasi_random"]] = None,
        fields: Optional[Sequence[str]] = None,
        group: str = "",
        pipeline: Union[str, Sequence[str], None] = None,
        drop_last: bool = False,
        device: Union[str, Any] = "cpu",
        shard: Union[None, Tuple[int, int], Literal["env"]] = None,
        shm_budget: Optional[int] = None,
        timeout: Optional[float] = None,
        max_respawns: int = 3,
        framework: Literal["torch", "numpy"] = "torch",
        copy: bool = False,
        *,
        format: Literal["auto", "hdf5", "lmdb"] = "auto",
        shm_fraction: float = 0.5,
        shm_backing: Literal["auto", "dev_shm", "memfd"] = "auto",
        shutdown_grace: float = 2.0,
        prefetch_to_device: int = 2,
        staging: Literal["auto", "pinned_copy", "registered_shm"] = "auto",
        worker_oom_score_adj: int = 500,
        max_image_pixels: int = 89478485,
        max_open_shards: int = 64,
        lmdb_keys: Union[str, dict[str, str], None] = None,
        lmdb_count_key: Optional[str] = None,
        held_batches: int = 1,
        on_decode_error: Literal["fail", "skip"] = "fail",
        transform: Optional[Callable[[Dict[str, Any], Any], Dict[str, Any]]] = None,
        seed_globals: bool = True,
        ragged: Union[None, Sequence[str], Dict[str, int]] = None,
        transform_output: Optional[Dict[str, Tuple[Any, Sequence[Optional[int]]]]] = None,
        op_libraries: Optional[Sequence[Union[str, os.PathLike]]] = None,
        trace: Optional[Union[str, os.PathLike]] = None,
        sources: Optional[Sequence[Source]] = None,
        samples_per_epoch: Optional[int] = None,
        cache_dir: Optional[Union[str, os.PathLike[str]]] = None,
        cache_limit: int = 0,
        fetch_parallelism: int = 4,
        fetch_timeout: float = 120.0,
    ) -> None: ...
    def set_epoch(self, epoch: int) -> None: ...
    def __iter__(self) -> _EpochIterator: ...
    def __len__(self) -> int: ...
    def state_dict(self) -> dict[str, Union[str, int, bool, list[int]]]: ...
    def load_state_dict(self, state: dict[str, Union[str, int, bool, list[int]]]) -> None: ...
    def stats(self) -> dict[str, Union[int, float, str, list[int]]]: ...
    @property
    def schema(self) -> list[tuple[str, str, str, tuple[int, ...]]]: ...
    @property
    def metadata(self) -> dict[str, Any]: ...
    @property
    def sampler(self) -> _EpochSetter: ...
    @property
    def num_samples(self) -> int: ...
    def samples_per_epoch(self) -> int: ...
    def describe_source(self) -> str: ...
    def worker_pids(self) -> list[int]: ...
    def write_index(self, path: Optional[Union[str, os.PathLike[str]]] = None) -> str: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "Loader": ...
    def __exit__(self, *exc: object) -> None: ...

def split_bytes(batch: Batch, name: str) -> list[Any]: ...
