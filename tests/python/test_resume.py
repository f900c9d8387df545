"""state_dict() through torch.save / torch.load(weights_only=True) into a Loader with other
num_workers and batch_size delivers exactly the samples the epoch had not delivered."""

import pickle

import pytest
import stoker
import torch
from conftest import N


def indices_of(loader, stop_after=None):
    seen = []
    it = iter(loader)
    for k, _ in enumerate(it):
        seen += it.indices
        if stop_after is not None and k + 1 == stop_after:
            break
    return seen


@pytest.mark.parametrize("workers,new_workers,new_batch", [(2, 0, 13), (0, 3, 7)])
def test_resume_through_torch_save_with_other_workers_and_batch_size(data, tmp_path, workers, new_workers, new_batch):
    full = indices_of(stoker.Loader(data["fixed"], batch_size=10, shuffle=True, seed=4))
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=workers, shuffle=True, seed=4)
    loader.set_epoch(0)
    first = indices_of(loader, stop_after=6)
    sd = loader.state_dict()
    assert all(isinstance(v, (str, int, bool)) for v in sd.values())
    torch.save({"loader": sd}, tmp_path / "ckpt.pt")
    del loader
    sd2 = torch.load(tmp_path / "ckpt.pt", weights_only=True)["loader"]
    resumed = stoker.Loader(data["fixed"], batch_size=new_batch, num_workers=new_workers, shuffle=True, seed=4)
    resumed.load_state_dict(sd2)
    rest = indices_of(resumed)
    assert first == full[:60]
    assert first + rest == full
    # The next epoch after the resumed one starts from its beginning.
    resumed.set_epoch(1)
    assert sorted(indices_of(resumed)) == list(range(N))


def test_finished_epoch_resumes_the_next(data):
    loader = stoker.Loader(data["fixed"], batch_size=50, shuffle=True, seed=1)
    loader.set_epoch(3)
    indices_of(loader)
    sd = loader.state_dict()
    assert sd["epoch"] == 3 and sd["epoch_finished"] is True
    other = stoker.Loader(data["fixed"], batch_size=50, shuffle=True, seed=1)
    other.load_state_dict(sd)
    want = stoker.Loader(data["fixed"], batch_size=50, shuffle=True, seed=1)
    want.set_epoch(4)
    assert indices_of(other) == indices_of(want)


def test_state_of_another_order_is_refused(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, shuffle=True, seed=1)
    indices_of(loader, stop_after=2)
    sd = loader.state_dict()
    other = stoker.Loader(data["fixed"], batch_size=10, shuffle=True, seed=2)
    with pytest.raises(stoker.Error) as e:
        other.load_state_dict(sd)
    assert e.value.code == "state_mismatch" and "seed" in str(e.value)


def test_pickled_loader_is_its_configuration_and_pending_state(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=2, shuffle=True, seed=8)
    full = indices_of(loader)
    loader.set_epoch(0)  # the same epoch again (a pass without set_epoch is the next epoch)
    first = indices_of(loader, stop_after=3)
    pending = stoker.Loader(data["fixed"], batch_size=10, num_workers=2, shuffle=True, seed=8)
    pending.load_state_dict(loader.state_dict())
    clone = pickle.loads(pickle.dumps(pending))
    assert clone.worker_pids() and set(clone.worker_pids()).isdisjoint(pending.worker_pids())
    assert first + indices_of(clone) == full
    loader.set_epoch(0)
    plain = pickle.loads(pickle.dumps(loader))
    assert indices_of(plain) == full
    # The epoch a pass without set_epoch would load travels too.
    indices_of(plain)
    assert indices_of(pickle.loads(pickle.dumps(plain))) == indices_of(loader_at(data, 2))


def loader_at(data, epoch):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=2, shuffle=True, seed=8)
    loader.set_epoch(epoch)
    return loader


def test_each_pass_without_set_epoch_is_the_next_epoch_as_dataloaders(data):
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=1, shuffle=True, seed=8)
    passes = [indices_of(loader) for _ in range(3)]
    assert passes == [indices_of(loader_at(data, e)) for e in range(3)]
    assert passes[0] != passes[1] != passes[2]
    assert sorted(passes[1]) == list(range(len(passes[1])))
    loader.set_epoch(1)  # set_epoch still chooses the epoch, for DistributedSampler's users
    assert indices_of(loader) == passes[1]
    assert indices_of(loader) == passes[2]
    # A resumed epoch goes on, and the pass after it is the epoch after it.
    loader.set_epoch(0)
    first = indices_of(loader, stop_after=4)
    state = loader.state_dict()
    loader.load_state_dict(state)
    assert first + indices_of(loader) == passes[0]
    assert indices_of(loader) == passes[1]


def test_an_iterator_dropped_unused_is_no_pass(data):
    """As PyTorch Lightning makes one to check that a loader is iterable: it neither moves the next
    pass to the next epoch nor uses up a loaded state."""
    loader = stoker.Loader(data["fixed"], batch_size=10, num_workers=1, shuffle=True, seed=8)
    iter(loader)
    assert indices_of(loader) == indices_of(loader_at(data, 0))
    iter(loader)
    iter(loader)
    assert indices_of(loader) == indices_of(loader_at(data, 1))
    loader.set_epoch(0)
    first = indices_of(loader, stop_after=4)
    state = loader.state_dict()
    loader.load_state_dict(state)
    iter(loader)
    assert loader.state_dict() == state, "nothing of the loaded state used yet"
    assert first + indices_of(loader) == indices_of(loader_at(data, 0))


def test_a_loaded_finished_epoch_is_the_state_until_the_next_epoch_delivers(data):
    """A save right after a load (Accelerate's save_state at an epoch's end, say) saves the loaded
    state again, not the state of a loader that has delivered nothing."""
    loader = loader_at(data, 2)
    indices_of(loader)
    finished = loader.state_dict()
    assert finished["epoch"] == 2 and finished["epoch_finished"] is True
    other = stoker.Loader(data["fixed"], batch_size=10, num_workers=2, shuffle=True, seed=8)
    other.load_state_dict(finished)
    assert other.state_dict() == finished
    other.set_epoch(3)  # the epoch the state says is next: still the state
    assert other.state_dict() == finished
    assert indices_of(other) == indices_of(loader_at(data, 3))
    assert other.state_dict()["epoch"] == 3
    other.load_state_dict(finished)
    other.set_epoch(7)  # elsewhere: the state is dropped
    assert other.state_dict() != finished


def test_a_resumed_remainder_without_a_batch_is_a_pass_all_the_same(data):
    """200 of 203 samples consumed, resumed with batches of 100 and drop_last: no batch is left.
    That pass uses up the state, and the next is the next epoch, as after any pass."""
    loader = stoker.Loader(data["fixed"], batch_size=50, num_workers=1, shuffle=True, seed=8)
    indices_of(loader, stop_after=4)
    state = loader.state_dict()
    other = stoker.Loader(data["fixed"], batch_size=100, drop_last=True, num_workers=1, shuffle=True, seed=8)
    other.load_state_dict(state)
    assert indices_of(other) == []
    want = stoker.Loader(data["fixed"], batch_size=100, drop_last=True, num_workers=1, shuffle=True, seed=8)
    want.set_epoch(1)
    assert indices_of(other) == indices_of(want)


def test_a_pickled_loader_keeps_a_loaded_finished_state(data):
    loader = loader_at(data, 2)
    indices_of(loader)
    finished = loader.state_dict()
    other = stoker.Loader(data["fixed"], batch_size=10, num_workers=2, shuffle=True, seed=8)
    other.load_state_dict(finished)
    copy = pickle.loads(pickle.dumps(other))
    assert copy.state_dict() == finished
    assert indices_of(copy) == indices_of(loader_at(data, 3))


def test_a_sharded_loader_changes_its_epoch_by_set_epoch_alone(data):
    kwargs = dict(batch_size=10, num_workers=1, shuffle=True, seed=8, shard=(0, 2))
    loader = stoker.Loader(data["fixed"], **kwargs)
    first, again = indices_of(loader), indices_of(loader)
    assert first == again  # every rank in the same epoch, whatever passes one of them makes
    loader.set_epoch(1)
    assert indices_of(loader) != first
