"""What is wrong with a student's sharded run: the verdicts of lesson 5's ZeRO-1 and FSDP2 tests, on the plain data
the ranks reported, against helpers.sharding_reference's single-process Adam (None when nothing is wrong)."""

from __future__ import annotations

import torch

from . import compare
from .language import say
from .sharding_reference import ShardConfig, flat_shard, same_state, shard_state


def _ranks_problem(ranks, world_size: int) -> str | None:
    if type(ranks) is not list or len(ranks) != world_size:
        return say("one result per rank ({world_size})", world_size=world_size)
    return None


def zero1_problem(ranks, world_size: int, reference: dict) -> str | None:
    """Every rank ends with plain Adam's weights, and holds plain Adam's state for its own slice, and no more."""
    problem = _ranks_problem(ranks, world_size)
    if problem:
        return problem
    for rank, result in enumerate(ranks):
        if not compare.is_record(result, {"rank": int, "state": None, "shard": None, "adam": dict}) or result["rank"] != rank:
            return say("the collected results are incomplete")
        if not same_state(result["state"], reference["state"]):
            return say("rank {rank}'s weights are not those of plain Adam on the global batches: are the gradients "
                       "averaged, the right slice stepped, every slice gathered?", rank=rank)
        weights = torch.cat([t.reshape(-1) for t in reference["state"].values()])
        if not compare.same_tensor(result["shard"], flat_shard(weights, world_size, rank), atol=1e-5, rtol=1e-5):
            return say("rank {rank}'s shard does not hold its slice of the trained weights: step the shard you are "
                       "given", rank=rank)
        if list(result["adam"]) != ["exp_avg", "exp_avg_sq"]:
            return say("rank {rank}'s optimizer holds no Adam state for its shard: step the optimizer you are given",
                       rank=rank)
        for key in ("exp_avg", "exp_avg_sq"):
            expected = flat_shard(reference[key], world_size, rank)
            if not compare.same_tensor(result["adam"][key], expected, atol=1e-7, rtol=1e-5):
                return say("rank {rank}'s Adam state ({key}) is not plain Adam's for its slice: step the optimizer "
                           "you are given", rank=rank, key=key)
    return None


def fsdp_problem(ranks, cfg: ShardConfig, world_size: int, reference: dict) -> str | None:
    """Every block and the root are FSDP units, every parameter a DTensor, each rank's shards its rows of plain
    Adam's trained weights, and the gathered weights plain Adam's."""
    problem = _ranks_problem(ranks, world_size)
    if problem:
        return problem
    shards = shard_state(reference["state"], world_size)
    for rank, result in enumerate(ranks):
        if type(result) is dict and set(result) == {"rank", "problem"} and type(result["problem"]) is str:
            return result["problem"][:300]
        if not compare.is_record(result, {"rank": int, "units": list, "kinds": dict, "local": dict, "full": dict}) \
                or result["rank"] != rank:
            return say("the collected results are incomplete")
        missing = [name for name in [""] + cfg.block_names() if name not in result["units"]]
        if missing:
            return say("these modules are not FSDP units: {names}: fully_shard every block, then the model",
                       names=[say("the model") if n == "" else n for n in missing])
        if not compare.same_values(result["kinds"], {k: "DTensor" for k in reference["state"]}):
            return say("rank {rank}'s parameters are not all DTensors: {kinds}", rank=rank, kinds=result["kinds"])
        if not same_state(result["local"], shards[rank]):
            return say("rank {rank}'s shards are not its rows of the trained model: did it train cfg.steps steps of "
                       "Adam on its own batches?", rank=rank)
    if any(result["full"] != {} for result in ranks[1:]):
        return say("only rank 0 gathers the full weights")
    if not same_state(ranks[0]["full"], reference["state"]):
        return say("the trained weights are not those of plain Adam on the global batches")
    return None
