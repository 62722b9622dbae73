"""A plain training loop with a progress bar: the same loop for a plain or a wrapped model."""

from __future__ import annotations

import torch
from torch import nn
from tqdm.auto import tqdm

from ._validate import positive_int


def primary_device(model: nn.Module) -> torch.device:
    """Where the batch must go: the device of the model's first parameter (device 0 for DataParallel)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def train(model: nn.Module, loader, optimizer, loss_fn, epochs: int = 1, progress: bool = True) -> list[float]:
    """Train and return the loss of every step."""
    positive_int("epochs", epochs)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    device = primary_device(model)
    losses: list[float] = []
    model.train()
    bar = tqdm(total=epochs * len(loader), desc="training", disable=not progress, leave=False)
    for _ in range(epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            bar.update()
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    bar.close()
    return losses
