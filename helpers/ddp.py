"""DistributedDataParallel: the lesson's workers (importable, so mp.spawn and torchrun can start them),
a reusable DDP trainer and its single-process reference, and the arithmetic of the lesson.

Every worker has the signature `worker(rank, world_size, ...)` and runs inside a process group
started by `helpers.launch.launch` (or by itself under torchrun).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
from tqdm.auto import tqdm

from . import checkpoints, data, launch, memory, models
from ._validate import positive_int, positive_number


# ---- arithmetic ---------------------------------------------------------------------------


def shard_indices(n_samples: int, world_size: int, rank: int, drop_last: bool = False,
                  shuffle: bool = False, seed: int = 0, epoch: int = 0) -> list[int]:
    """The sample indices rank `rank` sees in epoch `epoch`: torch's DistributedSampler itself."""
    positive_int("n_samples", n_samples)
    positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def global_batch(per_device_batch: int, world_size: int, accumulation_steps: int = 1) -> int:
    """Samples behind one optimizer step."""
    positive_int("per_device_batch", per_device_batch)
    positive_int("world_size", world_size)
    positive_int("accumulation_steps", accumulation_steps)
    return per_device_batch * world_size * accumulation_steps


def linear_scaled_lr(base_lr: float, base_batch: int, new_batch: int) -> float:
    """The linear scaling rule (Goyal et al., 2017): the learning rate grows with the global batch."""
    positive_number("base_lr", base_lr)
    positive_int("base_batch", base_batch)
    positive_int("new_batch", new_batch)
    return base_lr * new_batch / base_batch


def ring_allreduce_bytes(model_bytes: int, world_size: int) -> float:
    """Bytes each device sends (and receives) in a ring all-reduce of `model_bytes`: 2(k-1)/k x bytes."""
    positive_int("model_bytes", model_bytes, minimum=0)
    positive_int("world_size", world_size)
    return 2 * (world_size - 1) / world_size * model_bytes


def dataparallel_device0_bytes(model_bytes: int, world_size: int) -> int:
    """Bytes device 0 sends plus receives per DataParallel step for the weights and gradients alone:
    it broadcasts the weights to k-1 devices and receives k-1 gradient copies (inputs and outputs come on top)."""
    positive_int("model_bytes", model_bytes, minimum=0)
    positive_int("world_size", world_size)
    return 2 * (world_size - 1) * model_bytes


# ---- a reusable trainer and its single-process reference ---------------------------------


@dataclass(frozen=True)
class TrainConfig:
    n_samples: int = 256
    in_features: int = 16
    hidden: int = 32
    out_features: int = 2
    batch_size: int = 16  # per rank
    epochs: int = 2
    lr: float = 0.05
    seed: int = 0
    set_epoch: bool = True

    def __post_init__(self):
        for name in ("n_samples", "in_features", "hidden", "out_features", "batch_size", "epochs"):
            positive_int(name, getattr(self, name))
        positive_number("lr", self.lr)

    def dataset(self):
        return data.regression(self.n_samples, self.in_features, self.out_features, seed=self.seed)

    def model(self):
        return models.seeded(models.MLP, self.seed, in_features=self.in_features, hidden=self.hidden,
                             out_features=self.out_features)

    def sampler(self, dataset, world_size: int, rank: int) -> DistributedSampler:
        return DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=self.seed)


def wrap(model: torch.nn.Module) -> DDP:
    """DDP around `model` on this rank's device (device_ids only for GPUs: on the CPU it must be None)."""
    device = launch.device()
    model = model.to(device)
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def train_worker(rank: int, world_size: int, cfg: TrainConfig, progress: bool = True) -> dict:
    """DDP training: DistributedSampler (+ set_epoch), DDP wrap, SGD; the loss all-reduced to a mean."""
    dataset = cfg.dataset()
    sampler = cfg.sampler(dataset, world_size, rank)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler)
    model = wrap(cfg.model())
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    device = launch.device()
    losses = []
    bar = tqdm(total=cfg.epochs * len(loader), desc=f"DDP x{world_size}", disable=not progress or rank != 0, leave=False)
    for epoch in range(cfg.epochs):
        if cfg.set_epoch:
            sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            losses.append(mean_loss.item() / world_size)
            bar.update()
    bar.close()
    return {"state": checkpoints.clean_state_dict(model), "losses": losses}


def reference_train(cfg: TrainConfig, world_size: int) -> dict:
    """One process, the same global batches: at step i, the union of every rank's i-th batch."""
    positive_int("world_size", world_size)
    dataset = cfg.dataset()
    model = cfg.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    losses = []
    for epoch in range(cfg.epochs):
        shards = []
        for rank in range(world_size):
            sampler = cfg.sampler(dataset, world_size, rank)
            if cfg.set_epoch:
                sampler.set_epoch(epoch)
            shards.append(list(sampler))
        for start in range(0, len(shards[0]), cfg.batch_size):
            idx = [i for shard in shards for i in shard[start:start + cfg.batch_size]]
            x, y = dataset[idx]
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return {"state": model.state_dict(), "losses": losses}


def same_state(a: dict, b: dict, atol: float = 1e-5) -> bool:
    return list(a) == list(b) and all(torch.allclose(a[k].cpu(), b[k].cpu(), atol=atol) for k in a)


# ---- the lesson's workers -------------------------------------------------------------------


def hello(rank: int, world_size: int) -> dict:
    """Who am I? Every rank is its own process with its own rank, device and backend."""
    return {"rank": rank, "world_size": world_size, "pid": os.getpid(), "backend": dist.get_backend(),
            "device": str(launch.device()), "threads": torch.get_num_threads()}


def hello_spawn(rank: int, world_size: int, folder: str) -> None:
    """For torch.multiprocessing.spawn (which passes the rank first): leave a note in `folder`."""
    with open(os.path.join(folder, f"rank{rank}.txt"), "w") as f:
        f.write(f"rank {rank} of {world_size}, process {os.getpid()}")


def allreduce_demo(rank: int, world_size: int) -> dict:
    value = torch.tensor([float(rank + 1)], device=launch.device())
    before = value.item()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return {"rank": rank, "before": before, "after": value.item()}


def manual_average_worker(rank: int, world_size: int, cfg: TrainConfig, average_gradients) -> dict:
    """Train a plain model, averaging the gradients by hand with `average_gradients(model)`."""
    dataset = cfg.dataset()
    sampler = cfg.sampler(dataset, world_size, rank)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler)
    model = cfg.model().to(launch.device())
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.mse_loss(model(x.to(launch.device())), y.to(launch.device())).backward()
            average_gradients(model)
            optimizer.step()
    return {"state": model.state_dict()}


def count_allreduces(ddp_model: DDP) -> list[int]:
    """Register a comm hook that counts DDP's bucket all-reduces (then averages like the default)."""
    counter = [0]

    def hook(state, bucket):
        counter[0] += 1
        tensor = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])

    ddp_model.register_comm_hook(None, hook)
    return counter


def accumulation_worker(rank: int, world_size: int, cfg: TrainConfig, micro_batches: int, step_fn) -> dict:
    """One optimizer step over `micro_batches` micro-batches per rank, done by `step_fn`; counts all-reduces."""
    dataset = cfg.dataset()
    model = wrap(cfg.model())
    calls = count_allreduces(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    per_rank = cfg.batch_size * micro_batches
    x, y = dataset[rank * per_rank:(rank + 1) * per_rank]
    device = launch.device()
    batches = list(zip(x.to(device).chunk(micro_batches), y.to(device).chunk(micro_batches)))
    step_fn(model, optimizer, batches, F.mse_loss)
    return {"state": checkpoints.clean_state_dict(model), "allreduces": calls[0]}


def large_batch_reference(cfg: TrainConfig, world_size: int, micro_batches: int) -> dict:
    """The step that accumulation must equal: one SGD step on every rank's samples at once."""
    positive_int("world_size", world_size)
    positive_int("micro_batches", micro_batches)
    dataset = cfg.dataset()
    model = cfg.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    x, y = dataset[: world_size * cfg.batch_size * micro_batches]
    F.mse_loss(model(x), y).backward()
    optimizer.step()
    return {"state": model.state_dict()}


def uneven_worker(rank: int, world_size: int, batches_per_rank: list[int], join: bool = False) -> dict:
    """Rank r trains on batches_per_rank[r] batches, then all ranks meet at a barrier.

    Without `join`, the rank with more batches waits in backward's all-reduce for partners that
    already left the loop, until the process group's timeout. `model.join()` lets the finished
    ranks shadow the missing all-reduces."""
    model = wrap(models.MLP(8, 16, 1))
    device = launch.device()
    with model.join(enable=join):
        for _ in range(batches_per_rank[rank]):
            model(torch.randn(4, 8, device=device)).sum().backward()
    dist.barrier()
    return {"rank": rank, "steps": batches_per_rank[rank]}


def loader_steps_worker(rank: int, world_size: int, n_samples: int, make_loader) -> dict:
    """Train through one epoch of `make_loader(dataset, world_size, rank, batch_size=4)`."""
    dataset = data.regression(n_samples, 8, 1)
    model = wrap(models.MLP(8, 16, 1))
    steps = 0
    for x, y in make_loader(dataset, world_size, rank, 4):
        F.mse_loss(model(x.to(launch.device())), y.to(launch.device())).backward()
        steps += 1
    return {"rank": rank, "steps": steps}


def checkpoint_worker(rank: int, world_size: int, cfg: TrainConfig, path: str, save_fn) -> dict:
    """Train briefly, save with `save_fn(ddp_model, path)`, then load the file on every rank."""
    model = wrap(cfg.model())
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    x, y = cfg.dataset()[rank * cfg.batch_size:(rank + 1) * cfg.batch_size]
    F.mse_loss(model(x.to(launch.device())), y.to(launch.device())).backward()
    optimizer.step()
    save_fn(model, path)
    loaded = torch.load(path, map_location=launch.device(), weights_only=True)  # this rank's device
    return {"trained": checkpoints.clean_state_dict(model), "loaded": loaded}


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
