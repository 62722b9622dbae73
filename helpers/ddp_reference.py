"""What a DDP run must equal, computed in one process: the training the lesson runs (`TrainConfig`: its data,
model and sampler), single-process trainings on the same global batches, the comparison of two sets of weights,
and the lesson's arithmetic in closed form (shards, global batch, learning rate, bytes sent).

The workers (helpers.ddp_workers) run what a TrainConfig describes under DDP; the verdicts (helpers.ddp_judging)
hold their results to these references. Nothing here starts a process or joins a process group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from . import compare, data, models
from ._validate import positive_int, positive_number
from . import refusal
from .language import say


# ---- arithmetic ----------------------------------------------------------------------------------


def shard_indices(n_samples: int, world_size: int, rank: int, drop_last: bool = False,
                  shuffle: bool = False, seed: int = 0, epoch: int = 0) -> list[int]:
    """The sample indices rank `rank` sees in epoch `epoch`: torch's DistributedSampler itself."""
    positive_int("n_samples", n_samples)
    positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(say("rank must be an int in [0, {world_size}), got {rank!r}", world_size=world_size,
                             rank=rank))
    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


@refusal.reference
def global_batch(per_device_batch: int, world_size: int, accumulation_steps: int = 1) -> int:
    """Samples behind one optimizer step."""
    positive_int("per_device_batch", per_device_batch)
    positive_int("world_size", world_size)
    positive_int("accumulation_steps", accumulation_steps)
    return per_device_batch * world_size * accumulation_steps


@refusal.reference
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


# ---- the training and its single-process references ----------------------------------------------


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
    data_seed: int | None = None  # the data's own seed (a hidden test's, apart from the model's); None: seed

    def __post_init__(self):
        for name in ("n_samples", "in_features", "hidden", "out_features", "batch_size", "epochs"):
            positive_int(name, getattr(self, name))
        positive_number("lr", self.lr)
        if self.data_seed is not None:
            positive_int("data_seed", self.data_seed, minimum=0)

    def dataset(self):
        seed = self.seed if self.data_seed is None else self.data_seed
        return data.regression(self.n_samples, self.in_features, self.out_features, seed=seed)

    def model(self):
        return models.seeded(models.MLP, self.seed, in_features=self.in_features, hidden=self.hidden,
                             out_features=self.out_features)

    def sampler(self, dataset, world_size: int, rank: int) -> DistributedSampler:
        return DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=self.seed)


@refusal.reference
def reference_train(cfg: TrainConfig, world_size: int, epoch_numbers: list[int] | None = None) -> dict:
    """One process, the same global batches: at step i, the union of every rank's i-th batch.

    `epoch_numbers`: what set_epoch is given in each epoch (its shuffle's seed is cfg.seed + that number); by
    default 0, 1, 2, ... (or no set_epoch at all when cfg.set_epoch is False)."""
    positive_int("world_size", world_size)
    if epoch_numbers is not None and (type(epoch_numbers) is not list or len(epoch_numbers) != cfg.epochs
                                      or not all(type(e) is int for e in epoch_numbers)):
        raise ValueError(say("epoch_numbers must be a list of {epochs} ints, got {epoch_numbers!r}", epochs=cfg.epochs,
                             epoch_numbers=epoch_numbers))
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


@refusal.reference
def large_batch_reference(cfg: TrainConfig, world_size: int, micro_batches: int, steps: int = 1) -> dict:
    """What accumulation must equal: `steps` plain SGD steps, each on every rank's samples of that step at once."""
    positive_int("world_size", world_size)
    positive_int("micro_batches", micro_batches)
    positive_int("steps", steps)
    per_step = world_size * cfg.batch_size * micro_batches
    if steps * per_step > cfg.n_samples:
        raise ValueError(say("steps: {steps} steps of {per_step} samples need more than cfg.n_samples={n_samples}",
                             steps=steps, per_step=per_step, n_samples=cfg.n_samples))
    dataset = cfg.dataset()
    model = cfg.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for step in range(steps):
        x, y = dataset[step * per_step:(step + 1) * per_step]
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return {"state": model.state_dict()}


def same_state(a: dict, b: dict, atol: float = 1e-5) -> bool:
    """Whether two state dicts hold the same weights: helpers.compare.same_state (the same keys in the same order,
    dtypes and shapes, nothing broadcast; values within atol + 1e-5 x |b|, a NaN or inf never close to a number)."""
    return compare.same_state(a, b, atol=atol, rtol=1e-5)
