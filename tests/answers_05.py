"""Lesson 5's answers (see tests/answers.py): ZeRO's bytes per rank, a ZeRO-1 step, the shard a rank holds, an FSDP2
worker, resharding, a checkpoint converter and the quiz. The answers that launch processes run in 2 or 3 gloo
processes, as the test cells do."""

# ---- Exercise 1: bytes per rank for each ZeRO stage ---------------------------------------------------------------

ZERO_BYTES_RIGHT = {
    "the solution": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    if stage not in (0, 1, 2, 3) or type(stage) is not int:
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    params, grads, state = 2.0, 2.0, 12.0
    if stage >= 1:
        state /= world_size
    if stage >= 2:
        grads /= world_size
    if stage >= 3:
        params /= world_size
    return n_parameters * (params + grads + state)
''',
    "a table of the paper's formulas": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    formulas = {0: lambda p, n: 16 * p, 1: lambda p, n: 4 * p + 12 * p / n, 2: lambda p, n: 2 * p + 14 * p / n,
                3: lambda p, n: 16 * p / n}
    if type(stage) is not int or stage not in formulas:
        raise ValueError("stage")
    return float(formulas[stage](n_parameters, world_size))
''',
    "a list of what is sharded": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage <= 3:
        raise ValueError(f"no ZeRO stage {stage!r}")
    total = 0.0
    for position, size in enumerate([12, 2, 2]):  # state, gradients, parameters: the order the stages shard them
        total += size * n_parameters / (world_size if position < stage else 1)
    return total
''',
}

ZERO_BYTES_WRONG = {
    "stage 2 shards the gradients alone, not the optimizer state": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    if stage not in (0, 1, 2, 3) or type(stage) is not int:
        raise ValueError("stage")
    return float(n_parameters * {0: 16, 1: 4 + 12 / world_size, 2: 2 + 2 / world_size + 12, 3: 16 / world_size}[stage])
''',
    "fp32 Adam: 4 + 4 + 8 bytes": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    if stage not in (0, 1, 2, 3) or type(stage) is not int:
        raise ValueError("stage")
    p, g, s = 4.0, 4.0, 8.0
    s = s / world_size if stage >= 1 else s
    g = g / world_size if stage >= 2 else g
    p = p / world_size if stage >= 3 else p
    return n_parameters * (p + g + s)
''',
    "Adam's state as 8 bytes": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    if stage not in (0, 1, 2, 3) or type(stage) is not int:
        raise ValueError("stage")
    p, g, s = 2.0, 2.0, 8.0
    s = s / world_size if stage >= 1 else s
    g = g / world_size if stage >= 2 else g
    p = p / world_size if stage >= 3 else p
    return n_parameters * (p + g + s)
''',
    "stage 3 keeps the fp16 parameters whole": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    if stage not in (0, 1, 2, 3) or type(stage) is not int:
        raise ValueError("stage")
    sharded = {0: 0, 1: 12, 2: 14, 3: 14}[stage]
    return float(n_parameters * (16 - sharded + sharded / world_size))
''',
    "no ValueError: stage 4 is stage 3": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    return float({0: 16 * n_parameters, 1: 4 * n_parameters + 12 * n_parameters / world_size,
                  2: 2 * n_parameters + 14 * n_parameters / world_size}.get(stage, 16 * n_parameters / world_size))
''',
    "GB instead of bytes": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    if stage not in (0, 1, 2, 3) or type(stage) is not int:
        raise ValueError("stage")
    return round({0: 16 * n_parameters, 1: 4 * n_parameters + 12 * n_parameters / world_size,
                  2: 2 * n_parameters + 14 * n_parameters / world_size, 3: 16 * n_parameters / world_size}[stage] / 1e9, 1) * 1e9
''',
    "an int": '''
def zero_bytes_per_rank(n_parameters, world_size, stage):
    if stage not in (0, 1, 2, 3) or type(stage) is not int:
        raise ValueError("stage")
    return int({0: 16 * n_parameters, 1: 4 * n_parameters + 12 * n_parameters / world_size,
                2: 2 * n_parameters + 14 * n_parameters / world_size, 3: 16 * n_parameters / world_size}[stage])
''',
}

# ---- Exercise 2: a ZeRO-1 step ----------------------------------------------------------------------------------

ZERO1_RIGHT = {
    "the solution: reduce-scatter, all-gather into a tensor": '''
def zero1_step(model, shard, optimizer):
    world_size = dist.get_world_size()
    params = list(model.parameters())
    grads = parameters_to_vector([p.grad for p in params])
    size = shard.numel()
    grads = F.pad(grads, (0, size * world_size - grads.numel()))
    mine = torch.empty_like(shard)
    dist.reduce_scatter_tensor(mine, grads)
    shard.grad = mine / world_size
    optimizer.step()
    everything = torch.empty(size * world_size, dtype=shard.dtype, device=shard.device)
    dist.all_gather_into_tensor(everything, shard.detach())
    vector_to_parameters(everything[:sum(p.numel() for p in params)], params)
''',
    "all-reduce, slice, all_gather into a list, copy_ per parameter": '''
def zero1_step(model, shard, optimizer):
    world, rank = dist.get_world_size(), dist.get_rank()
    params = list(model.parameters())
    grads = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(grads)
    grads /= world
    size = shard.numel()
    padded = torch.zeros(size * world)
    padded[:grads.numel()] = grads
    shard.grad = padded[rank * size:(rank + 1) * size].clone()
    optimizer.step()
    pieces = [torch.zeros_like(shard) for _ in range(world)]
    dist.all_gather(pieces, shard.detach())
    flat = torch.cat(pieces)
    offset = 0
    with torch.no_grad():
        for p in params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
''',
    "broadcast each rank's slice in turn": '''
def zero1_step(model, shard, optimizer):
    world, rank = dist.get_world_size(), dist.get_rank()
    params = list(model.parameters())
    grads = parameters_to_vector([p.grad for p in params]) / world
    dist.all_reduce(grads)
    size = shard.numel()
    grads = torch.cat([grads, grads.new_zeros(size * world - grads.numel())])
    shard.grad = grads[rank * size:(rank + 1) * size].clone()
    optimizer.step()
    flat = torch.empty(size * world)
    for owner in range(world):
        piece = shard.detach().clone() if owner == rank else torch.empty(size)
        dist.broadcast(piece, src=owner)
        flat[owner * size:(owner + 1) * size] = piece
    vector_to_parameters(flat[:sum(p.numel() for p in params)], params)
''',
}

ZERO1_WRONG = {
    "no averaging: each rank steps on its own gradients": '''
def zero1_step(model, shard, optimizer):
    world, rank = dist.get_world_size(), dist.get_rank()
    params = list(model.parameters())
    size = shard.numel()
    grads = F.pad(parameters_to_vector([p.grad for p in params]), (0, size * world - sum(p.numel() for p in params)))
    shard.grad = grads[rank * size:(rank + 1) * size].clone()
    optimizer.step()
    everything = torch.empty(size * world)
    dist.all_gather_into_tensor(everything, shard.detach())
    vector_to_parameters(everything[:sum(p.numel() for p in params)], params)
''',
    "summed, not averaged": '''
def zero1_step(model, shard, optimizer):
    world, rank = dist.get_world_size(), dist.get_rank()
    params = list(model.parameters())
    size = shard.numel()
    grads = F.pad(parameters_to_vector([p.grad for p in params]), (0, size * world - sum(p.numel() for p in params)))
    mine = torch.empty_like(shard)
    dist.reduce_scatter_tensor(mine, grads)
    shard.grad = mine
    optimizer.step()
    everything = torch.empty(size * world)
    dist.all_gather_into_tensor(everything, shard.detach())
    vector_to_parameters(everything[:sum(p.numel() for p in params)], params)
''',
    "never all-gathers: each rank keeps only its own slice updated": '''
def zero1_step(model, shard, optimizer):
    world, rank = dist.get_world_size(), dist.get_rank()
    params = list(model.parameters())
    size = shard.numel()
    grads = F.pad(parameters_to_vector([p.grad for p in params]), (0, size * world - sum(p.numel() for p in params)))
    mine = torch.empty_like(shard)
    dist.reduce_scatter_tensor(mine, grads)
    shard.grad = mine / world
    optimizer.step()
    flat = F.pad(parameters_to_vector(params).detach(), (0, size * world - sum(p.numel() for p in params)))
    flat[rank * size:(rank + 1) * size] = shard.detach()
    vector_to_parameters(flat[:sum(p.numel() for p in params)], params)
''',
    "a full Adam of its own, the shard ignored": '''
_own = {}

def zero1_step(model, shard, optimizer):
    world = dist.get_world_size()
    params = list(model.parameters())
    for p in params:
        dist.all_reduce(p.grad)
        p.grad /= world
    if id(model) not in _own:
        _own[id(model)] = torch.optim.Adam(params, lr=optimizer.param_groups[0]["lr"])
    _own[id(model)].step()
''',
    "the wrong slice: rank r steps rank r+1's": '''
def zero1_step(model, shard, optimizer):
    world, rank = dist.get_world_size(), dist.get_rank()
    params = list(model.parameters())
    size = shard.numel()
    grads = F.pad(parameters_to_vector([p.grad for p in params]), (0, size * world - sum(p.numel() for p in params)))
    dist.all_reduce(grads)
    other = (rank + 1) % world
    shard.grad = grads[other * size:(other + 1) * size] / world
    optimizer.step()
    everything = torch.empty(size * world)
    dist.all_gather_into_tensor(everything, shard.detach())
    vector_to_parameters(everything[:sum(p.numel() for p in params)], params)
''',
}

# ---- Exercise 3: the shard a rank holds -------------------------------------------------------------------------

SHARD_SHAPE_RIGHT = {
    "the solution": '''
def local_shape(shape, world_size, rank):
    rows = shape[0]
    per_rank = -(-rows // world_size)
    start = min(rows, rank * per_rank)
    mine = min(rows, start + per_rank) - start
    return (mine, *shape[1:])
''',
    "torch.chunk of the rows": '''
def local_shape(shape, world_size, rank):
    chunks = torch.arange(shape[0]).chunk(world_size) if shape[0] else ()
    rows = len(chunks[rank]) if rank < len(chunks) else 0
    return (rows,) + tuple(shape[1:])
''',
    "math.ceil and max": '''
import math

def local_shape(shape, world_size, rank):
    size = math.ceil(shape[0] / world_size)
    return tuple([max(0, min(size, shape[0] - rank * size))] + list(shape[1:]))
''',
}

SHARD_SHAPE_WRONG = {
    "tensor_split's rule (4, 3, 3)": '''
def local_shape(shape, world_size, rank):
    rows = shape[0] // world_size + (1 if rank < shape[0] % world_size else 0)
    return (rows, *shape[1:])
''',
    "floor division": '''
def local_shape(shape, world_size, rank):
    return (shape[0] // world_size, *shape[1:])
''',
    "the padded size on every rank": '''
def local_shape(shape, world_size, rank):
    return (-(-shape[0] // world_size), *shape[1:])
''',
    "a list": '''
def local_shape(shape, world_size, rank):
    size = -(-shape[0] // world_size)
    return [max(0, min(size, shape[0] - rank * size)), *shape[1:]]
''',
    "sharded on the last dimension": '''
def local_shape(shape, world_size, rank):
    size = -(-shape[-1] // world_size)
    return (*shape[:-1], max(0, min(size, shape[-1] - rank * size)))
''',
    "min without max: negative rows past the end": '''
def local_shape(shape, world_size, rank):
    size = -(-shape[0] // world_size)
    return (min(size, shape[0] - rank * size), *shape[1:])
''',
}

# ---- Exercise 4: an FSDP2 worker --------------------------------------------------------------------------------

FSDP_RIGHT = {
    "the solution": '''
def my_fsdp_worker(rank, world_size, cfg):
    device = launch.device()
    mesh = sharding.device_mesh()
    model = cfg.model().to(device)
    for block in cfg.blocks(model):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = cfg.batch(step, world_size, rank)
        F.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model
''',
    "reshard_after_forward=False, zero_grad first": '''
def my_fsdp_worker(rank, world_size, cfg):
    model = cfg.model().to(launch.device())
    for block in cfg.blocks(model):
        fully_shard(block, reshard_after_forward=False)
    fully_shard(model, reshard_after_forward=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        optimizer.zero_grad(set_to_none=True)
        x, y = (t.to(launch.device()) for t in cfg.batch(step, world_size, rank))
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    return model
''',
    "an explicit device mesh and forward prefetching": '''
from torch.distributed.device_mesh import init_device_mesh

def my_fsdp_worker(rank, world_size, cfg):
    device = launch.device()
    mesh = init_device_mesh(device.type, (world_size,))
    model = cfg.model().to(device)
    blocks = cfg.blocks(model)
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for block, following in zip(blocks, blocks[1:]):
        block.set_modules_to_forward_prefetch([following])
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = cfg.batch(step, world_size, rank)
        F.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model
''',
}

FSDP_WRONG = {
    "the root only: one unit": '''
def my_fsdp_worker(rank, world_size, cfg):
    model = cfg.model()
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = cfg.batch(step, world_size, rank)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model
''',
    "the optimizer made before sharding": '''
def my_fsdp_worker(rank, world_size, cfg):
    model = cfg.model()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for block in cfg.blocks(model):
        fully_shard(block)
    fully_shard(model)
    for step in range(cfg.steps):
        x, y = cfg.batch(step, world_size, rank)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model
''',
    "the global batch on every rank": '''
def my_fsdp_worker(rank, world_size, cfg):
    model = cfg.model()
    for block in cfg.blocks(model):
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = cfg.batch(step, 1, 0)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model
''',
    "never zero_grad": '''
def my_fsdp_worker(rank, world_size, cfg):
    model = cfg.model()
    for block in cfg.blocks(model):
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = cfg.batch(step, world_size, rank)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return model
''',
    "SGD instead of Adam": '''
def my_fsdp_worker(rank, world_size, cfg):
    model = cfg.model()
    for block in cfg.blocks(model):
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = cfg.batch(step, world_size, rank)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model
''',
    "returns the state dict, not the model": '''
def my_fsdp_worker(rank, world_size, cfg):
    model = cfg.model()
    for block in cfg.blocks(model):
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        x, y = cfg.batch(step, world_size, rank)
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.state_dict()
''',
}

# ---- Exercise 5: resharding -------------------------------------------------------------------------------------

RESHARD_RIGHT = {
    "the solution": '''
def reshard(shards, new_world_size):
    new = [OrderedDict() for _ in range(new_world_size)]
    for name in shards[0]:
        whole = torch.cat([shard[name] for shard in shards])
        rows = -(-whole.shape[0] // new_world_size)
        for rank in range(new_world_size):
            new[rank][name] = whole[rank * rows:(rank + 1) * rows].clone()
    return new
''',
    "torch.chunk, padded with empty shards": '''
def reshard(shards, new_world_size):
    out = [{} for _ in range(new_world_size)]
    for name in shards[0]:
        whole = torch.cat([s[name] for s in shards], dim=0)
        chunks = list(torch.chunk(whole, new_world_size, dim=0)) if whole.shape[0] else []
        while len(chunks) < new_world_size:
            chunks.append(whole[:0])
        for rank, chunk in enumerate(chunks):
            out[rank][name] = chunk.clone()
    return out
''',
    "the full state dict first, then one rank at a time": '''
def reshard(shards, new_world_size):
    full = {name: torch.cat([s[name] for s in shards]) for name in shards[0]}
    result = []
    for rank in range(new_world_size):
        mine = {}
        for name, tensor in full.items():
            size = -(-tensor.shape[0] // new_world_size)
            start = min(tensor.shape[0], rank * size)
            mine[name] = tensor.narrow(0, start, min(size, tensor.shape[0] - start)).clone()
        result.append(mine)
    return result
''',
}

RESHARD_WRONG = {
    "tensor_split's rule": '''
def reshard(shards, new_world_size):
    new = [OrderedDict() for _ in range(new_world_size)]
    for name in shards[0]:
        for rank, part in enumerate(torch.tensor_split(torch.cat([s[name] for s in shards]), new_world_size)):
            new[rank][name] = part.clone()
    return new
''',
    "torch.chunk alone: too few ranks when the rows run out": '''
def reshard(shards, new_world_size):
    new = [OrderedDict() for _ in range(new_world_size)]
    for name in shards[0]:
        for rank, part in enumerate(torch.chunk(torch.cat([s[name] for s in shards]), new_world_size)):
            new[rank][name] = part.clone()
    return new
''',
    "rows dealt round-robin": '''
def reshard(shards, new_world_size):
    new = [OrderedDict() for _ in range(new_world_size)]
    for name in shards[0]:
        whole = torch.cat([s[name] for s in shards])
        for rank in range(new_world_size):
            new[rank][name] = whole[rank::new_world_size].clone()
    return new
''',
    "the full tensors on every rank": '''
def reshard(shards, new_world_size):
    full = OrderedDict((name, torch.cat([s[name] for s in shards])) for name in shards[0])
    return [OrderedDict(full) for _ in range(new_world_size)]
''',
    "the old shards, unchanged": '''
def reshard(shards, new_world_size):
    return [dict(shards[r % len(shards)]) for r in range(new_world_size)]
''',
    "keys sorted": '''
def reshard(shards, new_world_size):
    new = [OrderedDict() for _ in range(new_world_size)]
    for name in sorted(shards[0]):
        whole = torch.cat([shard[name] for shard in shards])
        rows = -(-whole.shape[0] // new_world_size)
        for rank in range(new_world_size):
            new[rank][name] = whole[rank * rows:(rank + 1) * rows].clone()
    return new
''',
}

# ---- Exercise 6: a checkpoint converter -------------------------------------------------------------------------

CONVERT_RIGHT = {
    "the solution": '''
def convert_state_dict(state_dict, to):
    if to not in ("plain", "ddp", "fsdp"):
        raise ValueError(f"to must be 'plain', 'ddp' or 'fsdp', got {to!r}")
    state = OrderedDict(state_dict)
    for prefix in ("module.", "_orig_mod."):
        if state and all(key.startswith(prefix) for key in state):
            state = OrderedDict((key[len(prefix):], value) for key, value in state.items())
    if to == "ddp":
        state = OrderedDict(("module." + key, value) for key, value in state.items())
    return state
''',
    "with the course's checkpoints helpers": '''
def convert_state_dict(state_dict, to):
    if to not in {"plain", "ddp", "fsdp"}:
        raise ValueError("to")
    plain = checkpoints.strip_prefix(checkpoints.strip_prefix(state_dict), "_orig_mod.")
    return checkpoints.add_prefix(plain) if to == "ddp" else plain
''',
    "removeprefix in a loop, a plain dict": '''
def convert_state_dict(state_dict, to):
    kinds = {"plain": "", "fsdp": "", "ddp": "module."}
    if to not in kinds:
        raise ValueError(f"unknown kind {to!r}")
    keys = list(state_dict)
    changed = True
    while changed and keys:
        changed = False
        for prefix in ("module.", "_orig_mod."):
            if all(k.startswith(prefix) for k in keys):
                keys = [k.removeprefix(prefix) for k in keys]
                changed = True
    return {kinds[to] + k: v for k, v in zip(keys, state_dict.values())}
''',
}

CONVERT_WRONG = {
    "replace anywhere in the key": '''
def convert_state_dict(state_dict, to):
    if to not in ("plain", "ddp", "fsdp"):
        raise ValueError("to")
    state = {k.replace("module.", "").replace("_orig_mod.", ""): v for k, v in state_dict.items()}
    return {"module." + k: v for k, v in state.items()} if to == "ddp" else state
''',
    "strips from every key that has it, not only when all do": '''
def convert_state_dict(state_dict, to):
    if to not in ("plain", "ddp", "fsdp"):
        raise ValueError("to")
    state = {}
    for k, v in state_dict.items():
        k = k.removeprefix("module.").removeprefix("_orig_mod.")
        state[k] = v
    return {"module." + k: v for k, v in state.items()} if to == "ddp" else state
''',
    "forgets torch.compile's prefix": '''
def convert_state_dict(state_dict, to):
    if to not in ("plain", "ddp", "fsdp"):
        raise ValueError("to")
    state = checkpoints.strip_prefix(state_dict)
    return checkpoints.add_prefix(state) if to == "ddp" else state
''',
    "FSDP1's names for fsdp": '''
def convert_state_dict(state_dict, to):
    if to not in ("plain", "ddp", "fsdp"):
        raise ValueError("to")
    plain = checkpoints.strip_prefix(checkpoints.strip_prefix(state_dict), "_orig_mod.")
    if to == "ddp":
        return checkpoints.add_prefix(plain)
    return checkpoints.add_prefix(plain, "_fsdp_wrapped_module.") if to == "fsdp" else plain
''',
    "keys sorted": '''
def convert_state_dict(state_dict, to):
    if to not in ("plain", "ddp", "fsdp"):
        raise ValueError("to")
    plain = checkpoints.strip_prefix(checkpoints.strip_prefix(state_dict), "_orig_mod.")
    plain = OrderedDict(sorted(plain.items()))
    return checkpoints.add_prefix(plain) if to == "ddp" else plain
''',
    "any unknown kind treated as plain": '''
def convert_state_dict(state_dict, to):
    plain = checkpoints.strip_prefix(checkpoints.strip_prefix(state_dict), "_orig_mod.")
    return checkpoints.add_prefix(plain) if to == "ddp" else plain
''',
}

# ---- Exercise 7: the quiz ---------------------------------------------------------------------------------------

QUIZ_RIGHT = {
    "the solution": 'quiz = {"q1": 3, "q2": "b", "q3": 3.75, "q4": 1, "q5": "b"}',
    "upper-case letters, q3 as a fraction": 'quiz = {"q1": 3, "q2": "B", "q3": 2 + 14 / 8, "q4": 1, "q5": "B"}',
    "computed with torch": '''
quiz = {"q1": 3, "q2": "b", "q3": float(2 + (2 + 12) / 8), "q4": len(torch.arange(10).chunk(4)[3]), "q5": "b"}
''',
}

QUIZ_WRONG = {
    "stage 2 shards the parameters": 'quiz = {"q1": 2, "q2": "b", "q3": 3.75, "q4": 1, "q5": "b"}',
    "reshard_after_forward=False turns sharding off": 'quiz = {"q1": 3, "q2": "a", "q3": 3.75, "q4": 1, "q5": "b"}',
    "stage 2 as 16 / N": 'quiz = {"q1": 3, "q2": "b", "q3": 2.0, "q4": 1, "q5": "b"}',
    "tensor_split's rows": 'quiz = {"q1": 3, "q2": "b", "q3": 3.75, "q4": 2, "q5": "b"}',
    "FSDP1's names": 'quiz = {"q1": 3, "q2": "b", "q3": 3.75, "q4": 1, "q5": "c"}',
    "q3 as an int": 'quiz = {"q1": 3, "q2": "b", "q3": 4, "q4": 1, "q5": "b"}',
}

ANSWERS = {
    "05-sharding": {
        "zero_bytes": {"right": ZERO_BYTES_RIGHT, "wrong": ZERO_BYTES_WRONG},
        "zero1": {"right": ZERO1_RIGHT, "wrong": ZERO1_WRONG},
        "shard_shape": {"right": SHARD_SHAPE_RIGHT, "wrong": SHARD_SHAPE_WRONG},
        "fsdp": {"right": FSDP_RIGHT, "wrong": FSDP_WRONG},
        "reshard": {"right": RESHARD_RIGHT, "wrong": RESHARD_WRONG},
        "convert": {"right": CONVERT_RIGHT, "wrong": CONVERT_WRONG},
        "quiz": {"right": QUIZ_RIGHT, "wrong": QUIZ_WRONG},
    },
}
