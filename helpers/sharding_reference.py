"""What a sharded run must equal, computed in one process: the lesson's training (`ShardConfig`: data, model, its
blocks), the single-process Adam run a ZeRO or FSDP run must reproduce, and the lesson's arithmetic in closed form:
the dim-0 shard a rank holds (DTensor's own rule), ZeRO's bytes per rank (Rajbhandari et al., 2020), the bytes a
step sends, resharding N shards into M, and moving a state dict between a plain, a DDP and an FSDP model.

Nothing here starts a process or joins a process group.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import compare, data, models
from ._validate import one_of, positive_int, positive_number
from . import refusal
from .language import say

# ---- the shard a rank holds ------------------------------------------------------------------------------------


def _rank(rank, world_size: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(say("rank must be an int in [0, {world_size}), got {rank!r}", world_size=world_size,
                             rank=rank))
    return rank


def _shape(shape) -> tuple:
    if type(shape) not in (tuple, list, torch.Size) or not shape or not all(
            type(s) is int and s >= 0 for s in shape):
        raise ValueError(say("shape must be a non-empty tuple of ints >= 0, got {shape!r}", shape=shape))
    return tuple(shape)


@refusal.reference
def local_shape(shape, world_size: int, rank: int) -> tuple:
    """The shape of the shard rank `rank` holds of a tensor of `shape` sharded on dim 0 over `world_size` ranks:
    DTensor's own rule (`Shard(0)`, which fully_shard uses), torch.chunk's: ceil(rows / world_size) rows per rank,
    the last ranks with fewer or none."""
    shape = _shape(shape)
    positive_int("world_size", world_size)
    _rank(rank, world_size)
    rows, _ = _rows(shape[0], world_size, rank)
    return (rows, *shape[1:])


def _rows(rows: int, world_size: int, rank: int) -> tuple[int, int]:
    """(rows, offset) of rank `rank`'s dim-0 shard of `rows` rows: torch.chunk's pieces, which DTensor's Shard(0)
    cuts too (its private `Shard._local_shard_size_and_offset`, whose signature changes between torch versions)."""
    pieces = torch.arange(rows).chunk(world_size)
    if rank < len(pieces) and len(pieces[rank]):
        return len(pieces[rank]), int(pieces[rank][0])
    return 0, rows


@refusal.reference
def shard_rows(tensor: torch.Tensor, world_size: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s rows of `tensor` (dim 0), as `local_shape` cuts them."""
    if type(tensor) is not torch.Tensor or tensor.dim() == 0:
        raise ValueError(say("tensor must be a torch.Tensor with at least one dimension, got {kind}",
                             kind=type(tensor).__name__))
    positive_int("world_size", world_size)
    _rank(rank, world_size)
    rows, offset = _rows(tensor.shape[0], world_size, rank)
    return tensor[offset:offset + rows].clone()


@refusal.reference
def shard_state(state: dict, world_size: int) -> list:
    """A full state dict as `world_size` ranks hold it: one dict of dim-0 shards per rank."""
    positive_int("world_size", world_size)
    return [OrderedDict((k, shard_rows(v, world_size, r)) for k, v in state.items()) for r in range(world_size)]


@refusal.reference
def reshard(shards: list, new_world_size: int) -> list:
    """The shards of N ranks (one dict of dim-0 shards each) as `new_world_size` ranks hold them."""
    if type(shards) is not list or not shards or not all(isinstance(s, dict) for s in shards):
        raise ValueError(say("shards must be a non-empty list of dicts, one per rank"))
    full = OrderedDict((k, torch.cat([s[k] for s in shards])) for k in shards[0])
    return shard_state(full, new_world_size)


# ---- ZeRO's bytes --------------------------------------------------------------------------------------------

# Mixed-precision Adam, as in the paper: fp16 parameters (2 bytes) and gradients (2), and K = 12 bytes of optimizer
# state (an fp32 copy of the parameters, momentum and variance).
PARAM_BYTES, GRAD_BYTES, STATE_BYTES = 2, 2, 12


@refusal.reference
def zero_bytes(n_parameters: int, world_size: int, stage: int, *, param_bytes: int = PARAM_BYTES,
               grad_bytes: int = GRAD_BYTES, state_bytes: int = STATE_BYTES) -> float:
    """Bytes of parameters, gradients and optimizer state per rank under ZeRO stage 0 (none: DDP), 1 (optimizer
    state sharded), 2 (+ gradients) or 3 (+ parameters), Rajbhandari et al. 2020, section 5 (activations apart)."""
    positive_int("n_parameters", n_parameters)
    positive_int("world_size", world_size)
    one_of("stage", stage, {0, 1, 2, 3})
    if type(stage) is not int:
        raise ValueError(say("stage must be an int, got {stage!r}", stage=stage))
    split = [1, 1, 1]  # param, grad, state: 1 = replicated, world_size = sharded
    for i in range(stage):
        split[2 - i] = world_size
    return n_parameters * (param_bytes / split[0] + grad_bytes / split[1] + state_bytes / split[2])


@refusal.reference
def step_traffic(n_bytes: int, world_size: int, stage: int) -> float:
    """Bytes each rank sends per step, ring algorithms: DDP and ZeRO-1/2 reduce-scatter the gradients and all-gather
    the parameters once (as much as an all-reduce: 2(N-1)/N x bytes); ZeRO-3 all-gathers the parameters twice,
    for forward and again for backward: 3(N-1)/N x bytes, 1.5x (the paper's section 7)."""
    positive_int("n_bytes", n_bytes, minimum=0)
    positive_int("world_size", world_size)
    one_of("stage", stage, {0, 1, 2, 3})
    return (3 if stage == 3 else 2) * (world_size - 1) / world_size * n_bytes


# ---- the training and its single-process reference ------------------------------------------------------------


@dataclass(frozen=True)
class ShardConfig:
    in_features: int = 16
    hidden: int = 30  # 30 rows: uneven over 4 ranks (8, 8, 8, 6); the last layer's 3 rows leave a 4th rank empty
    out_features: int = 3
    depth: int = 2
    batch_size: int = 8  # per rank
    steps: int = 3
    lr: float = 0.01
    seed: int = 0

    def __post_init__(self):
        for name in ("in_features", "hidden", "out_features", "depth", "batch_size", "steps"):
            positive_int(name, getattr(self, name))
        positive_number("lr", self.lr)
        positive_int("seed", self.seed, minimum=0)

    def model(self) -> nn.Module:
        return models.seeded(models.MLP, self.seed, in_features=self.in_features, hidden=self.hidden,
                             out_features=self.out_features, depth=self.depth)

    def blocks(self, model: nn.Module) -> list:
        """The model's blocks, each its own FSDP unit: its Linear layers."""
        return [m for m in model if isinstance(m, nn.Linear)]

    def block_names(self) -> list:
        return [name for name, m in self.model().named_children() if isinstance(m, nn.Linear)]

    def batch(self, step: int, world_size: int, rank: int | None = None):
        """(x, y) of step `step`: rank `rank`'s part, or the whole global batch when rank is None."""
        positive_int("world_size", world_size)
        if type(step) is not int or not 0 <= step < self.steps:
            raise ValueError(say("step must be an int in [0, {steps}), got {step!r}", steps=self.steps, step=step))
        per_step = self.batch_size * world_size
        x, y = data.regression(self.steps * per_step, self.in_features, self.out_features, seed=self.seed + 1)[
            step * per_step:(step + 1) * per_step]
        if rank is None:
            return x, y
        _rank(rank, world_size)
        return x[rank * self.batch_size:(rank + 1) * self.batch_size], y[rank * self.batch_size:(rank + 1) * self.batch_size]


@refusal.reference
def reference_adam(cfg: ShardConfig, world_size: int) -> dict:
    """One process, plain Adam, the global batches: the weights ({"state"}) and Adam's state flattened in the order
    of model.parameters() ({"exp_avg", "exp_avg_sq"}) that a sharded run must end with.

    The global batch's gradient is taken as data parallelism takes it, the mean of the ranks' batch gradients
    (the same gradient in exact arithmetic): Adam divides each update by the root of its own squared gradient, so
    an element whose gradient is near zero turns the rounding of a different sum order into an update difference of
    up to 1.4e-4 (3 of 300 drawn hidden cases over 1e-5 with one backward of the global batch; 0 this way)."""
    positive_int("world_size", world_size)
    model = cfg.model()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    params = list(model.parameters())
    for step in range(cfg.steps):
        summed = [torch.zeros_like(p) for p in params]
        for rank in range(world_size):
            x, y = cfg.batch(step, world_size, rank)
            for total, grad in zip(summed, torch.autograd.grad(F.mse_loss(model(x), y), params)):
                total += grad
        for p, total in zip(params, summed):
            p.grad = total / world_size
        optimizer.step()
    params = list(model.parameters())
    flat = {key: torch.cat([optimizer.state[p][key].reshape(-1) for p in params]) for key in ("exp_avg", "exp_avg_sq")}
    return {"state": model.state_dict(), **flat}


@refusal.reference
def flat_shard(flat: torch.Tensor, world_size: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s slice of a flat vector padded with zeros to a multiple of `world_size`: what ZeRO-1 by hand
    gives each rank."""
    positive_int("world_size", world_size)
    _rank(rank, world_size)
    size = -(-flat.numel() // world_size)
    return F.pad(flat, (0, size * world_size - flat.numel()))[rank * size:(rank + 1) * size].clone()


def same_state(a, b, atol: float = 1e-5) -> bool:
    """helpers.compare.same_state: the same keys in the same order, dtypes, shapes, values within atol + 1e-5 |b|."""
    return compare.same_state(a, b, atol=atol, rtol=1e-5)


# ---- moving a state dict between kinds of model -----------------------------------------------------------------

KINDS = ("plain", "ddp", "fsdp")
WRAPPERS = ("module.", "_orig_mod.")  # DDP's (and DataParallel's) prefix, torch.compile's


@refusal.reference
def converted(state_dict: dict, to: str) -> OrderedDict:
    """`state_dict` (from a plain, a DDP, a compiled or an FSDP2 model) with the keys a model of kind `to` loads:
    a plain model's names for "plain" and "fsdp" (fully_shard keeps the names), with "module." for "ddp". A wrapper's
    prefix is taken off only when every key has it (a layer of the model may be named `module`)."""
    one_of("to", to, set(KINDS))
    state = OrderedDict(state_dict)
    stripped = True
    while stripped and state:
        stripped = False
        for prefix in WRAPPERS:
            if all(k.startswith(prefix) for k in state):
                state = OrderedDict((k[len(prefix):], v) for k, v in state.items())
                stripped = True
    if to == "ddp":
        return OrderedDict(("module." + k, v) for k, v in state.items())
    return state


def named_module_model(seed: int, nested: bool = False) -> nn.Module:
    """A model with a layer named `module` (a trap for a converter that strips "module." from any key): at the top
    (`module.weight`, next to `head.weight`) or nested (`body.module.weight`)."""
    positive_int("seed", seed, minimum=0)

    def build():
        if nested:
            return nn.Sequential(OrderedDict([("body", nn.Sequential(OrderedDict([("module", nn.Linear(2, 2))])))]))
        return nn.Sequential(OrderedDict([("module", nn.Linear(2, 3)), ("head", nn.Linear(3, 1))]))

    return models.seeded(build, seed)
