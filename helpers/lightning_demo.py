"""PyTorch Lightning's automatic distributed sampler, seen from inside the training processes.

On a TPU: `Trainer(accelerator="tpu", devices=<every device the TPU has>)` (1 on Colab's v5e-1,
8 on Kaggle's v5e-8). Elsewhere the same automatic sampler shows up under Lightning's DDP strategy
on two CPU processes. Either way the Trainer runs in a fresh process (`helpers.fresh`): its
launchers fork, which is only safe from a process that has not yet run a multi-threaded op.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile

import torch
from torch.utils.data import DataLoader

from . import data, fresh, hardware, xla
from ._validate import positive_int


def __getattr__(name: str):
    # Lightning is imported only where a Trainer runs (a fresh process): the lesson's import cell, every kernel that
    # grades it, does not pay its seconds. `Regression` is still this module's, as pickle and a reader look it up.
    if name == "Regression":
        return _regression()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _regression():
    import lightning as L

    class Regression(L.LightningModule):
        """A linear model whose first training step writes down the sampler Lightning gave it."""

        def __init__(self, folder: str):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.folder = folder

        def training_step(self, batch, batch_idx):
            (x,) = batch
            if batch_idx == 0:
                info = sampler_report(self.trainer.train_dataloader, self.global_rank)
                with open(os.path.join(self.folder, f"rank{self.global_rank}.json"), "w") as f:
                    json.dump(info, f)
            return self.layer(x).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    Regression.__module__, Regression.__qualname__ = __name__, "Regression"
    return Regression


def sampler_of(loader):
    """The sampler behind the training loader Lightning hands the model. On one device (Colab's TPU v5e-1, CPU
    DDP) that is a DataLoader, with its `sampler`. On several XLA devices (Kaggle's TPU v5e-8) Lightning wraps it
    in torch_xla's MpDeviceLoader, which has no `sampler`: Lightning gives it the wrapped loader's `batch_sampler`,
    whose `sampler` it is, and MpDeviceLoader keeps the wrapped loader itself as `_loader`."""
    for holder in (loader, getattr(loader, "batch_sampler", None), getattr(loader, "_loader", None)):
        if holder is not None and hasattr(holder, "sampler"):
            return holder.sampler
    raise ValueError(f"loader must be a DataLoader or a loader wrapping one, got {type(loader).__name__}")


def sampler_report(loader, rank: int) -> dict:
    """What the sampler behind `loader` gives process `rank`: its type, its replicas and rank, and its indices."""
    sampler = sampler_of(loader)
    return {"rank": rank, "sampler": type(sampler).__name__, "num_replicas": getattr(sampler, "num_replicas", None),
            "sampler_rank": getattr(sampler, "rank", None), "shuffle": getattr(sampler, "shuffle", None),
            "indices": [int(i) for i in sampler]}


def trainer_kwargs() -> dict:
    """Every device of the TPU when there is one; 2 CPU processes with Lightning's fork-based DDP elsewhere."""
    hw = hardware.detect()
    if hw.tpu:
        return {"accelerator": "tpu", "devices": hw.tpu.devices}
    return {"accelerator": "cpu", "devices": 2, "strategy": "ddp_notebook"}


def samplers_seen(n_samples: int = 10, batch_size: int = 2, shuffle: bool = False, **kwargs) -> list[dict]:
    """Fit one epoch over `n_samples` indexed samples with a plain DataLoader (no sampler of ours)
    and return, per process, the sampler Lightning put in its place."""
    positive_int("n_samples", n_samples)
    positive_int("batch_size", batch_size)
    kwargs = kwargs or trainer_kwargs()
    env = xla.environment() if kwargs.get("accelerator") == "tpu" else {}
    return fresh.run(_fit_and_report, n_samples, batch_size, shuffle, kwargs, env=env)


def _fit_and_report(n_samples, batch_size, shuffle, kwargs) -> list[dict]:
    import lightning as L

    with tempfile.TemporaryDirectory() as folder:
        trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, **kwargs)
        loader = DataLoader(data.indexed(n_samples), batch_size=batch_size, shuffle=shuffle)
        trainer.fit(_regression()(folder), loader)
        return [json.load(open(os.path.join(folder, name))) for name in sorted(os.listdir(folder))]
