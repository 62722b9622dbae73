"""A plain training loop with a progress bar: the same loop for a plain or a wrapped model,
in fp32 or mixed precision (autocast, an optional GradScaler, optional gradient clipping)."""

from __future__ import annotations

import torch
from torch import nn
from tqdm.auto import tqdm

from ._validate import low_precision_dtype, positive_int, positive_number
from .language import say


def primary_device(model: nn.Module) -> torch.device:
    """Where the batch must go: the device of the model's first parameter (device 0 for DataParallel)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def step(model, optimizer, x, y, loss_fn, autocast_dtype=None, scaler=None, max_grad_norm=None) -> torch.Tensor:
    """One optimizer step. With a scaler: scale the loss, unscale before clipping, let the scaler step."""
    low_precision_dtype("autocast_dtype", autocast_dtype)
    if max_grad_norm is not None:
        positive_number("max_grad_norm", max_grad_norm)
    optimizer.zero_grad()
    with torch.autocast(x.device.type, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
        loss = loss_fn(model(x), y)
    if scaler is not None:
        scaler.scale(loss).backward()
        if max_grad_norm is not None:
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
    return loss


def train(model: nn.Module, loader, optimizer, loss_fn, epochs: int = 1, progress: bool = True,
          autocast_dtype: torch.dtype | None = None, scaler=None, max_grad_norm: float | None = None) -> list[float]:
    """Train and return the loss of every step."""
    positive_int("epochs", epochs)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(say("optimizer must be a torch.optim.Optimizer, got {kind}", kind=type(optimizer).__name__))
    low_precision_dtype("autocast_dtype", autocast_dtype)
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise ValueError(say("scaler must be a torch.amp.GradScaler, got {kind}", kind=type(scaler).__name__))
    device = primary_device(model)
    losses: list[float] = []
    model.train()
    # kept when done (leave): a bar that closes its widget shows "model not found" once the notebook is reopened
    bar = tqdm(total=epochs * len(loader), desc=say("training"), disable=not progress)
    for _ in range(epochs):
        for x, y in loader:
            loss = step(model, optimizer, x.to(device), y.to(device), loss_fn, autocast_dtype, scaler, max_grad_norm)
            losses.append(loss.item())
            bar.update()
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    bar.close()
    return losses
