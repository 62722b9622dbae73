"""DistributedDataParallel: the lesson's workers (importable, so mp.spawn and torchrun can start them),
a reusable DDP trainer and its single-process reference, and the arithmetic of the lesson.

Every worker has the signature `worker(rank, world_size, ...)` and runs inside a process group
started by `helpers.launch.launch` (or by itself under torchrun).
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from . import checkpoints, compare, data, launch, memory, models
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
        if progress:  # every rank, as torchrun shows it: launch prints it as "[rank1]: epoch ..."
            print(f"epoch {epoch + 1}/{cfg.epochs}: {len(loader)} steps, mean loss {sum(losses[-len(loader):]) / len(loader):.4f}")
    return {"state": checkpoints.clean_state_dict(model), "losses": losses}


def reference_train(cfg: TrainConfig, world_size: int, epoch_numbers: list[int] | None = None) -> dict:
    """One process, the same global batches: at step i, the union of every rank's i-th batch.

    `epoch_numbers`: what set_epoch is given in each epoch (its shuffle's seed is cfg.seed + that number); by
    default 0, 1, 2, ... (or no set_epoch at all when cfg.set_epoch is False)."""
    positive_int("world_size", world_size)
    if epoch_numbers is not None and (type(epoch_numbers) is not list or len(epoch_numbers) != cfg.epochs
                                      or not all(type(e) is int for e in epoch_numbers)):
        raise ValueError(f"epoch_numbers must be a list of {cfg.epochs} ints, got {epoch_numbers!r}")
    dataset = cfg.dataset()
    model = cfg.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    losses = []
    for epoch in range(cfg.epochs):
        shards = []
        for rank in range(world_size):
            sampler = cfg.sampler(dataset, world_size, rank)
            if epoch_numbers is not None:
                sampler.set_epoch(epoch_numbers[epoch])
            elif cfg.set_epoch:
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
    """Whether two state dicts hold the same weights: helpers.compare.same_state (the same keys in the same order,
    dtypes and shapes, nothing broadcast; values within atol + 1e-5 x |b|, a NaN or inf never close to a number)."""
    return compare.same_state(a, b, atol=atol, rtol=1e-5)


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


def large_batch_reference(cfg: TrainConfig, world_size: int, micro_batches: int, steps: int = 1) -> dict:
    """What accumulation must equal: `steps` plain SGD steps, each on every rank's samples of that step at once."""
    positive_int("world_size", world_size)
    positive_int("micro_batches", micro_batches)
    positive_int("steps", steps)
    per_step = world_size * cfg.batch_size * micro_batches
    if steps * per_step > cfg.n_samples:
        raise ValueError(f"steps: {steps} steps of {per_step} samples need more than cfg.n_samples={cfg.n_samples}")
    dataset = cfg.dataset()
    model = cfg.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for step in range(steps):
        x, y = dataset[step * per_step:(step + 1) * per_step]
        optimizer.zero_grad()
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


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@contextmanager
def recording_writes(path: str, slow_s: float = 0.0):
    """Inside the block, record whether this process writes `path`: a Python `open`/`os.open` for
    writing, a rename onto it (seen by an audit hook), or `torch.save` to it (whatever the spelling:
    `torch.save`, `checkpoints.save`, ...). `torch.save` to `path` then holds the half-written file
    `slow_s` seconds, so a rank that reads it without waiting finds it incomplete.

    Yields a list whose single item turns True at the first write."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if isinstance(slow_s, bool) or not isinstance(slow_s, (int, float)) or slow_s < 0:
        raise ValueError(f"slow_s must be a number >= 0, got {slow_s!r}")
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


def loader_problem(make_loader, n_samples: int, world_size: int, batch_size: int) -> str | None:
    """What is wrong with `make_loader(dataset, world_size, rank, batch_size)` on `data.indexed(n_samples)`,
    judged against torch's DistributedSampler (None when nothing is): every rank a DataLoader of
    batches of at most `batch_size`, the same share of ceil(n_samples / world_size) distinct samples
    (as many as DistributedSampler gives), as many batches as DistributedSampler's loader, and every
    sample on some rank. Any order and any padding are accepted."""
    record = loader_batches(make_loader, n_samples, world_size, batch_size)
    return loader_batches_problem(record, n_samples, world_size, batch_size)


def loader_batches(make_loader, n_samples: int, world_size: int, batch_size: int) -> list[dict]:
    """What `make_loader(dataset, world_size, rank, batch_size)` yields on `data.indexed(n_samples)`, rank by
    rank, as plain data for `loader_batches_problem` (a hidden test collects it in the student's kernel and
    judges it elsewhere). Per rank: {"loader": its type's name, "is_dataloader": bool, "batches": [[the batch's
    length, [the sample numbers in it]], ...], "not_tensor": None, or the type's name of the first batch that
    does not hold the dataset's tensors}. The record ends at the first rank whose loader is no DataLoader or
    yields such a batch."""
    if not callable(make_loader):
        raise ValueError(f"make_loader must be callable, got {type(make_loader).__name__}")
    positive_int("n_samples", n_samples)
    positive_int("world_size", world_size)
    positive_int("batch_size", batch_size)
    dataset = data.indexed(n_samples)
    record = []
    for rank in range(world_size):
        loader = make_loader(dataset, world_size, rank, batch_size)
        entry = {"loader": type(loader).__name__, "is_dataloader": isinstance(loader, DataLoader), "batches": [],
                 "not_tensor": None}
        record.append(entry)
        if not entry["is_dataloader"]:
            break
        for batch in loader:
            x = batch[0] if isinstance(batch, (list, tuple)) else batch
            if not isinstance(x, torch.Tensor):
                entry["not_tensor"] = type(x).__name__
                break
            entry["batches"].append([len(x), [int(v) for v in x.flatten()]])
        if entry["not_tensor"] is not None:
            break
    return record


def _is_loader_record(record, world_size: int) -> bool:
    """Whether `record` has the shape `loader_batches` gives for `world_size` ranks."""
    if type(record) is not list or not 1 <= len(record) <= world_size:
        return False
    for i, entry in enumerate(record):
        if type(entry) is not dict or set(entry) != {"loader", "is_dataloader", "batches", "not_tensor"}:
            return False
        if (type(entry["loader"]) is not str or type(entry["is_dataloader"]) is not bool
                or not (entry["not_tensor"] is None or type(entry["not_tensor"]) is str)
                or type(entry["batches"]) is not list):
            return False
        for batch in entry["batches"]:
            if (type(batch) is not list or len(batch) != 2 or type(batch[0]) is not int or type(batch[1]) is not list
                    or not all(type(v) is int for v in batch[1])):
                return False
        if not entry["is_dataloader"] and (entry["batches"] or entry["not_tensor"] is not None):
            return False
        ends = not entry["is_dataloader"] or entry["not_tensor"] is not None
        if ends and i < len(record) - 1:  # only the last rank can end the record early
            return False
    return len(record) == world_size or ends


def loader_batches_problem(record: list, n_samples: int, world_size: int, batch_size: int) -> str | None:
    """What is wrong with the loaders that `loader_batches(make_loader, n_samples, world_size, batch_size)`
    recorded (None when nothing is): `loader_problem`'s verdict, from the record alone. Raises ValueError
    when `record` is not such a record."""
    positive_int("n_samples", n_samples)
    positive_int("world_size", world_size)
    positive_int("batch_size", batch_size)
    if not _is_loader_record(record, world_size):
        raise ValueError(f"record must be what loader_batches returns for {world_size} ranks")
    dataset = data.indexed(n_samples)
    share = len(DistributedSampler(dataset, num_replicas=world_size, rank=0, shuffle=False))
    n_batches = len(DataLoader(dataset, batch_size=batch_size,
                               sampler=DistributedSampler(dataset, num_replicas=world_size, rank=0, shuffle=False)))
    shards = []
    for rank, entry in enumerate(record):
        if not entry["is_dataloader"]:
            return f"rank {rank}: make_loader returned a {entry['loader']}, not a DataLoader"
        rows = []
        for size, values in entry["batches"]:
            if size > batch_size:
                return f"rank {rank}: a batch of {size} samples, more than batch_size={batch_size}"
            rows += values
        if entry["not_tensor"] is not None:
            return f"rank {rank}: a batch holds a {entry['not_tensor']}, not the dataset's tensors"
        if len(rows) != len(set(rows)):
            return f"rank {rank} sees a sample twice in one epoch"
        shards.append((rows, len(entry["batches"])))
    counts = [len(rows) for rows, _ in shards]
    if len(set(counts)) > 1:
        return f"the ranks get different numbers of samples ({counts}): their gradients would not weigh alike"
    if counts[0] != share:
        return (f"each rank gets {counts[0]} of the {n_samples} samples over {world_size} ranks: every rank must "
                f"get the same share, n_samples / world_size rounded up")
    if any(batches != n_batches for _, batches in shards):
        return f"{[b for _, b in shards]} batches per rank: expected the batches of {share} samples at batch_size={batch_size}"
    missing = set(range(n_samples)) - {i for rows, _ in shards for i in rows}
    if missing:
        return f"samples on no rank: {len(missing)} of the {n_samples}"
    return None


def last_error_line(error: BaseException) -> str:
    """The line of a failed rank's traceback that names the exception (not the rank's stderr)."""
    if not isinstance(error, BaseException):
        raise ValueError(f"error must be an exception, got {type(error).__name__}")
    text = getattr(error, "details", str(error)).split("\n--- this rank's stderr ---")[0].strip()
    lines = text.splitlines()
    # the exception's own line: unindented `package.Name: message` (its message may run on below it)
    named = [line for line in lines if re.match(r"[A-Za-z_][\w.]*: ", line)]
    return named[-1] if named else lines[-1] if lines else type(error).__name__


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


# ---- judging the lesson's exercises against the references ------------------------------------


def checkpoint_problem(ranks: list, cfg: TrainConfig) -> str | None:
    """What is wrong with the results of `checkpoint_worker` (None when nothing is): rank 0, and only
    rank 0, wrote the file; every rank loaded a clean state dict (the plain model's keys) holding the
    trained weights, which are one SGD step on the global batch (`large_batch_reference`) on every rank."""
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    fields = {"rank": int, "trained": None, "loaded": None, "wrote": bool}  # what it loaded is judged below
    if type(ranks) is not list or not ranks or not all(compare.is_record(r, fields) for r in ranks):
        raise ValueError("ranks must be the list of checkpoint_worker's results")
    writers = [r["rank"] for r in ranks if r["wrote"]]
    if 0 not in writers:
        return "rank 0 did not write the checkpoint"
    if writers != [0]:
        return (f"ranks {writers} all wrote the checkpoint: only rank 0 may write it (the others race it for "
                f"the same file)")
    keys = list(cfg.model().state_dict())
    for r in ranks:
        loaded = r["loaded"]
        problem = _state_dict_problem(loaded, keys, "what the checkpoint holds", "a plain model cannot load it (save the model inside DDP)")
        if problem:
            return problem
        if not same_state(loaded, r["trained"]):
            return f"rank {r['rank']} loaded weights that differ from the trained ones"
    reference = large_batch_reference(cfg, len(ranks), 1)["state"]
    for r in ranks:
        if not same_state(r["trained"], reference):
            return f"rank {r['rank']}'s weights changed while it saved: saving must leave the model as it is"
    return None


def _state_dict_problem(state, keys: list, what: str, prefix_hint: str) -> str | None:
    """What is wrong with `state` as a state dict with exactly `keys` (None when nothing is)."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        return f"{what} is a {type(state).__name__}, not a state dict of tensors"
    if list(state) != keys:
        if list(state) == [checkpoints.PREFIX + k for k in keys]:
            return f"the keys of {what} start with 'module.': {prefix_hint}"
        return f"the keys of {what} are not the model's state dict keys"
    return None


def checkpoint_failure(error: BaseException) -> str:
    """A readable reason for a failed checkpoint launch: the failing rank's exception and what it suggests."""
    line = last_error_line(error)
    rank = getattr(error, "rank", "?")
    if "UnpicklingError" in line or "Weights only load failed" in line:
        hint = "the file is not a plain state dict of tensors"
    elif any(s in line for s in ("FileNotFoundError", "No such file", "PytorchStreamReader", "EOFError", "zip archive")):
        hint = "a rank read the file before rank 0 had finished writing it"
    elif "imed out" in line:
        hint = "a rank waited for a partner that never came (a barrier that not every rank reaches?)"
    else:
        hint = "see the error"
    return f"rank {rank} failed: {line} ({hint})"


def worker_problem(ranks: list, cfg: TrainConfig, world_size: int, epoch_numbers: list[int] | None = None) -> str | None:
    """What is wrong with the results of a complete DDP worker (None when nothing is): each returns
    {"state": clean state dict, "mean_loss": float}; the weights equal `reference_train` (with `epoch_numbers`,
    the numbers the worker gave set_epoch, when they are known) and agree exactly between ranks; mean_loss is
    the mean over the ranks of the last batch's loss, which is the reference's last loss (every rank's last
    batch has the same size under DistributedSampler)."""
    if not isinstance(ranks, list) or not ranks:
        raise ValueError("ranks must be the non-empty list of the worker's results")
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    positive_int("world_size", world_size)
    if not all(compare.is_record(r, {"state": None, "mean_loss": None}) for r in ranks):
        return "return a dict with the keys 'state' and 'mean_loss' (and no others)"
    keys = list(cfg.model().state_dict())
    for r in ranks:
        problem = _state_dict_problem(r["state"], keys, "the returned 'state'", "return the clean state dict of the model inside DDP")
        if problem:
            return problem
    if not all(same_state(r["state"], ranks[0]["state"], atol=0) for r in ranks):
        return "the ranks end with different weights: are the gradients averaged (the model wrapped in DDP)?"
    reference = reference_train(cfg, world_size, epoch_numbers)
    if not same_state(ranks[0]["state"], reference["state"]):
        if cfg.epochs > 1 and cfg.set_epoch and epoch_numbers is None:
            import dataclasses

            forgot = reference_train(dataclasses.replace(cfg, set_epoch=False), world_size)
            if same_state(ranks[0]["state"], forgot["state"]):
                return "the weights equal a run that never calls set_epoch: call sampler.set_epoch(epoch) every epoch"
        return ("the weights differ from one process trained on the same global batches: check the sampler, the "
                "batch size, the learning rate, zero_grad and the loss")
    losses = [r["mean_loss"] for r in ranks]
    not_floats = [v for v in losses if type(v) is not float]
    if not_floats:
        return f"mean_loss must be a float, got {type(not_floats[0]).__name__}"
    if not all(math.isfinite(v) for v in losses):
        return "mean_loss is not a finite number"
    if any(v != losses[0] for v in losses):
        return "the ranks return different mean_loss values: all-reduce the loss"
    if not compare.same_values(losses[0], float(reference["losses"][-1]), atol=1e-5, rtol=1e-5):
        return "mean_loss is not the mean over the ranks of the last batch's loss"
    return None


def observed_worker(rank: int, world_size: int, worker, *args) -> dict:
    """Run `worker(rank, world_size, *args)`, a complete DDP worker that joins and leaves the process group itself
    (`launch(observed_worker, n, args=(worker, ...), init_process_group=False)`, as torchrun starts a script), and
    report what judging it needs besides its result: {"result": what it returned, "epochs": the epoch number of
    every pass over a DistributedSampler, in order (what set_epoch last set: it seeds that pass's shuffle),
    "left_group": whether it had left the process group when it returned}. The launcher destroys a group left
    alive once the worker has returned: only here can a worker that never leaves it be seen."""
    if not callable(worker):
        raise ValueError(f"worker must be callable, got {type(worker).__name__}")
    epochs = []
    iterate = DistributedSampler.__iter__

    def recording_iter(sampler):
        epochs.append(int(sampler.epoch) if isinstance(sampler.epoch, int) else sampler.epoch)
        return iterate(sampler)

    DistributedSampler.__iter__ = recording_iter
    try:
        result = worker(rank, world_size, *args)
    finally:
        DistributedSampler.__iter__ = iterate
    return {"result": result, "epochs": epochs, "left_group": not dist.is_initialized()}


def observed_worker_problem(records: list, cfg: TrainConfig, world_size: int) -> str | None:
    """What is wrong with a complete DDP worker, from what `observed_worker` reported on each rank (None when
    nothing is): every rank left the process group; every rank went once per epoch through its
    DistributedSampler, shuffled with the same epoch number on every rank and a new one every epoch (any
    numbering: 0, 1, ... or 1, 2, ...); then `worker_problem` on the results, against the reference trained
    with those epoch numbers."""
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    positive_int("world_size", world_size)
    fields = {"result": None, "epochs": list, "left_group": bool}
    if type(records) is not list or len(records) != world_size or not all(compare.is_record(r, fields) for r in records):
        return f"expected a result from each of the {world_size} ranks"
    staying = [rank for rank, r in enumerate(records) if not r["left_group"]]
    if staying:
        return (f"step 5: rank {staying[0]} was still in the process group when the worker returned: leave it "
                f"(dist.destroy_process_group())")
    epochs = [r["epochs"] for r in records]
    if not all(type(e) is int for numbers in epochs for e in numbers):
        return "set_epoch must be given an int"
    passes = [len(numbers) for numbers in epochs]
    if any(n != cfg.epochs for n in passes):
        return (f"{cfg.epochs} epochs, but a rank went {next(n for n in passes if n != cfg.epochs)} times through a "
                f"DistributedSampler: load the data through the sampler of cfg.sampler, once per epoch")
    if any(numbers != epochs[0] for numbers in epochs):
        return "the ranks shuffled with different epoch numbers: call sampler.set_epoch(epoch) with the same epoch on every rank"
    if cfg.set_epoch and len(set(epochs[0])) < len(epochs[0]):
        return ("two epochs shuffled alike (the same epoch number): call sampler.set_epoch(epoch) every epoch, "
                "with a new epoch each time")
    return worker_problem([r["result"] for r in records], cfg, world_size, epochs[0])
