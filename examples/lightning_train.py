"""Training with PyTorch Lightning on stoker Loaders (docs/frameworks.md).

    python examples/lightning_train.py --data train.h5 [--devices 2] [--epochs 2] [--ckpt last.ckpt]

StokerDataModule is the part to copy: a LightningDataModule whose train loader is a stoker
Loader. Each process of a DDP run builds its own, sharded by the Trainer's rank and world size
(Lightning puts a DistributedSampler into DataLoaders only; a stoker Loader shards itself), and
the Loader's state_dict() goes into Lightning's checkpoints on its own: Lightning saves the state
of every loader that has state_dict() and load_state_dict(), so `fit(ckpt_path=...)` resumes in
the middle of an epoch exactly where the checkpoint was.
"""

import argparse
import math

import lightning as L
import stoker
import torch
import torch.nn.functional as F


class StokerDataModule(L.LightningDataModule):
    """Train batches from `path` through a stoker Loader built with `options` (stoker.Loader's
    keywords: pipeline, num_workers, seed, ...), shuffled, one shard per process."""

    def __init__(self, path: str, batch_size: int = 256, **options):
        super().__init__()
        self.path, self.batch_size, self.options = path, batch_size, options
        self.loader = None

    def train_dataloader(self):
        # Built once, when the Trainer knows its rank: each pass over it is the next epoch, and a
        # checkpoint's state is loaded into this same Loader before the pass it resumes. It lives
        # as long as the module (trainer.save_checkpoint() after fit() saves its state too); its
        # workers end when it is collected, or at self.loader.close().
        if self.loader is None:
            self.loader = stoker.Loader(
                self.path,
                batch_size=self.batch_size,
                shuffle=True,
                shard=(self.trainer.global_rank, self.trainer.world_size),
                **self.options,
            )
        return self.loader


class Classifier(L.LightningModule):
    """A linear classifier of `image` (uint8, `inputs` values a sample) into `classes` by `label`
    (no lazy layer: DDP wraps a model whose parameters exist)."""

    def __init__(self, inputs: int, classes: int):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(inputs, classes))

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.model(batch["image"].float().div(255)), batch["label"])
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def trainer(devices: int, accelerator: str = "auto", **kwargs) -> L.Trainer:
    # DDP over gloo on CPUs, over NCCL on GPUs; Lightning starts the other processes itself.
    return L.Trainer(accelerator=accelerator, devices=devices, strategy="ddp" if devices > 1 else "auto", **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an HDF5 file, LMDB or shard set with 'image' and 'label'")
    parser.add_argument("--pipeline", default="", help='e.g. "image=decode,resize(32,32),to_chw" for JPEGs')
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ckpt", help="a checkpoint to resume from")
    args = parser.parse_args()
    data = StokerDataModule(args.data, batch_size=64, num_workers=args.workers, pipeline=args.pipeline, seed=0)
    # The model's size from the dataset: the image's values, and the class names stoker-pack
    # stores (10 classes for a dataset without them).
    with stoker.Loader(args.data, batch_size=1, num_workers=0, pipeline=args.pipeline) as probe:
        shape = {name: shape for name, _, _, shape in probe.schema}["image"]
        classes = len(probe.metadata.get("labels", {}).get("label", [])) or 10
    t = trainer(args.devices, max_epochs=args.epochs)
    t.fit(Classifier(math.prod(shape), classes), datamodule=data, ckpt_path=args.ckpt)
    t.save_checkpoint("last.ckpt")
    end_process_group()


def end_process_group():
    """Ends DDP's process group before the interpreter does: torch's gloo threads torn down at
    exit, in whichever order, can abort a rank that has finished its work."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
