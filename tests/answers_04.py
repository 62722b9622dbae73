"""Lesson 4's answers (see tests/answers.py).

The exercises that launch processes (convert, gather) or XLA runs (trap's probes, compiles, bucket, spmd) take
seconds per answer: they keep to a few right and wrong answers each, chosen one per class of mistake.
"""

LESSON = "04-accelerate-tpu"

WORKER = '''
def my_accelerate_worker(n_samples, batch_size, epochs, lr, seed):
    accelerator = accel.accelerator()
    model = accel.model({seed})
    optimizer = torch.optim.SGD(model.parameters(), lr={lr})
    loader = DataLoader(accel.dataset(n_samples, seed), batch_size={batch_size}{shuffle})
    {prepare}
    for _ in range({epochs}):
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            {zero_grad}
    return {result}
'''
RIGHT_WORKER = dict(seed="seed", lr="lr", batch_size="batch_size", shuffle="", epochs="epochs",
                    prepare="model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
                    zero_grad="optimizer.zero_grad()",
                    result="{k: v.cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()}")


def worker(**changes):
    return WORKER.format(**{**RIGHT_WORKER, **changes})


def compiles(sgd, adam):
    return f'''
def predict_compiles(batch_sizes, optimizer):
    if optimizer == "adam":
        return {adam}
    return {sgd}
'''


BUCKET = '''
def bucket_length(length, buckets):
    for bucket in buckets:
        if bucket {compare} length:
            return bucket
    {otherwise}
'''


def bucket(compare=">=", otherwise='raise ValueError(f"{length} is longer than every bucket")'):
    return BUCKET.format(compare=compare, otherwise=otherwise)


SHARD = '''
def shard_batch(tensor, mesh):
    import torch_xla.distributed.spmd as xs

    {body}
'''


def shard(body):
    return SHARD.format(body=body)


TPU_BATCH = '''
def tpu_batch(global_batch, cores):
    per_core = {per_core}
    per_core = {rounded}
    return {result}
'''


def tpu_batch(per_core="-(-global_batch // cores)", rounded="-(-per_core // 8) * 8", result="per_core, per_core * cores"):
    return TPU_BATCH.format(per_core=per_core, rounded=rounded, result=result)


# The hidden cases every grading used before they were drawn per submission (issue 40): one graded submission showed
# them, and a table of their answers then scored full marks. Each answer below is right on them only.
OLD_CONVERT = [(288, 8, 2, 0.1, 3), (108, 12, 3, 0.05, 5), (24, 1, 1, 0.2, 7), (128, 8, 2, 0.1, 4), (96, 4, 1, 0.2, 6),
               (128, 16, 1, 0.05, 0)]
OLD_GATHER = [(10, 3), (13, 4), (8, 2), (5, 3), (21, 5), (1, 1), (2, 4), (7, 7), (12, 3), (9, 1)]
OLD_COMPILES = {((4, 8, 8, 4, 2), "sgd"): 3, ((8, 8, 4), "adam"): 3, ((4, 8, 8, 8), "adam"): 2, ((8,), "adam"): 1,
                ((8,) * 8, "sgd"): 1, ((8,) * 7 + (5,), "sgd"): 2, ((8,) * 8, "adam"): 2}
OLD_BUCKETS = [(4, 8, 16), (4, 8, 16, 32), (3, 5, 12, 100), (7,), (1, 2), (10, 20, 30, 40, 50), (2, 4, 8, 16)]
OLD_TPU_BATCH = ([*range(1, 300), 511, 512, 513, 1000, 1023, 1024, 1025, 4095, 4096, 4097, 10**6 + 1], (1, 2, 3, 4, 6, 8, 16, 64))

QUIZ = {"q1": {"accelerator": "tpu", "devices": 8}, "q2": "b", "q3": False, "q4": 1, "q5": 2}


def quiz(**changes):
    return f"quiz = {({**QUIZ, **changes})!r}"


ANSWERS = {
    LESSON: {
        "convert": {
            "right": {
                "the solution": worker(),
                "get_state_dict, zero_grad before backward": '''
def my_accelerate_worker(n_samples, batch_size, epochs, lr, seed):
    accelerator = accel.accelerator()
    model = accel.model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model, optimizer = accelerator.prepare(model, optimizer)
    loader = accelerator.prepare(DataLoader(accel.dataset(n_samples, seed), batch_size=batch_size, shuffle=False))
    model.train()
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            accelerator.backward(F.mse_loss(model(x), y))
            optimizer.step()
    state = accelerator.get_state_dict(model)
    return {name: tensor.detach().to("cpu") for name, tensor in state.items()}
''',
                "accumulate(), clone of the unwrapped weights": '''
def my_accelerate_worker(n_samples, batch_size, epochs, lr, seed):
    accelerator = accel.accelerator()
    net = accel.model(seed)
    opt = torch.optim.SGD(net.parameters(), lr)
    data = DataLoader(accel.dataset(n_samples=n_samples, seed=seed), batch_size)
    net, opt, data = accelerator.prepare(net, opt, data)
    for _ in range(epochs):
        for batch in data:
            with accelerator.accumulate(net):
                inputs, targets = batch
                accelerator.backward(F.mse_loss(net(inputs), targets))
                opt.step()
                opt.zero_grad()
    accelerator.wait_for_everyone()
    return {k: v.detach().clone().cpu() for k, v in accelerator.unwrap_model(net).state_dict().items()}
''',
                "the accelerator's own step counter: a step every gradient_accumulation_steps batches": '''
def my_accelerate_worker(n_samples, batch_size, epochs, lr, seed):
    accelerator = accel.accelerator()
    model = accel.model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(accel.dataset(n_samples, seed), batch_size=batch_size)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                if accelerator.sync_gradients:
                    optimizer.step()
                    optimizer.zero_grad()
    return {k: v.cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()}
''',
                "two DataLoader workers (num_workers=2), kept across the epochs": '''
def my_accelerate_worker(n_samples, batch_size, epochs, lr, seed):
    accelerator = accel.accelerator()
    model = accel.model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(accel.dataset(n_samples, seed), batch_size=batch_size, num_workers=2, persistent_workers=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(epochs):
        for x, y in loader:
            accelerator.backward(F.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    return {k: v.cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()}
''',
            },
            "wrong": {
                "the loader is not prepared: each process trains on everything": worker(
                    prepare="model, optimizer = accelerator.prepare(model, optimizer)"),
                "the wrapped model's state dict (module. prefix)": worker(
                    result="{k: v.cpu() for k, v in model.state_dict().items()}"),
                "no zero_grad": worker(zero_grad="pass"),
                "lr scaled by the number of processes (lesson 2's rule)": worker(lr="lr * accelerator.num_processes"),
                "one epoch whatever epochs says": worker(epochs="1"),
                "right on the old fixed hidden cases only, one epoch elsewhere": worker(epochs="epochs if (n_samples, batch_size, epochs, lr, seed) in _OLD else 1").replace(
                    "def my_accelerate_worker", f"_OLD = {OLD_CONVERT!r}\n\n\ndef my_accelerate_worker"),
                "loss.backward() instead of accelerator.backward(loss)": worker().replace(
                    "accelerator.backward(loss)", "loss.backward()"),
                "loss.backward() inside accelerator.accumulate(model)": worker().replace(
                    "            loss = F.mse_loss(model(x), y)\n            accelerator.backward(loss)\n"
                    "            optimizer.step()\n            optimizer.zero_grad()\n",
                    "            with accelerator.accumulate(model):\n                loss = F.mse_loss(model(x), y)\n"
                    "                loss.backward()\n                optimizer.step()\n                optimizer.zero_grad()\n"),
            },
        },
        "gather": {
            "right": {
                "the solution": '''
def gather_lengths(n_samples, batch_size, num_processes):
    per_step = batch_size * num_processes
    steps = -(-n_samples // per_step)
    return steps * per_step, n_samples
''',
                "batches rounded up to a multiple of the processes": '''
import math

def gather_lengths(n_samples, batch_size, num_processes):
    batches = math.ceil(n_samples / batch_size)
    batches += -batches % num_processes
    return batches * batch_size, n_samples
''',
                "divmod": '''
def gather_lengths(n_samples, batch_size, num_processes):
    steps, rest = divmod(n_samples, batch_size * num_processes)
    return int((steps + (rest > 0)) * batch_size * num_processes), int(n_samples)
''',
            },
            "wrong": {
                "pads the last batch only, not the processes": '''
def gather_lengths(n_samples, batch_size, num_processes):
    return -(-n_samples // batch_size) * batch_size, n_samples
''',
                "pads samples, not batches": '''
def gather_lengths(n_samples, batch_size, num_processes):
    return -(-n_samples // num_processes) * num_processes, n_samples
''',
                "one step too many when it divides evenly": '''
def gather_lengths(n_samples, batch_size, num_processes):
    per_step = batch_size * num_processes
    return (n_samples // per_step + 1) * per_step, n_samples
''',
                "two processes hard-coded": '''
def gather_lengths(n_samples, batch_size, num_processes):
    per_step = batch_size * 2
    return -(-n_samples // per_step) * per_step, n_samples
''',
                "gather_for_metrics padded as well": '''
def gather_lengths(n_samples, batch_size, num_processes):
    per_step = batch_size * num_processes
    padded = -(-n_samples // per_step) * per_step
    return padded, padded
''',
                "a table of the old fixed hidden cases, a guess elsewhere": f'''
_TABLE = {{(n, b, p): (-(-n // (b * p)) * b * p, n) for n, b in {OLD_GATHER!r} for p in (2, 3, 4)}}


def gather_lengths(n_samples, batch_size, num_processes):
    return _TABLE.get((n_samples, batch_size, num_processes), (n_samples, n_samples))
''',
            },
        },
        "trap": {
            "right": {
                "the solution": '''
def accelerate_env(tpu_present):
    return {} if tpu_present else {"USE_TORCH_XLA": "0"}
''',
                "false, and an explicit true on a TPU": '''
def accelerate_env(tpu_present):
    return {"USE_TORCH_XLA": "true" if tpu_present else "false"}
''',
                "also the CPU client for torch_xla when there is no TPU": '''
def accelerate_env(tpu_present):
    env = {}
    if not tpu_present:
        env["USE_TORCH_XLA"] = "0"
        env["PJRT_DEVICE"] = "CPU"
    return env
''',
                "PJRT_DEVICE=TPU on a TPU: torch_xla's TPU runtime named": '''
def accelerate_env(tpu_present):
    return {"PJRT_DEVICE": "TPU"} if tpu_present else {"USE_TORCH_XLA": "0"}
''',
                "on a TPU: USE_TORCH_XLA=1, PJRT_DEVICE=TPU, ACCELERATE_USE_CPU=false": '''
def accelerate_env(tpu_present):
    if tpu_present:
        return {"USE_TORCH_XLA": "1", "PJRT_DEVICE": "TPU", "ACCELERATE_USE_CPU": "false"}
    return {"USE_TORCH_XLA": "no"}
''',
            },
            "wrong": {
                "USE_TORCH_XLA=0 even on a TPU": '''
def accelerate_env(tpu_present):
    return {"USE_TORCH_XLA": "0"}
''',
                "PJRT_DEVICE=CPU: torch_xla on the CPU, still xla for Accelerate": '''
def accelerate_env(tpu_present):
    return {} if tpu_present else {"PJRT_DEVICE": "CPU"}
''',
                "ACCELERATE_USE_CPU (cpu=True is already asked for)": '''
def accelerate_env(tpu_present):
    return {} if tpu_present else {"ACCELERATE_USE_CPU": "true"}
''',
                "set in this process, nothing returned": '''
import os

def accelerate_env(tpu_present):
    if not tpu_present:
        os.environ["USE_TORCH_XLA"] = "0"
    return {}
''',
                "PJRT_DEVICE=CPU on the TPU too": '''
def accelerate_env(tpu_present):
    return {"PJRT_DEVICE": "CPU"} if tpu_present else {"USE_TORCH_XLA": "0", "PJRT_DEVICE": "CPU"}
''',
                "on a TPU, a USE_TORCH_XLA that Accelerate cannot read": '''
def accelerate_env(tpu_present):
    return {"USE_TORCH_XLA": "tpu"} if tpu_present else {"USE_TORCH_XLA": "0"}
''',
                "on a TPU, Accelerate's device forced to the CPU": '''
def accelerate_env(tpu_present):
    return {"PJRT_DEVICE": "TPU", "ACCELERATE_TORCH_DEVICE": "cpu"} if tpu_present else {"USE_TORCH_XLA": "0"}
''',
            },
        },
        "compiles": {
            "right": {
                "the solution": compiles(sgd="len(set(batch_sizes))", adam="1 + len(set(batch_sizes[1:]))"),
                "the graph cache, step by step": '''
def predict_compiles(batch_sizes, optimizer):
    cache = set()
    for step, rows in enumerate(batch_sizes):
        first_adam_step = optimizer == "adam" and step == 0
        cache.add((rows, first_adam_step))
    return len(cache)
''',
                "a counter of new shapes": '''
def predict_compiles(batch_sizes, optimizer):
    count, seen = 0, set()
    for i, b in enumerate(batch_sizes):
        if optimizer == "adam" and i == 0:
            count += 1  # the step that creates Adam's state
            continue
        if b not in seen:
            seen.add(b)
            count += 1
    return count
''',
            },
            "wrong": {
                "Adam adds one whatever the shapes": compiles(sgd="len(set(batch_sizes))", adam="len(set(batch_sizes)) + 1"),
                "a compilation whenever the shape changes": '''
def predict_compiles(batch_sizes, optimizer):
    changes = sum(a != b for a, b in zip(batch_sizes, batch_sizes[1:]))
    return 1 + changes + (1 if optimizer == "adam" else 0)
''',
                "Adam like SGD": compiles(sgd="len(set(batch_sizes))", adam="len(set(batch_sizes))"),
                "Adam doubles every graph": compiles(sgd="len(set(batch_sizes))", adam="2 * len(set(batch_sizes))"),
                "only the first and last shapes": compiles(sgd="1 + (batch_sizes[-1] != batch_sizes[0])",
                                                          adam="2 + (batch_sizes[-1] != batch_sizes[0])"),
                "a table of the old fixed hidden cases, one elsewhere": f'''
_TABLE = {OLD_COMPILES!r}


def predict_compiles(batch_sizes, optimizer):
    return _TABLE.get((tuple(batch_sizes), optimizer), 1)
''',
            },
        },
        "bucket": {
            "right": {
                "the solution": bucket(),
                "min over the buckets that fit (min of nothing is a ValueError)": '''
def bucket_length(length, buckets):
    return min(b for b in buckets if b >= length)
''',
                "bisect": '''
import bisect

def bucket_length(length, buckets):
    i = bisect.bisect_left(buckets, length)
    if i == len(buckets):
        raise ValueError("too long")
    return buckets[i]
''',
            },
            "wrong": {
                "> instead of >=": bucket(compare=">"),
                "IndexError from bisect": '''
import bisect

def bucket_length(length, buckets):
    return buckets[bisect.bisect_left(buckets, length)]
''',
                "StopIteration from next()": '''
def bucket_length(length, buckets):
    return next(b for b in buckets if b >= length)
''',
                "powers of two": '''
import math

def bucket_length(length, buckets):
    if length > buckets[-1]:
        raise ValueError("too long")
    return max(buckets[0], 2 ** math.ceil(math.log2(length)))
''',
                "the largest bucket raises too": '''
def bucket_length(length, buckets):
    if length >= buckets[-1]:
        raise ValueError("too long")
    return min(b for b in buckets if b >= length)
''',
                "right on the old fixed hidden buckets only, the largest bucket elsewhere": f'''
_OLD = {OLD_BUCKETS!r}


def bucket_length(length, buckets):
    if length > buckets[-1]:
        raise ValueError("too long")
    return min(b for b in buckets if b >= length) if tuple(buckets) in _OLD else buckets[-1]
''',
            },
        },
        "spmd": {
            "right": {
                "the solution": shard('xs.mark_sharding(tensor, mesh, ("data", None))'),
                "returns the sharded tensor": shard('return xs.mark_sharding(tensor, mesh, partition_spec=("data", None))'),
                "None for every dimension after the first": shard(
                    'xs.mark_sharding(tensor, mesh, ("data",) + (None,) * (tensor.dim() - 1))'),
            },
            "wrong": {
                "splits dim 1 instead": shard('xs.mark_sharding(tensor, mesh, (None, "data"))'),
                "also splits dim 1 over the model axis": shard('xs.mark_sharding(tensor, mesh, ("data", "model"))'),
                "the mesh axis by position": shard("xs.mark_sharding(tensor, mesh, (0, None))"),
                "annotates a copy": shard('xs.mark_sharding(tensor.clone(), mesh, ("data", None))'),
                "a mesh of its own": '''
def shard_batch(tensor, mesh):
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    n = xr.global_runtime_device_count()
    xs.mark_sharding(tensor, xs.Mesh(np.arange(n), (n, 1), ("data", "model")), ("data", None))
''',
            },
        },
        "tpu_batch": {
            "right": {
                "the solution": tpu_batch(),
                "math.ceil": '''
import math

def tpu_batch(global_batch, cores):
    per_core = 8 * math.ceil(global_batch / (8 * cores))
    return per_core, per_core * cores
''',
                "searching multiples of 8": '''
def tpu_batch(global_batch, cores):
    per_core = 8
    while per_core * cores < global_batch:
        per_core += 8
    return (per_core, per_core * cores)
''',
            },
            "wrong": {
                "floor division per core": tpu_batch(per_core="global_batch // cores"),
                "rounded to the nearest multiple of 8": tpu_batch(rounded="max(8, round(per_core / 8) * 8)"),
                "rounded up to a power of two": tpu_batch(rounded="max(8, 1 << (per_core - 1).bit_length())"),
                "the requested global batch returned": tpu_batch(result="per_core, global_batch"),
                "floats when it divides evenly": '''
import math

def tpu_batch(global_batch, cores):
    per_core = global_batch / cores
    if per_core % 8:
        per_core = math.ceil(per_core / 8) * 8
    return per_core, per_core * cores
''',
                "multiple of 8 for the global batch, not per core": tpu_batch(
                    per_core="-(-global_batch // 8) * 8", rounded="-(-per_core // cores)"),
                "a table of the old fixed hidden cases, 8 per core elsewhere": f'''
_GLOBAL, _CORES = {OLD_TPU_BATCH!r}
_TABLE = {{(g, c): -(-(-(-g // c)) // 8) * 8 for g in _GLOBAL for c in _CORES}}


def tpu_batch(global_batch, cores):
    per_core = _TABLE.get((global_batch, cores), 8)
    return per_core, per_core * cores
''',
            },
        },
        "quiz": {
            "right": {
                "the solution": quiz(),
                'devices="auto"': quiz(q1={"accelerator": "tpu", "devices": "auto"}),
                'strategy="xla", the one Lightning picks for 8 devices': quiz(
                    q1={"accelerator": "tpu", "devices": 8, "strategy": "xla"}),
                "the defaults spelled out": quiz(
                    q1={"accelerator": "tpu", "devices": 8, "strategy": "auto", "precision": "32-true", "num_nodes": 1}),
                "written as calls, (b), q5 computed": '''
quiz = dict(q1=dict(devices=8, accelerator="tpu"), q2="(b)", q3=False, q4=1, q5=len(set([32] * 99 + [20])))
''',
                # Lightning lowercases strategy names: the same Trainer
                'strategy "XLA" in capitals': quiz(q1={"accelerator": "tpu", "devices": 8, "strategy": "XLA"}),
                'strategy "Auto", devices " 8 ", precision "32"': quiz(
                    q1={"accelerator": "tpu", "devices": " 8 ", "strategy": "Auto", "precision": "32"}),
                'accelerator "auto": Lightning picks the TPU on a v5e-8': quiz(q1={"accelerator": "auto", "devices": 8}),
            },
            "wrong": {
                "the old tpu_cores argument": quiz(q1={"accelerator": "tpu", "tpu_cores": 8}),
                "one device": quiz(q1={"accelerator": "tpu", "devices": 1}),
                "8 hosts": quiz(q2="a"),
                "a DistributedSampler is needed": quiz(q3=True),
                "--num_processes 2 starts 2": quiz(q4=2),
                "one compilation per step": quiz(q5=100),
                "devices as a float": quiz(q1={"accelerator": "tpu", "devices": 8.0}),
                "a strategy that shards the model (FSDP), not data parallel": quiz(
                    q1={"accelerator": "tpu", "devices": 8, "strategy": "xla_fsdp"}),
                "bf16 weights: another run": quiz(q1={"accelerator": "tpu", "devices": 8, "precision": "bf16-true"}),
                "8 hosts (num_nodes)": quiz(q1={"accelerator": "tpu", "devices": 8, "num_nodes": 8}),
                'accelerator "TPU": Lightning does not lowercase accelerator names, it refuses this one': quiz(
                    q1={"accelerator": "TPU", "devices": 8}),
                'strategy "xla_debug": XLA with its debug mode, another run': quiz(
                    q1={"accelerator": "tpu", "devices": 8, "strategy": "xla_debug"}),
                'precision "bf16": Lightning reads "bf16-mixed", which XLA refuses': quiz(
                    q1={"accelerator": "tpu", "devices": 8, "precision": "bf16"}),
                "all eight listed: Lightning takes one index or a count on a TPU": quiz(
                    q1={"accelerator": "tpu", "devices": list(range(8))}),
            },
        },
    },
}
