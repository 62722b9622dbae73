"""Lesson 2's helpers: DDP equals one process on the global batch; the arithmetic equals a simulation."""

import pytest
import torch
import torch.distributed as dist

from helpers import ddp, hardware, launch, memory
from helpers.ddp import TrainConfig


def average_gradients(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def accumulate_with_no_sync(model, optimizer, batches, loss_fn):
    with model.no_sync():
        for x, y in batches[:-1]:
            (loss_fn(model(x), y) / len(batches)).backward()
    x, y = batches[-1]
    (loss_fn(model(x), y) / len(batches)).backward()
    optimizer.step()


def accumulate_naively(model, optimizer, batches, loss_fn):
    for x, y in batches:
        (loss_fn(model(x), y) / len(batches)).backward()
    optimizer.step()


def save_on_rank0(model, path):
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), path)
    dist.barrier()


@pytest.mark.parametrize("world_size, cfg", [(2, TrainConfig()), (3, TrainConfig(n_samples=100, batch_size=8, seed=4))])
def test_ddp_training_equals_one_process_on_the_global_batches(world_size, cfg):
    ranks = launch.launch(ddp.train_worker, world_size, args=(cfg, False))
    reference = ddp.reference_train(cfg, world_size)
    for r in ranks:
        assert ddp.same_state(r["state"], ranks[0]["state"], atol=0)
        assert ddp.same_state(r["state"], reference["state"])
    assert ranks[0]["losses"] == pytest.approx(reference["losses"], abs=1e-5)


def test_forgetting_set_epoch_changes_the_result():
    cfg = TrainConfig(set_epoch=False)
    ranks = launch.launch(ddp.train_worker, 2, args=(cfg, False))
    assert ddp.same_state(ranks[0]["state"], ddp.reference_train(cfg, 2)["state"])  # the reference forgets too
    assert not ddp.same_state(ranks[0]["state"], ddp.reference_train(TrainConfig(), 2)["state"])


def test_manual_gradient_averaging_equals_ddp():
    cfg = TrainConfig(epochs=1)
    manual = launch.launch(ddp.manual_average_worker, 2, args=(cfg, average_gradients))
    assert ddp.same_state(manual[0]["state"], ddp.reference_train(cfg, 2)["state"])


def test_no_sync_accumulation_all_reduces_once_and_equals_the_large_batch():
    cfg = TrainConfig()
    reference = ddp.large_batch_reference(cfg, 2, 4)["state"]
    synced = launch.launch(ddp.accumulation_worker, 2, args=(cfg, 4, accumulate_with_no_sync))
    naive = launch.launch(ddp.accumulation_worker, 2, args=(cfg, 4, accumulate_naively))
    assert [r["allreduces"] for r in synced] == [1, 1] and [r["allreduces"] for r in naive] == [4, 4]
    assert ddp.same_state(synced[0]["state"], reference) and ddp.same_state(naive[0]["state"], reference)


def test_uneven_batches_time_out_and_join_fixes_them():
    with pytest.raises(launch.WorkerFailed, match="Timed out"):
        launch.launch(ddp.uneven_worker, 2, args=([3, 2],), timeout_s=4)
    assert [r["steps"] for r in launch.launch(ddp.uneven_worker, 2, args=([3, 2], True), timeout_s=10)] == [3, 2]


def test_rank0_checkpoint_loads_on_every_rank(tmp_path):
    ranks = launch.launch(ddp.checkpoint_worker, 2, args=(TrainConfig(), str(tmp_path / "c.pt"), save_on_rank0))
    for r in ranks:
        assert ddp.same_state(r["loaded"], r["trained"], atol=0)
    assert not any(k.startswith("module.") for k in ranks[0]["loaded"])


def test_ddp_memory_ledger_is_balanced_and_consistent():
    ranks = launch.launch(ddp.step_time_worker, 2, args=(16, 32, 8, 1))
    mem = [r["memory"] for r in ranks]
    assert mem[0] == mem[1]
    if "parameters" in mem[0]:
        p = mem[0]["parameters"]
        assert mem[0]["gradients"] == mem[0]["all-reduce buckets"] == p
        n_tensors = 6  # MLP(16, 32, 16): three Linear layers
        assert mem[0]["optimizer state"] == 2 * p + 4 * n_tensors
        assert mem[0]["inputs"] == 2 * 4 * 4 * 16 and mem[0]["outputs"] == 4 * 4 * 16
        assert mem[0]["activations"] == 2 * 4 * 32 * 4
    assert all(r["seconds"] > 0 for r in ranks)


def _simulated_ring_allreduce_bytes(model_bytes, k):
    """Run reduce-scatter then all-gather on a ring of k devices, counting what device 0 sends."""
    chunk = model_bytes / k
    sent = 0.0
    for _phase in ("reduce-scatter", "all-gather"):
        for _step in range(k - 1):
            sent += chunk  # every device passes one chunk to its neighbour per step
    return sent


def test_ring_allreduce_volume_matches_a_simulation():
    for k in range(1, 17):
        assert ddp.ring_allreduce_bytes(1000, k) == pytest.approx(_simulated_ring_allreduce_bytes(1000, k))
    assert ddp.dataparallel_device0_bytes(1000, 4) == 6000


def test_shards_come_from_distributed_sampler_with_epochs():
    assert ddp.shard_indices(10, 3, 1) == [1, 4, 7, 0]
    assert ddp.shard_indices(10, 3, 1, drop_last=True) == [1, 4, 7]
    e0 = ddp.shard_indices(20, 2, 0, shuffle=True, epoch=0)
    assert e0 == ddp.shard_indices(20, 2, 0, shuffle=True, epoch=0) != ddp.shard_indices(20, 2, 0, shuffle=True, epoch=1)


def test_batch_and_learning_rate_arithmetic():
    assert ddp.global_batch(32, 8, 4) == 1024
    assert ddp.linear_scaled_lr(0.1, 256, 1024) == pytest.approx(0.4)


@pytest.mark.parametrize("call, match", [
    (lambda: ddp.shard_indices(10, 3, 3), "rank"),
    (lambda: ddp.shard_indices(0, 3, 0), "n_samples"),
    (lambda: ddp.global_batch(32, 0), "world_size"),
    (lambda: ddp.linear_scaled_lr(-1, 2, 4), "base_lr"),
    (lambda: ddp.ring_allreduce_bytes(10, 0), "world_size"),
    (lambda: ddp.ring_allreduce_bytes(-5, 2), "model_bytes"),
    (lambda: ddp.dataparallel_device0_bytes(-5, 2), "model_bytes"),
    (lambda: ddp.reference_train(TrainConfig(), 0), "world_size"),
    (lambda: ddp.large_batch_reference(TrainConfig(), 2, 0), "micro_batches"),
    (lambda: ddp.dataparallel_step_time(16, 32, 8, steps=0), "steps"),
    (lambda: hardware.detect().ddp_mode(0), "n_procs"),
    (lambda: memory.ddp_rank_bytes(torch.nn.Linear(2, 2), None, None, None), "ddp_model"),
    (lambda: TrainConfig(batch_size=0), "batch_size"),
    (lambda: TrainConfig(lr=-0.1), "lr"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
