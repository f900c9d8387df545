"""The device path: on the emulated device everywhere (the copy ordered with Batch::ready_on), and
on CUDA where torch sees a GPU."""

import pytest
import stoker
import torch
from test_contents import collect, same


def test_emulated_device_delivers_the_same_batches(data):
    want = collect(stoker.Loader(data["fixed"], batch_size=16, num_workers=1, framework="numpy"))
    got = collect(stoker.Loader(data["fixed"], batch_size=16, num_workers=1, device="emulated"))
    same(got, want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_cuda_tensors_are_on_the_gpu_and_ordered_on_torch_s_stream(data):
    want = collect(stoker.Loader(data["fixed"], batch_size=16, num_workers=1, framework="numpy"))
    loader = stoker.Loader(data["fixed"], batch_size=16, num_workers=1, device="cuda")
    s = torch.cuda.Stream()
    got = []
    with torch.cuda.stream(s):
        it = iter(loader)
        for batch in it:
            assert all(t.is_cuda for t in batch.values())
            sums = {k: (v.to(torch.float64) * 2).cpu().numpy() / 2 for k, v in batch.items()}
            got.append((list(it.indices), {k: sums[k].astype(want[0][1][k].dtype) for k in sums}))
    same(got, want)
    assert loader.stats()["gpu_steps"] > 0
    copied = next(iter(stoker.Loader(data["fixed"], batch_size=16, device="cuda", copy=True)))
    assert copied["image"].is_cuda


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_a_consumer_s_stream_given_through_dlpack_sees_the_copied_batch(data):
    """Another framework takes the tensors with __dlpack__(stream=its stream): torch orders that
    stream after its current one, which stoker ordered after the batch's copy."""
    cupy = pytest.importorskip("cupy")
    want = collect(stoker.Loader(data["fixed"], batch_size=16, num_workers=1, framework="numpy"))
    loader = stoker.Loader(data["fixed"], batch_size=16, num_workers=1, device="cuda")
    consumer = cupy.cuda.Stream(non_blocking=True)
    got = []
    with consumer:
        it = iter(loader)
        for batch in it:
            arrays = {k: cupy.from_dlpack(v) for k, v in batch.items()}  # calls v.__dlpack__(stream=...)
            # A kernel on the consumer's stream reads the batch, then the host reads its output.
            got.append((list(it.indices), {k: cupy.asnumpy(a.copy(), stream=consumer) for k, a in arrays.items()}))
    same(got, want)


def test_a_torch_device_is_taken_as_its_name(data):
    """As Accelerate's accelerator.device is passed: torch.device("cpu") and torch's "cpu:0" are
    the CPU; torch.device("cuda", 1) is "cuda:1" (refused without a GPU, saying so)."""
    want = collect(stoker.Loader(data["fixed"], batch_size=50, num_workers=0))
    for device in (torch.device("cpu"), torch.device("cpu", 0), "cpu:0"):
        loader = stoker.Loader(data["fixed"], batch_size=50, num_workers=0, device=device)
        assert "device='cpu'" in repr(loader)
        same(collect(loader), want)
    from stoker._arguments import _device

    assert _device(torch.device("cuda", 1)) == "cuda:1" and _device(torch.device("cuda")) == "cuda"
    if not torch.cuda.is_available():
        with pytest.raises(stoker.Error, match="device cuda: no NVIDIA driver"):
            stoker.Loader(data["fixed"], batch_size=50, num_workers=0, device=torch.device("cuda", 1))
    with pytest.raises(TypeError, match="device must be a str"):
        stoker.Loader(data["fixed"], device=3)
