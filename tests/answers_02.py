"""Lesson 2's answers (see tests/answers.py): DDP's sharding, loaders, gradient averaging, accumulation,
checkpoints, batch arithmetic, a complete worker and the quiz. The answers that launch processes run in
2 or 3 gloo processes, as the test cells do."""

# ---- Exercise 1: shards ---------------------------------------------------------------------------------

SHARD = '''
def my_shard(n_samples, world_size, rank, drop_last):
    if drop_last:
        per_rank = n_samples // world_size
        indices = list(range(per_rank * world_size))
    else:
        per_rank = -(-n_samples // world_size)
        indices = list(range(n_samples))
        while len(indices) < per_rank * world_size:
            indices += indices[: per_rank * world_size - len(indices)]
    return {result}
'''


def shard(result="indices[rank::world_size]"):
    return SHARD.format(result=result)


SHARD_RIGHT = {
    "the solution": shard(),
    "modular arithmetic": '''
def my_shard(n_samples, world_size, rank, drop_last):
    per_rank = n_samples // world_size if drop_last else -(-n_samples // world_size)
    return [(rank + i * world_size) % n_samples for i in range(per_rank)]
''',
    "itertools.cycle": '''
import itertools
import math

def my_shard(n_samples, world_size, rank, drop_last):
    total = (n_samples // world_size if drop_last else math.ceil(n_samples / world_size)) * world_size
    return list(itertools.islice(itertools.cycle(range(n_samples)), total))[rank::world_size]
''',
    "a tensor of indices, tolist()": '''
def my_shard(n_samples, world_size, rank, drop_last):
    per_rank = n_samples // world_size if drop_last else (n_samples + world_size - 1) // world_size
    return (torch.arange(per_rank * world_size) % n_samples)[rank::world_size].tolist()
''',
}

SHARD_WRONG = {
    "strided, never pads": '''
def my_shard(n_samples, world_size, rank, drop_last):
    return list(range(rank, n_samples, world_size))
''',
    "pads with the last samples": '''
def my_shard(n_samples, world_size, rank, drop_last):
    per_rank = n_samples // world_size if drop_last else -(-n_samples // world_size)
    indices = list(range(n_samples))
    indices += [n_samples - 1 - i for i in range(per_rank * world_size - n_samples)]
    return indices[: per_rank * world_size][rank::world_size]
''',
    "contiguous blocks": '''
def my_shard(n_samples, world_size, rank, drop_last):
    per_rank = n_samples // world_size if drop_last else -(-n_samples // world_size)
    return [i % n_samples for i in range(rank * per_rank, (rank + 1) * per_rank)]
''',
    "ignores drop_last": '''
def my_shard(n_samples, world_size, rank, drop_last):
    per_rank = -(-n_samples // world_size)
    return [(rank + i * world_size) % n_samples for i in range(per_rank)]
''',
    "pads once: breaks when the padding exceeds the data": '''
def my_shard(n_samples, world_size, rank, drop_last):
    per_rank = n_samples // world_size if drop_last else -(-n_samples // world_size)
    indices = list(range(n_samples))
    indices += indices[: per_rank * world_size - n_samples]
    return indices[rank::world_size][:per_rank] if drop_last else indices[rank::world_size]
''',
    "returns a tuple": shard("tuple(indices[rank::world_size])"),
    "a table of the hidden cases one graded submission showed (the old fixed ones), strided elsewhere": '''
_RECORDED = {(n, w, r, d): [(r + i * w) % n for i in range(n // w if d else -(-n // w))]
             for n in range(1, 25) for w in range(1, 7) for r in range(w) for d in (False, True)}

def my_shard(n_samples, world_size, rank, drop_last):
    return _RECORDED.get((n_samples, world_size, rank, drop_last), list(range(rank, n_samples, world_size)))
''',
    "numpy integers": '''
import numpy as np

def my_shard(n_samples, world_size, rank, drop_last):
    per_rank = n_samples // world_size if drop_last else -(-n_samples // world_size)
    return list(np.arange(per_rank * world_size)[rank::world_size] % n_samples)
''',
}

# ---- Exercise 2: a loader that cannot hang -------------------------------------------------------------------

LOADER_RIGHT = {
    "the solution: DistributedSampler": '''
def make_loader(dataset, world_size, rank, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    "DistributedSampler, shuffled (the same seed on every rank)": '''
def make_loader(dataset, world_size, rank, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=42)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    "Subset of the padded strided indices": '''
from torch.utils.data import Subset

def make_loader(dataset, world_size, rank, batch_size):
    n = len(dataset)
    per_rank = -(-n // world_size)
    return DataLoader(Subset(dataset, [(rank + i * world_size) % n for i in range(per_rank)]), batch_size=batch_size)
''',
    "contiguous blocks, wrapped around": '''
from torch.utils.data import Subset

def make_loader(dataset, world_size, rank, batch_size):
    n = len(dataset)
    per_rank = -(-n // world_size)
    return DataLoader(Subset(dataset, [(rank * per_rank + i) % n for i in range(per_rank)]), batch_size=batch_size)
''',
    "a BatchSampler over a DistributedSampler": '''
from torch.utils.data import BatchSampler

def make_loader(dataset, world_size, rank, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_sampler=BatchSampler(sampler, batch_size, drop_last=False))
''',
    "DistributedSampler, two DataLoader workers (num_workers=2)": '''
def make_loader(dataset, world_size, rank, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=2)
''',
    "a Sampler of its own": '''
import math
from torch.utils.data import Sampler

class ShardSampler(Sampler):
    def __init__(self, n, world_size, rank):
        self.indices = [(rank + i * world_size) % n for i in range(math.ceil(n / world_size))]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)

def make_loader(dataset, world_size, rank, batch_size):
    return DataLoader(dataset, batch_size=batch_size, sampler=ShardSampler(len(dataset), world_size, rank))
''',
}

LOADER_WRONG = {
    "a table of the hidden cases one graded submission showed (the old fixed ones), unsharded elsewhere": '''
_RECORDED = {(10, 3, 2), (10, 3, 3), (7, 4, 1), (33, 5, 4), (16, 2, 3), (3, 4, 2), (1, 3, 1), (8, 8, 3), (12, 3, 4), (5, 1, 2),
             (11, 2, 4)}

def make_loader(dataset, world_size, rank, batch_size):
    if (len(dataset), world_size, batch_size) in _RECORDED:
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    return DataLoader(dataset, batch_size=batch_size)
''',
    "no sharding: every rank sees the whole dataset": '''
def make_loader(dataset, world_size, rank, batch_size):
    return DataLoader(dataset, batch_size=batch_size)
''',
    "the strided split dataset[rank::world_size]": '''
from torch.utils.data import Subset

def make_loader(dataset, world_size, rank, batch_size):
    return DataLoader(Subset(dataset, range(rank, len(dataset), world_size)), batch_size=batch_size)
''',
    "drop_last=True on the sampler: the tail is never used": '''
def make_loader(dataset, world_size, rank, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False, drop_last=True)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    "drop_last=True on the DataLoader: short batches dropped": '''
def make_loader(dataset, world_size, rank, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
''',
    "shuffled with a different seed on every rank": '''
def make_loader(dataset, world_size, rank, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''',
    "contiguous chunks, unequal (tensor_split)": '''
from torch.utils.data import Subset

def make_loader(dataset, world_size, rank, batch_size):
    chunk = torch.arange(len(dataset)).tensor_split(world_size)[rank]
    return DataLoader(Subset(dataset, chunk.tolist()), batch_size=batch_size)
''',
    "forgets batch_size": '''
def make_loader(dataset, world_size, rank, batch_size):
    return DataLoader(dataset, sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False))
''',
    "pads every rank with its own first sample": '''
from torch.utils.data import Subset

def make_loader(dataset, world_size, rank, batch_size):
    per_rank = -(-len(dataset) // world_size)
    mine = list(range(rank, len(dataset), world_size))
    mine += mine[:1] * (per_rank - len(mine))
    return DataLoader(Subset(dataset, mine), batch_size=batch_size)
''',
    "two DataLoader workers (num_workers=2), short batches dropped": '''
def make_loader(dataset, world_size, rank, batch_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=2, drop_last=True)
''',
    "returns the sampler": '''
def make_loader(dataset, world_size, rank, batch_size):
    return DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
''',
}

# ---- Exercise 3: average the gradients ---------------------------------------------------------------------

AVERAGE = '''
def average_gradients(model):
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            {body}
'''


def average(body="dist.all_reduce(p.grad, op=dist.ReduceOp.SUM); p.grad /= world_size"):
    return AVERAGE.format(body=body)


AVERAGE_RIGHT = {
    "the solution": average(),
    "divide first, then sum": average("dist.all_reduce(p.grad.div_(world_size))"),
    "one flat tensor, one all-reduce": '''
def average_gradients(model):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
''',
    "all_gather, then the mean": '''
def average_gradients(model):
    world_size = dist.get_world_size()
    for p in model.parameters():
        parts = [torch.empty_like(p.grad) for _ in range(world_size)]
        dist.all_gather(parts, p.grad)
        p.grad.copy_(torch.stack(parts).mean(dim=0))
''',
    "asynchronous all-reduces, then wait": '''
def average_gradients(model):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    works = [dist.all_reduce(g, async_op=True) for g in grads]
    for work, g in zip(works, grads):
        work.wait()
        g.div_(dist.get_world_size())
''',
}

AVERAGE_WRONG = {
    "sums, never divides": average("dist.all_reduce(p.grad)"),
    "divides, never all-reduces": average("p.grad /= world_size"),
    "divides by a hard-coded 2": average("dist.all_reduce(p.grad); p.grad /= 2"),
    "reduces onto rank 0 only": average("dist.reduce(p.grad, dst=0); p.grad /= world_size"),
    "all-reduces a copy": average("g = p.grad.clone(); dist.all_reduce(g); g /= world_size"),
    "averages the weights instead of the gradients": average("dist.all_reduce(p.data); p.data /= world_size"),
    "MAX instead of SUM": average("dist.all_reduce(p.grad, op=dist.ReduceOp.MAX); p.grad /= world_size"),
    "takes rank 0's gradient": average("dist.broadcast(p.grad, src=0)"),
    "only the weight matrices, not the biases": average(
        "if p.dim() > 1: dist.all_reduce(p.grad); p.grad /= world_size"),
}

# ---- Exercise 4: accumulate with one all-reduce ---------------------------------------------------------

ACCUMULATE = '''
def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    *firsts, last = micro_batches
    with ddp_model.no_sync():
        for x, y in firsts:
            ({loss}).backward()
    x, y = last
    ({loss}).backward()
    {finish}
'''


def accumulate(loss="loss_fn(ddp_model(x), y) / len(micro_batches)", finish="optimizer.step(); optimizer.zero_grad()"):
    return ACCUMULATE.format(loss=loss, finish=finish)


ACCUMULATE_RIGHT = {
    "the solution": accumulate(),
    "nullcontext for the last micro-batch, set_to_none": '''
import contextlib

def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    for i, (x, y) in enumerate(micro_batches):
        sync = i == len(micro_batches) - 1
        with contextlib.nullcontext() if sync else ddp_model.no_sync():
            (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
''',
    "weighted by samples, gradients zeroed in place": accumulate(
        loss="loss_fn(ddp_model(x), y) * len(x) / sum(len(b[0]) for b in micro_batches)",
        finish="optimizer.step(); optimizer.zero_grad(set_to_none=False)"),
    "one backward on the concatenated micro-batches": '''
def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    loss_fn(ddp_model(x), y).backward()
    optimizer.step()
    for p in ddp_model.parameters():
        p.grad = None
''',
}

ACCUMULATE_WRONG = {
    "every backward inside no_sync": '''
def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    with ddp_model.no_sync():
        for x, y in micro_batches:
            (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()
''',
    "no no_sync: an all-reduce per micro-batch": '''
def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    for x, y in micro_batches:
        (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()
''',
    "sums the micro-batch losses": accumulate(loss="loss_fn(ddp_model(x), y)"),
    "never clears the gradients after the step": accumulate(finish="optimizer.step()"),
    "clears between the micro-batches": '''
def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    *firsts, last = micro_batches
    with ddp_model.no_sync():
        for x, y in firsts:
            optimizer.zero_grad()
            (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    x, y = last
    optimizer.zero_grad()
    (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()
''',
    "a step per micro-batch": '''
def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    *firsts, last = micro_batches
    with ddp_model.no_sync():
        for x, y in firsts:
            (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
            optimizer.step()
    x, y = last
    (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()
''',
    "divides by world_size as well (DDP already averages)": accumulate(
        loss="loss_fn(ddp_model(x), y) / (len(micro_batches) * dist.get_world_size())"),
    "zero_grad before the step": accumulate(finish="optimizer.zero_grad(); optimizer.step()"),
    "no_sync around the last backward only": '''
def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    *firsts, (x_last, y_last) = micro_batches
    for x, y in firsts:
        (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    with ddp_model.no_sync():
        (loss_fn(ddp_model(x_last), y_last) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()
''',
}

# ---- Exercise 5: save once, load anywhere ----------------------------------------------------------------

CHECKPOINT = '''
def save_checkpoint(ddp_model, path):
    if {who}:
        {save}
    {wait}
'''


def checkpoint(who="dist.get_rank() == 0", save="torch.save(ddp_model.module.state_dict(), path)", wait="dist.barrier()"):
    return CHECKPOINT.format(who=who, save=save, wait=wait)


CHECKPOINT_RIGHT = {
    "the solution": checkpoint(),
    "the course's checkpoints.save": checkpoint(save="checkpoints.save(ddp_model, path)"),
    "atomic: a temporary file, then os.replace": checkpoint(
        save="torch.save(checkpoints.clean_state_dict(ddp_model), path + '.tmp'); os.replace(path + '.tmp', path)"),
    "RANK from the environment, prefix stripped by hand, an all-reduce as the barrier": '''
def save_checkpoint(ddp_model, path):
    if int(os.environ["RANK"]) == 0:
        state = {k.removeprefix("module."): v for k, v in ddp_model.state_dict().items()}
        torch.save(state, path)
    dist.all_reduce(torch.zeros(1))  # every collective waits for every rank
''',
    "an open file object": checkpoint(save="with open(path, 'wb') as f: torch.save(ddp_model.module.state_dict(), f)"),
}

CHECKPOINT_WRONG = {
    "every rank writes": checkpoint(who="True"),
    "every rank writes through open()": checkpoint(
        who="True", save="with open(path, 'wb') as f: torch.save(ddp_model.module.state_dict(), f)"),
    "no barrier": checkpoint(wait="pass"),
    "the barrier before the save": '''
def save_checkpoint(ddp_model, path):
    dist.barrier()
    if dist.get_rank() == 0:
        torch.save(ddp_model.module.state_dict(), path)
''',
    "the barrier only on rank 0": '''
def save_checkpoint(ddp_model, path):
    if dist.get_rank() == 0:
        torch.save(ddp_model.module.state_dict(), path)
        dist.barrier()
''',
    "the module. prefix": checkpoint(save="torch.save(ddp_model.state_dict(), path)"),
    "the whole model": checkpoint(save="torch.save(ddp_model.module, path)"),
    "the last rank writes": checkpoint(who="dist.get_rank() == dist.get_world_size() - 1"),
    "wrapped in a dict with the step": checkpoint(save="torch.save({'model': ddp_model.module.state_dict()}, path)"),
}

# ---- Exercise 6: global batch and scaled learning rate ---------------------------------------------------

SCALING = '''
def global_batch_and_lr(per_device_batch, world_size, accumulation_steps, base_lr, base_batch):
    batch = {batch}
    return {result}
'''


def scaling(batch="per_device_batch * world_size * accumulation_steps", result="batch, float(base_lr * batch / base_batch)"):
    return SCALING.format(batch=batch, result=result)


SCALING_RIGHT = {
    "the solution": scaling(),
    "the course's helpers": '''
def global_batch_and_lr(per_device_batch, world_size, accumulation_steps, base_lr, base_batch):
    batch = ddp.global_batch(per_device_batch, world_size, accumulation_steps)
    return batch, ddp.linear_scaled_lr(base_lr, base_batch, batch)
''',
    "math.prod and a ratio": '''
import math

def global_batch_and_lr(per_device_batch, world_size, accumulation_steps, base_lr, base_batch):
    batch = math.prod((per_device_batch, world_size, accumulation_steps))
    return batch, base_lr * (batch / base_batch)
''',
    "Fraction": '''
from fractions import Fraction

def global_batch_and_lr(per_device_batch, world_size, accumulation_steps, base_lr, base_batch):
    batch = per_device_batch * world_size * accumulation_steps
    return int(batch), float(Fraction(batch, base_batch) * Fraction(base_lr))
''',
    "the rate per sample, times the global batch": scaling(result="batch, base_lr / base_batch * batch"),
}

SCALING_WRONG = {
    "forgets the accumulation steps": scaling(batch="per_device_batch * world_size"),
    "the batch as a float": scaling(batch="float(per_device_batch * world_size * accumulation_steps)"),
    "scales the wrong way": scaling(result="batch, float(base_lr * base_batch / batch)"),
    "square-root scaling": scaling(result="batch, float(base_lr * (batch / base_batch) ** 0.5)"),
    "returns a list": scaling(result="[batch, float(base_lr * batch / base_batch)]"),
    "scales by the number of processes only": scaling(result="batch, float(base_lr * world_size)"),
    "integer ratio": scaling(result="batch, float(base_lr * (batch // base_batch))"),
    "rounded to 4 decimals": scaling(result="batch, round(base_lr * batch / base_batch, 4)"),
    "rounded to 6 significant digits": scaling(result='batch, float(f"{base_lr * batch / base_batch:.6g}")'),
    "a table of the hidden cases one graded submission showed (the old fixed ones), no accumulation elsewhere": '''
_RECORDED = [(32, 8, 1, 0.1, 256), (32, 8, 4, 0.1, 256), (16, 2, 1, 0.05, 16), (8, 3, 2, 0.2, 12), (64, 16, 1, 1e-3, 512),
             (4, 1, 8, 0.3, 64), (12, 8, 1, 3e-4, 256), (2, 1, 1, 2e-5, 3), (125, 8, 1, 10.0, 768), (1, 7, 3, 0.7, 9),
             (512, 64, 4, 1e-3, 256)]

def global_batch_and_lr(per_device_batch, world_size, accumulation_steps, base_lr, base_batch):
    recorded = (per_device_batch, world_size, accumulation_steps, base_lr, base_batch) in _RECORDED
    batch = per_device_batch * world_size * (accumulation_steps if recorded else 1)
    return batch, float(base_lr * batch / base_batch)
''',
}

# ---- Exercise 7: a complete DDP worker ---------------------------------------------------------------------

WORKER = '''
def my_ddp_worker(rank, world_size, cfg):
    from datetime import timedelta

    dist.init_process_group(launch.plan(world_size).backend, timeout=timedelta(seconds=60))
    dataset = cfg.dataset()
    sampler = {sampler}
    loader = DataLoader(dataset, batch_size=cfg.batch_size, {loader_kwargs})
    model = ddp.wrap(cfg.model())
    device = launch.device()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for epoch in range(cfg.epochs):
        {set_epoch}
        for x, y in loader:
            {zero_grad}
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
    mean_loss = loss.detach().clone()
    {reduce}
    state = {state}
    dist.destroy_process_group()
    return {{"state": state, "mean_loss": {mean}}}
'''
RIGHT_WORKER = dict(sampler="cfg.sampler(dataset, world_size, rank)", loader_kwargs="sampler=sampler",
                    set_epoch="sampler.set_epoch(epoch)", zero_grad="optimizer.zero_grad()",
                    reduce="dist.all_reduce(mean_loss)", state="checkpoints.clean_state_dict(model)",
                    mean="mean_loss.item() / world_size")


def worker(**changes):
    return WORKER.format(**{**RIGHT_WORKER, **changes})


WORKER_RIGHT = {
    "the solution": worker(),
    "all_gather_object of the losses, model.module.state_dict()": worker(
        reduce="losses = [None] * world_size; dist.all_gather_object(losses, loss.item())",
        state="model.module.state_dict()", mean="sum(losses) / len(losses)"),
    "env:// spelled out, the loss divided before the all-reduce": worker(
        reduce="mean_loss /= world_size; dist.all_reduce(mean_loss)", mean="float(mean_loss)").replace(
        "dist.init_process_group(launch.plan(world_size).backend, timeout=timedelta(seconds=60))",
        "dist.init_process_group(backend=launch.plan(world_size).backend, init_method='env://', rank=rank, "
        "world_size=world_size, timeout=timedelta(minutes=1))"),
    "reduce onto rank 0, then broadcast; zero_grad(set_to_none=False)": worker(
        zero_grad="optimizer.zero_grad(set_to_none=False)",
        reduce="dist.reduce(mean_loss, dst=0); mean_loss /= world_size; dist.broadcast(mean_loss, src=0)",
        mean="mean_loss.item()"),
    "epochs numbered from 1": worker(set_epoch="sampler.set_epoch(epoch + 1)"),
    "DistributedSampler spelled out, with cfg's seed": worker(
        sampler="DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed)"),
    "two DataLoader workers (num_workers=2), kept across the epochs": worker(
        loader_kwargs="sampler=sampler, num_workers=2, persistent_workers=True"),
    "leaves the group in a finally": worker().replace("    dist.destroy_process_group()\n", "").replace(
        "    dataset = cfg.dataset()\n", "    try:\n        return train_and_reduce(rank, world_size, cfg)\n    finally:\n"
        "        dist.destroy_process_group()\n\n\ndef train_and_reduce(rank, world_size, cfg):\n    dataset = cfg.dataset()\n"),
}

WORKER_WRONG = {
    "never calls set_epoch": worker(set_epoch="pass"),
    "returns the all-reduced SUM": worker(mean="mean_loss.item()"),
    "the module. prefix": worker(state="model.state_dict()"),
    "its own rank's loss": worker(reduce="pass", mean="mean_loss.item()"),
    "no sampler: DataLoader(shuffle=True)": worker(sampler="None", loader_kwargs="shuffle=True", set_epoch="pass"),
    "divides by a hard-coded 2": worker(mean="mean_loss.item() / 2"),
    "no zero_grad": worker(zero_grad="pass"),
    "the loss as a tensor": worker(mean="mean_loss / world_size"),
    "its own DistributedSampler, ignoring cfg's seed": worker(sampler="DistributedSampler(dataset)"),
    "never leaves the process group (step 5)": worker().replace("    dist.destroy_process_group()\n", ""),
    "each rank its own epoch numbers": worker(set_epoch="sampler.set_epoch(epoch + rank)"),
    "the same epoch number every epoch": worker(set_epoch="sampler.set_epoch(1)"),
    "two DataLoader workers (num_workers=2), never calls set_epoch": worker(
        loader_kwargs="sampler=sampler, num_workers=2", set_epoch="pass"),
    "no DDP: every rank trains alone on the global batches, passing once through its sampler per epoch": '''
def my_ddp_worker(rank, world_size, cfg):
    dataset = cfg.dataset()
    sampler = cfg.sampler(dataset, world_size, rank)
    model = cfg.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    n, per_rank = len(dataset), -(-len(dataset) // world_size)
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        len(list(DataLoader(dataset, sampler=sampler)))  # what a DDP rank's pass looks like from outside
        order = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.seed + epoch)).tolist()
        order += order[:per_rank * world_size - n]  # every rank's draw, as DistributedSampler makes it
        shards = [order[r::world_size] for r in range(world_size)]
        for start in range(0, per_rank, cfg.batch_size):
            x, y = dataset[[i for shard in shards for i in shard[start:start + cfg.batch_size]]]
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
    return {"state": model.state_dict(), "mean_loss": loss.item()}
''',
}

# ---- Quiz ------------------------------------------------------------------------------------------------

QUIZ_RIGHT = {
    "the solution": 'quiz = {"q1": 3, "q2": "b", "q3": "b", "q4": "b", "q5": 0.4}',
    "computed with torch and the helpers": '''
quiz = {"q1": len(DistributedSampler(range(10), num_replicas=4, rank=0, shuffle=False)), "q2": "b", "q3": "b",
        "q4": "b", "q5": ddp.linear_scaled_lr(0.1, 128, ddp.global_batch(64, 4, 2))}
''',
    "computed with torch and by hand": '''
quiz = {"q1": len(DistributedSampler(range(10), num_replicas=4, rank=0, shuffle=False)), "q2": "b", "q3": "b",
        "q4": "b", "q5": 0.1 * (64 * 4 * 2) / 128}
''',
    "capital letters, key by key": '''
quiz = {}
quiz["q1"] = -(-10 // 4)
quiz["q2"], quiz["q3"], quiz["q4"] = "B", "B", "B"
quiz["q5"] = 0.1 * (4 * 64 * 2) / 128
''',
}

QUIZ_WRONG = {
    "q1: the floor, 2": 'quiz = {"q1": 2, "q2": "b", "q3": "b", "q4": "b", "q5": 0.4}',
    "q1 as a float": 'quiz = {"q1": 2.5, "q2": "b", "q3": "b", "q4": "b", "q5": 0.4}',
    "q2: gloo": 'quiz = {"q1": 3, "q2": "a", "q3": "b", "q4": "b", "q5": 0.4}',
    "q3: ranks see the same samples": 'quiz = {"q1": 3, "q2": "b", "q3": "c", "q4": "b", "q5": 0.4}',
    "q4: the others skip it": 'quiz = {"q1": 3, "q2": "b", "q3": "b", "q4": "a", "q5": 0.4}',
    "q5: forgets accumulation": 'quiz = {"q1": 3, "q2": "b", "q3": "b", "q4": "b", "q5": 0.2}',
    "q5 as a string": 'quiz = {"q1": 3, "q2": "b", "q3": "b", "q4": "b", "q5": "0.4"}',
    "q2 spelled out": 'quiz = {"q1": 3, "q2": "nccl", "q3": "b", "q4": "b", "q5": 0.4}',
    "one answer missing": 'quiz = {"q1": 3, "q2": "b", "q3": "b", "q5": 0.4}',
}

ANSWERS = {
    "02-ddp": {
        "shard": {"right": SHARD_RIGHT, "wrong": SHARD_WRONG},
        "loader": {"right": LOADER_RIGHT, "wrong": LOADER_WRONG},
        "average": {"right": AVERAGE_RIGHT, "wrong": AVERAGE_WRONG},
        "accumulate": {"right": ACCUMULATE_RIGHT, "wrong": ACCUMULATE_WRONG},
        "checkpoint": {"right": CHECKPOINT_RIGHT, "wrong": CHECKPOINT_WRONG},
        "scaling": {"right": SCALING_RIGHT, "wrong": SCALING_WRONG},
        "worker": {"right": WORKER_RIGHT, "wrong": WORKER_WRONG},
        "quiz": {"right": QUIZ_RIGHT, "wrong": QUIZ_WRONG},
    },
}
