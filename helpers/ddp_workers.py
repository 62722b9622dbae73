"""The lesson's DDP workers: what each rank runs, from "who am I?" to a complete training that saves a checkpoint.

Every worker has the signature `worker(rank, world_size, ...)` and runs inside a process group started by
`helpers.launch.launch` (or by itself under torchrun); it lives in a module so that mp.spawn and torchrun can
start it too. What a worker's result must equal is in helpers.ddp_reference.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from . import checkpoints, data, launch, models
from ._validate import function, positive_int
from .ddp_reference import TrainConfig
from .language import say


# ---- a reusable DDP trainer ----------------------------------------------------------------------


def wrap(model: torch.nn.Module) -> DDP:
    """DDP around `model` on this rank's device (device_ids only for GPUs: on the CPU it must be None)."""
    device = launch.device()
    model = model.to(device)
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def train_worker(rank: int, world_size: int, cfg: TrainConfig, progress: bool = True) -> dict:
    """DDP training: DistributedSampler (+ set_epoch), DDP wrap, SGD; the loss all-reduced to a mean. With
    `progress`: its steps on the launch's progress bar, and a line from each rank at the end."""
    dataset = cfg.dataset()
    sampler = cfg.sampler(dataset, world_size, rank)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler)
    model = wrap(cfg.model())
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    device = launch.device()
    bar = launch.progress(cfg.epochs * len(loader) if progress else 0)
    losses = []
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
    if progress:  # every rank, as torchrun shows it: launch prints it as "[rank1]: ..."
        print(say("{steps} steps, last mean loss {loss:.4f}", steps=len(losses), loss=losses[-1]))
    return {"state": checkpoints.clean_state_dict(model), "losses": losses}


# ---- the lesson's workers ------------------------------------------------------------------------


def hello(rank: int, world_size: int) -> dict:
    """Who am I? Every rank is its own process with its own rank, device and backend."""
    return {"rank": rank, "world_size": world_size, "pid": os.getpid(), "backend": dist.get_backend(),
            "device": str(launch.device()), "threads": torch.get_num_threads()}


def hello_spawn(rank: int, world_size: int, folder: str) -> None:
    """For torch.multiprocessing.spawn (which passes the rank first): leave a note in `folder`."""
    with open(os.path.join(folder, f"rank{rank}.txt"), "w") as f:
        f.write(say("rank {rank} of {world_size}, process {pid}", rank=rank, world_size=world_size, pid=os.getpid()))


class SpawnedStderr:
    """What processes started inside `spawned_stderr()` wrote to stderr."""

    def __init__(self):
        self.text = ""

    def errors(self) -> list[str]:
        """Each exception line they wrote (`Name: message`), once."""
        found = re.findall(r"^([A-Za-z_][\w.]*(?:Error|Exception): .*)$", self.text, re.M)
        return list(dict.fromkeys(found))


@contextmanager
def spawned_stderr():
    """Keep what the processes started in the block write to stderr (mp.spawn's children inherit file descriptor 2)
    instead of showing it, and mp.spawn's warning that it stops the other children: a failure the lesson expects
    then reads as one line, not as a crash."""
    captured = SpawnedStderr()
    saved, spawn_log = os.dup(2), logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    with tempfile.TemporaryFile() as kept:
        os.dup2(kept.fileno(), 2)
        spawn_log.setLevel(logging.ERROR)
        try:
            yield captured
        finally:
            spawn_log.setLevel(level)
            os.dup2(saved, 2)
            os.close(saved)
            kept.seek(0)
            captured.text = kept.read().decode(errors="replace")


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


def accumulation_worker(rank: int, world_size: int, cfg: TrainConfig, micro_batches: int, step_fn,
                        steps: int = 1) -> dict:
    """`steps` optimizer steps, each over `micro_batches` micro-batches per rank, done by `step_fn`.

    Step s of rank r uses the samples `(s * world_size + r) * per_rank ...` (per_rank = batch_size x
    micro_batches), so one step's global batch is a contiguous block: `large_batch_reference`'s.
    Returns the clean state, DDP's all-reduces per step (a comm hook counts its buckets) and, per
    step, whether the gradients were left cleared (None or zero) when `step_fn` returned."""
    positive_int("micro_batches", micro_batches)
    positive_int("steps", steps)
    dataset = cfg.dataset()
    model = wrap(cfg.model())
    calls = count_allreduces(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    per_rank = cfg.batch_size * micro_batches
    device = launch.device()
    per_step, cleared = [], []
    for step in range(steps):
        start = (step * world_size + rank) * per_rank
        x, y = dataset[start:start + per_rank]
        batches = list(zip(x.to(device).chunk(micro_batches), y.to(device).chunk(micro_batches)))
        before = calls[0]
        step_fn(model, optimizer, batches, F.mse_loss)
        per_step.append(calls[0] - before)
        cleared.append(all(p.grad is None or not p.grad.any() for p in model.parameters()))
    return {"state": checkpoints.clean_state_dict(model), "allreduces": calls[0], "allreduces_per_step": per_step,
            "grads_cleared": cleared}


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


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@contextmanager
def recording_writes(path: str, slow_s: float = 0.0):
    """Inside the block, record whether this process writes `path`: a Python `open`/`os.open` for
    writing, a rename onto it (seen by an audit hook), or `torch.save` to it (whatever the spelling:
    `torch.save`, `checkpoints.save`, ...). `torch.save` to `path` then holds the half-written file
    `slow_s` seconds, so a rank that reads it without waiting finds it incomplete.

    Yields a list whose single item turns True at the first write."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(say("path must be a str or os.PathLike, got {kind}", kind=type(path).__name__))
    if isinstance(slow_s, bool) or not isinstance(slow_s, (int, float)) or slow_s < 0:
        raise ValueError(say("slow_s must be a number >= 0, got {slow_s!r}", slow_s=slow_s))
    target = os.path.realpath(path)
    wrote, active = [False], [True]

    def is_target(name) -> bool:
        try:
            return os.path.realpath(os.fsdecode(name)) == target
        except (TypeError, ValueError):
            return False

    def hook(event, args):
        if not active[0]:
            return
        if event == "open" and isinstance(args[2], int) and args[2] & _WRITE_FLAGS and is_target(args[0]):
            wrote[0] = True
        elif event == "os.rename" and is_target(args[1]):
            wrote[0] = True

    original = torch.serialization._open_zipfile_writer_file

    class Recording(original):
        def __init__(self, name):
            super().__init__(name)
            if is_target(name):
                wrote[0] = True
                time.sleep(slow_s)  # the file exists, its records are not written yet

    sys.addaudithook(hook)  # hooks cannot be removed: `active` switches it off
    torch.serialization._open_zipfile_writer_file = Recording
    try:
        yield wrote
    finally:
        active[0] = False
        torch.serialization._open_zipfile_writer_file = original


def checkpoint_worker(rank: int, world_size: int, cfg: TrainConfig, path: str, save_fn, slow_s: float = 0.0) -> dict:
    """Train briefly, save with `save_fn(ddp_model, path)`, then load the file on every rank.

    Records whether this rank wrote `path`. With `slow_s` > 0 rank 0 reaches `save_fn` `slow_s` seconds
    after the others and its torch.save holds the half-written file as long: a rank that reads the
    file without waiting for rank 0 (a barrier after the save) fails instead of being lucky."""
    model = wrap(cfg.model())
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    x, y = cfg.dataset()[rank * cfg.batch_size:(rank + 1) * cfg.batch_size]
    F.mse_loss(model(x.to(launch.device())), y.to(launch.device())).backward()
    optimizer.step()
    delay = slow_s if rank == 0 else 0.0
    time.sleep(delay)
    with recording_writes(path, slow_s=delay) as wrote:
        save_fn(model, path)
    loaded = torch.load(path, map_location=launch.device(), weights_only=True)  # this rank's device
    return {"rank": rank, "trained": checkpoints.clean_state_dict(model), "loaded": loaded, "wrote": wrote[0]}


@dataclass(frozen=True)
class RankShare(TrainConfig):
    """A TrainConfig as one rank of a hidden test sees it (`rank_share`): `dataset()` is `samples`, and there is no
    data_seed to make the whole dataset from."""

    samples: TensorDataset | None = field(default=None, repr=False, compare=False)

    def dataset(self):
        return self.samples


def rank_share(cfg: TrainConfig, world_size: int, rank: int) -> RankShare:
    """`cfg` as rank `rank` of `world_size` gets it: its dataset holds cfg's samples only where this rank's sampler
    can take them (in every epoch, numbered from 0 or from 1, and without set_epoch), other numbers elsewhere. Only
    a rank that averages its gradients with the others' ends where one process trained on the global batches ends;
    one that trains alone on the whole dataset learns from the other numbers."""
    positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(say("rank must be an int in [0, {world_size}), got {rank!r}", world_size=world_size,
                             rank=rank))
    if not isinstance(cfg, TrainConfig):
        raise ValueError(say("cfg must be a TrainConfig, got {kind}", kind=type(cfg).__name__))
    true = cfg.dataset()
    reachable = set()
    for epoch in range(cfg.epochs + 1):
        sampler = cfg.sampler(true, world_size, rank)
        sampler.set_epoch(epoch)
        reachable.update(sampler)
    seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
    x, y = data.regression(cfg.n_samples, cfg.in_features, cfg.out_features, seed=(seed * 1_000_003 + rank + 1) % 2**62).tensors
    index = torch.tensor(sorted(reachable))
    x[index], y[index] = true.tensors[0][index], true.tensors[1][index]
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(TrainConfig)}
    return RankShare(**{**fields, "data_seed": None}, samples=TensorDataset(x, y))


def share_worker(rank: int, world_size: int, worker, cfg: TrainConfig) -> dict:
    """Run `worker(rank, world_size, rank_share(cfg, world_size, rank))`, a complete DDP worker that joins and leaves
    the process group itself (`launch(share_worker, n, args=(worker, cfg), init_process_group=False)`, as torchrun
    starts a script): {"result": what it returned, "left_group": whether it had left the process group when it
    returned}. The launcher destroys a group left alive once the worker has returned: only here can a worker that
    never leaves it be seen. (The worker gets no data_seed; reaching for this frame's `cfg` is reaching into the
    interpreter's frames, which graders/audit.py flags.)"""
    function("worker", worker)
    result = worker(rank, world_size, rank_share(cfg, world_size, rank))
    return {"result": result, "left_group": not dist.is_initialized()}
