"""Lesson 1's answers (see tests/answers.py)."""

SPLIT = '''
def my_split_sizes(batch_size, n_devices):
    rows = {rows}
    sizes = {sizes}
    return sizes
'''
CEIL = "-(-batch_size // n_devices)"
FULL_AND_REST = "[rows] * (batch_size // rows) + ([batch_size % rows] if batch_size % rows else [])"


def split(rows=CEIL, sizes=FULL_AND_REST):
    return SPLIT.format(rows=rows, sizes=sizes)


SAMPLES = '''
def device_samples(batch_size, n_devices, device):
    rows = {rows}
    {body}
'''
SAMPLES_BODY = "start = min(device * rows, batch_size)\n    return list(range(start, min(start + rows, batch_size)))"


def samples(rows=CEIL, body=SAMPLES_BODY):
    return SAMPLES.format(rows=rows, body=body)


GRADIENTS = '''
def data_parallel_gradients(model, x, y, n_devices):
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    for x_part, y_part in zip({split_x}, {split_y}):
        part_loss = {loss}
        for acc, grad in zip(total, torch.autograd.grad(part_loss, params)):
            acc += grad
    return {result}
'''
RIGHT_GRADIENTS = dict(split_x="x.chunk(n_devices)", split_y="y.chunk(n_devices)",
                       loss='F.mse_loss(model(x_part), y_part, reduction="sum") / y.numel()', result="total")


def gradients(**changes):
    return GRADIENTS.format(**{**RIGHT_GRADIENTS, **changes})


EXTRA = '''
def device0_extra_bytes(model, optimizer, batch_size, in_features, out_features, n_devices):
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    state = {{"sgd": 0, "momentum": {momentum}, "adam": {adam}}}[optimizer]
    chunk = {chunk}
    inputs = {inputs}
    gathered_outputs = {gathered}
    loss = {loss}
    reduced_gradients = {reduced}
    return state + inputs + gathered_outputs + loss + reduced_gradients
'''
RIGHT_EXTRA = dict(momentum="param_bytes", adam="2 * param_bytes + 4 * n_tensors", chunk="batch_size // n_devices",
                   inputs="4 * (batch_size * in_features + batch_size * out_features) - 4 * chunk * in_features",
                   gathered="4 * batch_size * out_features", loss="4", reduced="param_bytes")


def extra(**changes):
    return EXTRA.format(**{**RIGHT_EXTRA, **changes})


PORTABLE = '''
def portable_state_dict(model):
    {unwrap}
    return {state}


def load_portable(model, state_dict):
    {unwrap}
    {load}
'''
RIGHT_PORTABLE = dict(unwrap="while isinstance(model, nn.DataParallel):\n        model = model.module",
                      state="model.state_dict()",
                      load='if set(state_dict) != set(model.state_dict()):\n'
                           '        state_dict = {k.removeprefix("module."): v for k, v in state_dict.items()}\n'
                           '    model.load_state_dict(state_dict)')


def portable(**changes):
    return PORTABLE.format(**{**RIGHT_PORTABLE, **changes})


RIGHT_QUIZ = {"q1": 1, "q2": "b", "q3": "b", "q4": "a", "q5": "b"}


def quiz(**changes):
    return f"quiz = {({**RIGHT_QUIZ, **changes})!r}\n"


ANSWERS = {
    "01-dataparallel": {
        "split_sizes": {
            "right": {
                "remaining rows in a loop": '''
import math

def my_split_sizes(batch_size, n_devices):
    rows = math.ceil(batch_size / n_devices)
    sizes, left = [], batch_size
    while left > 0:
        sizes.append(min(rows, left))
        left -= rows
    return sizes
''',
                "starts stepping by ceil": '''
def my_split_sizes(batch_size, n_devices):
    rows = (batch_size + n_devices - 1) // n_devices
    return [min(rows, batch_size - start) for start in range(0, batch_size, rows)]
''',
                "Tensor.split by ceil rows (not chunk)": '''
def my_split_sizes(batch_size, n_devices):
    rows = -(-batch_size // n_devices)
    return [len(part) for part in torch.arange(batch_size).split(rows)]
''',
                "divmod": split(sizes="[rows] * divmod(batch_size, rows)[0] + [r for r in [divmod(batch_size, rows)[1]] if r]"),
                "numpy boundaries": '''
import numpy as np

def my_split_sizes(batch_size, n_devices):
    rows = int(np.ceil(batch_size / n_devices))
    edges = list(range(0, batch_size, rows)) + [batch_size]
    return [int(b - a) for a, b in zip(edges, edges[1:])]
''',
            },
            "wrong": {
                "calls torch.chunk (forbidden)": '''
def my_split_sizes(batch_size, n_devices):
    return [len(c) for c in torch.chunk(torch.arange(batch_size), n_devices)]
''',
                "calls Tensor.chunk (forbidden)": '''
def my_split_sizes(batch_size, n_devices):
    return [len(c) for c in torch.arange(batch_size).chunk(n_devices)]
''',
                "calls the course's helper (forbidden)": '''
from helpers.dataparallel import split_sizes

def my_split_sizes(batch_size, n_devices):
    return list(split_sizes(batch_size, n_devices))
''',
                "tensor_split's even split": '''
def my_split_sizes(batch_size, n_devices):
    return [len(c) for c in torch.arange(batch_size).tensor_split(n_devices)]
''',
                "numpy array_split (as even as possible)": '''
import numpy as np

def my_split_sizes(batch_size, n_devices):
    return [len(c) for c in np.array_split(np.arange(batch_size), n_devices)]
''',
                "floor rows, remainder to the last": split(rows="batch_size // n_devices",
                                                           sizes="[rows] * (n_devices - 1) + [batch_size - rows * (n_devices - 1)]"),
                "always one entry per device (last devices get nothing forgotten)":
                    split(sizes="[min(rows, max(0, batch_size - d * rows)) for d in range(n_devices)]"),
                "off-by-one ceil": split(rows="batch_size // n_devices + 1"),
                "tuple instead of list": split(sizes="tuple(" + FULL_AND_REST + ")"),
                "numpy ints": '''
import numpy as np

def my_split_sizes(batch_size, n_devices):
    rows = -(-batch_size // n_devices)
    sizes = np.full(batch_size // rows, rows)
    return list(sizes) + ([np.int64(batch_size % rows)] if batch_size % rows else [])
''',
                "floats": split(rows="batch_size / n_devices", sizes="[rows] * n_devices"),
                "hard-coded visible cases": '''
def my_split_sizes(batch_size, n_devices):
    return {(64, 2): [32, 32], (10, 3): [4, 4, 2]}.get((batch_size, n_devices), [batch_size // n_devices] * n_devices)
''',
            },
        },
        "device_samples": {
            "right": {
                "slice of the batch's indices": '''
def device_samples(batch_size, n_devices, device):
    rows = -(-batch_size // n_devices)
    return list(range(batch_size))[device * rows:(device + 1) * rows]
''',
                "torch.chunk with a bounds check": '''
def device_samples(batch_size, n_devices, device):
    chunks = torch.arange(batch_size).chunk(n_devices)
    return chunks[device].tolist() if device < len(chunks) else []
''',
                "the course's split_indices": '''
def device_samples(batch_size, n_devices, device):
    parts = dp.split_indices(batch_size, n_devices)
    return list(parts[device]) if device < len(parts) else []
''',
                "cumulative sizes": '''
import itertools

def device_samples(batch_size, n_devices, device):
    rows = -(-batch_size // n_devices)
    sizes = [min(rows, batch_size - s) for s in range(0, batch_size, rows)]
    starts = [0] + list(itertools.accumulate(sizes))
    return list(range(starts[device], starts[device + 1])) if device < len(sizes) else []
''',
            },
            "wrong": {
                "tensor_split's even split": '''
def device_samples(batch_size, n_devices, device):
    return torch.arange(batch_size).tensor_split(n_devices)[device].tolist()
''',
                "chunk without the empty devices (IndexError)": '''
def device_samples(batch_size, n_devices, device):
    return torch.arange(batch_size).chunk(n_devices)[device].tolist()
''',
                "off-by-one end": samples(body="start = min(device * rows, batch_size)\n"
                                               "    return list(range(start, min(start + rows + 1, batch_size)))"),
                "floor rows": samples(rows="batch_size // n_devices"),
                "a tensor instead of a list": '''
def device_samples(batch_size, n_devices, device):
    chunks = torch.arange(batch_size).chunk(n_devices)
    return chunks[device] if device < len(chunks) else []
''',
                "numpy ints": '''
import numpy as np

def device_samples(batch_size, n_devices, device):
    rows = -(-batch_size // n_devices)
    return list(np.arange(batch_size)[device * rows:(device + 1) * rows])
''',
                "round-robin samples": samples(body="return list(range(device, batch_size, n_devices))"),
                "hard-coded visible cases": '''
def device_samples(batch_size, n_devices, device):
    if (batch_size, n_devices, device) == (6, 4, 3):
        return []
    half = batch_size // n_devices
    return list(range(device * half, (device + 1) * half))
''',
            },
        },
        "dp_gradients": {
            "right": {
                "model.forward instead of model(...)": gradients(
                    loss='F.mse_loss(model.forward(x_part), y_part, reduction="sum") / y.numel()'),
                "chunk-weighted mean losses": gradients(loss="F.mse_loss(model(x_part), y_part) * len(x_part) / len(x)"),
                "gather the outputs, one full-batch loss (what DataParallel does)": '''
def data_parallel_gradients(model, x, y, n_devices):
    outputs = torch.cat([model(part) for part in x.chunk(n_devices)])
    return list(torch.autograd.grad(F.mse_loss(outputs, y), list(model.parameters())))
''',
                "backward into .grad per device, split by the helper's sizes": '''
def data_parallel_gradients(model, x, y, n_devices):
    params = list(model.parameters())
    for p in params:
        p.grad = None
    sizes = dp.split_sizes(len(x), n_devices)
    for x_part, y_part in zip(x.split(sizes), y.split(sizes)):
        ((model(x_part) - y_part) ** 2).sum().div(y.numel()).backward()
    grads = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return grads
''',
                "autograd.grad per replica, summed with torch.stack": '''
def data_parallel_gradients(model, x, y, n_devices):
    params = [p for _, p in model.named_parameters()]
    per_device = []
    for x_part, y_part in zip(x.chunk(n_devices), y.chunk(n_devices)):
        out = model(x_part)
        per_device.append(torch.autograd.grad(F.mse_loss(out, y_part, reduction="sum") / y.numel(), params))
    return [torch.stack(g).sum(0) for g in zip(*per_device)]
''',
                "one thread per device, as DataParallel runs its replicas (any finishing order)": '''
def data_parallel_gradients(model, x, y, n_devices):
    params = list(model.parameters())
    pieces = list(zip(x.chunk(n_devices), y.chunk(n_devices)))
    per_device = [None] * len(pieces)
    start = threading.Barrier(len(pieces))

    def replica(i, x_part, y_part):
        start.wait()
        part_loss = F.mse_loss(model(x_part), y_part, reduction="sum") / y.numel()
        per_device[i] = torch.autograd.grad(part_loss, params)

    threads = [threading.Thread(target=replica, args=(i, *piece)) for i, piece in enumerate(pieces)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [sum(g) for g in zip(*per_device)]
''',
                "the devices' pieces from the last to the first": gradients(
                    split_x="reversed(x.chunk(n_devices))", split_y="reversed(y.chunk(n_devices))"),
                "the devices' pieces in a random order": '''
import random


def data_parallel_gradients(model, x, y, n_devices):
    params = list(model.parameters())
    pieces = list(zip(x.chunk(n_devices), y.chunk(n_devices)))
    random.Random(len(x)).shuffle(pieces)
    total = [torch.zeros_like(p) for p in params]
    for x_part, y_part in pieces:
        for acc, grad in zip(total, torch.autograd.grad(F.mse_loss(model(x_part), y_part, reduction="sum") / y.numel(), params)):
            acc += grad
    return total
''',
            },
            "wrong": {
                "mean of the chunks' mean losses": gradients(loss="F.mse_loss(model(x_part), y_part) / n_devices"),
                "sum of the chunks' mean losses": gradients(loss="F.mse_loss(model(x_part), y_part)"),
                "divided by the rows, not the elements": gradients(
                    loss='F.mse_loss(model(x_part), y_part, reduction="sum") / len(y)'),
                "full batch in one run (no split)": '''
def data_parallel_gradients(model, x, y, n_devices):
    return list(torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters())))
''',
                "tensor_split's even split": gradients(split_x="x.tensor_split(n_devices)", split_y="y.tensor_split(n_devices)"),
                "a tuple from autograd.grad": '''
def data_parallel_gradients(model, x, y, n_devices):
    outputs = torch.cat([model(part) for part in x.chunk(n_devices)])
    return torch.autograd.grad(F.mse_loss(outputs, y), list(model.parameters()))
''',
                "device 0's gradient only": gradients(split_x="x.chunk(n_devices)[:1]", split_y="y.chunk(n_devices)[:1]"),
                "mean instead of sum of the device gradients": gradients(
                    loss='F.mse_loss(model(x_part), y_part, reduction="sum") / y.numel()',
                    result="[t / len(x.chunk(n_devices)) for t in total]"),
                "the reversed batch's pieces: the right sizes, other rows": gradients(
                    split_x="x.flip(0).chunk(n_devices)", split_y="y.flip(0).chunk(n_devices)"),
                "a warm-up forward on device 0's piece: the model runs twice there": '''
def data_parallel_gradients(model, x, y, n_devices):
    params = list(model.parameters())
    with torch.no_grad():
        model(x.chunk(n_devices)[0])  # warm-up
    outputs = torch.cat([model(part) for part in x.chunk(n_devices)])
    return list(torch.autograd.grad(F.mse_loss(outputs, y), params))
''',
                "round-robin rows": gradients(split_x="[x[d::n_devices] for d in range(min(n_devices, len(x)))]",
                                              split_y="[y[d::n_devices] for d in range(min(n_devices, len(y)))]"),
            },
        },
        "device0_extra": {
            "right": {
                "one formula": '''
def device0_extra_bytes(model, optimizer, batch_size, in_features, out_features, n_devices):
    p = sum(t.numel() for t in model.parameters()) * 4
    state = {"sgd": 0, "momentum": p, "adam": 2 * p + 4 * sum(1 for _ in model.parameters())}[optimizer]
    return state + 4 * ((batch_size - batch_size // n_devices) * in_features + 2 * batch_size * out_features + 1) + p
''',
                "from the state dict": '''
def device0_extra_bytes(model, optimizer, batch_size, in_features, out_features, n_devices):
    tensors = list(model.state_dict().values())
    param_bytes = sum(t.nbytes for t in tensors)
    buffers = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    steps = 4 * len(tensors) if optimizer == "adam" else 0
    rows_elsewhere = batch_size - batch_size // n_devices
    return (buffers * param_bytes + steps + param_bytes + 4 * rows_elsewhere * in_features
            + 4 * batch_size * out_features * 2 + 4)
''',
                "row by row of the ledger": '''
def device0_extra_bytes(model, optimizer, batch_size, in_features, out_features, n_devices):
    params = list(model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in params)
    rows = {
        "optimizer state": {"sgd": 0, "momentum": nbytes, "adam": 2 * nbytes + 4 * len(params)}[optimizer],
        "reduced gradients": nbytes,
        "inputs": 4 * batch_size * (in_features + out_features) - 4 * (batch_size // n_devices) * in_features,
        "gathered outputs": 4 * batch_size * out_features,
        "loss": 4,
    }
    return int(sum(rows.values()))
''',
            },
            "wrong": {
                "Adam's step tensors forgotten": extra(adam="2 * param_bytes"),
                "Adam's step as 8 bytes": extra(adam="2 * param_bytes + 8 * n_tensors"),
                "reduced gradients forgotten": extra(reduced="0"),
                "device 1's chunk not subtracted": extra(inputs="4 * (batch_size * in_features + batch_size * out_features)"),
                "targets forgotten": extra(inputs="4 * batch_size * in_features - 4 * chunk * in_features"),
                "gathered outputs forgotten": extra(gathered="0"),
                "loss forgotten": extra(loss="0"),
                "momentum as two buffers": extra(momentum="2 * param_bytes"),
                "a float": extra(chunk="batch_size / n_devices"),
            },
        },
        "portable_checkpoint": {
            "right": {
                "unwrap once, torch's consume_prefix": '''
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

def _inner(model):
    return model.module if isinstance(model, nn.DataParallel) else model

def portable_state_dict(model):
    return _inner(model).state_dict()

def load_portable(model, state_dict):
    model = _inner(model)
    state_dict = dict(state_dict)
    if state_dict.keys() != model.state_dict().keys():
        consume_prefix_in_state_dict_if_present(state_dict, "module.")
    model.load_state_dict(state_dict)
''',
                "try strict, then strip": '''
def portable_state_dict(model):
    while isinstance(model, nn.DataParallel):
        model = model.module
    return model.state_dict()

def load_portable(model, state_dict):
    while isinstance(model, nn.DataParallel):
        model = model.module
    try:
        model.load_state_dict(state_dict)
    except RuntimeError:
        model.load_state_dict({k[len("module."):] if k.startswith("module.") else k: v for k, v in state_dict.items()})
''',
                "the course's checkpoints helpers": '''
def portable_state_dict(model):
    return checkpoints.unwrap(model).state_dict()

def load_portable(model, state_dict):
    inner = checkpoints.unwrap(model)
    fits = list(state_dict) == list(inner.state_dict())
    inner.load_state_dict(state_dict if fits else checkpoints.strip_prefix(state_dict))
''',
                "cloned tensors in an OrderedDict": portable(
                    state="__import__('collections').OrderedDict((k, v.clone()) for k, v in model.state_dict().items())"),
            },
            "wrong": {
                "always strips the prefix": portable(
                    load='model.load_state_dict({k.replace("module.", "", 1): v for k, v in state_dict.items()})'),
                "unwraps anything with a .module": portable(
                    unwrap="while hasattr(model, \"module\"):\n        model = model.module"),
                "does not unwrap the state dict": portable(unwrap="pass"),
                "loads straight into the wrapper": portable(load="model.load_state_dict(state_dict)"),
                "strict=False loads nothing": portable(
                    load='model.load_state_dict(state_dict, strict=False)'),
                "a list of pairs": portable(state="list(model.state_dict().items())"),
                "strips when any key has the prefix": portable(
                    load='if any(k.startswith("module.") for k in state_dict):\n'
                         '        state_dict = {k[len("module."):]: v for k, v in state_dict.items()}\n'
                         '    model.load_state_dict(state_dict)'),
            },
        },
        "quiz": {
            "right": {
                "literal": quiz(),
                "q1 worked out": 'quiz = {"q1": len(range(10)[9:]), "q2": "b", "q3": "b", "q4": "a", "q5": "b"}\n',
                "dict() with keywords": 'quiz = dict(q5="b", q4="a", q3="b", q2="b", q1=10 - 3 * 3)\n',
                "filled in one by one": 'quiz = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None}\n'
                                        'quiz["q1"] = 1\nquiz.update(q2="b", q3="b", q4="a", q5="b")\n',
            },
            "wrong": {
                "tensor_split's rows for q1": quiz(q1=2),
                "last devices get nothing, q1 = 0": quiz(q1=0),
                "q1 as a string": quiz(q1="1"),
                "all-reduce for q2": quiz(q2="a"),
                "q3 loads the prefixed keys": quiz(q3="a"),
                "q4 two GPUs only": quiz(q4="b"),
                "DataParallel across machines": quiz(q5="a"),
                "upper-case letters": quiz(q2="B"),
                "unanswered": 'quiz = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None}\n',
            },
        },
    },
}
