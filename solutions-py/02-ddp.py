# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 2 — DistributedDataParallel (DDP)
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/02-ddp/02-ddp.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/02-ddp/02-ddp.ipynb)
#
# Lesson 1 ended with DataParallel's limits: one process drives every device, device 0 does the
# extra work, and every step re-broadcasts the weights. `DistributedDataParallel` removes all three:
# **one process per device**, each with its own copy of the model for the whole run, and the
# gradients averaged by an **all-reduce** in which every device does the same work.
#
# Everything here runs for real. Without GPUs the processes are CPU processes talking over
# **gloo**; with one GPU per process they use **nccl** — the same cells either way.

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
import json
import os
import tempfile
import time

from helpers import launch

# the server the ranks fork from starts importing torch now, in the background, while the rest imports: the first
# launch then starts at once
launch.warm_up()

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from helpers import grading, checkpoints, commands, compare, data, ddp, memory, models, plotting

WORLD = 2  # processes in the examples
print(launch.plan(WORLD))

# %% [markdown]
# ## 1. Why DDP: the same step, two ways
#
# Take one model and one global batch of 256 samples over two devices. DataParallel splits the
# batch inside one process; DDP gives each process 128 samples of its own. Measure a training step
# and the memory each device holds:

# %% tags=["demonstration"]
shape = dict(in_features=256, hidden=512, batch=256, steps=5)
dp_seconds, dp_report = ddp.dataparallel_step_time(**shape)
ddp_ranks = launch.launch(ddp.step_time_worker, WORLD, args=tuple(shape.values()))
ddp_report = memory.MemoryReport([r["memory"] for r in ddp_ranks], "DDP ranks, ledger" if "parameters" in ddp_ranks[0]["memory"] else memory.MEASURED)

print("DataParallel (emulated):" if dp_report.emulated else "DataParallel (CUDA):",
      f"{dp_seconds * 1e3:.1f} ms per step, device 0 / device 1 memory = {dp_report.imbalance_ratio:.2f}")
print(f"DDP ({launch.plan(WORLD).backend}): {max(r['seconds'] for r in ddp_ranks) * 1e3:.1f} ms per step, "
      f"rank 0 / rank 1 memory = {ddp_report.imbalance_ratio:.2f}")
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
plotting.plot_memory(dp_report, ax=axes[0], title="DataParallel")
plotting.plot_memory(ddp_report, ax=axes[1], title="DDP");
# what the text below reads in these numbers
assert dp_report.imbalance_ratio > 1.05, "DataParallel's device 0 holds more than the others"
assert abs(ddp_report.imbalance_ratio - 1) < 0.05, "DDP's ranks hold the same bytes"
assert dp_seconds > 0 and all(r["seconds"] > 0 for r in ddp_ranks), "every timing should be positive"

# %% [markdown]
# Memory first. DataParallel's device 0 holds more than device 1 (the ratio above 1): it gathers the
# outputs, and the only optimizer and its state live there. DDP's ranks hold the same bytes (a ratio
# of 1.00): nobody gathers the outputs or keeps the only optimizer. Each rank does pay for its own
# optimizer state, and for DDP's **all-reduce buckets** (flat buffers the gradients are copied into
# before they are sent; `gradient_as_bucket_view=True` removes the copy).
#
# The two times are **not** a speed comparison. Without GPUs both runs share this machine's few CPU
# cores: the emulated DataParallel runs its replicas as threads of this one process (emulated copies
# included), the DDP ranks are two processes with a share of the cores each. Which one is faster here
# depends on the machine and on what else runs on it, and says nothing about GPUs. The cell shows the
# mechanics; on GPUs the same cell times the real thing.

# %% [markdown]
# ## 2. Process groups, ranks and backends
#
# Every DDP process joins a **process group**:
#
# * `world_size` — how many processes take part; `rank` — this process's number, `0 .. world_size-1`;
#   `local_rank` — its number on *this machine* (it picks the GPU: `cuda:local_rank`).
# * a **backend** moves the tensors: `nccl` between NVIDIA GPUs, `gloo` on CPUs (and as a fallback).
# * `dist.init_process_group(backend, init_method=..., rank=..., world_size=..., timeout=...)` joins;
#   `dist.destroy_process_group()` leaves. Always pass a `timeout`: the default is 30 minutes with gloo
#   and 10 minutes with nccl, and a process waiting for a partner that never comes waits that long.
#
# `helpers.launch.launch(worker, n)` starts `n` processes, joins them into a group and returns what
# each `worker(rank, world_size)` returns. What a rank prints shows up below the cell as it happens, each line
# marked with its rank (`[rank1]: ...`), the way `torchrun --tee` shows it; what a rank writes to stderr comes
# back with its error if it fails. Ask each process who it is:

# %% tags=["demonstration"]
infos = launch.launch(ddp.hello, WORLD)
for info in infos:
    print(info)
assert [i["rank"] for i in infos] == list(range(WORLD)) and len({i["pid"] for i in infos}) == WORLD, "each rank should report once, from a process of its own"  # one process each

# %% [markdown]
# Different process ids: these are separate Python interpreters, each with its own GIL. The basic
# collective is the **all-reduce**: every rank contributes a tensor and every rank receives the sum.

# %% tags=["demonstration"]
results = launch.launch(ddp.allreduce_demo, WORLD)
for r in results:
    print(f"rank {r['rank']}: before {r['before']}, after all_reduce(SUM) {r['after']}")
assert all(r["after"] == sum(q["before"] for q in results) for r in results), "after all_reduce every rank should hold the sum of all ranks' values"  # every rank holds the sum


# %% [markdown]
# ## 3. Launching processes
#
# ### `mp.spawn` and the `__main__` trap
# `torch.multiprocessing.spawn(fn, nprocs=n)` starts `n` fresh interpreters and calls `fn(rank, ...)`
# in each. Fresh interpreters find `fn` **by name**, by importing the module it was defined in. A
# function defined in a notebook lives in `__main__`, which a fresh interpreter cannot import:

# %% tags=["demonstration"]
def notebook_worker(rank):
    print("hello from", rank)

with ddp.spawned_stderr() as children:  # keeps the children's tracebacks: this failure is the one we expect
    try:
        mp.spawn(notebook_worker, nprocs=2)
    except Exception as error:
        spawn_error = error
print(f"mp.spawn failed, as expected: {type(spawn_error).__name__}: {spawn_error}")
for line in children.errors():
    print("what the children said:", line)
assert isinstance(spawn_error, mp.ProcessExitedException), "mp.spawn should have failed: it cannot import a function defined in the notebook"  # the children exited before running anything

# %% [markdown]
# Each child printed `AttributeError: Can't get attribute 'notebook_worker' on <module '__main__' ...>`
# and exited; `spawn` then reports the exit. The fix is to put workers in an importable module.
# `helpers.ddp` is such a module:

# %% tags=["demonstration"]
with tempfile.TemporaryDirectory() as folder:
    mp.spawn(ddp.hello_spawn, args=(2, folder), nprocs=2)
    notes = sorted(os.listdir(folder))
    for name in notes:
        print(open(os.path.join(folder, name)).read())
assert notes == ["rank0.txt", "rank1.txt"], "each rank should have written its own note"


# %% [markdown]
# `helpers.launch` goes one step further: it ships the worker function itself, by value (with
# `cloudpickle`), so even a worker written in this notebook can run — you will write one below. It
# also picks a free port for every launch (re-running a cell just works), passes a timeout to every
# process group, and when one rank fails it stops all of them and shows you that rank's traceback:

# %%
def broken_worker(rank, world_size):
    if rank == 1:
        raise ValueError("rank 1 cannot find its data")
    value = torch.ones(1, device=launch.device())  # on the rank's device: nccl serves CUDA tensors only
    dist.all_reduce(value)  # rank 0 would wait here for rank 1 until the group's timeout
    return value

start = time.perf_counter()
try:
    launch.launch(broken_worker, WORLD, timeout_s=30)
except launch.WorkerFailed as error:
    launch_error, stopped_after = error, time.perf_counter() - start
    print(f"stopped after {stopped_after:.1f} s; rank {error.rank} said:")
    print(ddp.last_error_line(error))
assert launch_error.rank == 1 and "ValueError" in launch_error.details, "the launch should report rank 1's own error"
assert stopped_after < 30, "a failing rank should stop the launch within seconds, not at the group's timeout"  # stopped by the launcher, not by rank 0's 30 s timeout


# %% [markdown]
# ### Scripts and `torchrun`
# Real jobs run as scripts. `helpers/ddp_scripts/` holds a short series; each step is the previous
# one plus one idea:
#
# | script | adds |
# |---|---|
# | `step1_single.py` | one process, one device: the baseline |
# | `step2_spawn.py` | a process group, `DistributedSampler` + `set_epoch`, the `DDP` wrapper, `mp.spawn` |
# | `step3_torchrun.py` | no `mp.spawn`: `torchrun` starts the processes and sets `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT` |
# | `step4_multinode.py` | several machines: local vs global rank, a rank-0 checkpoint with a barrier |
#
# From a terminal: `torchrun --standalone --nproc_per_node=2 -m helpers.ddp_scripts.step3_torchrun`
# (`--standalone` picks a free port itself). Here is that command, run for real:

# %% tags=["demonstration"]
def run(command):
    out = commands.run(command, timeout_s=120)  # an interrupted cell stops torchrun *and* its workers
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith('{"step"')]
    if out.returncode or not lines:
        print(out.stderr[-2000:])
    return lines

# `torchrun` is `python -m torch.distributed.run`; the module form works on every Python layout (on
# Colab the `torchrun` command does not sit next to sys.executable)
torchrun = commands.TORCHRUN
lines = run([*torchrun, "--standalone", "--nproc_per_node=2", "-m", "helpers.ddp_scripts.step3_torchrun"])
for line in lines:
    print(line)
assert sorted(l["rank"] for l in lines) == [0, 1] and len({l["weights_sha256"] for l in lines}) == 1, "torchrun should run ranks 0 and 1, ending with the same weights (see the output above)"

# %% [markdown]
# Both ranks end with the same weights (the same fingerprint): DDP keeps the replicas identical.
#
# ## 4. More than one machine
#
# On two machines you run the same `torchrun` on each, with `--nnodes=2`, its own `--node_rank`, and a
# **rendezvous** endpoint both can reach (`--rdzv_backend=c10d --rdzv_endpoint=HOST:PORT`). Here both
# "machines" are this one — two `torchrun` commands, two processes each, exactly as you would type them
# on two hosts.
#
# On separate machines `LOCAL_RANK` picks each process's GPU. Here the two "machines" share one set of
# GPUs, and both `torchrun`s number their processes 0 and 1: `LOCAL_RANK` would put two ranks on each GPU,
# which NCCL refuses. So `step4_multinode.py` first joins a gloo group, asks every rank for its host name
# and GPU count, and gives each rank its position among the ranks on its machine (`common.device_plan`):
# nccl when every machine has a GPU for each of its ranks, gloo otherwise:

# %% tags=["demonstration"]
port = launch.free_port()
checkpoint_path = os.path.join(tempfile.mkdtemp(), "multinode.pt")
nodes = commands.run_all([[*torchrun, "--nnodes=2", f"--node_rank={n}", "--nproc_per_node=2", "--rdzv_backend=c10d",
                            f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=lesson2", "-m", "helpers.ddp_scripts.step4_multinode",
                            "--save", checkpoint_path] for n in (0, 1)], timeout_s=180)
lines = []
for n, node in enumerate(nodes):
    if node.returncode:
        print(f"node {n} failed:", node.stderr[-2000:])
    for line in node.stdout.splitlines():
        if line.startswith('{"step"'):
            print(f"node {n}:", line)
            lines.append(json.loads(line))
reference = ddp.reference_train(ddp.TrainConfig(), world_size=4)
matches = ddp.same_state(torch.load(checkpoint_path, weights_only=True), reference["state"])
print("equals a single process on the same global batches:", matches)
assert sorted(l["rank"] for l in lines) == [0, 1, 2, 3] and len({l["weights_sha256"] for l in lines}) == 1 and matches, "the two nodes should run ranks 0-3 with the same weights, equal to one process on the same global batches"

# %% [markdown]
# On a cluster, a scheduler starts the `torchrun`s; `helpers/ddp_scripts/slurm_multinode.sbatch` does
# it for SLURM (one `torchrun` per node, the first node as the rendezvous host).
#
# `step4_multinode.py` ends with "rank 0 saves, barrier, every rank loads the file". That works here
# because both "machines" are this one, with one disk. On real machines it silently assumes a
# **filesystem shared by the nodes** (NFS, Lustre, a mounted bucket...): without one, the file lands on
# node 0's disk and the ranks of node 1 do not find it. Section 7 shows what to do then.

# %% [markdown]
# ## 5. Data: every rank its own shard
#
# A `DistributedSampler` gives rank `r` every `world_size`-th sample starting at `r`. When the data
# does not divide evenly it **pads** by repeating the first samples, so that every rank gets the same
# number — or, with `drop_last=True`, drops the tail. Ten samples over three ranks:

# %%
shards = {drop_last: [ddp.shard_indices(10, 3, r, drop_last=drop_last) for r in range(3)] for drop_last in (False, True)}
for drop_last, indices in shards.items():
    print(f"drop_last={drop_last}:", indices)
assert shards[False][1][-1] == 0 and shards[False][2][-1] == 1, "without drop_last the last ranks repeat the first samples to even out"  # padded with the first samples, 0 and 1
assert sorted(sum(shards[True], [])) == list(range(9)), "with drop_last the shards together hold each sample once"  # sample 9 dropped


# %% [markdown]
# ### Exercise 1 — shards (2 points)
# Write `my_shard(n_samples, world_size, rank, drop_last)` returning the list of indices that
# `DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=False, drop_last=drop_last)`
# yields. Do not use `DistributedSampler` or the helpers.

# %% nbgrader={"grade": false, "grade_id": "shard", "locked": false, "schema_version": 3, "solution": true}
def my_shard(n_samples, world_size, rank, drop_last):
    ### BEGIN SOLUTION
    if drop_last:
        per_rank = n_samples // world_size
        indices = list(range(per_rank * world_size))
    else:
        per_rank = -(-n_samples // world_size)
        indices = list(range(n_samples))
        while len(indices) < per_rank * world_size:
            indices += indices[: per_rank * world_size - len(indices)]
    return indices[rank::world_size]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "shard_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert type(my_shard(10, 3, 1, False)) is list, "return a list"
assert my_shard(10, 3, 1, False) == [1, 4, 7, 0], "rank 1 of 3: 1, 4, 7 and a padded 0"
assert my_shard(10, 3, 1, True) == [1, 4, 7], "drop_last drops the tail instead of padding"
print("✓ my_shard passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_cases = [(_n, _w, _r, _drop) for _n in range(1, 25) for _w in range(1, 7) for _r in range(_w) for _drop in (False, True)]
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
for _w in [_rng.randint(1, 64) for _ in range(300)]:
    _cases.append((_rng.randint(1, 600), _w, _rng.randrange(_w), _rng.random() < 0.5))
# [collect]
_got = grading.collect("shard_tests", [my_shard(*_case) for _case in _cases])
# [judge]
def _type(value):
    return value.type_name if isinstance(value, grading.Other) else type(value).__name__

assert type(_got) is list and len(_got) == len(_cases), "one result per case"
for (_n, _w, _r, _drop), _shard in zip(_cases, _got):
    assert type(_shard) is list and all(type(i) is int for i in _shard), \
        f"my_shard must return a list of Python ints, got a {_type(_shard)} of {sorted({_type(i) for i in _shard}) if type(_shard) in (list, tuple) else '?'}"
    assert _shard == list(DistributedSampler(range(_n), num_replicas=_w, rank=_r, shuffle=False, drop_last=_drop)), \
        f"my_shard({_n}, {_w}, {_r}, drop_last={_drop}) is not what DistributedSampler yields"
### END HIDDEN TESTS

# %% [markdown]
# ### `set_epoch`: the same shuffle every epoch
# With `shuffle=True` the sampler shuffles with a generator seeded by `seed + epoch`. The epoch is
# whatever you last passed to `sampler.set_epoch(...)` — and if you never call it, it stays 0:

# %%
sampler = DistributedSampler(range(8), num_replicas=2, rank=0, shuffle=True, seed=0)
without = [list(sampler) for epoch in range(3)]
print("without set_epoch:", without)
orders = []
for epoch in range(3):
    sampler.set_epoch(epoch)
    orders.append(list(sampler))
print("with set_epoch:   ", orders)
assert without[0] == without[1] == without[2] and len({tuple(o) for o in orders}) > 1, "without set_epoch every epoch has the same order; with it the orders differ"

# %% [markdown]
# Forgetting `set_epoch` does not crash: the model just sees the data in the same order every epoch.
# The loss tells you nothing; the single-process reference does — the run without `set_epoch`
# no longer matches it:

# %% tags=["demonstration"]
cfg = ddp.TrainConfig(epochs=3)
reference = ddp.reference_train(cfg, WORLD)
matched = {}
for set_epoch in (True, False):
    run_cfg = ddp.TrainConfig(epochs=3, set_epoch=set_epoch)
    ranks = launch.launch(ddp.train_worker, WORLD, args=(run_cfg,))
    matched[set_epoch] = ddp.same_state(ranks[0]['state'], reference['state'])
    print(f"set_epoch={set_epoch}: final loss {ranks[0]['losses'][-1]:.4f}, matches the reference: {matched[set_epoch]}")
assert matched == {True: True, False: False}, "only the run that calls set_epoch should match the single-process reference"

# %% [markdown]
# ### Uneven inputs: a hang
# Every backward is a collective: all ranks must take part. If one rank has one more batch than
# another, the ranks stop meeting. Here rank 0 has 3 batches and rank 1 has 2. After its second batch
# rank 1 leaves the loop and waits at the `dist.barrier()` after it; rank 0 runs its third backward and
# waits in its all-reduce. **Both** ranks are now waiting for a partner that will never come, and
# each gives up when the process group's timeout (5 s here; by default 30 minutes with gloo, 10 with
# nccl) runs out:

# %% tags=["demonstration"]
import re

# gloo raises a Python error ("... timed out"); nccl's watchdog writes "Watchdog caught collective operation
# timeout" on the rank's stderr, waits for a debugging dump (launch gives its ranks a second) and kills the
# rank (SIGABRT), which the launcher reports with that stderr
TIMEOUT = re.compile(r"timed out|collective operation timeout", re.IGNORECASE)
start = time.perf_counter()
try:
    launch.launch(ddp.uneven_worker, WORLD, args=([3, 2],), timeout_s=5)
except launch.WorkerFailed as error:
    hang_error, waited = error, time.perf_counter() - start
    said = next((line for line in error.details.splitlines() if TIMEOUT.search(line)), ddp.last_error_line(error))
    if error.signal:
        print(f"after {waited:.0f} s, rank {error.rank} (killed by {error.signal}): {said.strip()[:160]}")
    else:
        print(f"after {waited:.0f} s, rank {error.rank}: {said.strip()[:160]}")
assert TIMEOUT.search(hang_error.details) and waited >= 5, "the rank left waiting should fail at the group's timeout"  # a timeout, not a crash

# %% [markdown]
# What you see is the error of whichever rank's timeout fired first: sometimes rank 0 (waiting in the
# collectives of its extra batch), sometimes rank 1 (waiting at the barrier). The rank named is not
# necessarily the one with the extra batch; the message says only that a collective timed out. The
# launch then stops the other rank, so the wait is the timeout plus the processes' start. With nccl (two
# GPUs) it looks different: collectives are matched by their order, so rank 1's barrier can pair with rank
# 0's all-reduce, and the rank left waiting is killed by nccl's watchdog (SIGABRT, no Python traceback: its
# stderr says "Watchdog caught collective operation timeout"). The watchdog first waits for a debugging dump:
# since torch 2.8, 4 × `TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC`, a minute by default. `launch` gives its ranks
# 250 ms (a one-second wait) unless you set the variable, and waits for whatever wait they have.
#
# Two fixes: give every rank the same number of batches (a `DistributedSampler` does, by padding or
# `drop_last`), or, when the data really is uneven, wrap the loop in `with ddp_model.join():`, which
# lets the finished ranks shadow the collectives of the others:

# %% tags=["demonstration"]
joined = launch.launch(ddp.uneven_worker, WORLD, args=([3, 2], True), timeout_s=5)
print(joined)
assert [r["steps"] for r in joined] == [3, 2], "with join() the rank with more batches runs them all"  # no timeout: each rank ran its own batches


# %% [markdown]
# ### Why not just `dataset[rank::world_size]`?
# The strided split uses every sample exactly once, and sometimes gives every rank the same number of
# batches. But when `world_size` does not divide the dataset, some ranks get one sample more than the
# others, and then
#
# * the batch counts depend on the batch size: equal for some sizes, unequal for others, and unequal
#   counts hang at the last collective, as above;
# * even when the counts are equal, the last batches differ in size, so averaging the ranks'
#   gradients weighs those samples unequally: no longer the single-process gradient;
# * the split never changes: a sample stays on its rank every epoch. Shuffling inside each rank only
#   reorders that rank's shard. `DistributedSampler` shuffles the *whole* dataset with `seed + epoch`
#   (the same permutation on every rank), then splits it.
#
# Ten samples over three ranks:

# %%
def strided_shares(n, world_size):
    return [len(range(rank, n, world_size)) for rank in range(world_size)]

def batch_counts(shares, batch_size):
    return [-(-share // batch_size) for share in shares]  # ceil: the last batch may be short

for batch_size in (2, 3):
    sampler_shares = [len(DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False)) for r in range(3)]
    print(f"batch_size={batch_size}: strided split {strided_shares(10, 3)} samples -> "
          f"{batch_counts(strided_shares(10, 3), batch_size)} batches; DistributedSampler {sampler_shares} samples -> "
          f"{batch_counts(sampler_shares, batch_size)} batches")
assert batch_counts(strided_shares(10, 3), 2) == [2, 2, 2], "10 samples over 3 ranks in batches of 2: 2 batches each"  # equal counts, unequal last batches (2, 1, 1)
assert batch_counts(strided_shares(10, 3), 3) == [2, 1, 1], "10 samples over 3 ranks in batches of 3: rank 0 gets one batch more"  # rank 0 would hang in its second backward


# %% [markdown]
# ### Exercise 2 — a loader that cannot hang (2 points)
# `make_loader(dataset, world_size, rank, batch_size)` must return a `DataLoader` over this rank's share
# of `dataset`, in batches of at most `batch_size`, such that
#
# * the ranks **split** the data: every rank gets the same number of samples, `len(dataset) / world_size`
#   rounded up, and so the same number of batches;
# * every sample is on some rank, and no sample appears twice on one rank.
#
# The order does not matter. The test judges your loaders against `DistributedSampler`'s on several
# dataset sizes, and trains through them with DDP.

# %% nbgrader={"grade": false, "grade_id": "loader", "locked": false, "schema_version": 3, "solution": true}
def make_loader(dataset, world_size, rank, batch_size):
    ### BEGIN SOLUTION
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "loader_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_ds = data.indexed(10)
_loaders = [make_loader(_ds, 3, r, 2) for r in range(3)]
assert all(isinstance(l, DataLoader) for l in _loaders), "return a DataLoader"
assert len({len(l) for l in _loaders}) == 1, f"batches per rank differ: {[len(l) for l in _loaders]}"
_problem = ddp.loader_problem(make_loader, 10, 3, 2)
assert _problem is None, f"10 samples, 3 ranks, batch_size 2: {_problem}"
print("✓ make_loader passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_cases = [(10, 3, 2), (10, 3, 3), (7, 4, 1), (3, 4, 2), (1, 3, 1), (8, 8, 3), (5, 1, 2)]  # uneven tails, padding only
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases += [(_rng.randint(1, 60), _rng.randint(1, 8), _rng.randint(1, 8)) for _ in range(8)]
_trained = (_rng.randint(2, 3), _rng.randint(5, 40))  # DDP trains through the loaders: ranks, samples
# [collect]
try:
    _steps = [_r["steps"] for _r in launch.launch(ddp.loader_steps_worker, _trained[0], args=(_trained[1], make_loader),
                                                  timeout_s=20)]
except launch.WorkerFailed as _error:
    _steps = f"DDP training through the loaders failed on rank {_error.rank}: {ddp.last_error_line(_error)}"
_got = grading.collect("loader_tests", {"batches": [ddp.loader_batches(make_loader, *_case) for _case in _cases],
                                        "steps": _steps})
# [judge]
assert compare.is_record(_got, {"batches": list, "steps": (list, str)}) and len(_got["batches"]) == len(_cases), "one record per case"
for (_n, _w, _b), _record in zip(_cases, _got["batches"]):
    _problem = ddp.loader_batches_problem(_record, _n, _w, _b)
    assert _problem is None, f"{_n} samples, {_w} ranks, batch_size {_b}: {_problem}"
_steps = _got["steps"]
assert type(_steps) is not str, _steps
_w, _n = _trained
assert type(_steps) is list and len(_steps) == _w and all(type(s) is int for s in _steps), "one number of steps per rank"
assert len(set(_steps)) == 1, f"DDP ranks took {_steps} steps"
_expected = len(DataLoader(range(_n), batch_size=4, sampler=DistributedSampler(range(_n), num_replicas=_w, rank=0)))
assert _steps[0] == _expected, f"{_w} DDP ranks took {_steps[0]} steps through {_n} samples in batches of 4, not {_expected}"
### END HIDDEN TESTS

# %% [markdown]
# ## 6. Gradients: all-reduce, by hand and by DDP
#
# After backward, DDP all-reduces every gradient and divides by `world_size`: each rank ends up
# with the **average** of the ranks' gradients. Each rank computed a mean over its own batch, so with
# equal batch sizes the average of the means is the mean over the global batch — exactly the
# gradient one process would compute on all samples at once. That is why `reference_train`, one
# process on the union of the ranks' batches, matches DDP above.
#
# ### Exercise 3 — average the gradients yourself (2 points)
# Write `average_gradients(model)`: inside a running process group, replace every parameter's
# `.grad` by the average of that gradient over all ranks, using `dist.all_reduce`. The worker
# `ddp.manual_average_worker` trains a *plain* model with your function after every backward; the
# result must equal DDP's.

# %% nbgrader={"grade": false, "grade_id": "average", "locked": false, "schema_version": 3, "solution": true}
def average_gradients(model):
    ### BEGIN SOLUTION
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world_size
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "average_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_cfg = ddp.TrainConfig(epochs=1)
_manual = launch.launch(ddp.manual_average_worker, 2, args=(_cfg, average_gradients), timeout_s=30)
_ddp = launch.launch(ddp.train_worker, 2, args=(_cfg, False), timeout_s=30)
assert ddp.same_state(_manual[0]["state"], _manual[1]["state"]), "the ranks drifted apart: are the gradients averaged?"
assert ddp.same_state(_manual[0]["state"], _ddp[0]["state"]), "the ranks agree, but not with DDP: the average is the sum / world_size"
print("✓ average_gradients passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases = [(_rng.randint(_fewest, 4), ddp.TrainConfig(n_samples=_rng.randint(24, 120), batch_size=_rng.randint(4, 16),
                                                    epochs=_rng.randint(1, 2), lr=_rng.choice([0.01, 0.05, 0.1]),
                                                    seed=_rng.randrange(2**31)))
          for _fewest in (3, 2)]  # more ranks than the visible check's 2; uneven tails, a short last batch
# [collect]
_runs = [launch.launch(ddp.manual_average_worker, _size, args=(_config, average_gradients), timeout_s=60)
         for _size, _config in _cases]
_got = grading.collect("average_tests", [[_r["state"] for _r in _ranks] for _ranks in _runs])
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one run per case"
for (_w, _cfg), _states in zip(_cases, _got):
    assert type(_states) is list and len(_states) == _w, f"one state per rank ({_w})"
    _reference = grading.reference(f"02-ddp reference_train {_cfg!r} {_w}", lambda: ddp.reference_train(_cfg, _w)["state"])
    assert all(ddp.same_state(_s, _states[0]) for _s in _states), \
        f"with {_w} ranks the ranks drifted apart: is every gradient averaged over all ranks?"
    assert ddp.same_state(_states[0], _reference), \
        f"with {_w} ranks the result is not one process's on the global batches: divide the sum by the number of ranks"
### END HIDDEN TESTS

# %% [markdown]
# ### How much does all-reduce send?
# DDP hands each bucket of gradients to the backend's all-reduce, and the backend picks the algorithm:
# NCCL chooses ring, tree or NVLS (NVSwitch) itself, by message size and topology; gloo has algorithms of
# its own. The one to reason with is the **ring all-reduce**: the gradient is cut into `k` pieces that
# travel around a ring of the `k` devices, first summed, then shared. Each device sends (and receives)
# `2(k-1)/k` times the gradient's size — under twice the model, however many devices. DataParallel's device 0 broadcasts
# the weights to `k-1` devices and receives `k-1` gradients every step: its traffic grows with `k`.

# %% tags=["demonstration"]
model_bytes = 4 * models.n_parameters(models.MLP(256, 512, 256))
ks = list(range(2, 17))
ring = [ddp.ring_allreduce_bytes(model_bytes, k) / 1e6 for k in ks]
dp0 = [ddp.dataparallel_device0_bytes(model_bytes, k) / 1e6 for k in ks]
plt.figure(figsize=(6, 3))
plt.plot(ks, ring, "o-", label="DDP: each device (ring all-reduce)")
plt.plot(ks, dp0, "s-", label="DataParallel: device 0 (weights + gradients)")
plt.xlabel("devices k"); plt.ylabel("MB per step"); plt.legend(); plt.title(f"model of {model_bytes / 1e6:.1f} MB");


# %% [markdown]
# ### Gradient accumulation with `no_sync`
# To train with a global batch larger than fits, run several micro-batches before each optimizer
# step. Each backward in DDP all-reduces — wasteful when only the sum matters. Inside
# `with ddp_model.no_sync():` backward just accumulates locally; the first backward outside it
# all-reduces the accumulated gradients, once.
#
# "Once" means one round: DDP all-reduces **bucket by bucket**, one all-reduce per bucket, each launched
# as soon as its gradients are ready so that communication overlaps the rest of backward. A bucket holds
# up to 25 MiB (`bucket_cap_mb`); after the first iteration DDP rebuilds its buckets in the order the
# gradients arrived and caps the first at 1 MiB (`dist._DEFAULT_FIRST_BUCKET_BYTES`), so a 2 MiB model
# all-reduces twice per backward. The small model below fits one bucket: one all-reduce per step.
#
# ### Exercise 4 — accumulate with one all-reduce (3 points)
# Write `accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn)`: `micro_batches` is a list
# of `(x, y)` of equal sizes. Take one optimizer step whose gradient is that of the **mean** loss over all
# of the micro-batches, with one round of all-reduces (for this model, one all-reduce), then clear the gradients: when the function returns
# they are zero (or `None`), ready for the next call. The test calls it for several steps in a row,
# compares with as many large-batch steps, and counts DDP's all-reduces.

# %% nbgrader={"grade": false, "grade_id": "accumulate", "locked": false, "schema_version": 3, "solution": true}
def accumulate_and_step(ddp_model, optimizer, micro_batches, loss_fn):
    ### BEGIN SOLUTION
    *firsts, last = micro_batches
    with ddp_model.no_sync():
        for x, y in firsts:
            (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    x, y = last
    (loss_fn(ddp_model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "accumulate_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
_cfg = ddp.TrainConfig()
_ranks = launch.launch(ddp.accumulation_worker, 2, args=(_cfg, 4, accumulate_and_step, 2), timeout_s=30)
_calls = _ranks[0]["allreduces_per_step"]
assert 0 not in _calls, ("DDP did not all-reduce the gradients at all: the last backward must run outside no_sync, "
                         "or the ranks never average their gradients")
assert _calls == [1, 1], f"DDP all-reduced {_calls} times per optimizer step: run every backward but the last inside no_sync"
assert all(_ranks[0]["grads_cleared"]), "the gradients are still there when the function returns: clear them after the step"
assert ddp.same_state(_ranks[0]["state"], _ranks[1]["state"], atol=0), "the ranks' weights drifted apart"
assert ddp.same_state(_ranks[0]["state"], ddp.large_batch_reference(_cfg, 2, 4, 2)["state"]), \
    "not equal to large-batch steps: is the gradient that of the mean loss over the micro-batches?"
print("✓ accumulate_and_step passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases = []
for _fewest in (3, 2):  # the first case: more ranks than the visible check's 2, and micro-batches to accumulate
    _size, _count = _rng.randint(_fewest, 4), _rng.randint(_fewest - 1, 4)
    _repeat, _batch = _rng.randint(1, 3), _rng.randint(2, 8)
    _config = ddp.TrainConfig(n_samples=_size * _batch * _count * _repeat + _rng.randint(0, 16), batch_size=_batch,
                              lr=_rng.choice([0.01, 0.05, 0.1]), seed=_rng.randrange(2**31))
    _cases.append((_size, _count, _repeat, _config))
# [collect]
_runs = [launch.launch(ddp.accumulation_worker, _size, args=(_config, _count, accumulate_and_step, _repeat), timeout_s=60)
         for _size, _count, _repeat, _config in _cases]
_got = grading.collect("accumulate_tests", [[{_k: _rank[_k] for _k in ("state", "allreduces_per_step", "grads_cleared")}
                                             for _rank in _run] for _run in _runs])
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one run per case"
for (_w, _micro, _steps, _cfg), _ranks in zip(_cases, _got):
    assert type(_ranks) is list and len(_ranks) == _w, f"one result per rank ({_w})"
    _ref = grading.reference(f"02-ddp large_batch_reference {_cfg!r} {_w} {_micro} {_steps}",
                             lambda: ddp.large_batch_reference(_cfg, _w, _micro, _steps)["state"])
    for _r in _ranks:
        assert compare.is_record(_r, {"state": None, "allreduces_per_step": list, "grads_cleared": list}), "the collected results are incomplete"
        _calls = _r["allreduces_per_step"]
        assert 0 not in _calls, ("DDP did not all-reduce the gradients at all: the last backward must run outside no_sync, "
                                 "or the ranks never average their gradients")
        assert compare.same_values(_calls, [1] * _steps), \
            f"with {_w} ranks and {_micro} micro-batches DDP all-reduced {_calls} times per step, not once: run every backward but the last inside no_sync"
        assert compare.same_values(_r["grads_cleared"], [True] * _steps), "the gradients are still there when the function returns: clear them after the step"
        assert ddp.same_state(_r["state"], _ranks[0]["state"], atol=0), "the ranks' weights drifted apart"
        assert ddp.same_state(_r["state"], _ref), \
            f"with {_w} ranks and {_micro} micro-batches, {_steps} calls do not equal {_steps} large-batch steps: is the gradient that of the mean loss over the micro-batches?"
### END HIDDEN TESTS

# %% [markdown]
# ## 7. Checkpoints
#
# Every rank holds the same weights, so **one** rank saves: rank 0 writes `model.module.state_dict()`
# (no `module.` prefix, as in lesson 1). The others must not read the file before it is complete:
# `dist.barrier()` *after* the save makes everyone wait until all ranks reach it. When loading,
# `map_location` puts the tensors on *this* rank's device — without it, every rank would load onto the
# device the tensors were saved from (`cuda:0`) and crowd it.
#
# ### Exercise 5 — save once, load anywhere (2 points)
# Write `save_checkpoint(ddp_model, path)`, called by every rank: rank 0, and no other rank, writes a
# clean state dict to `path`; no rank returns before the file is complete. The test records which ranks
# write the file and slows rank 0 down, so a rank that does not wait notices.

# %% nbgrader={"grade": false, "grade_id": "checkpoint", "locked": false, "schema_version": 3, "solution": true}
def save_checkpoint(ddp_model, path):
    ### BEGIN SOLUTION
    if dist.get_rank() == 0:
        torch.save(ddp_model.module.state_dict(), path)
    dist.barrier()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "checkpoint_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
def _checkpoint_run(world_size, cfg, path):
    try:
        return launch.launch(ddp.checkpoint_worker, world_size, args=(cfg, path, save_checkpoint, 0.5), timeout_s=20)
    except launch.WorkerFailed as error:
        raise AssertionError(ddp.checkpoint_failure(error)) from None

_path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
_ranks = _checkpoint_run(2, ddp.TrainConfig(), _path)
_problem = ddp.checkpoint_problem(_ranks, ddp.TrainConfig())
assert _problem is None, _problem
_plain = ddp.TrainConfig().model()
_saved = torch.load(_path, weights_only=True)
_plain.load_state_dict(_saved)  # a plain model, no prefix
assert ddp.same_state(_saved, _ranks[0]["trained"]), "the file does not hold the trained weights"
print("✓ save_checkpoint passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases = []
for _size, _batch in [(_rng.randint(_fewest, 4), _rng.randint(2, 16)) for _fewest in (3, 2)]:  # more ranks than 2 too
    _cases.append((_size, ddp.TrainConfig(n_samples=_size * _batch + _rng.randint(0, 32), batch_size=_batch,
                                          lr=_rng.choice([0.01, 0.05, 0.1]), seed=_rng.randrange(2**31))))
# [collect]
def _record(ranks, path):
    return {"ranks": ranks, "file": grading.outcome(torch.load, path, weights_only=True)}

_runs = []
for _size, _config in _cases:
    _file = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    try:
        _runs.append(_record(_checkpoint_run(_size, _config, _file), _file))
    except AssertionError as _error:
        _runs.append({"failed": str(_error)})
_got = grading.collect("checkpoint_tests", _runs)
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one run per case"
for (_w, _cfg), _run in zip(_cases, _got):
    assert type(_run) is dict and "failed" not in _run, f"with {_w} ranks: {_run.get('failed')}"
    assert compare.is_record(_run, {"ranks": list, "file": tuple}) and len(_run["file"]) == 2, "the collected results are incomplete"
    _ranks = _run["ranks"]
    assert compare.same_values([_r["rank"] for _r in _ranks], list(range(_w))), f"one result per rank ({_w})"
    _problem = ddp.checkpoint_problem(_ranks, _cfg)
    assert _problem is None, f"with {_w} ranks: {_problem}"
    _how, _state = _run["file"]
    assert _how == "returned", f"with {_w} ranks: torch.load(path, weights_only=True) raised {_state}"
    _plain = _cfg.model()
    _plain.load_state_dict(_state)  # a plain model, no prefix
    assert ddp.same_state(_state, _ranks[0]["trained"]), "the file does not hold the trained weights"
### END HIDDEN TESTS

# %% [markdown]
# ### Several machines without a shared filesystem
# "Rank 0 saves, barrier, every rank loads" assumes that every rank can open rank 0's file: a
# filesystem shared by all nodes. Without one, the other nodes' ranks find nothing at `path`. Two ways out:
#
# * **send the state instead of the file**: rank 0 loads (or keeps) the state dict and
#   `dist.broadcast_object_list([state], src=0)` hands it to every rank over the process group;
# * **save once per node**: each node's `LOCAL_RANK` 0 writes to its own disk, a barrier, then every rank
#   loads from its node's copy.
#
# Below, each rank gets a folder of its own, like a node with its own disk. Rank 0 saves its trained
# weights there; the other ranks start from different weights, as a freshly started process would:

# %%
def private_disk_worker(rank, world_size, cfg, folder):
    disk = os.path.join(folder, f"node{rank}")  # this rank's own "disk"
    os.makedirs(disk, exist_ok=True)
    path = os.path.join(disk, "ckpt.pt")
    model = cfg.model() if rank == 0 else models.seeded(models.MLP, 100 + rank, in_features=cfg.in_features,
                                                          hidden=cfg.hidden, out_features=cfg.out_features)
    if rank == 0:
        torch.save(model.state_dict(), path)
    dist.barrier()
    found = os.path.exists(path)  # what "every rank loads the file" would find
    state = [torch.load(path, map_location="cpu", weights_only=True) if rank == 0 else None]
    dist.broadcast_object_list(state, src=0)  # rank 0's state dict, pickled, to every rank
    model.load_state_dict(state[0])
    return {"rank": rank, "file on my disk": found, "state": model.state_dict()}

with tempfile.TemporaryDirectory() as folder:
    results = launch.launch(private_disk_worker, WORLD, args=(ddp.TrainConfig(), folder))
for r in results:
    print(f"rank {r['rank']}: file on my disk {r['file on my disk']}, "
          f"weights equal rank 0's after the broadcast: {ddp.same_state(r['state'], results[0]['state'], atol=0)}")
assert [r["file on my disk"] for r in results] == [True] + [False] * (WORLD - 1), "without a shared filesystem only rank 0 finds the file"
assert all(ddp.same_state(r["state"], results[0]["state"], atol=0) for r in results), "every rank should end with rank 0's weights"


# %% [markdown]
# ## 8. Effective batch size and the learning rate
#
# With `k` processes each taking `b` samples, and `a` accumulation steps, one optimizer step sees
# `b·k·a` samples — the **global batch**. A larger batch gives a less noisy gradient, so you can take
# larger steps: the *linear scaling rule* (Goyal et al., 2017, "Accurate, Large Minibatch SGD")
# multiplies the learning rate by the factor the batch grew by, usually with a few warm-up epochs.
#
# ### Exercise 6 — global batch and scaled learning rate (2 points)
# `global_batch_and_lr(per_device_batch, world_size, accumulation_steps, base_lr, base_batch)` returns
# `(global_batch, lr)`: an `int` and a `float`, the learning rate scaled linearly from `base_lr`, which
# was tuned for `base_batch` (exactly: do not round it, tiny and huge rates alike).

# %% nbgrader={"grade": false, "grade_id": "scaling", "locked": false, "schema_version": 3, "solution": true}
def global_batch_and_lr(per_device_batch, world_size, accumulation_steps, base_lr, base_batch):
    ### BEGIN SOLUTION
    batch = per_device_batch * world_size * accumulation_steps
    return batch, float(base_lr * batch / base_batch)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "scaling_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_got = global_batch_and_lr(32, 8, 1, 0.1, 256)
assert type(_got) is tuple and len(_got) == 2, "return a tuple (global_batch, lr)"
assert type(_got[0]) is int and type(_got[1]) is float, f"return (int, float), got ({type(_got[0]).__name__}, {type(_got[1]).__name__})"
assert _got[0] == 256 and abs(_got[1] - 0.1) < 1e-12, "8 GPUs x 32 = 256 = the base batch: same learning rate"
print("✓ global_batch_and_lr passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_cases = [(32, 8, 1, 0.1, 256), (32, 8, 4, 0.1, 256), (16, 2, 1, 0.05, 16), (8, 3, 2, 0.2, 12), (64, 16, 1, 1e-3, 512), (4, 1, 8, 0.3, 64),
          (12, 8, 1, 3e-4, 256), (2, 1, 1, 2e-5, 3), (125, 8, 1, 10.0, 768), (1, 7, 3, 0.7, 9), (512, 64, 4, 1e-3, 256)]
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases += [(_rng.randint(1, 1024), _rng.randint(1, 512), _rng.randint(1, 16), 10 ** _rng.uniform(-6, 1), _rng.randint(1, 8192))
           for _ in range(40)]
# [collect]
_got = grading.collect("scaling_tests", [global_batch_and_lr(*_case) for _case in _cases])
# [judge]
def _type(value):
    return value.type_name if isinstance(value, grading.Other) else type(value).__name__

assert type(_got) is list and len(_got) == len(_cases), "one result per case"
for (_b, _k, _a, _lr, _base), _result in zip(_cases, _got):
    assert type(_result) is tuple and len(_result) == 2, "return a tuple (global_batch, lr)"
    assert type(_result[0]) is int and type(_result[1]) is float, \
        f"return (int, float), got ({_type(_result[0])}, {_type(_result[1])})"
    assert _result[0] == ddp.global_batch(_b, _k, _a), \
        "a global batch is not per_device_batch x world_size x accumulation_steps"
    # relative: tiny and huge rates alike; only float rounding of the same product (a last bit) passes
    assert compare.same_values(_result[1], ddp.linear_scaled_lr(_lr, _base, _result[0]), rtol=1e-12), \
        "a learning rate is not base_lr x global_batch / base_batch (exactly: not rounded)"
### END HIDDEN TESTS

# %% [markdown]
# ## 9. Your own DDP worker
#
# Put it together. `ddp.train_worker` is the course's DDP trainer; now write yours.
#
# ### Exercise 7 — a complete DDP worker (3 points)
# Write `my_ddp_worker(rank, world_size, cfg)`. It is started with `init_process_group=False`, like
# torchrun starts a script: the environment holds `MASTER_ADDR`, `MASTER_PORT`, `RANK` and
# `WORLD_SIZE`, and your worker must
# 1. join the process group (`launch.plan(world_size).backend`, a `timeout`),
# 2. build `cfg.dataset()`, a sampler with `cfg.sampler(dataset, world_size, rank)` and a
#    `DataLoader` with `batch_size=cfg.batch_size`,
# 3. wrap `cfg.model()` with DDP (`ddp.wrap` does it for this rank's device),
# 4. train `cfg.epochs` epochs of SGD (`lr=cfg.lr`, `F.mse_loss`), calling `set_epoch` every epoch (a new
#    epoch number every epoch, the same on every rank: `0, 1, …` as above, or `1, 2, …`),
# 5. all-reduce the last batch's loss into the mean over the ranks, leave the group
#    (`dist.destroy_process_group()`: the tests check that the worker returns outside it), and
# 6. return `{"state": <the model's clean state dict>, "mean_loss": <that mean, a float>}`.

# %% nbgrader={"grade": false, "grade_id": "worker", "locked": false, "schema_version": 3, "solution": true}
def my_ddp_worker(rank, world_size, cfg):
    ### BEGIN SOLUTION
    from datetime import timedelta

    dist.init_process_group(launch.plan(world_size).backend, timeout=timedelta(seconds=60))
    dataset = cfg.dataset()
    sampler = cfg.sampler(dataset, world_size, rank)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler)
    model = ddp.wrap(cfg.model())
    device = launch.device()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    state = checkpoints.clean_state_dict(model)
    dist.destroy_process_group()
    return {"state": state, "mean_loss": mean_loss.item() / world_size}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "worker_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
_cfg = ddp.TrainConfig(epochs=2)
# each rank runs my_ddp_worker under ddp.share_worker: its dataset holds only the samples its own sampler takes,
# other numbers elsewhere, and it reports whether the worker left the process group
_ranks = launch.launch(ddp.share_worker, 2, args=(my_ddp_worker, _cfg), init_process_group=False, timeout_s=60)
_problem = ddp.share_worker_problem(_ranks, _cfg, 2)
assert _problem is None, _problem
print("✓ my_ddp_worker passes this check; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_cases = [(_rng.randint(_fewest, 4), ddp.TrainConfig(n_samples=_rng.randint(64, 128), batch_size=_rng.randint(4, 16),
                                                    epochs=_rng.randint(2, 3), lr=_rng.choice([0.01, 0.05, 0.1]),
                                                    seed=_rng.randrange(1, 2**31), data_seed=_rng.randrange(2**31)))
          for _fewest in (3, 2)]  # more ranks than 2 too; the data's own seed: no rank makes samples it was not given
# [collect]
_runs = [launch.launch(ddp.share_worker, _size, args=(my_ddp_worker, _config), init_process_group=False, timeout_s=60)
         for _size, _config in _cases]
_got = grading.collect("worker_tests", _runs)
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "one run per case"
for (_w, _cfg), _ranks in zip(_cases, _got):
    # left the group; the weights of one process trained on the global batches (epochs numbered from 0 or 1), which
    # ranks that only had their own samples reach by averaging their gradients
    _problem = ddp.share_worker_problem(_ranks, _cfg, _w)
    assert _problem is None, f"in a hidden run: {_problem}"
### END HIDDEN TESTS

# %% [markdown]
# ## 10. Quick check
#
# * **q1** — 10 samples, 4 ranks, `DistributedSampler(shuffle=False)`: how many samples does each rank get? (an `int`)
# * **q2** — Which backend for 8 NVIDIA GPUs? (a) gloo (b) nccl (c) mpi
# * **q3** — You forgot `sampler.set_epoch(epoch)`. What happens? (a) a crash (b) every epoch sees the
#   same order (c) ranks see the same samples
# * **q4** — One rank has an extra batch. Without a fix, the others… (a) skip it (b) wait until the
#   process-group timeout (c) average it in
# * **q5** — 4 GPUs × 64 samples, 2 accumulation steps, base lr 0.1 tuned for 128: the linearly scaled lr? (a `float`)

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true}
quiz = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None}
### BEGIN SOLUTION
quiz = {"q1": 3, "q2": "b", "q3": "b", "q4": "b", "q5": 0.4}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "quiz_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert type(quiz) is dict and set(quiz) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five: quiz is a dict with the keys q1 ... q5"
assert type(quiz["q1"]) is int, f"q1 is a number of samples, an int; got {type(quiz['q1']).__name__}"
assert type(quiz["q5"]) is float, f"q5 is a learning rate, a float; got {type(quiz['q5']).__name__}"
for _q in ("q2", "q3", "q4"):
    assert type(quiz[_q]) is str and len(quiz[_q]) == 1 and quiz[_q].lower() in "abc", f"{_q}: answer with one letter, a, b or c"
print("✓ quiz is answered in the right form; the hidden tests check the answers when your notebook is graded")
### BEGIN HIDDEN TESTS
# [collect]
_got = grading.collect("quiz_tests", quiz)
# [judge]
assert type(_got) is dict and set(_got) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five: quiz is a dict with the keys q1 ... q5"
assert type(_got["q1"]) is int, "q1 is a number of samples, an int"
assert type(_got["q5"]) is float, "q5 is a learning rate, a float"
for _q in ("q2", "q3", "q4"):
    assert type(_got[_q]) is str and len(_got[_q]) == 1 and _got[_q].lower() in "abc", f"{_q}: answer with one letter, a, b or c"
assert _got["q1"] == len(DistributedSampler(range(10), num_replicas=4, rank=0, shuffle=False)), \
    "q1 is wrong: what does DistributedSampler do with the samples that do not divide evenly?"
for _q, _right in zip(("q2", "q3", "q4"), "bbb"):
    assert _got[_q].lower() == _right, f"{_q} is wrong"
assert abs(_got["q5"] - ddp.linear_scaled_lr(0.1, 128, ddp.global_batch(64, 4, 2))) < 1e-12, \
    "q5 is wrong: which samples make up the global batch?"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
#
# * DDP runs one process per device; each keeps its replica and its optimizer, and after backward the
#   gradients are averaged by an all-reduce — the result equals one process on the global batch.
# * A process group has a backend (nccl for GPUs, gloo for CPUs), ranks, and — always set it — a timeout.
# * Launch with `mp.spawn` (workers must be importable) or `torchrun` (scripts; `--standalone` on one
#   machine, `--nnodes` with a c10d rendezvous across machines).
# * `DistributedSampler` shards (and pads) the data, reshuffling the whole dataset each epoch; call
#   `set_epoch` every epoch; uneven batch counts hang — equalise them or use `join()`.
# * `no_sync` accumulates without communicating; save on rank 0, `barrier`, load with `map_location` —
#   on several machines that needs a shared filesystem, or broadcast the state from rank 0 instead.
# * Global batch = per-device batch × processes × accumulation steps; scale the learning rate with it.
#
# Next: lesson 3, mixed precision.
