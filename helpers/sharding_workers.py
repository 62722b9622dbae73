"""The lesson's sharding workers: what each rank runs under `helpers.launch.launch` (gloo CPU processes, or nccl with
one GPU per rank): the bytes each rank holds under DDP, ZeRO-1 and FSDP2, torch's ZeroRedundancyOptimizer, a tour
of fully_shard, distributed checkpoints saved on N ranks and loaded on M, and the harnesses that run a student's
ZeRO-1 step and FSDP2 worker and report what each rank really held. What their results must equal is in
helpers.sharding_reference.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from . import launch
from ._saved import saved_bytes
from .language import say
from .sharding_reference import ShardConfig, flat_shard

MODES = ("ddp", "zero1", "fsdp")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _bytes(tensors) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors if t is not None)


def _state_tensors(optimizer) -> list:
    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def device_mesh():
    """The 1-D mesh of this launch's ranks, on their device: cuda under nccl, cpu under gloo. (fully_shard's default
    mesh is on the machine's accelerator: on a one-GPU machine it would put every gloo rank on that GPU.)"""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(launch.device().type, (dist.get_world_size(),))


def shard_model(model: torch.nn.Module, cfg: ShardConfig, **options) -> torch.nn.Module:
    """fully_shard on every block, then on the root (the lesson's way; `options` go to every call), on the ranks'
    device_mesh()."""
    mesh = device_mesh()
    for block in cfg.blocks(model):
        fully_shard(block, mesh=mesh, **options)
    fully_shard(model, mesh=mesh, **options)
    return model


def _batch(cfg: ShardConfig, step: int, world_size: int, rank: int):
    x, y = cfg.batch(step, world_size, rank)
    return x.to(launch.device()), y.to(launch.device())


# ---- where a replica's memory goes ---------------------------------------------------------------------------


def memory_worker(rank: int, world_size: int, cfg: ShardConfig) -> dict:
    """One Adam step under DDP, DDP + ZeroRedundancyOptimizer (ZeRO-1) and FSDP2 (ZeRO-3): the bytes of the
    parameters, gradients and optimizer state this rank holds after it (a ledger of its tensors, as lesson 1's), and
    the activations its forward saved for backward (DDP's run: each rank's own batch, unsharded in every stage)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    x, y = _batch(cfg, 0, world_size, rank)
    result = {"rank": rank, "n_parameters": sum(p.numel() for p in cfg.model().parameters())}
    for mode in MODES:
        model = cfg.model().to(launch.device())
        if mode == "fsdp":
            model = shard_model(model, cfg)
            optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        else:
            model = DDP(model)
            optimizer = (ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=cfg.lr)
                         if mode == "zero1" else torch.optim.Adam(model.parameters(), lr=cfg.lr))
        if mode == "ddp":
            with saved_bytes(list(model.parameters()) + [x]) as saved:
                loss = F.mse_loss(model(x), y)
            result["activations"] = saved["bytes"]
        else:
            loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        states = optimizer.optim if mode == "zero1" else optimizer
        result[mode] = {"parameters": _bytes(model.parameters()), "gradients": _bytes(p.grad for p in model.parameters()),
                        "optimizer state": _bytes(_state_tensors(states))}
    return result


# ---- ZeRO-1: by hand and torch's ------------------------------------------------------------------------------


def zero1_worker(rank: int, world_size: int, cfg: ShardConfig, zero1_step) -> dict:
    """Trains cfg.model() with `zero1_step(model, shard, optimizer)` after every backward: `shard` is this rank's
    slice of the flattened parameters (padded with zeros to a multiple of world_size), the only tensor `optimizer`
    (Adam) holds state for. Reports the weights, the shard and Adam's state for it."""
    model = cfg.model().to(launch.device())
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    shard = torch.nn.Parameter(flat_shard(flat, world_size, rank))
    optimizer = torch.optim.Adam([shard], lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = _batch(cfg, step, world_size, rank)
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        zero1_step(model, shard, optimizer)
    state = optimizer.state.get(shard, {})
    return {"rank": rank, "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "shard": shard.detach().clone(),
            "adam": {k: state[k].detach().clone() for k in ("exp_avg", "exp_avg_sq") if k in state}}


def torch_zero_worker(rank: int, world_size: int, cfg: ShardConfig) -> dict:
    """DDP + torch's ZeroRedundancyOptimizer(Adam): the weights, and which parameters' state this rank holds."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model = DDP(cfg.model().to(launch.device()))
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=cfg.lr)
    names = {p: n for n, p in model.module.named_parameters()}
    for step in range(cfg.steps):
        x, y = _batch(cfg, step, world_size, rank)
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    owned = [names[p] for p in optimizer.optim.state]
    return {"rank": rank, "state": model.module.state_dict(), "owned": owned,
            "state elements": sum(t.numel() for t in _state_tensors(optimizer.optim) if t.dim())}


# ---- FSDP2 ------------------------------------------------------------------------------------------------------


def fsdp_tour_worker(rank: int, world_size: int, cfg: ShardConfig, reshard_after_forward: bool = True,
                     low_precision: bool = False) -> dict:
    """fully_shard per block and on the root, trained cfg.steps steps of Adam; what this rank saw on the way: each
    parameter's local shard, each block's weight inside its forward (all-gathered), after the forward (resharded or
    not) and its gradient's shard; with `low_precision`, MixedPrecisionPolicy(bf16 parameters, fp32 reduction)."""
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if low_precision else None
    model = shard_model(cfg.model().to(launch.device()), cfg, reshard_after_forward=reshard_after_forward,
                        **({"mp_policy": policy} if policy else {}))
    seen = {}

    def inside(module, args):  # runs after FSDP's own pre-forward hook: the block's parameters are all-gathered
        seen.setdefault(module.weight_name, (type(module.weight).__name__, tuple(module.weight.shape),
                                             str(module.weight.dtype).removeprefix("torch.")))

    for name, block in zip(cfg.block_names(), cfg.blocks(model)):
        block.weight_name = name
        block.register_forward_pre_hook(inside)
    local = {n: (type(p).__name__, tuple(_local(p).shape), str(p.placements) if isinstance(p, DTensor) else "")
             for n, p in model.named_parameters()}
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = _batch(cfg, step, world_size, rank)
        loss = F.mse_loss(model(x).float(), y)  # bf16 outputs under the policy
        if step == 0:
            after = {n: type(b.weight).__name__ for n, b in zip(cfg.block_names(), cfg.blocks(model))}
        loss.backward()
        if step == 0:
            grads = {n: (type(p.grad).__name__, tuple(_local(p.grad).shape), str(p.grad.dtype).removeprefix("torch."))
                     for n, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad()
    return {"rank": rank, "local": local, "inside forward": seen, "after forward": after, "grads": grads,
            "full": full_state(model)}


def full_state(model: torch.nn.Module) -> dict:
    """The full (unsharded) state dict of an FSDP model, on rank 0 (an empty dict on the other ranks)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return dict(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)))


def fsdp_observed_worker(rank: int, world_size: int, my_fsdp_worker, cfg: ShardConfig) -> dict:
    """Runs a student's `my_fsdp_worker(rank, world_size, cfg)`, which returns its trained model, and reports what
    this rank really holds: which modules are FSDP units, each parameter's type and local shard, and (rank 0) the
    full weights gathered from every rank's shards."""
    model = my_fsdp_worker(rank, world_size, cfg)
    if not isinstance(model, torch.nn.Module):
        return {"rank": rank,
                "problem": say("my_fsdp_worker returned a {kind}, not the model", kind=type(model).__name__)}
    units = [name for name, m in model.named_modules() if isinstance(m, FSDPModule)]
    params = dict(model.named_parameters())
    kinds = {n: type(p).__name__ for n, p in params.items()}
    local = {n: _local(p).detach().clone() for n, p in params.items()}
    # every rank gathers each tensor (full_tensor is a collective); rank 0 reports them, as get_model_state_dict would
    full = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in model.state_dict().items()}
    return {"rank": rank, "units": units, "kinds": kinds, "local": local, "full": full if rank == 0 else {}}


# ---- checkpoints ----------------------------------------------------------------------------------------------


def dcp_save_worker(rank: int, world_size: int, cfg: ShardConfig, folder: str) -> dict:
    """Trains an FSDP2 model, then every rank writes its own shards with torch.distributed.checkpoint (no rank
    gathers the model). Reports the files written and the full weights (rank 0)."""
    import os

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    model = shard_model(cfg.model().to(launch.device()), cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = _batch(cfg, step, world_size, rank)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    sharded = get_model_state_dict(model)  # DTensors: this rank's shards
    dcp.save({"model": sharded}, checkpoint_id=folder)
    dist.barrier()
    return {"rank": rank, "value types": sorted({type(v).__name__ for v in sharded.values()}),
            "files": sorted(os.listdir(folder)), "full": full_state(model)}


def dcp_load_worker(rank: int, world_size: int, cfg: ShardConfig, folder: str) -> dict:
    """A fresh FSDP2 model on `world_size` ranks (any number: not the saving run's) loads the checkpoint: each rank
    reads the pieces of the files its own shards need. Reports its local shards and the full weights (rank 0)."""
    import dataclasses

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    model = shard_model(dataclasses.replace(cfg, seed=cfg.seed + 1).model().to(launch.device()), cfg)  # other weights
    state = {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(model, state["model"])
    return {"rank": rank, "local": {n: tuple(_local(p).shape) for n, p in model.named_parameters()},
            "full": full_state(model)}


def load_kinds_worker(rank: int, world_size: int, cfg: ShardConfig, states: dict) -> dict:
    """Loads states["plain"], states["ddp"] and states["fsdp"] into a plain model, a DDP model and an FSDP2 model
    (strict: every key must fit), and reports the weights each then holds (full, rank 0 for FSDP)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    loaded = {}
    plain = cfg.model().to(launch.device())
    plain.load_state_dict(states["plain"])
    loaded["plain"] = plain.state_dict()
    wrapped = DDP(cfg.model().to(launch.device()))
    wrapped.load_state_dict(states["ddp"])
    loaded["ddp"] = wrapped.module.state_dict()
    sharded = shard_model(cfg.model().to(launch.device()), cfg)
    set_model_state_dict(sharded, states["fsdp"], options=StateDictOptions(full_state_dict=True))
    loaded["fsdp"] = full_state(sharded)
    return {"rank": rank, "loaded": loaded}


def accelerate_plugin_worker(rank: int, world_size: int) -> dict:
    """Accelerate's FSDP2 plugin, built in this rank (importing accelerate here, not in the notebook): its settings,
    or None where accelerate is not installed."""
    import importlib.util
    import os

    if importlib.util.find_spec("accelerate") is None:
        return None
    os.environ["USE_TORCH_XLA"] = "0"  # lesson 4: with torch_xla installed, Accelerate would pick XLA
    from accelerate import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=True,
                                            state_dict_type="SHARDED_STATE_DICT")
    return {"fsdp_version": plugin.fsdp_version, "reshard_after_forward": plugin.reshard_after_forward,
            "state_dict_type": plugin.state_dict_type.name}


def fsdp_tours_worker(rank: int, world_size: int, cfg: ShardConfig) -> dict:
    """fsdp_tour_worker three times in one launch: in fp32 ({"fp32"}), under bf16 MixedPrecisionPolicy ({"bf16"}) and with
    reshard_after_forward=False ({"kept"})."""
    return {"fp32": fsdp_tour_worker(rank, world_size, cfg), "bf16": fsdp_tour_worker(rank, world_size, cfg, True, True),
            "kept": fsdp_tour_worker(rank, world_size, cfg, reshard_after_forward=False)}
