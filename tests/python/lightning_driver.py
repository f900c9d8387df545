"""Run by test_frameworks.py (and, as Lightning's DDP starts them, by the processes it starts):
fits examples/lightning_train.py's Classifier on its StokerDataModule, each rank appending the ids
of the samples of every training step to RECORD.rankN.

usage: lightning_driver.py DATA RECORD full|stop|resume|one CHECKPOINT
  full    two epochs
  one     two epochs in one process (no DDP)
  stop    the first 9 steps (the middle of epoch 1), a checkpoint taken after step 9 by
          ModelCheckpoint, as a run preempted then would have left
  resume  from the checkpoint to the end of epoch 1
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from lightning_train import Classifier, StokerDataModule, end_process_group, trainer  # noqa: E402


class Recording(Classifier):
    def __init__(self, record):
        super().__init__(inputs=3 * 4 * 4, classes=4)
        self.record = record

    def training_step(self, batch, batch_idx):
        with open(f"{self.record}.rank{self.global_rank}", "a") as f:
            f.write(json.dumps([self.current_epoch, batch["id"].tolist()]) + "\n")
        return super().training_step(batch, batch_idx)


data, record, mode, ckpt = sys.argv[1:5]
quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
module = StokerDataModule(data, batch_size=8, num_workers=2, seed=5)
if mode == "stop":
    directory, name = os.path.split(ckpt)
    every_9 = ModelCheckpoint(dirpath=directory, filename=name.removesuffix(".ckpt"), every_n_train_steps=9)
    quiet["enable_checkpointing"] = True
    t = trainer(2, "cpu", max_epochs=2, max_steps=9, callbacks=[every_9], **quiet)
    t.fit(Recording(record), datamodule=module)
elif mode == "one":
    t = trainer(1, "cpu", max_epochs=2, **quiet)
    t.fit(Recording(record), datamodule=module)
else:
    t = trainer(2, "cpu", max_epochs=2, **quiet)
    t.fit(Recording(record), datamodule=module, ckpt_path=ckpt if mode == "resume" else None)
end_process_group()
