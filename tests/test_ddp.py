"""Lesson 2's helpers: DDP equals one process on the global batch; the arithmetic equals a simulation."""

import math

import pytest
import torch
import torch.distributed as dist

from helpers import compare, ddp, grading, hardware, launch, memory
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


def save_on_every_rank(model, path):
    with open(path, "wb") as f:  # through Python's open, not torch.save's own file writer
        torch.save(model.module.state_dict(), f)
    dist.barrier()


def save_without_barrier(model, path):
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), path)


accumulate_never_clearing = accumulate_with_no_sync  # steps, but leaves the gradients for the next step


def accumulate_and_clear(model, optimizer, batches, loss_fn):
    accumulate_never_clearing(model, optimizer, batches, loss_fn)
    optimizer.zero_grad()


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


def test_accumulation_over_several_steps_needs_the_gradients_cleared():
    cfg = TrainConfig()
    reference = ddp.large_batch_reference(cfg, 2, 2, steps=3)["state"]
    assert not ddp.same_state(reference, ddp.large_batch_reference(cfg, 2, 2)["state"])
    cleared = launch.launch(ddp.accumulation_worker, 2, args=(cfg, 2, accumulate_and_clear, 3))
    kept = launch.launch(ddp.accumulation_worker, 2, args=(cfg, 2, accumulate_never_clearing, 3))
    assert cleared[0]["allreduces_per_step"] == [1, 1, 1] and cleared[0]["grads_cleared"] == [True] * 3
    assert ddp.same_state(cleared[0]["state"], reference)
    assert kept[0]["grads_cleared"] == [False] * 3 and not ddp.same_state(kept[0]["state"], reference)


def test_uneven_batches_time_out_and_join_fixes_them():
    with pytest.raises(launch.WorkerFailed, match="Timed out"):
        launch.launch(ddp.uneven_worker, 2, args=([3, 2],), timeout_s=4)
    assert [r["steps"] for r in launch.launch(ddp.uneven_worker, 2, args=([3, 2], True), timeout_s=10)] == [3, 2]


def test_rank0_checkpoint_loads_on_every_rank(tmp_path):
    ranks = launch.launch(ddp.checkpoint_worker, 2, args=(TrainConfig(), str(tmp_path / "c.pt"), save_on_rank0, 0.3))
    for r in ranks:
        assert ddp.same_state(r["loaded"], r["trained"], atol=0)
    assert not any(k.startswith("module.") for k in ranks[0]["loaded"])
    assert [r["wrote"] for r in ranks] == [True, False]
    assert ddp.checkpoint_problem(ranks, TrainConfig()) is None


def test_checkpoint_writers_and_early_readers_are_caught(tmp_path):
    ranks = launch.launch(ddp.checkpoint_worker, 2, args=(TrainConfig(), str(tmp_path / "a.pt"), save_on_every_rank))
    assert [r["wrote"] for r in ranks] == [True, True]
    assert "only rank 0" in ddp.checkpoint_problem(ranks, TrainConfig())
    with pytest.raises(launch.WorkerFailed) as failed:
        launch.launch(ddp.checkpoint_worker, 2, args=(TrainConfig(), str(tmp_path / "b.pt"), save_without_barrier, 0.5))
    assert "before rank 0 had finished writing" in ddp.checkpoint_failure(failed.value)


def test_a_checkpoint_failure_names_where_the_rank_raised():
    """Not "(see the error)": the check raises without the rank's traceback, so its message says where."""
    failed = launch.WorkerFailed(1, 'Traceback (most recent call last):\n  File "/tmp/ipykernel_1/2.py", line 4, in '
                                    'save_checkpoint\n    torch.save(state, path + 1)\nTypeError: can only concatenate')
    assert ddp.checkpoint_failure(failed) == ("rank 1 failed: TypeError: can only concatenate (raised in save_checkpoint: "
                                              "torch.save(state, path + 1))")


def test_recording_writes_sees_every_spelling_of_a_write(tmp_path):
    path = str(tmp_path / "w.pt")
    for write in (lambda: torch.save({}, path), lambda: open(path, "ab").close(),
                  lambda: (torch.save({}, path + ".tmp"), __import__("os").replace(path + ".tmp", path))):
        with ddp.recording_writes(path) as wrote:
            write()
        assert wrote == [True]
    with ddp.recording_writes(path) as wrote:
        torch.load(path, weights_only=True)
        open(path, "rb").close()
        torch.save({}, str(tmp_path / "other.pt"))
    assert wrote == [False]


def _strided_loader(dataset, world_size, rank, batch_size):
    return torch.utils.data.DataLoader(torch.utils.data.Subset(dataset, range(rank, len(dataset), world_size)),
                                       batch_size=batch_size)


def _sampler_loader(dataset, world_size, rank, batch_size):
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def _unsharded_loader(dataset, world_size, rank, batch_size):
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size)


def test_loader_problem_judges_against_distributed_sampler():
    for n, w, b in [(10, 3, 2), (1, 3, 1), (16, 2, 3), (7, 4, 1)]:
        assert ddp.loader_problem(_sampler_loader, n, w, b) is None
    assert ddp.loader_problem(_unsharded_loader, 1, 1, 1) is None  # one rank: its share is everything
    assert "same share" in ddp.loader_problem(_unsharded_loader, 10, 3, 2)
    assert "different numbers of samples" in ddp.loader_problem(_strided_loader, 10, 3, 2)
    assert ddp.loader_problem(_strided_loader, 12, 3, 2) is None  # divisible: the strided split is a fine split


def test_worker_problem_accepts_the_course_trainer_and_names_the_mistake():
    cfg = TrainConfig(epochs=2)
    ranks = launch.launch(ddp.train_worker, 2, args=(cfg, False))
    right = [{"state": r["state"], "mean_loss": r["losses"][-1]} for r in ranks]
    assert ddp.worker_problem(right, cfg, 2) is None
    summed = [{**r, "mean_loss": 2 * r["mean_loss"]} for r in right]
    assert "mean over the ranks" in ddp.worker_problem(summed, cfg, 2)
    prefixed = [{**r, "state": {"module." + k: v for k, v in r["state"].items()}} for r in right]
    assert "module." in ddp.worker_problem(prefixed, cfg, 2)
    forgot = launch.launch(ddp.train_worker, 2, args=(TrainConfig(epochs=2, set_epoch=False), False))
    forgot = [{"state": r["state"], "mean_loss": r["losses"][-1]} for r in forgot]
    assert "set_epoch" in ddp.worker_problem(forgot, cfg, 2)


def test_worker_problem_rejects_a_shared_nan_loss_an_empty_state_and_extra_keys():
    cfg = TrainConfig(epochs=1)
    reference = ddp.reference_train(cfg, 2)
    right = {"state": reference["state"], "mean_loss": reference["losses"][-1]}
    assert ddp.worker_problem([right, right], cfg, 2) is None
    nan = {**right, "mean_loss": math.nan}  # one NaN object on both ranks: a set() of the losses holds it once
    assert "finite" in ddp.worker_problem([nan, nan], cfg, 2)
    empty = {**right, "state": {k: torch.empty(0, 1, 1) for k in right["state"]}}  # torch.allclose broadcast it
    assert ddp.worker_problem([empty, empty], cfg, 2) is not None
    extra = {**right, "losses": reference["losses"]}
    assert "no others" in ddp.worker_problem([extra, extra], cfg, 2)


def test_checkpoint_problem_holds_the_records_to_their_types():
    state = ddp.large_batch_reference(TrainConfig(), 1, 1)["state"]  # one rank's one step
    rank = {"rank": 0, "trained": state, "loaded": state, "wrote": True}
    assert ddp.checkpoint_problem([rank], TrainConfig()) is None
    empty = {k: torch.empty(0, 1, 1) for k in state}
    assert "differ from the trained ones" in ddp.checkpoint_problem([{**rank, "loaded": empty}], TrainConfig())
    assert "changed while it saved" in ddp.checkpoint_problem([{**rank, "loaded": empty, "trained": empty}], TrainConfig())
    for wrong in ({**rank, "wrote": 1}, {**rank, "rank": 0.0}, {**rank, "extra": 0}):
        with pytest.raises(ValueError, match="ranks"):
            ddp.checkpoint_problem([wrong], TrainConfig())


def test_same_state_compares_structure_before_values():
    state = {"w": torch.ones(2, 3), "b": torch.zeros(3)}
    assert ddp.same_state(state, {k: v.clone() for k, v in state.items()}, atol=0)
    assert ddp.same_state({"w": torch.ones(2, 3) + 1e-6, "b": torch.zeros(3)}, state)
    wrongs = [{"w": torch.empty(0, 1, 1), "b": torch.empty(0, 1, 1)},  # torch.allclose broadcast these: equal to anything
              {"w": torch.ones(1), "b": torch.zeros(1)},
              {"w": torch.ones(2, 3, dtype=torch.float64), "b": torch.zeros(3, dtype=torch.float64)},
              {"b": torch.zeros(3), "w": torch.ones(2, 3)},
              {"w": torch.ones(2, 3)},
              {**state, "extra": torch.zeros(3)},
              {"w": torch.full((2, 3), math.nan), "b": torch.zeros(3)},
              {"w": torch.nn.Parameter(torch.ones(2, 3)), "b": torch.zeros(3)},
              [("w", torch.ones(2, 3)), ("b", torch.zeros(3))]]
    for wrong in wrongs:
        assert not ddp.same_state(wrong, state) and not ddp.same_state(state, wrong), wrong


def test_compare_holds_types_exactly_and_non_finite_values_as_values():
    inf, nan = math.inf, math.nan
    assert compare.same_values([1.0, inf, -inf, nan], [1.0, inf, -inf, nan])
    assert compare.same_tensor(torch.tensor([1.0, inf, nan], dtype=torch.float16), torch.tensor([1.0, inf, nan], dtype=torch.float16))
    for got, expected in [(nan, 1.0), (inf, 1e308), (-inf, inf), (1.0, nan), (nan, inf)]:
        assert not compare.same_values(got, expected, atol=1e300, rtol=1e300), (got, expected)
        assert not compare.same_tensor(torch.tensor([got], dtype=torch.float64), torch.tensor([expected], dtype=torch.float64),
                                       atol=1e300, rtol=1e300), (got, expected)
    assert compare.same_values({"a": [1, (2.0, "x")]}, {"a": [1, (2.0 + 1e-9, "x")]}, atol=1e-6)
    for got, expected in [(1, 1.0), (True, 1), ((1, 2), [1, 2]), ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
                          (grading.Other("x"), 1), (torch.ones(3), torch.ones(1)), ([1.0, 2.0], [1.0]),
                          (torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.int64))]:
        assert not compare.same_values(got, expected), (got, expected)
    assert compare.is_record({"a": 1, "b": None}, {"b": None, "a": int})
    assert not compare.is_record({"a": True}, {"a": int}) and not compare.is_record({"a": 1, "extra": 2}, {"a": int})


@pytest.mark.parametrize("call, match", [
    (lambda: compare.same_tensor(torch.ones(1), torch.ones(1), atol=-1), "atol"),
    (lambda: compare.same_state({}, {}, rtol=math.nan), "rtol"),
    (lambda: compare.same_values(1.0, 1.0, atol="0"), "atol"),
    (lambda: compare.same_values(object(), object()), "expected"),
    (lambda: compare.is_record({}, ["a"]), "fields"),
])
def test_compare_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


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
    (lambda: ddp.large_batch_reference(TrainConfig(), 2, 4, steps=3), "steps"),
    (lambda: ddp.accumulation_worker(0, 2, TrainConfig(), 2, None, steps=0), "steps"),
    (lambda: ddp.loader_problem(None, 10, 2, 2), "make_loader"),
    (lambda: ddp.loader_problem(lambda *a: None, 0, 2, 2), "n_samples"),
    (lambda: ddp.loader_problem(lambda *a: None, 10, 2, 0), "batch_size"),
    (lambda: ddp.recording_writes(3).__enter__(), "path"),
    (lambda: ddp.recording_writes("x", slow_s=-1).__enter__(), "slow_s"),
    (lambda: ddp.last_error_line("text"), "error"),
    (lambda: ddp.checkpoint_problem([], TrainConfig()), "ranks"),
    (lambda: ddp.checkpoint_problem([{"wrote": True, "rank": 0}], None), "cfg"),
    (lambda: ddp.worker_problem([{}], TrainConfig(), 0), "world_size"),
    (lambda: ddp.worker_problem([], TrainConfig(), 2), "ranks"),
    (lambda: ddp.dataparallel_step_time(16, 32, 8, steps=0), "steps"),
    (lambda: hardware.detect().ddp_mode(0), "n_procs"),
    (lambda: memory.ddp_rank_bytes(torch.nn.Linear(2, 2), None, None, None), "ddp_model"),
    (lambda: TrainConfig(batch_size=0), "batch_size"),
    (lambda: TrainConfig(lr=-0.1), "lr"),
    (lambda: TrainConfig(data_seed=-1), "data_seed"),
    (lambda: ddp.rank_share(TrainConfig(), 2, 2), "rank"),
    (lambda: ddp.rank_share(TrainConfig(), 0, 0), "world_size"),
    (lambda: ddp.rank_share(None, 2, 0), "cfg"),
    (lambda: ddp.share_worker(0, 2, None, TrainConfig()), "worker"),
    (lambda: ddp.share_worker_problem([], None, 2), "cfg"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_loader_batches_records_plain_data_the_judge_checks_alone():
    """The hidden loader test's two halves: the record made in the kernel, the verdict made from it elsewhere."""
    from torch.utils.data import DataLoader, DistributedSampler

    def right(dataset, world_size, rank, batch_size):
        return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset, world_size, rank, shuffle=False))

    def everything(dataset, world_size, rank, batch_size):
        return DataLoader(dataset, batch_size=batch_size)

    record = ddp.loader_batches(right, 10, 3, 2)
    assert [len(r["batches"]) for r in record] == [2, 2, 2] and record[1]["batches"][0] == [2, [1, 4]]
    assert ddp.loader_batches_problem(record, 10, 3, 2) is None
    assert "sample" in ddp.loader_batches_problem(ddp.loader_batches(everything, 10, 3, 2), 10, 3, 2)
    for bad in ([], [{"loader": "x"}], "record", record[:1] + [{**record[1], "batches": [[2, [1.0, 4]]]}] + record[2:]):
        with pytest.raises(ValueError, match="record"):
            ddp.loader_batches_problem(bad, 10, 3, 2)
    with pytest.raises(ValueError, match="make_loader"):
        ddp.loader_batches(None, 10, 3, 2)
    with pytest.raises(ValueError, match="world_size"):
        ddp.loader_batches(right, 10, 0, 2)


def _allreduces_per_backward(rank, world_size, sizes, iterations):
    """A model of nn.Linear layers of `sizes` under DDP: how many all-reduces (buckets) each backward launches."""
    from torch import nn

    torch.manual_seed(0)
    model = ddp.wrap(nn.Sequential(*[nn.Linear(a, b) for a, b in sizes]))
    calls = ddp.count_allreduces(model)
    counts = []
    for _ in range(iterations):
        before = calls[0]
        model(torch.randn(4, sizes[0][0], device=launch.device())).sum().backward()
        counts.append(calls[0] - before)
    return {"counts": counts, "bytes": sum(p.nbytes for p in model.parameters())}


def test_ddp_all_reduces_once_per_bucket_so_a_2_mib_model_twice_per_backward():
    """Lesson 2: after the first iteration DDP rebuilds its buckets with the first capped at 1 MiB."""
    assert dist._DEFAULT_FIRST_BUCKET_BYTES == 2**20
    small = launch.launch(_allreduces_per_backward, 2, args=([(16, 32), (32, 2)], 3))[0]
    large = launch.launch(_allreduces_per_backward, 2, args=([(512, 512), (512, 512)], 3))[0]
    assert small["counts"] == [1, 1, 1], "a small model is one bucket: one all-reduce per backward"
    assert 2 * 2**20 <= large["bytes"] < 25 * 2**20
    assert large["counts"] == [1, 2, 2], "2 MiB: one 25 MiB bucket at first, then a 1 MiB first bucket and the rest"


def _worker_numbering_epochs_from(first_epoch, leave=True):
    """A complete worker (the exercise's) whose set_epoch counts from `first_epoch`, leaving the group or not."""

    def worker(rank, world_size, cfg):
        from datetime import timedelta

        from torch.utils.data import DataLoader

        dist.init_process_group(launch.plan(world_size).backend, timeout=timedelta(seconds=60))
        dataset = cfg.dataset()
        sampler = cfg.sampler(dataset, world_size, rank)
        model = ddp.wrap(cfg.model())
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        for epoch in range(cfg.epochs):
            sampler.set_epoch(first_epoch + epoch)
            for x, y in DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler):
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        state = {k: v.clone() for k, v in model.module.state_dict().items()}
        if leave:
            dist.destroy_process_group()
        return {"state": state, "mean_loss": mean_loss.item() / world_size}

    return worker


def _worker_alone(rank, world_size, cfg):
    """No DDP at all: every rank trains one process on the global batches (the other ranks' samplers' draws made
    as DistributedSampler makes them), passes once through its own sampler per epoch and never joins a group. It
    reported what the old grader observed (one pass per epoch, set_epoch, out of the group) and ended on the
    reference's weights."""
    from torch.utils.data import DataLoader

    dataset = cfg.dataset()
    sampler = cfg.sampler(dataset, world_size, rank)
    model = cfg.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    n, per_rank = len(dataset), -(-len(dataset) // world_size)
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        len(list(DataLoader(dataset, sampler=sampler)))
        order = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.seed + epoch)).tolist()
        order += order[:per_rank * world_size - n]
        shards = [order[r::world_size] for r in range(world_size)]
        for start in range(0, per_rank, cfg.batch_size):
            x, y = dataset[[i for shard in shards for i in shard[start:start + cfg.batch_size]]]
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
    return {"state": model.state_dict(), "mean_loss": loss.item()}


def test_share_worker_judges_the_weights_ranks_reach_from_their_own_samples():
    """Epochs numbered from 0 or from 1 pass; a worker that stays in the group fails step 5; a worker with no DDP
    code, which trains the reference alone on every rank, fails: each rank had only its own samples."""
    cfg = TrainConfig(epochs=2, n_samples=64, seed=3, data_seed=77)
    assert ddp.same_state(_worker_alone(0, 2, cfg)["state"], ddp.reference_train(cfg, 2)["state"])  # given all the data
    for worker, verdict in ((_worker_numbering_epochs_from(0), None), (_worker_numbering_epochs_from(1), None),
                            (_worker_numbering_epochs_from(0, leave=False), "step 5"),
                            (_worker_numbering_epochs_from(2), "weights differ"), (_worker_alone, "different weights")):
        records = launch.launch(ddp.share_worker, 2, args=(worker, cfg), init_process_group=False)
        problem = ddp.share_worker_problem(records, cfg, 2)
        assert problem == verdict if verdict is None else verdict in problem, problem


def test_rank_share_holds_the_samples_the_ranks_sampler_takes_and_others_elsewhere():
    cfg = TrainConfig(epochs=2, n_samples=50, batch_size=4, seed=5, data_seed=9)
    x, y = cfg.dataset().tensors
    for rank in range(3):
        share = ddp.rank_share(cfg, 3, rank)
        assert isinstance(share, TrainConfig) and share.data_seed is None and "tensor" not in repr(share)
        assert (share.seed, share.epochs, share.batch_size) == (cfg.seed, cfg.epochs, cfg.batch_size)
        taken = {i for epoch in range(3) for i in ddp.shard_indices(50, 3, rank, shuffle=True, seed=5, epoch=epoch)}
        sx, sy = share.dataset().tensors
        same = {i for i in range(50) if torch.equal(sx[i], x[i]) and torch.equal(sy[i], y[i])}
        assert same == taken and len(taken) < 50
        assert not any(torch.equal(sx[i], x[i]) or torch.equal(sy[i], y[i]) for i in set(range(50)) - taken)
    assert not ddp.same_state(ddp.reference_train(ddp.rank_share(cfg, 3, 0), 3)["state"], ddp.reference_train(cfg, 3)["state"])


def test_reference_train_follows_the_epoch_numbers_it_is_given():
    cfg = TrainConfig(epochs=2, n_samples=64)
    assert ddp.same_state(ddp.reference_train(cfg, 2, [0, 1])["state"], ddp.reference_train(cfg, 2)["state"], atol=0)
    assert not ddp.same_state(ddp.reference_train(cfg, 2, [1, 2])["state"], ddp.reference_train(cfg, 2)["state"])
    for bad in ([0], [0, 1.0], (0, 1), [0, True]):
        with pytest.raises(ValueError, match="epoch_numbers"):
            ddp.reference_train(cfg, 2, bad)


def test_share_worker_problem_judges_the_records_alone():
    cfg = TrainConfig(epochs=2, n_samples=64)
    reference = ddp.reference_train(cfg, 2, [1, 2])
    result = {"state": reference["state"], "mean_loss": reference["losses"][-1]}
    records = [{"result": result, "left_group": True}] * 2
    assert ddp.share_worker_problem(records, cfg, 2) is None  # numbered from 1
    assert "step 5" in ddp.share_worker_problem([records[0], {**records[1], "left_group": False}], cfg, 2)
    shifted = ddp.reference_train(cfg, 2, [3, 5])
    assert "weights differ" in ddp.share_worker_problem(
        [{"result": {"state": shifted["state"], "mean_loss": shifted["losses"][-1]}, "left_group": True}] * 2, cfg, 2)
    for wrong in (records[:1], [{**records[0], "left_group": 1}] * 2, [{**records[0], "epochs": [0, 1]}] * 2):
        assert "each of the 2 ranks" in ddp.share_worker_problem(wrong, cfg, 2)


def test_lesson_2_draws_its_hidden_cases_from_the_grading_seed():
    """Every hidden test but the quiz's draws new cases for every submission graded: the cases that one graded
    submission shows are not the next one's (a table of the fixed cases the grader used before fails)."""
    import nbformat

    from conftest import REPO
    from graders import judge

    solution = nbformat.read(REPO / "solutions" / "02-ddp" / "02-ddp.ipynb", as_version=4)
    for grade_id, parts in judge.judged_cells(solution).items():
        if grade_id == "quiz_tests":
            continue
        drawn = []
        for seed in (11, 12, 11):
            grading.use_hidden_seed(seed)
            try:
                namespace = judge.prelude(solution)
                exec(parts["setup"], namespace)
            finally:
                grading.use_hidden_seed(grading.FIXED_SEED)
            drawn.append(repr((namespace["_cases"], namespace.get("_trained"))))
        assert drawn[0] != drawn[1] and drawn[0] == drawn[2], grade_id


def test_spawned_stderr_keeps_the_childrens_tracebacks_and_names_their_errors(capfd):
    import subprocess
    import sys

    with ddp.spawned_stderr() as children:
        subprocess.run([sys.executable, "-c", "raise AttributeError(\"Can't get attribute 'f' on <module '__main__'>\")"])
    assert children.errors() == ["AttributeError: Can't get attribute 'f' on <module '__main__'>"]
    assert "Traceback" in children.text and "Traceback" not in capfd.readouterr().err
