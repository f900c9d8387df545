"""Training with Hugging Face Accelerate on a stoker Loader (docs/frameworks.md).

    accelerate launch --num_processes 2 examples/accelerate_train.py --data train.h5 [--save ckpt]

The Loader is not given to accelerator.prepare(), which would shard it again: it shards itself by
the process index and count Accelerate gives, and starts its workers in each process. The model
and optimizer are prepared as usual. register_for_checkpointing(loader) puts the Loader's state in
every accelerator.save_state(), so accelerator.load_state() resumes in the middle of an epoch
exactly where the save was, with any number of processes.
"""

import argparse
import math

import stoker
import torch
import torch.nn.functional as F
from accelerate import Accelerator


def main(argv=None, on_step=None, on_end=None):
    """Trains as the command line says; calls on_step(accelerator, epoch, batch) before each step
    and on_end(accelerator, model) once training is done, before the processes part."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an HDF5 file, LMDB or shard set with 'image' and 'label'")
    parser.add_argument("--pipeline", default="", help='e.g. "image=decode,resize(32,32),to_chw" for JPEGs')
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-steps", type=int, help="stop after this many steps, saving the state (--save)")
    parser.add_argument("--save", help="a directory for accelerator.save_state() at the end")
    parser.add_argument("--resume", help="a directory saved by --save to resume from")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even where there is a GPU")
    args = parser.parse_args(argv)

    accelerator = Accelerator(cpu=args.cpu)
    loader = stoker.Loader(
        args.data,
        pipeline=args.pipeline,
        batch_size=args.batch_size,
        num_workers=args.workers,
        shuffle=True,
        seed=0,
        shard=(accelerator.process_index, accelerator.num_processes),
        device=accelerator.device,  # batches arrive where the model is
    )
    shape = {name: shape for name, _, _, shape in loader.schema}["image"]
    classes = len(loader.metadata.get("labels", {}).get("label", [])) or 10  # stoker-pack's class names
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(math.prod(shape), classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(loader)
    if args.resume:
        accelerator.load_state(args.resume)  # the model, the optimizer and the Loader's place
    start = loader.state_dict()["epoch"] + loader.state_dict()["epoch_finished"]

    steps = 0
    for epoch in range(start, args.epochs):
        loader.set_epoch(epoch)  # as with DistributedSampler: a sharded Loader is in the epoch it is told
        for batch in loader:  # a loaded state's epoch resumes where it was
            if on_step:
                on_step(accelerator, epoch, batch)
            loss = F.cross_entropy(model(batch["image"].float().div(255)), batch["label"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            if steps == args.max_steps:
                break
        if steps == args.max_steps:
            break
    if args.save:
        accelerator.save_state(args.save)
    loader.close()
    if on_end:
        on_end(accelerator, model)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # the process group ends here, not in whichever rank exits first


if __name__ == "__main__":
    main()
