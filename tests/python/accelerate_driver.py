"""Run by test_frameworks.py under `accelerate launch`: examples/accelerate_train.py's main(), each
process appending the ids of the samples of every step to RECORD.rankN, and at the end writing
the sum of its model's parameters to RECORD.params (rank 0, gathered from every rank).

usage: accelerate_driver.py RECORD [accelerate_train.py's arguments]
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from accelerate_train import main  # noqa: E402

record = sys.argv[1]


def on_step(accelerator, epoch, batch):
    with open(f"{record}.rank{accelerator.process_index}", "a") as f:
        f.write(json.dumps([epoch, batch["id"].tolist()]) + "\n")


def on_end(accelerator, model):
    total = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    sums = accelerator.gather(total).tolist()
    if accelerator.is_main_process:
        with open(f"{record}.params", "w") as f:
            json.dump(sums, f)


main(sys.argv[2:], on_step, on_end)
# Everything is written and the process group destroyed. The interpreter's teardown is left out:
# there torch's Gloo process group now and then aborts the process ("terminate called without an
# active exception", at exit on one rank while the other still runs), which is torch's, not what
# this test checks (pytorch/pytorch#179291 discusses Gloo's threads at interpreter exit).
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
