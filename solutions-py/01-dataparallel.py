# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 1 — Multi-GPU training with `nn.DataParallel`
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/01-dataparallel/01-dataparallel.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/01-dataparallel/01-dataparallel.ipynb)
#
# This is the first of five lessons on training one model on many devices:
#
# 1. **DataParallel** — one process drives several GPUs (this lesson)
# 2. DistributedDataParallel — one process per device
# 3. Mixed precision (AMP)
# 4. Hugging Face Accelerate and TPUs
# 5. Sharding: ZeRO and FSDP2 — when the model does not fit on one device
#
# Every cell runs for real on the machine you have. With two or more CUDA GPUs the lesson uses
# the real `torch.nn.DataParallel`. Without them it uses a **faithful CPU emulation** from the
# course's `helpers` package: torch's own `DataParallel.forward` runs on *virtual devices*, and
# only the GPU-to-GPU copies are replaced. Results that come from the emulation say so.
#
# Exercises are graded automatically. Write your code where it says `YOUR CODE HERE`, then run
# the test cell below it: it shows at once whether your answer is on track.

# %% [markdown]
# ## Setup
# In a checkout of the course (`make lab`) the `helpers` package is already installed. On Colab or
# Kaggle this cell installs it from the course repository and leaves the runtime's own `torch` alone.

# %% tags=["prelude"]
import importlib.util
import os
import subprocess
import sys

COURSE_REPO = "https://github.com/multi-device-course/pytorch-multi-device-course"
# This lesson needs the course's `helpers` package. On Colab or Kaggle pip installs it from
# COURSE_REPO and leaves the runtime's own torch and torch_xla alone; in a course checkout (`make lab`)
# it is already there.
NEEDS = ["helpers"]
# Native Windows cannot run the course's multi-process cells (their ranks' pipes, torchrun's rendezvous): the course
# needs WSL2 there. Said before anything else runs.
if os.name == "nt" or sys.platform == "win32":
    raise RuntimeError(
        "This is native Windows: the course needs WSL2 (Linux on Windows), because its multi-process cells cannot "
        "run here. Install it in PowerShell run as administrator with `wsl --install`, restart the computer, open "
        f"Ubuntu and set the course up there as on Linux ({COURSE_REPO}: `make lab`); or open this lesson on Colab "
        "or Kaggle (the badges above).")
# A helpers.py or helpers/ folder of your own next to this notebook would hide the course's package.
spec = importlib.util.find_spec("helpers")
folders = list(spec.submodule_search_locations or []) if spec else []
if spec and not any(os.path.isfile(os.path.join(folder, "hardware.py")) for folder in folders):
    raise ImportError(f"{folders[0] if folders else spec.origin} hides the course's `helpers` package: rename it "
                      "(e.g. to my_helpers), restart the kernel and run this cell again.")
if any(importlib.util.find_spec(module) is None for module in NEEDS):
    package = f"multi-device-course-helpers @ git+{COURSE_REPO}"
    command = [sys.executable, "-m", "pip", "install", "-q", package]
    pip = subprocess.run(command, capture_output=True, text=True)
    if pip.returncode:
        print(" ".join(command), "failed:\n", (pip.stdout + pip.stderr)[-3000:])
        raise RuntimeError(
            f"could not install {package}. Check that this runtime can reach the internet (Kaggle: "
            "Settings > Internet > On) and GitHub, then run this cell again; or install it yourself with "
            f"`!pip install \"{package}\"`.")

from helpers import hardware, language, versions

language.use("en")  # the helpers speak this notebook's language: each edition's catalog translates "en"
versions.check()  # says so when this runtime's torch is outside the versions the course is tested with
hw = hardware.print_summary()

# %% tags=["prelude"]
import os
import threading

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from helpers import grading, checkpoints, compare, data, memory, models, plotting
from helpers import dataparallel as dp
from helpers.training import primary_device, train

torch.set_num_threads(max(1, min(4, hw.cpu_cores)))

# %% [markdown]
# ## 1. Why more than one GPU?
#
# Training needs memory for the weights, for their gradients, for the optimizer's state and for
# the activations that backward needs — and it needs arithmetic for every sample. Both grow with
# the model and with the batch. A rough count for a model with 7 billion parameters trained in
# fp32 with Adam (4 bytes of weights, 4 of gradients, 8 of Adam state per parameter):

# %%
params = 7e9
bytes_per_param = 4 + 4 + 8  # weights + gradients + Adam's two moments, all fp32
print(f"{params * bytes_per_param / 1e9:.0f} GB before a single activation is stored")
print("one H100 SXM has 80 GB of memory (NVIDIA H100 datasheet)")
assert params * bytes_per_param / 1e9 > 80, "the text says it does not fit on one GPU"

# %% [markdown]
# Such a model does not fit on one GPU at all; smaller models fit but train slowly on one.
# More GPUs let you train larger models, or push larger batches through in less wall-clock time.
# PyTorch has several ways to use them. The simplest is `nn.DataParallel`.

# %% [markdown]
# ## 2. Data parallelism
#
# *Data parallelism* keeps one full copy (a **replica**) of the model on every device and splits
# every batch between them. Each device runs forward and backward on its own part of the batch;
# then the gradients are combined, so that every replica takes the same update and stays in sync.
# The model itself is never cut into pieces — that would be *model* parallelism.

# %% [markdown]
# ## 3. `nn.DataParallel` in one line
#
# On a machine with two GPUs you would write:
#
# ```python
# model = MyModel().cuda()
# model = nn.DataParallel(model, device_ids=[0, 1])
# ```
#
# PyTorch then scatters every input batch over the GPUs and gathers the outputs back on GPU 0.
# Without CUDA, `nn.DataParallel` quietly does nothing at all — look:

# %%
plain_dp = nn.DataParallel(models.MLP())
print("device_ids on this machine:", plain_dp.device_ids)
if not torch.cuda.is_available():
    assert plain_dp.device_ids == [], "without CUDA, nn.DataParallel has no devices"

# %% [markdown]
# An empty `device_ids` means forward is a plain call: no split, no replicas. That is why this
# course uses `helpers.dataparallel.make_data_parallel`: the same one line gives the real
# `nn.DataParallel` when there are two or more GPUs, and the emulation otherwise. Both *are*
# `nn.DataParallel` objects and record what each step did.

# %%
model = models.seeded(models.MLP, in_features=32, hidden=64, out_features=4)
dp_model = dp.make_data_parallel(model, device_ids=[0, 1])
print(dp_model.label)
print("an nn.DataParallel:", isinstance(dp_model, nn.DataParallel))

# %% [markdown]
# ## 4. Automatic batch splitting
#
# In forward, DataParallel splits the batch along **dimension 0**. A batch of 64 on two devices
# becomes two sub-batches of 32: device 0 gets samples 0..31, device 1 gets samples 32..63.

# %% tags=["demonstration"]
x = torch.randn(64, 32).to(primary_device(dp_model))
out = dp_model(x)
print("rows per device:", dp_model.steps[-1].chunk_sizes, "-> output", tuple(out.shape))
assert dp_model.steps[-1].chunk_sizes == [32, 32] and tuple(out.shape) == (64, 4), "a batch of 64 over 2 devices: 32 rows each, and the outputs gathered back to 64 x 4"
plotting.plot_split(64, 2);

# %% [markdown]
# What if the batch does not divide evenly? torch splits with `tensor.chunk(n_devices)`:
# every piece gets `ceil(N / k)` rows and the last piece gets what is left. That is **not**
# "as even as possible": 10 rows over 3 devices gives `[4, 4, 2]`, not `[4, 3, 3]`. And when
# `ceil(N / k)` rows already use up the batch early, the last devices get *nothing* and no
# replica is even created for them.

# %% tags=["demonstration"]
for n, k in [(64, 2), (10, 3), (7, 4), (6, 4), (2, 4)]:
    by_torch = [len(c) for c in torch.arange(n).chunk(k)]
    print(f"N={n:>2}, k={k}: DataParallel {dp.split_sizes(n, k)}   torch.chunk {by_torch}   "
          f"tensor_split {[len(c) for c in torch.arange(n).tensor_split(k)]}")

assert dp.split_sizes(10, 3) == [4, 4, 2] and [len(c) for c in torch.arange(10).tensor_split(3)] == [4, 3, 3], "torch.chunk's rule (4, 4, 2) is not tensor_split's (4, 3, 3)"
assert dp.split_sizes(6, 4) == [2, 2, 2], "6 over 4: the last device gets nothing"

fig, axes = plt.subplots(1, 2, figsize=(12, 2.4))
plotting.plot_split(10, 3, ax=axes[0])
plotting.plot_split(6, 4, ax=axes[1]);

# %% [markdown]
# The wrapper agrees: a batch of 6 over 4 devices runs only 3 replicas.

# %%
dp4 = dp.make_data_parallel(models.seeded(models.MLP, in_features=32), device_ids=[0, 1, 2, 3])
dp4(torch.randn(6, 32).to(primary_device(dp4)))
print("rows per device:", dp4.steps[-1].chunk_sizes)
assert dp4.steps[-1].chunk_sizes == [2, 2, 2], "only 3 replicas run"


# %% [markdown]
# ### Exercise 1 — split sizes (2 points)
# Write `my_split_sizes(batch_size, n_devices)` that returns the list of rows each device gets,
# exactly as DataParallel splits them (devices that get nothing are left out of the list).
# Return a `list` of `int`s. Work out the rule: `torch.chunk` (`Tensor.chunk`) and the course's
# `dp.split_sizes`/`dp.split_indices` raise an error while the tests call your function.

# %% nbgrader={"grade": false, "grade_id": "split_sizes", "locked": false, "schema_version": 3, "solution": true}
def my_split_sizes(batch_size, n_devices):
    ### BEGIN SOLUTION
    rows = -(-batch_size // n_devices)
    sizes = [rows] * (batch_size // rows)
    if batch_size % rows:
        sizes.append(batch_size % rows)
    return sizes
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "split_sizes_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
with dp.chunk_forbidden():  # torch.chunk, Tensor.chunk and the helpers raise in here
    result = my_split_sizes(64, 2)
    uneven = my_split_sizes(10, 3)
assert type(result) is list and all(type(v) is int for v in result), "return a list of ints"
assert result == [32, 32], f"64 rows over 2 devices should be [32, 32], got {result}"
assert uneven == [4, 4, 2], f"10 rows over 3 devices should be [4, 4, 2] (each piece gets ceil(10/3) = 4 rows, the last what is left), got {uneven}"
print("✓ my_split_sizes passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases = [(10, 3), (7, 4), (6, 4), (2, 4), (1, 1), (1, 12), (64, 2), (13, 13), (97, 8)]  # uneven tails, empty devices
_cases += [(_rng.randint(1, 96), _rng.randint(1, 16)) for _ in range(300)]
_cases += [(_rng.randint(97, 50000), _rng.randint(1, 512)) for _ in range(100)]
# [collect]
with dp.chunk_forbidden():
    _results = [my_split_sizes(n, k) for n, k in _cases]
_got = grading.collect("split_sizes_tests", _results)
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one answer per hidden case"
for (_n, _k), _sizes in zip(_cases, _got):
    assert type(_sizes) is list and all(type(v) is int for v in _sizes), (_n, _k)
    assert _sizes == [len(c) for c in torch.arange(_n).chunk(_k)], (_n, _k)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2 — which samples go where (2 points)
# Write `device_samples(batch_size, n_devices, device)` that returns the list of sample indices
# (positions in the batch, as `int`s) that device number `device` receives. A device that gets
# no rows receives `[]`.

# %% nbgrader={"grade": false, "grade_id": "device_samples", "locked": false, "schema_version": 3, "solution": true}
def device_samples(batch_size, n_devices, device):
    ### BEGIN SOLUTION
    rows = -(-batch_size // n_devices)
    start = min(device * rows, batch_size)
    return list(range(start, min(start + rows, batch_size)))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "device_samples_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert device_samples(64, 2, 1) == list(range(32, 64)), "device 1 of 2 gets samples 32..63 of a batch of 64"
assert device_samples(6, 4, 3) == [], "6 rows over 4 devices: device 3 gets nothing"
print("✓ device_samples passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases = [(10, 3, 2), (6, 4, 3), (7, 4, 3), (2, 4, 1), (1, 1, 0), (64, 2, 1)]  # uneven tails, a device with nothing
for _n, _k in [(_rng.randint(1, 96), _rng.randint(1, 16)) for _ in range(400)] + [(_rng.randint(97, 1000), _rng.randint(1, 64)) for _ in range(40)]:
    _cases.append((_n, _k, _rng.randrange(_k)))
# [collect]
_got = grading.collect("device_samples_tests", [device_samples(*case) for case in _cases])
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one answer per hidden case"
for (_n, _k, _d), _rows in zip(_cases, _got):
    _chunks = torch.arange(_n).chunk(_k)
    assert type(_rows) is list and all(type(v) is int for v in _rows), (_n, _k, _d)
    assert _rows == (_chunks[_d].tolist() if _d < len(_chunks) else []), (_n, _k, _d)
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Gradients are reduced onto device 0
#
# In backward every replica computes the gradients of *its* part of the loss. DataParallel then
# **sums** those gradients onto the primary device (`device_ids[0]`), into the original model's
# `.grad`. Because the loss is computed once, on device 0, over the *gathered* outputs of the whole
# batch, a mean loss already carries the `1 / N`: the sum of the replicas' gradients is exactly the
# gradient of the full batch. Check it against a plain model that sees all 64 samples at once:

# %%
x, y = torch.randn(64, 32), torch.randn(64, 4)
reference = models.seeded(models.MLP, in_features=32, hidden=64, out_features=4)
wrapped = dp.make_data_parallel(models.seeded(models.MLP, in_features=32, hidden=64, out_features=4), device_ids=[0, 1])

F.mse_loss(reference(x), y).backward()
device = primary_device(wrapped)
F.mse_loss(wrapped(x.to(device)), y.to(device)).backward()

worst = max((a.grad - b.grad.cpu()).abs().max().item() for a, b in zip(reference.parameters(), wrapped.module.parameters()))
print(f"largest difference between DataParallel's gradients and the full batch's: {worst:.1e}")
assert worst < 1e-5, "more than rounding: the gradients should be the full batch's"


# %% [markdown]
# The difference is floating-point rounding: the sums are added in another order. Before the next
# forward, DataParallel broadcasts the updated weights to every device again — the replicas are
# rebuilt each step, which is part of its overhead.
#
# ### Exercise 3 — DataParallel's backward by hand (3 points)
# Write `data_parallel_gradients(model, x, y, n_devices)`. Split `x` and `y` the way DataParallel
# splits a batch, run `model` once on each device's piece (as the replicas would; the tests record
# the rows the model runs on, in any order, since DataParallel's replica threads finish in any order),
# and return the list
# of gradients — one tensor per parameter, in `model.parameters()` order — that DataParallel leaves
# on device 0 for the loss `F.mse_loss(model(x), y)`. The result must equal the full-batch gradient.
# Hint: `torch.autograd.grad(loss, list(model.parameters()))`; think about what `mean` divides by.

# %% nbgrader={"grade": false, "grade_id": "dp_gradients", "locked": false, "schema_version": 3, "solution": true}
def data_parallel_gradients(model, x, y, n_devices):
    ### BEGIN SOLUTION
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    for x_part, y_part in zip(x.chunk(n_devices), y.chunk(n_devices)):
        part_loss = F.mse_loss(model(x_part), y_part, reduction="sum") / y.numel()
        for acc, grad in zip(total, torch.autograd.grad(part_loss, params)):
            acc += grad
    return total
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "dp_gradients_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
def _full_batch_gradients(model, x, y):
    return list(torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters())))


class _Recording(nn.Module):
    """An MLP that records every input it runs on, however it is called (model(x) or model.forward(x))."""

    def __init__(self, seed, in_features, out_features):
        super().__init__()
        self.net = models.seeded(models.MLP, seed=seed, in_features=in_features, hidden=10, out_features=out_features)
        self.inputs = []

    def forward(self, x):
        self.inputs.append(x.detach().clone())
        return self.net(x)


def _check_dp_gradients(n, k, seed=0, in_features=8, out_features=2):
    model = _Recording(seed, in_features, out_features)
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, in_features, generator=g), torch.randn(n, out_features, generator=g)
    got = data_parallel_gradients(model, x, y, k)
    seen, model.inputs = model.inputs, []
    assert type(got) is list and all(type(t) is torch.Tensor for t in got), "return a list of tensors"
    assert len(got) == len(list(model.parameters())), "one gradient per parameter"
    problem = dp.pieces_problem(seen, x, k)
    assert problem is None, (f"{n} rows over {k} devices, pieces of {dp.split_sizes(n, k)} rows (in any order): {problem}; "
                             f"it ran {len(seen)} times, on {[len(rows) for rows in seen]} rows")
    for t, ref in zip(got, _full_batch_gradients(model, x, y)):
        assert compare.same_tensor(t, ref, atol=1e-6, rtol=1e-5), (
            f"{n} rows over {k} devices: not equal to the full-batch gradient")


_check_dp_gradients(10, 3)  # uneven: [4, 4, 2]
print("✓ data_parallel_gradients passes this check; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases = [(10, 3), (7, 4), (6, 4), (5, 8), (1, 3)]  # uneven tails, devices with nothing, one row
_cases += [(_rng.randint(1, 64), _rng.randint(1, 8)) for _ in range(5)]
_seeds = [_rng.randrange(2**31) for _ in _cases]


def _inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randn(n, 3, generator=g)
# [collect]
class _PerPiece(_Recording):
    """An MLP whose output depends on the rows it runs on together (as BatchNorm's does in training): the gradients
    DataParallel leaves on device 0 then say which pieces it ran on."""

    def forward(self, x):
        out = super().forward(x)
        return out + out.mean(0, keepdim=True)


_results = []
for _seed, (_n, _k) in zip(_seeds, _cases):
    _model = _PerPiece(_seed, 6, 3)
    _grads = data_parallel_gradients(_model, *_inputs(_n, _seed), _k)
    _results.append({"gradients": _grads if type(_grads) is list else type(_grads).__name__, "inputs": _model.inputs})
_got = grading.collect("dp_gradients_tests", _results)
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one answer per hidden case"
for _seed, (_n, _k), _r in zip(_seeds, _cases, _got):
    _x, _y = _inputs(_n, _seed)
    _net = models.seeded(models.MLP, seed=_seed, in_features=6, hidden=10, out_features=3)
    _gathered = torch.cat([_o + _o.mean(0, keepdim=True) for _o in map(_net, _x.chunk(_k))])  # the replicas' outputs
    _ref = torch.autograd.grad(F.mse_loss(_gathered, _y), list(_net.parameters()))
    assert compare.is_record(_r, {"gradients": (list, str), "inputs": list}), "the collected results are incomplete"
    _grads = _r["gradients"]
    assert type(_grads) is list and len(_grads) == len(_ref) and all(type(t) is torch.Tensor for t in _grads), \
        "on a hidden batch: return a list of tensors, one gradient per parameter"
    for _t, _expected in zip(_grads, _ref):  # the outcome, computed here: it holds only if the model ran on the pieces
        assert compare.same_tensor(_t, _expected, atol=1e-6, rtol=1e-5), (
            "on a hidden batch: not the gradients DataParallel leaves on device 0 (the hidden model's output depends on "
            "the rows it runs on together, as BatchNorm's does in training: run it once on each device's piece)")
    _problem = dp.pieces_problem(_r["inputs"], _x, _k)  # each device's piece exactly once, in any order (threads)
    assert _problem is None, f"on a hidden batch: {_problem}"
### END HIDDEN TESTS

# %% [markdown]
# ## 6. The training loop barely changes
#
# Move each batch to the primary device and call the wrapped model as usual; scattering,
# replicating and gathering happen inside. `helpers.training.train` is exactly this loop:
#
# ```python
# for x, y in loader:
#     x, y = x.to(device), y.to(device)   # device 0
#     optimizer.zero_grad()
#     loss = loss_fn(model(x), y)          # split over the devices inside
#     loss.backward()                      # gradients summed onto device 0
#     optimizer.step()
# ```
#
# Train the same initial model plain and wrapped, on the same batches:

# %% tags=["demonstration"]
dataset = data.regression(n_samples=512, in_features=32, out_features=4)
curves = {}
for name, wrap in [("one device", False), ("DataParallel, 2 devices", True)]:
    net = models.seeded(models.MLP, in_features=32, hidden=64, out_features=4)
    net = dp.make_data_parallel(net, device_ids=[0, 1]) if wrap else net
    loader = DataLoader(dataset, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    curves[name] = train(net, loader, optimizer, F.mse_loss, epochs=3)
gap = max(abs(a - b) for a, b in zip(*curves.values()))
print(f"final losses {[round(c[-1], 5) for c in curves.values()]}, largest gap between the curves {gap:.1e}")
assert gap < 1e-4, "the two curves should coincide up to rounding"
plotting.plot_losses(curves);

# %% [markdown]
# ## 7. The GPU 0 imbalance
#
# Device 0 is not like the others. It holds the input batch the loop moved there, it receives the
# gathered outputs of the whole batch, it computes the loss, it keeps the optimizer's state, and it
# runs the optimizer step. It also receives the gradients: backward sums every replica's gradients
# into a new tensor on device 0 (torch's `ReduceAddCoalesced`) while replica 0's own gradients are
# still alive, so device 0 holds one more copy of the trainable parameters — and only device 0 keeps
# the sum: the parameters' `.grad` tensors are views of it. The other devices only hold a replica, their chunk, its activations
# and the gradients they compute. One more copy is made on *every* device while the gradients are
# reduced: `reduce_add_coalesced` first flattens each device's gradients into one buffer (per chunk of
# at most 10 MiB; a chunk of a single tensor is only viewed), and those flat buffers are what it sums —
# the "flattened gradients" row. It is the same on every device, so it does not widen device 0's lead.
# Here is one training step, device by device, for SGD and for Adam
# (Adam keeps two extra tensors per parameter):

# %% tags=["demonstration"]
net = models.seeded(models.MLP, in_features=256, hidden=512, out_features=64)
batch_x, batch_y = torch.randn(256, 256), torch.randn(256, 64)
reports = {}
for name, make_optimizer in [("SGD", lambda p: torch.optim.SGD(p, lr=0.01)), ("Adam", lambda p: torch.optim.Adam(p))]:
    wrapped = dp.make_data_parallel(models.seeded(models.MLP, in_features=256, hidden=512, out_features=64), device_ids=[0, 1])
    device = primary_device(wrapped)
    reports[name] = memory.measure_step(wrapped, make_optimizer(wrapped.parameters()),
                                        batch_x.to(device), batch_y.to(device), F.mse_loss)
    print(reports[name], f"\ndevice 0 / device 1 = {reports[name].imbalance_ratio:.2f}\n")

assert all(r.imbalance_ratio > 1 for r in reports.values()), "device 0 holds more than device 1"

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
for ax, (name, report) in zip(axes, reports.items()):
    plotting.plot_memory(report, ax=ax, title=name)

# %% [markdown]
# On the emulation each row is counted from the real tensors of the step (the activations by
# hooks inside each replica's thread), and the bars add rows up as if all were alive at once — an
# upper bound on the peak. On real GPUs the bars are `torch.cuda.max_memory_allocated` per device,
# which also counts what the ledger leaves out — above all **cuBLAS's workspace**, allocated on every
# device that runs a matrix multiply: 8 MiB, and 32 MiB on Hopper GPUs such as the H100; for a
# model this small that is a large share of every bar. The ledger follows torch's own steps (the emulation's
# backward runs torch's `reduce_add_coalesced`, with a CPU sum in place of NCCL's reduce), so the
# flattened and the reduced gradients are where a GPU allocates them. Either way, device 0 runs out of memory first,
# and with more devices the gap grows: each new device takes rows off the others, while device 0
# keeps the whole batch, the gathered outputs, the reduced gradients and the optimizer.
#
# The cell below runs 2 and 4 devices. On a machine with 2 or 3 GPUs the 2-device line is real and
# the 4-device line emulated (bytes of different kinds, not to be compared), so each line says which.

# %% tags=["demonstration"]
ratios = {}
for k in (2, 4):
    wrapped = dp.make_data_parallel(models.seeded(models.MLP, in_features=256, hidden=512, out_features=64),
                                    device_ids=list(range(k)))
    device = primary_device(wrapped)
    report = memory.measure_step(wrapped, torch.optim.Adam(wrapped.parameters()), batch_x.to(device), batch_y.to(device), F.mse_loss)
    print(f"{k} devices, {report.source.split(' (')[0]}: total KiB per device {[t // 1024 for t in report.totals()]}, "
          f"ratio {report.imbalance_ratio:.2f}")
    ratios[k] = (report.source.split(" (")[0], report.imbalance_ratio)
assert all(ratio > 1 for _, ratio in ratios.values()), "device 0 runs out of memory first"
if ratios[2][0] == ratios[4][0]:  # bytes of the same kind: with more devices the gap grows
    assert ratios[4][1] > ratios[2][1], ratios


# %% [markdown]
# ### Exercise 4 — predict device 0's extra memory (3 points)
# For the emulated ledger above, predict how many bytes device 0 holds **beyond device 1**
# (`report.primary_extra_bytes`) for one step of an `MLP` trained with `F.mse_loss` on fp32 inputs
# of shape `(batch_size, in_features)` and targets of shape `(batch_size, out_features)`, where
# `batch_size` is a multiple of `n_devices`. `optimizer` is `"sgd"` (no state), `"momentum"` (one
# buffer per parameter) or `"adam"` (two buffers per parameter plus a 4-byte `step` tensor per
# parameter tensor). Every parameter of the `MLP` is trainable. Look at the table rows: which ones
# differ between device 0 and device 1? Return an `int`.

# %% nbgrader={"grade": false, "grade_id": "device0_extra", "locked": false, "schema_version": 3, "solution": true}
def device0_extra_bytes(model, optimizer, batch_size, in_features, out_features, n_devices):
    ### BEGIN SOLUTION
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    n_tensors = len(list(model.parameters()))
    state = {"sgd": 0, "momentum": param_bytes, "adam": 2 * param_bytes + 4 * n_tensors}[optimizer]
    chunk = batch_size // n_devices
    inputs = 4 * (batch_size * in_features + batch_size * out_features) - 4 * chunk * in_features
    gathered_outputs = 4 * batch_size * out_features
    loss = 4
    reduced_gradients = param_bytes  # the sum of the replicas' gradients, built on device 0
    return state + inputs + gathered_outputs + loss + reduced_gradients
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "device0_extra_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
def _measured_extra(optimizer, batch_size, in_features, out_features, n_devices, hidden=32):
    net = models.seeded(models.MLP, in_features=in_features, hidden=hidden, out_features=out_features)
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1), "momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p)}[optimizer]
    wrapped = dp.make_data_parallel(net, device_ids=list(range(n_devices)), emulate=True)
    report = memory.measure_step(wrapped, make(wrapped.parameters()), torch.randn(batch_size, in_features),
                                 torch.randn(batch_size, out_features), F.mse_loss)
    prediction = device0_extra_bytes(models.MLP(in_features, hidden, out_features), optimizer, batch_size,
                                     in_features, out_features, n_devices)
    return prediction, report.primary_extra_bytes

_pred, _measured = _measured_extra("sgd", 64, 32, 4, 2)
assert type(_pred) is int, "return an int"
assert _pred == _measured, f"SGD, batch 64 on 2 devices: predicted {_pred} bytes, the ledger measured {_measured}"
print("✓ device0_extra_bytes passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases = [("adam", 40, 10, 3, 4), ("momentum", 48, 16, 8, 3)]  # Adam's step tensors; an odd number of devices
for _ in range(4):
    _k = _rng.randint(2, 8)
    _cases.append((_rng.choice(["sgd", "momentum", "adam"]), _k * _rng.randint(1, 16), _rng.randint(1, 64), _rng.randint(1, 16), _k))
# [collect]
_got = grading.collect("device0_extra_tests", [device0_extra_bytes(models.MLP(i, 32, o), opt, b, i, o, k)
                                               for opt, b, i, o, k in _cases])
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one answer per hidden case"
for (_opt, _b, _i, _o, _k), _pred in zip(_cases, _got):
    _net = models.seeded(models.MLP, in_features=_i, hidden=32, out_features=_o)
    _wrapped = dp.make_data_parallel(_net, device_ids=list(range(_k)), emulate=True)
    _optimizer = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1), "momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                  "adam": lambda p: torch.optim.Adam(p)}[_opt](_wrapped.parameters())
    _report = memory.measure_step(_wrapped, _optimizer, torch.randn(_b, _i), torch.randn(_b, _o), F.mse_loss)
    assert type(_pred) is int and _pred == _report.primary_extra_bytes, (_opt, _b, _i, _o, _k)
### END HIDDEN TESTS

# %% [markdown]
# ## 8. One process, many threads
#
# DataParallel lives in **one Python process**. For every forward it starts one thread per device;
# each thread runs its replica. Ask the replicas who runs them:

# %%
class WhoRunsMe(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, x):
        self.calls.append((os.getpid(), threading.current_thread().name, x.shape[0]))
        return x

probe = WhoRunsMe()
probe_dp = dp.make_data_parallel(probe, device_ids=[0, 1, 2, 3])
probe_dp(torch.zeros(8, 1).to(probe_dp.primary_device))
print("main process:", os.getpid())
for pid, thread, rows in probe.calls:
    print(f"  pid {pid}, {thread}: {rows} rows")
assert {pid for pid, _, _ in probe.calls} == {os.getpid()} and len({t for _, t, _ in probe.calls}) == 4, "every replica should run in this process, each on a thread of its own"

# %% [markdown]
# All replicas share one interpreter, so Python code in them takes turns on the **GIL** (global
# interpreter lock); only the heavy tensor kernels release it. On top of that every step pays for
# scattering the batch, re-broadcasting the weights and gathering the outputs. Measure where a
# step's time goes, for a small model and for a larger one:

# %% tags=["demonstration"]
import statistics
import time


def sync(device):
    if device.type == "cuda":
        for d in range(torch.cuda.device_count()):
            torch.cuda.synchronize(d)


def step_timings(model_kwargs, batch, steps=6):
    """Median seconds of each phase of a 2-device DataParallel step, and of the same step on one device."""
    net = dp.make_data_parallel(models.seeded(models.MLP, **model_kwargs), device_ids=[0, 1])
    device = primary_device(net)
    plain = models.seeded(models.MLP, **model_kwargs).to(device)
    x, y = torch.randn(batch, model_kwargs["in_features"]).to(device), torch.randn(batch, model_kwargs["out_features"]).to(device)
    plain_seconds = []
    for _ in range(steps + 1):  # the first step warms up
        net.zero_grad()
        F.mse_loss(net(x), y).backward()
        sync(device)
        start = time.perf_counter()
        plain.zero_grad()
        F.mse_loss(plain(x), y).backward()
        sync(device)
        plain_seconds.append(time.perf_counter() - start)
    phases = {p: statistics.median(s.phase_seconds()[p] for s in net.steps[-steps:]) for p in dp.PHASES}
    return phases, statistics.median(plain_seconds[1:])


timings, slowdown = {}, {}
threads = torch.get_num_threads()
torch.set_num_threads(1)  # one CPU thread per (virtual) device: OpenMP's spin-waiting workers would time the CPU's crowding
try:
    for name, kwargs, batch in [("small MLP (32-64-4)", dict(in_features=32, hidden=64, out_features=4, depth=2), 64),
                                ("larger MLP (512-1024-512)", dict(in_features=512, hidden=1024, out_features=512, depth=3), 512)]:
        timings[name], plain_seconds = step_timings(kwargs, batch)
        slowdown[name] = sum(timings[name].values()) / plain_seconds
        print(f"{name}: DataParallel step {sum(timings[name].values()) * 1e3:.2f} ms, the same step on one device "
              f"{plain_seconds * 1e3:.2f} ms ({slowdown[name]:.1f}x); forward (threads and replicas) "
              f"{timings[name]['forward'] / sum(timings[name].values()):.0%}, backward "
              f"{timings[name]['backward'] / sum(timings[name].values()):.0%} of the step")
finally:
    torch.set_num_threads(threads)
small, larger = slowdown.values()
assert small > 2, "the small model's DataParallel step should cost several plain steps"
if dp_model.emulated:
    assert larger < small, "the larger model's arithmetic should hide more of the overhead"
    big = timings["larger MLP (512-1024-512)"]
    assert big["backward"] > sum(big.values()) / 2, "the larger model's step should be mostly backward's arithmetic"
plotting.plot_phases(timings)
plt.title("emulated on CPU (medians of 6 steps)" if dp_model.emulated else "measured on CUDA (medians of 6 steps)", fontsize=9);

# %% [markdown]
# For the small model the arithmetic is a sliver of the step: starting a thread per replica,
# splitting the batch, re-broadcasting the weights and gathering the outputs cost several times a
# plain one-device step, so extra devices buy nothing. For the larger model the arithmetic
# (backward above all) takes most of the step and the same overhead is a much smaller part of it.
# On real GPUs the copies travel over PCIe or NVLink and the threads contend for the GIL, which is
# why DataParallel scales poorly beyond two to four GPUs. (On the CPU emulation the copies are
# memory copies and the virtual devices share the machine's cores — each replica thread computes
# with its share of the CPU threads, and the cell times one thread per device because OpenMP's idle
# workers spin-wait and, on a crowded CPU, would time the crowding — so read where the time goes,
# not a speed-up.)

# %% [markdown]
# ## 9. Why DistributedDataParallel is preferred
#
# `DistributedDataParallel` (DDP, lesson 2) runs **one process per GPU**. Each process keeps its
# own replica for the whole run (no re-broadcast every step), loads its own data, and after
# backward the processes average their gradients with an efficient **all-reduce** — every GPU
# sends and receives the same amount, so there is no GPU 0 bottleneck and no shared GIL. Scaling
# is close to linear, and it works across machines.
#
# ## 10. When DataParallel is still fine
#
# For a quick experiment on one machine with two GPUs, its one-line simplicity can outweigh its
# inefficiency. For many GPUs, several machines, or anything you will run for long, use DDP.
# (PyTorch's own documentation recommends DDP over DataParallel even on a single machine.)

# %% [markdown]
# ## 11. A common pitfall: saving the wrapped model
#
# The wrapper stores your model as `wrapper.module`, so every key of its `state_dict()` gains a
# `module.` prefix. Save that, and it will not load into a plain model:

# %%
wrapped = dp.make_data_parallel(models.seeded(models.MLP, in_features=32), device_ids=[0, 1])
print(list(wrapped.state_dict())[:2], "vs", list(models.MLP(in_features=32).state_dict())[:2])
torch.save(wrapped.state_dict(), "wrapped.pt")
try:
    models.MLP(in_features=32).load_state_dict(torch.load("wrapped.pt"))
except RuntimeError as error:
    print(str(error)[:400])
else:
    raise AssertionError("the prefixed checkpoint was expected not to load")

# %% [markdown]
# The fix: save the inner model, `torch.save(model.module.state_dict(), "model.pt")`. A clean
# checkpoint loads into a plain model, and into a wrapped one through `.module`.
# `helpers.checkpoints` does this for any wrapper, and strips the prefix from old checkpoints:

# %%
checkpoints.save(wrapped, "model.pt")
plain = models.MLP(in_features=32)
plain.load_state_dict(torch.load("model.pt"))
checkpoints.load_clean(plain, torch.load("wrapped.pt"))  # an old, prefixed checkpoint
print("clean keys:", list(torch.load("model.pt"))[:2])
os.remove("wrapped.pt"), os.remove("model.pt");


# %% [markdown]
# ### Exercise 5 — checkpoints that load anywhere (3 points)
# Write two functions:
# * `portable_state_dict(model)` returns the state dict **without** the `module.` prefix, whether
#   `model` is a plain model or wrapped in `nn.DataParallel` (the emulation is one too);
# * `load_portable(model, state_dict)` loads a state dict that may or may not carry the prefix
#   into a plain or a wrapped model.
#
# Strip the prefix only when the keys do not already fit the model: a model may have a layer
# that is itself named `module`.

# %% nbgrader={"grade": false, "grade_id": "portable_checkpoint", "locked": false, "schema_version": 3, "solution": true}
def portable_state_dict(model):
    ### BEGIN SOLUTION
    while isinstance(model, nn.DataParallel):
        model = model.module
    return model.state_dict()
    ### END SOLUTION


def load_portable(model, state_dict):
    ### BEGIN SOLUTION
    while isinstance(model, nn.DataParallel):
        model = model.module
    if set(state_dict) != set(model.state_dict()):
        state_dict = {key.removeprefix("module."): value for key, value in state_dict.items()}
    model.load_state_dict(state_dict)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "portable_checkpoint_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
def _same_weights(a, b):
    return compare.same_state(portable_state_dict(a), portable_state_dict(b), atol=0, rtol=0)

_plain = models.seeded(models.MLP, seed=1, in_features=8)
_wrapped = dp.make_data_parallel(models.seeded(models.MLP, seed=2, in_features=8), device_ids=[0, 1], emulate=True)
assert list(portable_state_dict(_wrapped)) == list(_plain.state_dict()), "keys must not carry the module. prefix"
_target = models.seeded(models.MLP, seed=3, in_features=8)
load_portable(_target, _wrapped.state_dict())
assert _same_weights(_target, _wrapped), "a prefixed checkpoint must load into a plain model"
print("✓ portable_state_dict and load_portable pass these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
class _HasModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.module = nn.Linear(3, 2)


def _weights(model):  # what a model holds, without any wrapper's prefix
    while isinstance(model, nn.DataParallel):
        model = model.module
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


_rng = grading.hidden_random()  # a new model for every submission graded (helpers.grading)
_features = _rng.randint(2, 32)
_source = models.seeded(models.MLP, seed=_rng.randrange(2**31), in_features=_features)
_odd = models.seeded(_HasModule, seed=_rng.randrange(2**31))
# [collect]
_results = {"loaded": [], "portable": portable_state_dict(nn.DataParallel(_source)), "odd": portable_state_dict(_odd)}
for _make in [lambda: models.MLP(in_features=_features), lambda: nn.DataParallel(models.MLP(in_features=_features)),
              lambda: dp.make_data_parallel(models.MLP(in_features=_features), device_ids=[0, 1], emulate=True)]:
    for _sd in [_source.state_dict(), nn.DataParallel(_source).state_dict(), portable_state_dict(nn.DataParallel(_source))]:
        _target = _make()
        load_portable(_target, _sd)
        _results["loaded"].append(_weights(_target))
for _wrap in (lambda m: m, nn.DataParallel):
    _target = _HasModule()
    load_portable(_wrap(_target), _wrap(_odd).state_dict())
    _results["loaded"].append(_weights(_target))
_got = grading.collect("portable_checkpoint_tests", _results)
# [judge]
def _same(a, b):  # bit for bit: loading copies the weights
    return compare.same_state(a, b, atol=0, rtol=0)


_expected = _source.state_dict()
assert compare.is_record(_got, {"loaded": list, "portable": None, "odd": None}), "the collected results are incomplete"
assert type(_got["portable"]) in compare.DICTS and type(_got["odd"]) in compare.DICTS, "portable_state_dict must return a state dict"
assert list(_got["portable"]) == list(_expected), "keys must not carry the module. prefix"
assert _same(_got["portable"], _expected), "the portable state dict should hold the model's own tensors"
assert list(_got["odd"]) == ["module.weight", "module.bias"] and _same(_got["odd"], _odd.state_dict()), "a model's own attribute called module is not a wrapper"
assert len(_got["loaded"]) == 11, "the checkpoint should load into each of the hidden models"
assert all(_same(w, _expected) for w in _got["loaded"][:9]), "a checkpoint, prefixed or not, must load into a plain or wrapped model"
assert all(_same(w, _odd.state_dict()) for w in _got["loaded"][9:]), "a model whose own attribute is called module"
### END HIDDEN TESTS

# %% [markdown]
# ## 12. Quick check
#
# Answer in the dictionary below.
#
# * **q1** — With `device_ids=[0, 1, 2, 3]`, how many rows of a batch of 10 does GPU 3 get? (an `int`)
# * **q2** — Where does DataParallel combine the replicas' gradients?
#   (a) an all-reduce between all GPUs &nbsp; (b) summed onto `device_ids[0]` &nbsp; (c) averaged on the CPU
# * **q3** — Which line loads `torch.save(dp_model.state_dict(), "ckpt.pt")` into a plain model?
#   (a) `plain.load_state_dict(torch.load("ckpt.pt"))` &nbsp;
#   (b) `plain.load_state_dict({k.removeprefix("module."): v for k, v in torch.load("ckpt.pt").items()})` &nbsp;
#   (c) `plain.module.load_state_dict(torch.load("ckpt.pt"))`
# * **q4** — Why does DataParallel scale worse than DDP beyond a few GPUs?
#   (a) one process drives every GPU through threads that share the GIL, and device 0 scatters,
#   gathers and steps for all &nbsp; (b) it cannot use more than two GPUs &nbsp; (c) it does not combine gradients
# * **q5** — You will train on 8 GPUs spread over 2 machines. Use (a) `nn.DataParallel` (b) DDP?
#
# Each answer is a lowercase letter, except q1.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true}
quiz = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None}
### BEGIN SOLUTION
quiz = {"q1": 1, "q2": "b", "q3": "b", "q4": "a", "q5": "b"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "quiz_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert type(quiz) is dict and set(quiz) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five questions"
assert type(quiz["q1"]) is int, "q1 is a number of rows"
assert all(type(quiz[q]) is str and quiz[q] in "abc" and len(quiz[q]) == 1 for q in ("q2", "q3", "q4", "q5")), "answer with a letter"
print("✓ quiz is answered in the right form; the hidden tests check the answers when your notebook is graded")
### BEGIN HIDDEN TESTS
# [collect]
_got = grading.collect("quiz_tests", quiz)
# [judge]
assert type(_got) is dict and set(_got) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five questions"
assert _got.get("q1") == len(torch.arange(10).chunk(4)[3]) and type(_got["q1"]) is int, "q1 is wrong: how many rows does torch.chunk give the last device?"
assert [_got.get(q) for q in ("q2", "q3", "q4", "q5")] == ["b", "b", "a", "b"], "one of q2 ... q5 is wrong"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
#
# * `nn.DataParallel(model, device_ids=[0, 1])` replicates the model and splits every batch along
#   dimension 0 with `chunk`: `ceil(N / k)` rows per device, so trailing devices may get fewer or none.
# * Backward sums the replicas' gradients onto device 0; with the loss computed over the gathered
#   batch that equals the full-batch gradient.
# * The training loop does not change — but device 0 holds the batch, the gathered outputs, the loss,
#   the reduced gradients (beside its own replica's) and the optimizer state, so it fills up first;
#   while they are reduced, every device also holds a flat copy of its gradients.
# * One process drives every device with threads: the GIL and the per-step scatter/replicate/gather
#   limit scaling beyond two to four GPUs. Prefer DDP for many GPUs or several machines.
# * Save `model.module.state_dict()` (or strip the `module.` prefix) so checkpoints load anywhere.
#
# Next: lesson 2, DistributedDataParallel.
