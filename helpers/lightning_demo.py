"""PyTorch Lightning's automatic distributed sampler, seen from inside the training processes.

On a TPU: `Trainer(accelerator="tpu", devices=<every device the TPU has>)` (1 on Colab's v5e-1,
8 on Kaggle's v5e-8). Elsewhere the same automatic sampler shows up under Lightning's DDP strategy
on two CPU processes. Either way the Trainer runs in a fresh process (`helpers.fresh`): its
launchers fork, which is only safe from a process that has not yet run a multi-threaded op.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import tempfile
import warnings
from unittest import mock

import torch
from torch.utils.data import DataLoader

from . import data, fresh, hardware, xla
from ._validate import positive_int
from .language import say


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
    raise ValueError(say("loader must be a DataLoader or a loader wrapping one, got {kind}",
                         kind=type(loader).__name__))


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


# The Trainer arguments that choose the hardware and the precision: what `trainer_on_tpu` reads.
DEVICE_ARGS = ("accelerator", "devices", "strategy", "precision", "num_nodes")
# Lightning's modules that refuse to build XLA objects without torch_xla (Lightning's own tests patch these).
_XLA_GATED = ("lightning.fabric.accelerators.xla", "lightning.fabric.plugins.environments.xla",
              "lightning.fabric.plugins.io.xla", "lightning.fabric.plugins.precision.xla",
              "lightning.fabric.strategies.launchers.xla", "lightning.pytorch.plugins.precision.xla",
              "lightning.pytorch.strategies.launchers.xla", "lightning.pytorch.strategies.single_xla",
              "lightning.pytorch.strategies.xla")


def trainer_on_tpu(kwargs: dict, tpu_devices: int = 8) -> dict:
    """What Lightning makes of `Trainer(**kwargs)` (the DEVICE_ARGS only) on a machine with a TPU of `tpu_devices`
    devices and no GPU: the accelerator, the strategy and its settings, the precision, the devices and the nodes that
    Lightning's own connector builds from them, or {"error": ...}, what it raises. The machine is simulated, as
    Lightning's tests simulate a TPU: no TPU is needed, torch_xla is not imported, nothing of it outlasts the call.
    Two spellings of one configuration give the same dict."""
    if not isinstance(kwargs, dict) or not set(kwargs) <= set(DEVICE_ARGS):
        raise ValueError(say("kwargs must be a dict of some of {device_args}, got {kwargs!r}", device_args=DEVICE_ARGS,
                             kwargs=kwargs))
    positive_int("tpu_devices", tpu_devices)
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector

    try:
        with _simulated_tpu(tpu_devices), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            connector = _AcceleratorConnector(**kwargs)
    except Exception as error:  # noqa: BLE001 - Lightning refuses the configuration: that is what it makes of it
        return {"error": f"{type(error).__name__}: {error}"}
    strategy = connector.strategy
    devices = getattr(strategy, "parallel_devices", None) or [strategy.root_device]
    return {"accelerator": type(connector.accelerator).__name__, "strategy": type(strategy).__name__,
            "settings": {k: v for k, v in vars(strategy).items() if v is None or type(v) in (bool, int, float, str)},
            "precision": connector.precision_plugin.precision, "devices": [str(d) for d in devices],
            "num_nodes": getattr(strategy, "num_nodes", 1)}


@contextlib.contextmanager
def _simulated_tpu(devices: int):
    from lightning.fabric.accelerators.xla import XLAAccelerator  # Lightning's TPU accelerator inherits its probes
    from lightning.pytorch.accelerators import CUDAAccelerator, MPSAccelerator
    from lightning.pytorch.strategies import SingleDeviceStrategy, SingleDeviceXLAStrategy

    def single_xla(self, device, accelerator=None, checkpoint_io=None, precision_plugin=None, debug=False):
        # torch_xla's device for `device`, without torch_xla: the torch.device("xla", i) Lightning hands it
        SingleDeviceStrategy.__init__(self, device=device, accelerator=accelerator, checkpoint_io=checkpoint_io,
                                      precision_plugin=precision_plugin)
        self.debug = debug

    with contextlib.ExitStack() as stack:
        for name in _XLA_GATED:
            stack.enter_context(mock.patch.object(importlib.import_module(name), "_XLA_AVAILABLE", True))
        stack.enter_context(mock.patch("lightning.fabric.accelerators.xla._using_pjrt", lambda: True))
        for accelerator, available in ((XLAAccelerator, True), (CUDAAccelerator, False), (MPSAccelerator, False)):
            stack.enter_context(mock.patch.object(accelerator, "is_available", staticmethod(lambda a=available: a)))
        stack.enter_context(mock.patch.object(XLAAccelerator, "auto_device_count", staticmethod(lambda: devices)))
        stack.enter_context(mock.patch.object(SingleDeviceXLAStrategy, "__init__", single_xla))
        stack.enter_context(mock.patch.dict(os.environ))  # XLA precisions set XLA_USE_BF16 and the like
        yield
