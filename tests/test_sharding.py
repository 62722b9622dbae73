"""Lesson 5's helpers: the closed forms (shard shapes, ZeRO's bytes, resharding, state dicts between kinds) equal what
torch does, and the sharded runs (ZeRO-1, FSDP2, distributed checkpoints) equal one process running plain Adam."""

import math
from collections import OrderedDict

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers import checkpoints, launch, sharding
from helpers.sharding import ShardConfig


def zero1_by_reduce_scatter(model, shard, optimizer):
    world = dist.get_world_size()
    params = list(model.parameters())
    grads = F.pad(torch.nn.utils.parameters_to_vector([p.grad for p in params]),
                  (0, shard.numel() * world - sum(p.numel() for p in params)))
    mine = torch.empty_like(shard)
    dist.reduce_scatter_tensor(mine, grads)
    shard.grad = mine / world
    optimizer.step()
    flat = torch.empty(shard.numel() * world)
    dist.all_gather_into_tensor(flat, shard.detach())
    torch.nn.utils.vector_to_parameters(flat[:sum(p.numel() for p in params)], params)


def fsdp_worker(rank, world_size, cfg):
    from torch.distributed.fsdp import fully_shard

    model = cfg.model()
    for block in cfg.blocks(model):
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        F.mse_loss(model(cfg.batch(step, world_size, rank)[0]), cfg.batch(step, world_size, rank)[1]).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def test_the_paper_example_and_the_formulas():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed-precision Adam
    assert [round(sharding.zero_bytes(7_500_000_000, 64, s) / 1e9, 1) for s in range(4)] == [120.0, 31.4, 16.6, 1.9]
    for n, stage, per_param in ((8, 0, 16), (8, 1, 4 + 12 / 8), (8, 2, 2 + 14 / 8), (8, 3, 16 / 8)):
        assert math.isclose(sharding.zero_bytes(1000, n, stage), 1000 * per_param)
    assert sharding.step_traffic(1000, 4, 3) == 1.5 * sharding.step_traffic(1000, 4, 0) == 2250


@pytest.mark.parametrize("call", [lambda: sharding.zero_bytes(10, 2, 4), lambda: sharding.zero_bytes(0, 2, 1),
                                  lambda: sharding.zero_bytes(10, 2, 1.0), lambda: sharding.local_shape((), 2, 0),
                                  lambda: sharding.local_shape((4,), 2, 2), lambda: sharding.converted({}, "fsdp1"),
                                  lambda: ShardConfig(hidden=0), lambda: ShardConfig().batch(3, 2, 0)])
def test_bad_arguments_are_refused_by_name(call):
    with pytest.raises(ValueError):
        call()


def test_local_shapes_are_torch_chunks():
    for rows in range(0, 14):
        for world in range(1, 7):
            chunks = list(torch.arange(rows).chunk(world)) if rows else []
            expected = [len(chunks[r]) if r < len(chunks) else 0 for r in range(world)]
            assert [sharding.local_shape((rows, 3), world, r)[0] for r in range(world)] == expected
    assert [sharding.local_shape((3, 30), 4, r) for r in range(4)] == [(1, 30), (1, 30), (1, 30), (0, 30)]


def test_shards_are_cut_as_dtensors_own_rule_cuts_them():
    """helpers.sharding cuts with torch.chunk; DTensor's Shard(0) with its private _local_shard_size_and_offset (the
    pinned torch's signature: size, chunks, rank). Exhaustively for small sizes: the same rows and offsets."""
    from torch.distributed.tensor.placement_types import Shard

    from helpers.sharding_reference import _rows

    for rows in range(0, 20):
        for world in range(1, 9):
            for rank in range(world):
                assert _rows(rows, world, rank) == tuple(Shard._local_shard_size_and_offset(rows, world, rank)), \
                    (rows, world, rank)


def test_reshard_and_shard_state_round_trip():
    full = ShardConfig(hidden=7).model().state_dict()
    for old in range(1, 5):
        for new in range(1, 5):
            got = sharding.reshard(sharding.shard_state(full, old), new)
            assert all(sharding.same_state(g, e, atol=0) for g, e in zip(got, sharding.shard_state(full, new)))
            assert len(got) == new


def test_converted_keys_load_into_each_kind():
    model = torch.nn.Sequential(OrderedDict([("module", torch.nn.Linear(2, 3)), ("head", torch.nn.Linear(3, 1))]))
    plain = model.state_dict()
    for prefix in ("", "module.", "_orig_mod.", "module._orig_mod."):
        source = checkpoints.add_prefix(plain, prefix)
        assert list(sharding.converted(source, "plain")) == list(plain) == list(sharding.converted(source, "fsdp"))
        assert list(sharding.converted(source, "ddp")) == ["module." + k for k in plain]
    model.load_state_dict(sharding.converted(checkpoints.add_prefix(plain, "module."), "plain"))


def test_zero1_by_hand_equals_plain_adam_and_keeps_a_slice_of_its_state():
    cfg = ShardConfig(steps=2)
    reference = sharding.reference_adam(cfg, 3)
    ranks = launch.launch(sharding.zero1_worker, 3, args=(cfg, zero1_by_reduce_scatter), timeout_s=60)
    size = math.ceil(sum(p.numel() for p in cfg.model().parameters()) / 3)
    for r in ranks:
        assert sharding.same_state(r["state"], reference["state"])
        assert r["adam"]["exp_avg"].shape == (size,)
        assert torch.allclose(r["adam"]["exp_avg_sq"], sharding.flat_shard(reference["exp_avg_sq"], 3, r["rank"]), atol=1e-8)


def test_fsdp2_shards_as_dtensor_says_and_trains_as_plain_adam():
    cfg = ShardConfig(hidden=10, out_features=3, steps=2)  # 10 rows over 4 ranks: 3, 3, 3, 1; 3 rows: 1, 1, 1, 0
    ranks = launch.launch(sharding.fsdp_observed_worker, 4, args=(fsdp_worker, cfg), timeout_s=60)
    reference = sharding.reference_adam(cfg, 4)
    assert sharding.same_state(ranks[0]["full"], reference["state"])
    for r in ranks:
        assert r["units"] == ["", "0", "2", "4"]
        for name, local in r["local"].items():
            assert tuple(local.shape) == sharding.local_shape(tuple(reference["state"][name].shape), 4, r["rank"])
        assert sharding.same_state(r["local"], sharding.shard_state(reference["state"], 4)[r["rank"]])


def test_the_reference_adds_the_gradients_as_the_ranks_do():
    """A hidden draw (make test-seeds, seed 12) on which Adam after one backward of the global batch differed from
    a right FSDP2 run by 1.7e-5 at one weight whose gradient was near zero: the reference takes the mean of the
    ranks' gradients, as data parallelism does."""
    cfg = ShardConfig(hidden=35, out_features=3, depth=3, steps=2, lr=0.02, seed=541)
    ranks = launch.launch(sharding.fsdp_observed_worker, 3, args=(fsdp_worker, cfg), timeout_s=60)
    reference = sharding.reference_adam(cfg, 3)
    assert sharding.same_state(ranks[0]["full"], reference["state"])
    for r in ranks:
        assert sharding.same_state(r["local"], sharding.shard_state(reference["state"], 3)[r["rank"]])


def test_a_checkpoint_saved_on_two_ranks_loads_on_three(tmp_path):
    cfg = ShardConfig(steps=1)
    saved = launch.launch(sharding.dcp_save_worker, 2, args=(cfg, str(tmp_path)), timeout_s=60)
    loaded = launch.launch(sharding.dcp_load_worker, 3, args=(cfg, str(tmp_path)), timeout_s=60)
    assert sharding.same_state(loaded[0]["full"], saved[0]["full"], atol=0)
    assert sharding.same_state(saved[0]["full"], sharding.reference_adam(cfg, 2)["state"])
    assert [r["local"]["0.weight"] for r in loaded] == [(10, 16)] * 3


def test_what_lesson_5_says_of_the_libraries_is_what_their_code_does():
    """ZeroRedundancyOptimizer gives whole parameters, largest first, to the rank with the fewest elements so far;
    torch_xla's FSDPv2 marks each parameter along its largest dimension; Accelerate's plugin takes fsdp_version=2."""
    import importlib.util
    from pathlib import Path

    import nbformat

    lesson = nbformat.read(Path(__file__).resolve().parent.parent / "solutions" / "05-sharding" / "05-sharding.ipynb",
                           as_version=4)
    text = " ".join("\n".join(c.source for c in lesson.cells if c.cell_type == "markdown").split())
    assert "the largest first, each to the rank with the fewest elements so far" in text
    zero = Path(importlib.util.find_spec("torch.distributed.optim.zero_redundancy_optimizer").origin)
    assert "reverse=True" in zero.read_text() and "Greedily add the parameter to rank with smallest size" in zero.read_text()
    assert "along its largest dimension" in text
    spec = importlib.util.find_spec("torch_xla")
    if spec is not None:  # read, not imported: importing torch_xla takes seconds
        fsdpv2 = Path(spec.origin).parent / "experimental" / "spmd_fully_sharded_data_parallel.py"
        assert "_prepare_spmd_partition_spec(param, shard_maximal=True)" in fsdpv2.read_text()
    assert [r["fsdp_version"] for r in launch.launch(sharding.accelerate_plugin_worker, 1)] in ([2], [None])


def _average_by_reduce_scatter(rank, world_size):
    out = torch.empty(1)
    dist.reduce_scatter_tensor(out, torch.full((world_size,), float(rank + 1)), op=dist.ReduceOp.AVG)
    return out.item()


def test_lesson_5_stops_where_gloo_would_sum_instead_of_average():
    """Before torch 2.9 gloo's reduce_scatter returned the sum for ReduceOp.AVG (pytorch/pytorch#162338; torch 2.8.0,
    run by make test-versions: 6.0 below), so FSDP2 on CPU processes got world_size times the gradients: lesson 5 stops
    there with the reason (helpers/versions.py). The pinned torch averages, and lesson 5 runs."""
    from helpers import versions

    assert launch.launch(_average_by_reduce_scatter, 3) == [2.0, 2.0, 2.0]
    for version in ("2.6.0+cu124", "2.8.0"):
        assert "pytorch/pytorch#162338" in versions.lesson_5_problem(version, "gloo", 2)
    assert versions.lesson_5_problem("2.8.0", "nccl", 2) is None
    assert versions.lesson_5_problem(torch.__version__, "gloo", 2) is None
    assert versions.lesson_5_problem("2.10.0", "gloo", 4) is None


def test_reshard_after_forward_decides_what_a_block_holds_until_backward():
    """Lesson 5's tour: with the default the weights are DTensor shards again after the forward; with
    reshard_after_forward=False they stay whole Parameters until backward. Both train as plain Adam."""
    cfg = ShardConfig(steps=2)
    ranks = launch.launch(sharding.fsdp_tours_worker, 2, args=(cfg,), timeout_s=60)
    assert set(ranks[0]["fp32"]["after forward"].values()) == {"DTensor"}
    assert set(ranks[0]["kept"]["after forward"].values()) == {"Parameter"}
    reference = sharding.reference_adam(cfg, 2)
    assert sharding.same_state(ranks[0]["kept"]["full"], reference["state"])


def test_the_bytes_ranks_hold_are_zeros_formula_where_exercise_1_is_judged_by_them():
    """Exercise 1's hidden tests judge stages 0 and 3 also by the bytes ranks held in a measured run (the judge's
    config, 3 ranks, uneven shards): there fp32 and mixed-precision Adam hold the same 16 bytes per parameter, within
    1% (Adam's step counters); a stage 3 that keeps the parameters whole is far from it."""
    cfg = ShardConfig(in_features=64, hidden=127, out_features=5, depth=3)
    n = sum(p.numel() for p in cfg.model().parameters())
    ranks = launch.launch(sharding.memory_worker, 3, args=(cfg,))
    held = {mode: sum(sum(r[mode].values()) for r in ranks) / 3 for mode in ("ddp", "zero1", "fsdp")}
    for mode, stage in (("ddp", 0), ("fsdp", 3)):
        for precision in ({}, {"param_bytes": 4, "grad_bytes": 4, "state_bytes": 8}):
            assert abs(sharding.zero_bytes(n, 3, stage, **precision) - held[mode]) <= 0.01 * held[mode]
    assert len({sum(r["fsdp"].values()) for r in ranks}) > 1, "the shards are uneven"
    assert abs(n * (2 + 14 / 3) - held["fsdp"]) > 0.01 * held["fsdp"]
    zero1 = [sum(r["zero1"].values()) for r in ranks]
    assert max(zero1) > 1.1 * min(zero1), "torch's ZeRO-1 gives each rank whole parameters: not an even share each"
