# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 5 — When the model does not fit: ZeRO and FSDP2
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/05-sharding/05-sharding.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/05-sharding/05-sharding.ipynb)
#
# DataParallel, DDP, mixed precision and Accelerate all keep a **full copy** of the model, its gradients and its
# optimizer state on every device. However many devices you add, the largest model you can train is bounded by what
# one device holds. This lesson removes that bound by **sharding**: each of `N` ranks keeps `1/N` of the optimizer
# state (ZeRO-1), of the gradients (ZeRO-2), of the parameters themselves (ZeRO-3, which PyTorch calls FSDP) — and
# the ranks hand each other the pieces just when they are needed.
#
# Everything runs for real: without GPUs the ranks are CPU processes talking over **gloo**; with one GPU per rank they
# use **nccl** — the same cells either way. The model is small, so that a laptop runs it in seconds; what is measured
# per rank is exactly what scales to billions of parameters.

# %% [markdown]
# ## Setup

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
import tempfile
import time
from collections import OrderedDict

from helpers import launch

# the server the ranks fork from starts importing torch now, in the background, while the rest imports
launch.warm_up()

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from helpers import checkpoints, grading, compare, memory, plotting, sharding, xla

WORLD = 2  # processes in the examples
LESSON_START = time.perf_counter()
print(launch.plan(WORLD))
problem = versions.lesson_5_problem(torch.__version__, launch.plan(WORLD).backend, WORLD)  # FSDP2 on gloo: torch 2.9+
if problem:
    raise RuntimeError(problem)

# %% [markdown]
# ## 1. Where a replica's memory goes
#
# Training with Adam, every parameter costs a rank four things: the **parameter** itself, its **gradient**, and Adam's
# **two states** (a running mean of the gradients, `exp_avg`, and of their squares, `exp_avg_sq`), in fp32 each:
# 4 + 4 + 8 = **16 bytes per parameter**. On top of that come the **activations** the forward pass saves for backward,
# which depend on the batch, not on the parameters.
#
# The ZeRO paper (Rajbhandari et al., 2020, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*,
# SC20) counts the same for mixed-precision Adam: fp16 parameters (2 bytes) and gradients (2), and 12 bytes of
# optimizer state (an fp32 master copy of the parameters, momentum and variance): also **16 bytes per parameter**.
# Sharding them over `N` ranks gives its three stages:
#
# | stage | sharded | bytes per parameter per rank (mixed-precision Adam) |
# |---|---|---|
# | 0 (DDP) | nothing | 2 + 2 + 12 = 16 |
# | 1 | optimizer state | 2 + 2 + 12/N |
# | 2 | + gradients | 2 + (2 + 12)/N |
# | 3 (FSDP) | + parameters | (2 + 2 + 12)/N |
#
# The paper's example (its Figure 1): a 7.5-billion-parameter model on 64 GPUs needs 120 GB per GPU under DDP, and
# 31.4, 16.6 and 1.9 GB under stages 1, 2 and 3. You will compute these numbers in exercise 1.
#
# Below, two ranks each take one Adam step on the lesson's model (an MLP of 1,533 parameters) three ways — DDP, DDP
# with torch's `ZeroRedundancyOptimizer` (stage 1) and FSDP2 (stage 3) — and count the bytes of the tensors each rank
# then holds, as lesson 1's ledger did. Next to them, the formula for fp32 Adam (4 + 4 + 8 bytes):

# %%
cfg = sharding.ShardConfig()
n = sum(p.numel() for p in cfg.model().parameters())
reference = sharding.reference_adam(cfg, WORLD)  # one process, plain Adam: what every sharded run below must equal

# %% tags=["demonstration"]
ranks = launch.launch(sharding.memory_worker, WORLD, args=(cfg,))
print(f"{n} parameters, {WORLD} ranks; bytes per rank (fp32 Adam)")
print(f"{'':8}{'rank':>5}{'parameters':>12}{'gradients':>11}{'Adam state':>12}{'total':>8}{'formula':>9}")
for mode, stage in (("ddp", 0), ("zero1", 1), ("fsdp", 3)):
    formula = sharding.zero_bytes(n, WORLD, stage, param_bytes=4, grad_bytes=4, state_bytes=8)
    for r in ranks:
        b = r[mode]
        total = b["parameters"] + b["gradients"] + b["optimizer state"]
        print(f"{mode:8}{r['rank']:>5}{b['parameters']:>12}{b['gradients']:>11}{b['optimizer state']:>12}{total:>8}{formula:>9.0f}")
print(f"activations saved for backward: {ranks[0]['activations']} bytes per rank (its own batch of {cfg.batch_size})")
fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), sharey=True)
for ax, (mode, name) in zip(axes, (("ddp", "DDP"), ("zero1", "ZeRO-1"), ("fsdp", "FSDP2 (ZeRO-3)"))):
    plotting.plot_memory(memory.MemoryReport([r[mode] for r in ranks], "ledger"), ax=ax, title=name)
for ax in axes[1:]:
    ax.get_legend().remove()  # one legend for the three
totals = {mode: [sum(r[mode].values()) for r in ranks] for mode in ("ddp", "zero1", "fsdp")}
assert all(t == totals["ddp"][0] for t in totals["ddp"]), "under DDP every rank holds the same bytes"
assert sum(totals["fsdp"]) < 1.02 * totals["ddp"][0], "FSDP's ranks together hold about one replica"


# %% [markdown]
# What the ledger says:
#
# * **DDP**: every rank holds everything, 16 bytes per parameter (plus 4 bytes per tensor for Adam's `step` counters).
# * **ZeroRedundancyOptimizer** (stage 1): the parameters and gradients are still whole on every rank, but each rank
#   keeps Adam's state for only some parameters. torch's version gives each rank **whole parameters** (the largest
#   first, each to the rank with the fewest elements so far), so the split is uneven for a model with a few large tensors:
#   one rank got the 30×30 weight, the other the rest. ZeRO as the paper describes it cuts a **flat vector** of all
#   parameters into `N` equal pieces instead: you write that one in exercise 2.
# * **FSDP2** (stage 3): each rank holds about half of everything. Not exactly half: each tensor is cut along its first
#   dimension, and the uneven pieces make the two ranks' bytes differ a little. Section 3 shows the rule.
#
# The activations are not sharded by any stage: each rank saves its own batch's. With big models they are tamed by
# other means (activation checkpointing: recomputing them in backward instead of saving them), not by ZeRO.
#
# ### Exercise 1 — bytes per rank for each ZeRO stage (2 points)
# Write `zero_bytes_per_rank(n_parameters, world_size, stage)`: the bytes of parameters, gradients and optimizer
# state one rank holds under ZeRO stage `stage` (0, 1, 2 or 3) for mixed-precision Adam as in the table above (2, 2 and
# 12 bytes per parameter), as a `float`. A `stage` that is not 0, 1, 2 or 3 raises a `ValueError`. The hidden tests
# compare it with the formula on many sizes, and with the bytes the ranks of a run like the one above really held when
# the grader measured them (stages 0 and 3, where fp32 and mixed-precision Adam both hold 16 bytes per parameter).

# %% nbgrader={"grade": false, "grade_id": "zero_bytes", "locked": false, "schema_version": 3, "solution": true}
def zero_bytes_per_rank(n_parameters, world_size, stage):
    ### BEGIN SOLUTION
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
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "zero_bytes_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_paper = [zero_bytes_per_rank(7_500_000_000, 64, _stage) / 1e9 for _stage in range(4)]
assert all(type(_b) is float for _b in _paper), "return a float"
assert [round(_b, 1) for _b in _paper] == [120.0, 31.4, 16.6, 1.9], f"the paper's 7.5B model on 64 GPUs: 120, 31.4, 16.6, 1.9 GB, got {_paper}"
assert grading.outcome(zero_bytes_per_rank, 1000, 4, 4)[0] == "raised", "stage 4 does not exist: raise a ValueError"
print("✓ zero_bytes_per_rank passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_draw = grading.hidden_random()
_cases = [(7_500_000_000, 64, _s) for _s in range(4)] + [(_draw.randint(1, 10**12), _draw.randint(1, 4096), _draw.randint(0, 3)) for _ in range(40)]
_cases += [(1, 1, 0), (1, 1, 3), (3, 7, 2), (10**9, 1, 1)]
_bad = [(1000, 4, 4), (1000, 4, -1), (1000, 4, 1.0), (1000, 4, "1")]
# a run the judge measures (helpers.sharding.memory_worker): DDP is stage 0, FSDP2 stage 3, and in both stages fp32
# Adam (4 + 4 + 8 bytes per parameter) holds what mixed-precision Adam (2 + 2 + 12) does
_MEASURED_WORLD, _measured = 3, sharding.ShardConfig(in_features=64, hidden=127, out_features=5, depth=3)
_measured_n = sum(_p.numel() for _p in _measured.model().parameters())
_cases += [(_measured_n, _MEASURED_WORLD, 0), (_measured_n, _MEASURED_WORLD, 3)]
# [collect]
_got = grading.collect("zero_bytes_tests", {"values": [grading.outcome(zero_bytes_per_rank, *_c) for _c in _cases],
                                            "bad": [grading.outcome(zero_bytes_per_rank, *_c)[0] for _c in _bad]})
# [judge]
assert compare.is_record(_got, {"values": list, "bad": list}) and len(_got["values"]) == len(_cases) and len(_got["bad"]) == len(_bad), "one result per case"
_held = grading.reference(f"05-sharding memory_worker {_measured!r} {_MEASURED_WORLD}", lambda: [
    {_mode: sum(_r[_mode].values()) for _mode in ("ddp", "fsdp")}
    for _r in launch.launch(sharding.memory_worker, _MEASURED_WORLD, args=(_measured,))])
for _mode, _stage in (("ddp", 0), ("fsdp", 3)):
    _mean = sum(_r[_mode] for _r in _held) / _MEASURED_WORLD  # Adam's step counters and uneven shards: within 1%
    _outcome = _got["values"][_cases.index((_measured_n, _MEASURED_WORLD, _stage))]
    assert type(_outcome) is tuple and len(_outcome) == 2 and _outcome[0] == "returned" and type(_outcome[1]) is float \
        and abs(_outcome[1] - _mean) <= 0.01 * _mean, \
        f"zero_bytes_per_rank({_measured_n}, {_MEASURED_WORLD}, {_stage}) is not what {_MEASURED_WORLD} ranks held under stage {_stage} when the grader measured them: {_mean:.0f} bytes each"
for (_n, _w, _s), _outcome in zip(_cases, _got["values"]):
    assert type(_outcome) is tuple and len(_outcome) == 2 and _outcome[0] == "returned", f"zero_bytes_per_rank({_n}, {_w}, {_s}) raised {_outcome[-1]}"
    assert type(_outcome[1]) is float, f"zero_bytes_per_rank({_n}, {_w}, {_s}) should return a float"
    assert compare.same_values(_outcome[1], sharding.zero_bytes(_n, _w, _s), rtol=1e-9), f"zero_bytes_per_rank({_n}, {_w}, {_s}) is not what stage {_s} holds per rank"
assert compare.same_values(_got["bad"], ["raised"] * len(_bad)), "a stage other than the ints 0, 1, 2 and 3 should raise"
### END HIDDEN TESTS

# %% [markdown]
# With the formula right, the paper's whole figure is one loop; and the same for the model above, in fp32
# (4 + 4 + 8 bytes), next to what the ledger counted:

# %% tags=["demonstration"]
for stage in range(4):
    print(f"stage {stage}: 7.5B parameters on 64 GPUs: {sharding.zero_bytes(7_500_000_000, 64, stage) / 1e9:6.1f} GB per GPU")
fp32 = dict(param_bytes=4, grad_bytes=4, state_bytes=8)
for mode, stage in (("ddp", 0), ("zero1", 1), ("fsdp", 3)):
    print(f"{mode:6} measured {[sum(r[mode].values()) for r in ranks]} bytes per rank, formula {sharding.zero_bytes(n, WORLD, stage, **fp32):.0f}")

# %% [markdown]
# ## 2. ZeRO-1 by hand, then torch's
#
# Stage 1 changes only the optimizer step. Every rank still runs forward and backward on its own batch with the whole
# model; then:
#
# 1. the gradients are **averaged** over the ranks, as DDP does;
# 2. each rank takes its **own slice** of the flattened, averaged gradient and steps Adam on the matching slice of
#    the flattened parameters — Adam's state exists for that slice only;
# 3. the updated slices are **all-gathered**, so every rank has the whole updated model again.
#
# Adam works element by element, so stepping `N` slices apart gives exactly the update of one Adam over everything.
#
# What it costs in communication: DDP's all-reduce sends `2(N-1)/N` times the gradients' bytes per rank (lesson 2).
# An all-reduce *is* a reduce-scatter followed by an all-gather, each `(N-1)/N`: so ZeRO-1 and 2 can average the
# gradients with a **reduce-scatter** (each rank receives only its slice, summed) and all-gather the updated
# parameters — the same bytes as DDP, for `1/N` of the optimizer state. Stage 3 all-gathers the parameters
# again for backward: 1.5 times DDP's traffic (the paper's section 7):

# %%
model_bytes = 4 * n
for stage in range(4):
    print(f"stage {stage}: {sharding.step_traffic(model_bytes, 8, stage) / model_bytes:.2f} x the model's bytes sent per rank per step, 8 ranks")
assert sharding.step_traffic(model_bytes, 8, 3) == 1.5 * sharding.step_traffic(model_bytes, 8, 0), "stage 3 sends 1.5 x DDP's bytes"


# %% [markdown]
# ### Exercise 2 — a ZeRO-1 step (3 points)
# Write `zero1_step(model, shard, optimizer)`, called by every rank right after its backward. The worker
# `sharding.zero1_worker` has prepared, on each rank:
#
# * `shard`: this rank's slice of the model's parameters flattened in the order of `model.parameters()`
#   (`parameters_to_vector`), padded with zeros to `N` equal slices of `shard.numel()` elements: rank `r` holds
#   elements `r·s … (r+1)·s − 1`;
# * `optimizer`: an `Adam` over `[shard]` alone.
#
# Your step: average the gradients over the ranks and give `shard.grad` this rank's slice of them (a reduce-scatter
# does both at once: `dist.reduce_scatter_tensor`; an all-reduce then a slice also works), step the optimizer, then
# all-gather the slices (`dist.all_gather_into_tensor` or `dist.all_gather`) and copy the first
# `sum(p.numel() for p in model.parameters())` elements back into the parameters (`vector_to_parameters`). The test
# compares the weights **and** each rank's Adam state with one process running plain Adam on the global batches.

# %% nbgrader={"grade": false, "grade_id": "zero1", "locked": false, "schema_version": 3, "solution": true}
def zero1_step(model, shard, optimizer):
    ### BEGIN SOLUTION
    world_size = dist.get_world_size()
    params = list(model.parameters())
    grads = parameters_to_vector([p.grad for p in params])
    size = shard.numel()
    grads = F.pad(grads, (0, size * world_size - grads.numel()))
    mine = torch.empty_like(shard)
    dist.reduce_scatter_tensor(mine, grads)  # summed over the ranks, this rank's slice only
    shard.grad = mine / world_size
    optimizer.step()
    everything = torch.empty(size * world_size, dtype=shard.dtype, device=shard.device)
    dist.all_gather_into_tensor(everything, shard.detach())
    vector_to_parameters(everything[:sum(p.numel() for p in params)], params)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "zero1_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
_cfg = sharding.ShardConfig()
_ranks = launch.launch(sharding.zero1_worker, 2, args=(_cfg, zero1_step), timeout_s=30)
_problem = sharding.zero1_problem(_ranks, 2, sharding.reference_adam(_cfg, 2))
assert _problem is None, _problem
print("✓ zero1_step passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_draw = grading.hidden_random()
_cases = [(3, sharding.ShardConfig(hidden=_draw.randint(5, 40), out_features=_draw.randint(1, 5), steps=2, seed=_draw.randint(0, 999)))]
# [collect]
_runs = [launch.launch(sharding.zero1_worker, _w, args=(_c, zero1_step), timeout_s=30) for _w, _c in _cases]
_got = grading.collect("zero1_tests", _runs)
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one run per case"
for (_w, _c), _ranks in zip(_cases, _got):
    _reference = grading.reference(f"05-sharding reference_adam {_c!r} {_w}", lambda: sharding.reference_adam(_c, _w))
    _problem = sharding.zero1_problem(_ranks, _w, _reference)
    assert _problem is None, f"with {_w} ranks: {_problem}"
### END HIDDEN TESTS

# %% [markdown]
# torch ships stage 1 as `torch.distributed.optim.ZeroRedundancyOptimizer`: it wraps any optimizer class, steps the
# parameters this rank owns and broadcasts them to the others. With DDP it trains exactly like plain Adam:

# %% tags=["demonstration"]
zero_ranks = launch.launch(sharding.torch_zero_worker, WORLD, args=(cfg,))
for r in zero_ranks:
    print(f"rank {r['rank']}: Adam state for {r['owned']} ({r['state elements']} elements); "
          f"weights equal plain Adam's: {sharding.same_state(r['state'], reference['state'])}")
assert all(sharding.same_state(r["state"], reference["state"]) for r in zero_ranks), "ZeroRedundancyOptimizer should train as plain Adam does"

# %% [markdown]
# ## 3. FSDP2: sharding the parameters
#
# Stage 3 shards the parameters too. PyTorch's FSDP2 does it with one function, `fully_shard(module)`, called on each
# **block** of the model (a transformer layer, here a `Linear`) and then on the **root**:
#
# ```python
# for block in blocks:
#     fully_shard(block)
# fully_shard(model)
# ```
#
# Each call turns the module's parameters into **DTensors** sharded on dim 0 (`Shard(0)`) across the ranks, and
# groups them into one unit that is communicated together. Then, at every step:
#
# * **before a block's forward**, its unit is **all-gathered**: each rank receives the others' shards and holds the
#   whole parameters for the duration of the block's forward;
# * **after the forward**, with `reshard_after_forward=True` (the default), the whole parameters are freed again, and
#   all-gathered once more in backward; with `False` they stay until backward: less communication, more memory
#   (ZeRO-2's trade);
# * **after a block's backward**, its gradients are **reduce-scattered**: each rank receives only the sum of its own
#   shard's gradients, and the optimizer steps on the shards;
# * **prefetching**: FSDP2 issues the next block's all-gather while the current block computes (backward prefetching
#   is on by default; `module.set_modules_to_forward_prefetch([...])` adds it explicitly in forward), so that on GPUs
#   the communication can overlap the compute (the design PyTorch's FSDP2 documentation describes; not measured here:
#   on this lesson's CPU processes the collectives and the compute share the same cores).
#
# A unit's whole parameters exist only while it runs: the peak is one replica's shards plus the largest units being
# gathered, not a whole replica. That is why you shard *per block*: `fully_shard(model)` alone would make one unit
# of everything, all-gathered at once.
#
# Here is what each rank sees, with the lesson's model (layers of 30, 30 and 3 rows) on two ranks:

# %% tags=["demonstration"]
tours = launch.launch(sharding.fsdp_tours_worker, WORLD, args=(cfg,))  # in fp32, and in bf16 for section 3's end
tour = [r["fp32"] for r in tours]
for r in tour:
    print(f"rank {r['rank']}: holds {r['local']['0.weight'][:2]}, {r['local']['4.weight'][:2]}, {r['local']['4.bias'][:2]}")
    print(f"        inside the forward: {r['inside forward']}")
    print(f"        after the forward: {r['after forward']}; gradients: {r['grads']['0.weight']}")
print("trained weights equal plain Adam's:", sharding.same_state(tour[0]["full"], reference["state"]))
kept = tours[0]["kept"]["after forward"]
print("with reshard_after_forward=False, after the forward:", kept)
assert tour[1]["local"]["4.weight"][1] == (1, 30), "rank 1 holds 1 of the last layer's 3 rows"
assert tour[0]["inside forward"]["0"][1] == (30, 16), "inside its forward a block's weight is whole"
assert sharding.same_state(tour[0]["full"], reference["state"]), "FSDP2 trains as plain Adam does"
assert set(kept.values()) == {"Parameter"}, "without resharding a block's weights stay whole until backward"


# %% [markdown]
# Each rank holds 15 of the first layers' 30 rows, and of the last layer's 3 rows, rank 0 holds 2 and rank 1 one.
# Inside a block's forward its weight is a plain, whole `Parameter` of 30×16 (all-gathered); after the forward it is a
# `DTensor` shard again (with `reshard_after_forward=False`, the last line, it stays a whole `Parameter` until
# backward: no second all-gather, the memory of a whole replica of that block meanwhile); the gradients arrive as shards
# of the same shape. And the trained weights are those of one
# process running plain Adam.
#
# The rule is lesson 1's: a tensor of `rows` rows is cut like `tensor.chunk(N)` on dim 0 — `ceil(rows / N)` rows per
# rank, the last ranks getting fewer, or **none** (3 rows over 4 ranks: 1, 1, 1, 0). Internally FSDP2 pads each shard
# to `ceil(rows / N)` rows so that every rank sends and receives the same number of bytes; the padding is not part of
# the DTensor's local shape.
#
# ### Exercise 3 — the shard a rank holds (2 points)
# Write `local_shape(shape, world_size, rank)`: the shape (a `tuple` of `int`s) of the local shard rank `rank` holds of
# a parameter of shape `shape` (a tuple) after `fully_shard` on `world_size` ranks. The tests compare your shapes with
# what DTensor itself computes for `Shard(0)`.

# %% nbgrader={"grade": false, "grade_id": "shard_shape", "locked": false, "schema_version": 3, "solution": true}
def local_shape(shape, world_size, rank):
    ### BEGIN SOLUTION
    rows = shape[0]
    per_rank = -(-rows // world_size)  # ceil
    start = min(rows, rank * per_rank)
    mine = min(rows, start + per_rank) - start
    return (mine, *shape[1:])
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "shard_shape_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert local_shape((30, 16), 2, 1) == (15, 16), "30 rows over 2 ranks: 15 each"
assert [local_shape((3, 30), 4, _r) for _r in range(4)] == [(1, 30), (1, 30), (1, 30), (0, 30)], "3 rows over 4 ranks: 1, 1, 1 and none"
assert type(local_shape((7,), 3, 2)) is tuple and local_shape((7,), 3, 2) == (1,), "7 rows over 3 ranks: 3, 3, 1 (a tuple)"
print("✓ local_shape passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_draw = grading.hidden_random()
_cases = [((_rows,), _w, _r) for _rows in range(0, 13) for _w in range(1, 7) for _r in range(_w)]
_cases += [(tuple(_draw.randint(0, 300) for _ in range(_draw.randint(1, 4))), _w, _draw.randrange(_w))
           for _w in [_draw.randint(1, 64) for _ in range(60)]]
# [collect]
_got = grading.collect("shard_shape_tests", [local_shape(*_c) for _c in _cases])
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one shape per case"
for (_shape, _w, _r), _result in zip(_cases, _got):
    assert type(_result) is tuple and all(type(_s) is int for _s in _result), f"local_shape({_shape}, {_w}, {_r}) should be a tuple of ints"
    assert _result == sharding.local_shape(_shape, _w, _r), f"local_shape({_shape}, {_w}, {_r}) is not the shard DTensor gives rank {_r}"
### END HIDDEN TESTS

# %% [markdown]
# ### Mixed precision: bf16 parameters, fp32 reduction
#
# Lesson 3's idea again, now inside FSDP2: `MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)`
# all-gathers the parameters in **bf16** (half the bytes to send and hold) and computes in bf16, while the sharded
# parameters the optimizer steps stay **fp32** and the gradients are reduced in **fp32** (summing many small bf16
# numbers loses digits). Pass it as `fully_shard(module, mp_policy=...)`:

# %% tags=["demonstration"]
mixed = [r["bf16"] for r in tours]  # the same launch as above, under MixedPrecisionPolicy(bf16, fp32)
print("inside the forward:", mixed[0]["inside forward"]["0"], "| gradient shard:", mixed[0]["grads"]["0.weight"])
gap = max((mixed[0]["full"][k] - reference["state"][k]).abs().max().item() for k in reference["state"])
print(f"largest difference to fp32 Adam after {cfg.steps} steps: {gap:.1e}")
assert mixed[0]["inside forward"]["0"][2] == "bfloat16" and mixed[0]["grads"]["0.weight"][2] == "float32", "bf16 compute, fp32 gradient shards"
assert 0 < gap < 10 * cfg.lr, "bf16 training is close to fp32's, not equal to it"


# %% [markdown]
# The parameters are bf16 inside the forward and the gradient shards fp32. The weights are close to fp32 Adam's but
# not equal: they differ by about one or two of Adam's steps (`lr` = 0.01). Adam divides every gradient by its own
# running magnitude, so where a gradient is near zero, bf16's rounding (8 bits of mantissa) changes the direction of a
# full-size step. Mixed precision approximates fp32 training; that is why the exercise below trains in fp32, where
# FSDP2 must equal one process exactly (within float rounding).
#
# ### Exercise 4 — an FSDP2 training worker (3 points)
# Write `my_fsdp_worker(rank, world_size, cfg)`, run on every rank inside a process group. It must
#
# 1. build `cfg.model()` on this rank's device (`launch.device()`),
# 2. shard it: `fully_shard(module, mesh=mesh)` on each block (`cfg.blocks(model)`), then on the model itself, all
#    with one `mesh = sharding.device_mesh()`: the ranks' device mesh (without it, `fully_shard` builds its mesh on the
#    machine's GPU, even where the ranks are CPU processes, as on a one-GPU machine),
# 3. create `torch.optim.Adam(model.parameters(), lr=cfg.lr)` **after** sharding (so that it holds the shards),
# 4. train `cfg.steps` steps: at step `s` this rank's batch is `cfg.batch(s, world_size, rank)` (move it to the
#    device), the loss `F.mse_loss`, then backward, step and `zero_grad`,
# 5. return the trained model.
#
# The test runs it under `sharding.fsdp_observed_worker`, which reports which modules are FSDP units, the shard each
# rank holds of each parameter, and the full weights gathered from the shards; they must equal one process running
# plain Adam on the global batches.

# %% nbgrader={"grade": false, "grade_id": "fsdp", "locked": false, "schema_version": 3, "solution": true}
def my_fsdp_worker(rank, world_size, cfg):
    ### BEGIN SOLUTION
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
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "fsdp_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
_cfg = sharding.ShardConfig()
_ranks = launch.launch(sharding.fsdp_observed_worker, 2, args=(my_fsdp_worker, _cfg), timeout_s=30)
_problem = sharding.fsdp_problem(_ranks, _cfg, 2, sharding.reference_adam(_cfg, 2))
assert _problem is None, _problem
print("✓ my_fsdp_worker passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_draw = grading.hidden_random()
_cases = [(3, sharding.ShardConfig(hidden=_draw.randint(5, 40), out_features=_draw.randint(1, 5), depth=_draw.randint(1, 3),
                                   steps=2, lr=0.02, seed=_draw.randint(0, 999)))]
# [collect]
_runs = [launch.launch(sharding.fsdp_observed_worker, _w, args=(my_fsdp_worker, _c), timeout_s=30) for _w, _c in _cases]
_got = grading.collect("fsdp_tests", _runs)
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one run per case"
for (_w, _c), _ranks in zip(_cases, _got):
    _reference = grading.reference(f"05-sharding reference_adam {_c!r} {_w}", lambda: sharding.reference_adam(_c, _w))
    _problem = sharding.fsdp_problem(_ranks, _c, _w, _reference)
    assert _problem is None, f"with {_w} ranks: {_problem}"
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Checkpoints of a sharded model
#
# No rank holds the whole model, so "rank 0 saves `model.state_dict()`" no longer works. Two kinds of state dict
# (`torch.distributed.checkpoint.state_dict`):
#
# * **sharded**: `get_model_state_dict(model)` gives each rank a dict of its own **DTensor shards**. With
#   `torch.distributed.checkpoint` (`dcp.save`), every rank writes its shards at once, in parallel, and nobody ever
#   holds the whole model: the way to save a model that fits on no single device.
# * **full**: `get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))`
#   all-gathers every tensor and gives rank 0 a plain state dict (the other ranks an empty one): a file any plain
#   model loads, if it fits in rank 0's CPU memory.
#
# A sharded checkpoint also records each piece's place in the whole tensor. So it can be loaded on a **different
# number of ranks**: each rank of the new run reads the pieces its own shards need. Saved on 2 ranks, loaded on 3:

# %% tags=["demonstration"]
with tempfile.TemporaryDirectory() as folder:
    saved = launch.launch(sharding.dcp_save_worker, 2, args=(cfg, folder))
    print("each rank saved", saved[0]["value types"], "-> files:", saved[0]["files"])
    loaded = launch.launch(sharding.dcp_load_worker, 3, args=(cfg, folder))
for r in loaded:
    print(f"rank {r['rank']} of 3 holds 2.weight {r['local']['2.weight']}, 4.weight {r['local']['4.weight']}")
same = sharding.same_state(loaded[0]["full"], saved[0]["full"], atol=0)
print("the 3 ranks hold exactly the weights the 2 ranks saved:", same)
assert same and loaded[2]["local"]["2.weight"] == (10, 30), "loaded on 3 ranks, each holds 10 of 30 rows of the saved weights"


# %% [markdown]
# Two files of shards (one per saving rank, `__0_0.distcp` and `__1_0.distcp`) and a `.metadata` index; three ranks
# loading them, each now holding 10 of the 30 rows, all of the saved values.
#
# ### Exercise 5 — resharding by hand (2 points)
# What `dcp.load` did for each tensor, do by hand: write `reshard(shards, new_world_size)`. `shards` is a list of
# `N` state dicts, rank `r`'s dim-0 shards of every parameter (as `fully_shard` cuts them: `torch.chunk`'s rule, some
# possibly empty); return a list of `new_world_size` dicts, the shards each of the new ranks holds, with the same keys
# in the same order.

# %% nbgrader={"grade": false, "grade_id": "reshard", "locked": false, "schema_version": 3, "solution": true}
def reshard(shards, new_world_size):
    ### BEGIN SOLUTION
    new = [OrderedDict() for _ in range(new_world_size)]
    for name in shards[0]:
        whole = torch.cat([shard[name] for shard in shards])
        rows = -(-whole.shape[0] // new_world_size)
        for rank in range(new_world_size):
            new[rank][name] = whole[rank * rows:(rank + 1) * rows].clone()
    return new
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "reshard_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_full = sharding.ShardConfig(hidden=7, out_features=3).model().state_dict()
_new = reshard(sharding.shard_state(_full, 2), 3)
assert type(_new) is list and len(_new) == 3, "return one dict per new rank"
assert [tuple(_s["4.weight"].shape) for _s in _new] == [(1, 7), (1, 7), (1, 7)], "3 rows over 3 ranks: one each"
assert [tuple(_s["0.weight"].shape) for _s in reshard(sharding.shard_state(_full, 3), 4)] == [(2, 16), (2, 16), (2, 16), (1, 16)], "7 rows over 4 ranks: 2, 2, 2, 1"
assert all(sharding.same_state(_g, _e, atol=0) for _g, _e in zip(_new, sharding.shard_state(_full, 3))), "the new shards do not hold the saved values"
print("✓ reshard passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_draw = grading.hidden_random()
_cases = []
for _ in range(8):
    _c = sharding.ShardConfig(in_features=_draw.randint(1, 6), hidden=_draw.randint(1, 12), out_features=_draw.randint(1, 4), seed=_draw.randint(0, 999))
    _cases.append((_c, _draw.randint(1, 6), _draw.randint(1, 6)))
_inputs = [sharding.shard_state(_c.model().state_dict(), _old) for _c, _old, _new in _cases]
# [collect]
_got = grading.collect("reshard_tests", [reshard(_shards, _new) for _shards, (_c, _old, _new) in zip(_inputs, _cases)])
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one result per case"
for (_c, _old, _new), _result in zip(_cases, _got):
    _expected = sharding.shard_state(_c.model().state_dict(), _new)
    assert type(_result) is list and len(_result) == _new, f"{_old} ranks to {_new}: return one dict per new rank"
    for _r, (_g, _e) in enumerate(zip(_result, _expected)):
        assert sharding.same_state(_g, _e, atol=0), f"{_old} ranks to {_new}: new rank {_r}'s shards are not its rows of the saved tensors (keys, order, shapes, values)"
### END HIDDEN TESTS

# %% [markdown]
# ### Plain, DDP and FSDP state dicts
#
# Lesson 1's prefix lesson, once more. A DDP model's keys carry `module.` (`module.0.weight`), a compiled model's
# `_orig_mod.` (`torch.compile`), a DDP model of a compiled one both. FSDP2 keeps the plain model's names: its
# `fully_shard` changes the parameters into DTensors, not the module tree (the older FSDP1 wrapper inserted an
# `_fsdp_wrapped_module` into the tree, and its state-dict hooks took it out of the keys again). A full state dict from `get_model_state_dict(..., full_state_dict=True)` loads into an FSDP2
# model with `set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))`, which cuts each
# tensor into this rank's shard.
#
# ### Exercise 6 — a checkpoint converter (2 points)
# Write `convert_state_dict(state_dict, to)`: `state_dict` comes from a plain, a DDP, a compiled, or a DDP-of-compiled
# model (or from an FSDP2 model, as a full state dict); return a new dict with the same tensors in the same order,
# keyed as a model of kind `to` loads them: `"plain"` and `"fsdp"` with the plain names, `"ddp"` with `module.` in
# front. Take a wrapper's prefix off only when **every** key has it (a layer may be named `module`), and only from the
# front of a key. Any other `to` raises a `ValueError`.

# %% nbgrader={"grade": false, "grade_id": "convert", "locked": false, "schema_version": 3, "solution": true}
def convert_state_dict(state_dict, to):
    ### BEGIN SOLUTION
    if to not in ("plain", "ddp", "fsdp"):
        raise ValueError(f"to must be 'plain', 'ddp' or 'fsdp', got {to!r}")
    state = OrderedDict(state_dict)
    for prefix in ("module.", "_orig_mod."):  # DDP wraps a compiled model, not the other way round
        if state and all(key.startswith(prefix) for key in state):
            state = OrderedDict((key[len(prefix):], value) for key, value in state.items())
    if to == "ddp":
        state = OrderedDict(("module." + key, value) for key, value in state.items())
    return state
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "convert_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_plain = sharding.ShardConfig().model().state_dict()
assert list(convert_state_dict(checkpoints.add_prefix(_plain), "plain")) == list(_plain), "a DDP state dict loses its module. prefix"
assert list(convert_state_dict(_plain, "ddp"))[0] == "module.0.weight", "a DDP model's keys start with module."
assert list(convert_state_dict(checkpoints.add_prefix(_plain, "module._orig_mod."), "fsdp")) == list(_plain), "FSDP2 keeps the plain names"
assert grading.outcome(convert_state_dict, _plain, "fsdp1")[0] == "raised", "an unknown kind raises"
print("✓ convert_state_dict passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_draw = grading.hidden_random()
_models = [sharding.ShardConfig(hidden=_draw.randint(2, 9), seed=_draw.randint(0, 99)).model(),
           sharding.named_module_model(_draw.randint(0, 99), nested=False), sharding.named_module_model(_draw.randint(0, 99), nested=True)]
_cases = [(_i, _prefix, _to) for _i in range(len(_models)) for _prefix in ("", "module.", "_orig_mod.", "module._orig_mod.")
          for _to in ("plain", "ddp", "fsdp")]
_inputs = [checkpoints.add_prefix(_models[_i].state_dict(), _prefix) for _i, _prefix, _to in _cases]
# [collect]
_got = grading.collect("convert_tests", {"converted": [convert_state_dict(_s, _to) for _s, (_i, _p, _to) in zip(_inputs, _cases)],
                                         "bad": [grading.outcome(convert_state_dict, _inputs[0], _to)[0] for _to in ("FSDP", "", "module")]})
# [judge]
assert compare.is_record(_got, {"converted": list, "bad": list}) and len(_got["converted"]) == len(_cases), "one result per case"
for (_i, _prefix, _to), _result in zip(_cases, _got["converted"]):
    _expected = sharding.converted(checkpoints.add_prefix(_models[_i].state_dict(), _prefix), _to)
    assert type(_result) in (dict, OrderedDict), f"return a dict, got {type(_result).__name__}"
    assert list(_result) == list(_expected), f"a state dict with keys like {_prefix + '0.weight'!r} converted for {_to!r}: keys {list(_result)[:3]}..., expected {list(_expected)[:3]}..."
    assert sharding.same_state(_result, _expected, atol=0), f"converted for {_to!r}, the tensors are not the ones saved"
    _target = _models[_i].state_dict() if _to != "ddp" else checkpoints.add_prefix(_models[_i].state_dict())
    assert list(_result) == list(_target), f"a {_to} model would not load it (strict)"
assert compare.same_values(_got["bad"], ["raised"] * 3), "an unknown kind should raise"
### END HIDDEN TESTS

# %% [markdown]
# Converted dicts load for real, strictly (every key must fit), into a plain model, a DDP model and an FSDP2 model:

# %% tags=["demonstration"]
full = saved[0]["full"]
states = {kind: sharding.converted(checkpoints.add_prefix(full), kind) for kind in ("plain", "ddp", "fsdp")}
kinds = launch.launch(sharding.load_kinds_worker, WORLD, args=(cfg, states))
for kind, state in kinds[0]["loaded"].items():
    print(f"{kind:6} model loaded its keys ({list(states[kind])[0]}, ...) and holds the saved weights: {sharding.same_state(state, full, atol=0)}")
assert all(sharding.same_state(s, full, atol=0) for s in kinds[0]["loaded"].values()), "each kind of model should hold the saved weights"

# %% [markdown]
# ## 5. On TPUs and with Accelerate
#
# The idea is the same everywhere; the spelling changes.
#
# * **TPUs (torch_xla).** Lesson 4 sharded the *batch* with SPMD: `xs.mark_sharding(batch, mesh, ("data", None))`,
#   and the XLA compiler inserted the collectives. Sharding a *weight* the same way — `xs.mark_sharding(weight, mesh,
#   ("fsdp", None))`, its dim 0 over a mesh axis — is FSDP on a TPU: the compiler all-gathers it where it is used and
#   reduce-scatters its gradient. torch_xla packages this as "FSDPv2",
#   `torch_xla.experimental.spmd_fully_sharded_data_parallel.SpmdFullyShardedDataParallel`, which marks every
#   parameter of a module this way, along its largest dimension (torch_xla's SPMD and FSDPv2 documentation, and its
#   source, release 2.9). A TPU is where it pays, but it runs on XLA:CPU's virtual devices as well: the last cell of
#   this section trains this lesson's model with it on 4 of them.
# * **Accelerate.** `Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2, ...))`, or
#   `accelerate config` answering FSDP, makes `accelerator.prepare(model)` call `fully_shard` for you: the plugin
#   names the blocks to shard (`auto_wrap_policy="transformer_based_wrap"` and the layer class), `reshard_after_forward`,
#   the mixed-precision policy and the checkpoint's `state_dict_type` (`SHARDED_STATE_DICT` or `FULL_STATE_DICT`) —
#   this lesson's choices, as options (Accelerate's "Fully Sharded Data Parallel" guide and its FSDP1 → FSDP2 notes,
#   version 1.15). Building the plugin runs anywhere; the training it configures needs GPUs:

# %% tags=["demonstration"]
plugin = launch.launch(sharding.accelerate_plugin_worker, 1)[0]  # in a process of its own: the notebook never imports accelerate
print(plugin if plugin else "accelerate is not installed here (lesson 4 installs it): pip install accelerate")

# %% [markdown]
# FSDPv2 on 4 virtual XLA:CPU devices, in a process of its own (lesson 4's `xla.run`), next to the same model and
# Adam on one XLA device. Each parameter's sharding is XLA's notation: `{devices=[4,1]...}` splits dim 0 over the 4
# devices, `[1,4]` dim 1. FSDPv2 splits a weight along its *largest* dimension, so the last layer (3 × 30) is split by
# columns, where FSDP2's `fully_shard` always takes rows (dim 0, torch.chunk's rule).

# %% tags=["demonstration"]
if xla.available():
    v2 = xla.run(xla.fsdpv2_adam, sharding.ShardConfig(), n_devices=4, virtual=True)
    for name, spec in v2["shardings"].items():
        print(f"{name:9} {spec}")
    print(f"largest weight difference from Adam on one XLA device: {v2['max_abs_diff']:.1e}")
    assert v2["max_abs_diff"] < 1e-5, "FSDPv2 should train as one device does, at the same precision"
    assert v2["shardings"]["4.weight"].startswith("{devices=[1,4]"), "the last layer (3 x 30) is split by columns"
else:
    print(xla.missing())

# %% [markdown]
# ## 6. Quick check
#
# * **q1** — Which ZeRO stage shards the parameters too? (an `int`)
# * **q2** — `fully_shard(block, reshard_after_forward=False)`: (a) the block is not sharded at all (b) its whole
#   parameters stay gathered from forward to backward: one all-gather less, more memory (c) its gradients are not
#   reduce-scattered
# * **q3** — Mixed-precision Adam on 8 ranks, ZeRO stage 2: bytes per parameter per rank? (a `float`)
# * **q4** — A parameter of shape (10, 4) under `fully_shard` on 4 ranks: how many rows does rank 3 hold? (an `int`)
# * **q5** — The keys of an FSDP2 model's state dict: (a) start with `module.` (b) are the plain model's
#   (c) start with `_fsdp_wrapped_module.`

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true}
quiz = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None}
### BEGIN SOLUTION
quiz = {"q1": 3, "q2": "b", "q3": 3.75, "q4": 1, "q5": "b"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "quiz_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert type(quiz) is dict and set(quiz) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five: quiz is a dict with the keys q1 ... q5"
assert type(quiz["q1"]) is int and type(quiz["q4"]) is int, "q1 and q4 are ints"
assert type(quiz["q3"]) is float, f"q3 is a number of bytes, a float; got {type(quiz['q3']).__name__}"
for _q in ("q2", "q5"):
    assert type(quiz[_q]) is str and len(quiz[_q]) == 1 and quiz[_q].lower() in "abc", f"{_q}: answer with one letter, a, b or c"
print("✓ quiz is answered in the right form; the hidden tests check the answers when your notebook is graded")
### BEGIN HIDDEN TESTS
# [collect]
_got = grading.collect("quiz_tests", quiz)
# [judge]
assert type(_got) is dict and set(_got) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five: quiz is a dict with the keys q1 ... q5"
assert type(_got["q1"]) is int and type(_got["q4"]) is int, "q1 and q4 are ints"
assert type(_got["q3"]) is float, "q3 is a number of bytes, a float"
for _q in ("q2", "q5"):
    assert type(_got[_q]) is str and len(_got[_q]) == 1 and _got[_q].lower() in "abc", f"{_q}: answer with one letter, a, b or c"
assert _got["q1"] == 3, "q1 is wrong: which stage adds the parameters?"
assert _got["q2"].lower() == "b", "q2 is wrong"
assert abs(_got["q3"] - sharding.zero_bytes(1, 8, 2)) < 1e-9, "q3 is wrong: what does stage 2 shard, and what not?"
assert _got["q4"] == sharding.local_shape((10, 4), 4, 3)[0], "q4 is wrong: how does torch.chunk cut 10 rows into 4?"
assert _got["q5"].lower() == "b", "q5 is wrong"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
#
# * A replica costs 16 bytes per parameter with Adam (fp32, or the paper's mixed precision), plus activations. ZeRO
#   shards the optimizer state (stage 1: 4 + 12/N bytes), the gradients (stage 2: 2 + 14/N) and the parameters
#   (stage 3: 16/N): 120 GB → 31.4, 16.6 and 1.9 GB per GPU for 7.5B parameters on 64 GPUs.
# * ZeRO-1 steps each rank's slice of the optimizer state and all-gathers the result: exactly plain Adam, for the same
#   traffic as DDP when the gradients are reduce-scattered; stage 3 sends 1.5 times as much.
# * FSDP2: `fully_shard` per block, then on the root; parameters become DTensors sharded on dim 0 (torch.chunk's
#   rule); all-gather before a block's forward (and again in backward with `reshard_after_forward=True`),
#   reduce-scatter after its backward, prefetching to overlap; `MixedPrecisionPolicy` for bf16 compute and fp32
#   reductions. Trained with fp32, it equals one process.
# * Checkpoints: sharded state dicts with `torch.distributed.checkpoint` (every rank writes its shards; load on any
#   number of ranks), full ones on rank 0 for a plain model; FSDP2 keeps the plain names, DDP adds `module.`.
# * The same sharding is `mark_sharding` on TPUs and a plugin in Accelerate.

# %%
print(f"this lesson ran in {time.perf_counter() - LESSON_START:.0f} s on {os.cpu_count()} CPU cores ({launch.plan(WORLD).backend})")
