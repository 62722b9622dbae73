"""What a DDP step costs, measured: seconds per training step and each rank's memory, next to the same step
through DataParallel (the lesson's first comparison)."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from . import launch, memory, models
from ._validate import positive_int
from .ddp_workers import wrap


def step_time_worker(rank: int, world_size: int, in_features: int, hidden: int, batch: int, steps: int) -> dict:
    """Seconds per DDP training step (the global batch split over the ranks) and this rank's memory."""
    model = wrap(models.seeded(models.MLP, 0, in_features=in_features, hidden=hidden, out_features=in_features))
    optimizer = torch.optim.Adam(model.parameters())
    device = launch.device()
    per_rank = batch // world_size
    x, y = torch.randn(per_rank, in_features, device=device), torch.randn(per_rank, in_features, device=device)
    times = []
    for _ in range(steps + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {"seconds": sum(times[1:]) / steps, "memory": memory.ddp_rank_bytes(model, optimizer, x, y)}


def dataparallel_step_time(in_features: int, hidden: int, batch: int, steps: int, n_devices: int = 2):
    """The same step as `step_time_worker`, through DataParallel: (seconds per step, MemoryReport)."""
    from . import dataparallel

    for name, value in (("in_features", in_features), ("hidden", hidden), ("batch", batch), ("steps", steps)):
        positive_int(name, value)
    net = models.seeded(models.MLP, 0, in_features=in_features, hidden=hidden, out_features=in_features)
    wrapped = dataparallel.make_data_parallel(net, device_ids=list(range(n_devices)))
    optimizer = torch.optim.Adam(wrapped.parameters())
    x, y = torch.randn(batch, in_features), torch.randn(batch, in_features)
    x, y = x.to(wrapped.primary_device), y.to(wrapped.primary_device)
    report = memory.measure_step(wrapped, optimizer, x, y, F.mse_loss)
    times = []
    for _ in range(steps):
        if not wrapped.emulated:
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad()
        F.mse_loss(wrapped(x), y).backward()
        optimizer.step()
        if not wrapped.emulated:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sum(times) / steps, report
