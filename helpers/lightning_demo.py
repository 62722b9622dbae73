"""PyTorch Lightning's automatic distributed sampler, seen from inside the training processes.

On a TPU: `Trainer(accelerator="tpu", devices=8)`. Elsewhere the same automatic sampler shows up
under Lightning's notebook-friendly DDP strategy on CPU processes (`strategy="ddp_notebook"`).
"""

from __future__ import annotations

import json
import os
import tempfile

import lightning as L
import torch
from torch.utils.data import DataLoader

from . import data
from ._validate import positive_int
from .hardware import _tpu_present


class Regression(L.LightningModule):
    """A linear model whose first training step writes down the sampler Lightning gave it."""

    def __init__(self, folder: str):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.folder = folder

    def training_step(self, batch, batch_idx):
        (x,) = batch
        if batch_idx == 0:
            sampler = self.trainer.train_dataloader.sampler
            info = {"rank": self.global_rank, "sampler": type(sampler).__name__,
                    "num_replicas": getattr(sampler, "num_replicas", None), "sampler_rank": getattr(sampler, "rank", None),
                    "shuffle": getattr(sampler, "shuffle", None), "indices": [int(i) for i in sampler]}
            with open(os.path.join(self.folder, f"rank{self.global_rank}.json"), "w") as f:
                json.dump(info, f)
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer_kwargs() -> dict:
    """8 TPU cores on a TPU; 2 CPU processes with the notebook DDP strategy elsewhere."""
    if _tpu_present():
        return {"accelerator": "tpu", "devices": 8}
    return {"accelerator": "cpu", "devices": 2, "strategy": "ddp_notebook"}


def samplers_seen(n_samples: int = 10, batch_size: int = 2, shuffle: bool = False, **kwargs) -> list[dict]:
    """Fit one epoch over `n_samples` indexed samples with a plain DataLoader (no sampler of ours)
    and return, per process, the sampler Lightning put in its place."""
    positive_int("n_samples", n_samples)
    positive_int("batch_size", batch_size)
    kwargs = kwargs or trainer_kwargs()
    with tempfile.TemporaryDirectory() as folder:
        trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, **kwargs)
        loader = DataLoader(data.indexed(n_samples), batch_size=batch_size, shuffle=shuffle)
        trainer.fit(Regression(folder), loader)
        return [json.load(open(os.path.join(folder, name))) for name in sorted(os.listdir(folder))]
