"""The device path: on the emulated device everywhere (the copy ordered with Batch::ready_on), and
on CUDA where torch sees a GPU."""
import numpy as np
import pytest
import torch

import stoker
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
