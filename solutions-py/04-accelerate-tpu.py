# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 4 — Hugging Face Accelerate and TPUs
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/04-accelerate-tpu/04-accelerate-tpu.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/04-accelerate-tpu/04-accelerate-tpu.ipynb)
#
# Lessons 1–3 wrote the multi-device plumbing by hand. **Part A** hands it to Hugging Face
# Accelerate: one training loop that runs unchanged on a CPU, one GPU, many GPUs or a TPU.
# **Part B** looks under the hood of TPUs with `torch_xla` — lazy tensors, graph compilation, data
# parallelism over every TPU device, bf16 mixed precision — and at PyTorch Lightning's `Trainer(accelerator="tpu")`.
#
# TPUs come in different shapes: Colab's free TPU is a single **v5e** chip (v5e-1, since 2025), Kaggle's
# is **eight** v5e chips (v5e-8). The lesson asks the machine how many XLA devices it has and uses them
# all. Without a TPU, Part B runs for real on **XLA:CPU**: PJRT's CPU client with virtual devices
# (8 by default). XLA:CPU shares torch_xla's front end with the TPU — lazy tracing, graph cutting,
# the graph cache, SPMD partitioning — but not the TPU's compiler backend, and nothing of its speed.
# On a machine without `torch_xla` (macOS, Windows) Part B says so and Part A still runs.

# %% [markdown]
# ## Setup
# On Colab or Kaggle this installs the course's `helpers` package and its lesson 4 extras (accelerate and
# lightning, at the versions the course is tested with), nothing else: the runtime's own `torch` (and on TPU
# runtimes its `torch_xla`) stay as they are.

# %% tags=["prelude"]
import importlib.util
import os
import subprocess
import sys

COURSE_REPO = "https://github.com/multi-device-course/pytorch-multi-device-course"
# This lesson needs the course's `helpers` package, accelerate and lightning (at the versions the
# course is tested with). On Colab or Kaggle pip installs them from COURSE_REPO and leaves the runtime's
# own torch and torch_xla alone; in a course checkout (`make lab`) they are already there.
NEEDS = ["helpers", "accelerate", "lightning"]
# Part B needs torch_xla. Where this runtime lacks it and a wheel matching its torch exists, this
# cell prints the pip command; set INSTALL_TORCH_XLA = True to let it install it.
INSTALL_TORCH_XLA = False
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
    package = f"multi-device-course-helpers[lesson4] @ git+{COURSE_REPO}"
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
versions.offer_torch_xla(install=INSTALL_TORCH_XLA)
hw = hardware.print_summary()

# %% tags=["prelude"]
import json
import os
import tempfile

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from helpers import accel  # sets USE_TORCH_XLA=0 unless there is a TPU: see section A6
from helpers import commands, compare, ddp, grading, lightning_demo, plotting, tpu_stack, xla

XLA = xla.available()
print("torch_xla:", "installed" if XLA else xla.missing())
# the servers that later cells' processes fork from import torch (and torch_xla) now, in the background
accel.warm_up()
xla.warm_up()

# %% [markdown]
# # Part A — Accelerate
#
# ## A1. The loop, converted
#
# Lesson 2's DDP loop needed a process group, a `DistributedSampler`, the `DDP` wrapper and device
# moves. With Accelerate:
#
# ```python
# accelerator = Accelerator()                       # reads the launch: processes, device, precision
# model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
# for x, y in loader:                               # already on the right device, already sharded
#     loss = F.mse_loss(model(x), y)
#     accelerator.backward(loss)                    # instead of loss.backward(): scaling, syncing
#     optimizer.step()
#     optimizer.zero_grad()
# ```
#
# `prepare` wraps the model (in DDP when there are several processes), shards the data loader and
# moves batches to the device. `helpers.accel.train_worker` is this loop; `accel.launch(fn, 2)` runs it in
# 2 processes and brings back each process's result. Each process gets its own GPU when there are
# enough GPUs, and a share of the CPU otherwise (section A4 says how it starts them):

# %% tags=["demonstration"]
runs = accel.launch(accel.train_worker, 2)
print({k: runs[0][k] for k in ("distributed_type", "device", "num_processes")})
print("both processes hold the same weights:", ddp.same_state(runs[0]["state"], runs[1]["state"], atol=0))
print("equal to one process on the same global batches:", ddp.same_state(runs[0]["state"], accel.reference()["state"]))


# %% [markdown]
# Accelerate shards **batches**, not samples: process `r` gets batches `r, r+k, r+2k, …` of the
# loader, so one step sees `k` consecutive batches — which is what `accel.reference` trains on in a
# single process. The distributed type says what really ran: `MULTI_CPU` (gloo) on CPU processes,
# `MULTI_GPU` (nccl) with one GPU per process.
#
# ### Exercise 1 — convert a loop (3 points)
# Write `my_accelerate_worker(n_samples, batch_size, epochs, lr, seed)`: train `accel.model(seed)` on
# `DataLoader(accel.dataset(n_samples, seed), batch_size=batch_size)` with `torch.optim.SGD(lr=lr)` and
# `F.mse_loss` for `epochs` epochs, using an Accelerator from `accel.accelerator()`, `prepare` and
# `accelerator.backward`. Return the trained weights as a state dict **without** any wrapper prefix,
# on the CPU (`accelerator.unwrap_model`). The tests also launch it as `accelerate launch
# --gradient_accumulation_steps 2` would (see A3): its Accelerator then accumulates, and only
# `accelerator.backward(loss)`, not `loss.backward()`, scales the loss for it. Whether your step is inside
# `with accelerator.accumulate(model):` or not, the weights must be what Accelerate's own loop gives.

# %% nbgrader={"grade": false, "grade_id": "convert", "locked": false, "schema_version": 3, "solution": true}
def my_accelerate_worker(n_samples, batch_size, epochs, lr, seed):
    ### BEGIN SOLUTION
    accelerator = accel.accelerator()
    model = accel.model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(accel.dataset(n_samples, seed), batch_size=batch_size)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(epochs):
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    return {k: v.cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "convert_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
_states = accel.launch(my_accelerate_worker, 2, args=(128, 16, 1, 0.05, 0))
_keys = list(accel.model(0).state_dict())
assert all(isinstance(s, dict) for s in _states), f"return the state dict, not {type(_states[0]).__name__}"
assert all(list(s) == _keys for s in _states), f"return the unwrapped model's state dict: keys {list(_states[0])}, expected {_keys}"
assert all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for s in _states for v in s.values()), "the weights must be tensors on the CPU"
assert ddp.same_state(_states[0], accel.reference(128, 16, 1, 0.05, 0)["state"]), "not equal to the single-process reference (one step sees one batch from each process)"
print("✓ my_accelerate_worker passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new trainings for every submission graded (helpers.grading)
# (n_samples, batch_size, epochs, lr, seed), n_samples whole global batches (accel.reference): three trainings on 3 processes
# (the first for 2 epochs), then two on 2 processes launched as `accelerate launch --gradient_accumulation_steps 2` launches
# them: accelerator.backward divides each loss by 2, loss.backward() does not (without accumulation or fp16 the two give
# the same weights)
_ACCUMULATION_STEPS = 2
_cases, _accumulating = [], []
for _i in range(5):
    _processes, _steps = (3, 1) if _i < 3 else (2, _ACCUMULATION_STEPS)
    _batch = _rng.randint(1, 12)
    (_cases if _i < 3 else _accumulating).append((_batch * _steps * _processes * _rng.randint(1, 6), _batch,
                                                  2 if _i == 0 else _rng.randint(1, 3), _rng.choice([0.02, 0.05, 0.1, 0.2]),
                                                  _rng.randrange(2**31)))
# [collect]
def _train_each(cases):  # several trainings in each process of one launch
    return [my_accelerate_worker(*args) for args in cases]


def _record(state):  # a returned state dict, and the device each of its tensors was on
    devices = [v.device.type for v in state.values() if isinstance(v, torch.Tensor)] if isinstance(state, dict) else []
    return {"state": state, "devices": devices}


_per_process = accel.launch(_train_each, 3, args=(_cases,))
_per_process_accumulating = accel.launch(_train_each, 2, args=(_accumulating,),
                                         env={"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": str(_ACCUMULATION_STEPS)})
_got = grading.collect("convert_tests", {"3 processes": [[_record(p[i]) for p in _per_process] for i in range(len(_cases))],
                                         "accumulating": [[_record(p[i]) for p in _per_process_accumulating]
                                                          for i in range(len(_accumulating))]})
# [judge]
def _check(records, processes, refs, message):  # refs: the weights a right loop may end with
    assert type(records) is list and len(records) == processes, f"expected a result from each of the {processes} processes"
    for r in records:
        assert compare.is_record(r, {"state": None, "devices": list}), "the collected results are incomplete"
        s = r["state"]
        assert isinstance(s, dict), f"return the state dict, not {type(s).__name__}"
        assert list(s) == list(refs[0]), f"return the unwrapped model's state dict: keys {list(s)}, expected {list(refs[0])}"
        assert all(isinstance(v, torch.Tensor) for v in s.values()) and r["devices"] == ["cpu"] * len(s), "the weights must be tensors on the CPU"
        assert any(ddp.same_state(s, ref) for ref in refs), message


assert compare.is_record(_got, {"3 processes": list, "accumulating": list}), "the collected results are incomplete"
assert len(_got["3 processes"]) == len(_cases), "a result for each case"
for _args, _records in zip(_cases, _got["3 processes"]):
    _ref = grading.reference(f"04 accel.reference{_args}, num_processes=3", lambda: accel.reference(*_args, num_processes=3)["state"])
    _check(_records, 3, [_ref], "not equal to the reference on other data, seeds, epochs or process counts")
# with accumulation: Accelerate's loop inside accelerator.accumulate(model) (a step every 2 batches) or outside it
# (a step every batch on half the gradient); a loop with loss.backward() trains neither
assert len(_got["accumulating"]) == len(_accumulating), "a result for each case"
for _args, _records in zip(_accumulating, _got["accumulating"]):
    _refs = grading.reference(f"04 accel.accumulation_references{_args}, num_processes=2, accumulation_steps={_ACCUMULATION_STEPS}",
                              lambda: accel.accumulation_references(*_args, 2, _ACCUMULATION_STEPS))
    _check(_records, 2, [_refs["accumulate"], _refs["every batch"]],
           "launched with gradient accumulation (accelerate launch --gradient_accumulation_steps 2), the weights are not "
           "what Accelerate's loop gives: call accelerator.backward(loss), which scales the loss for the accumulation")
### END HIDDEN TESTS

# %% [markdown]
# ## A2. Metrics over every process: `gather` vs `gather_for_metrics`
#
# To evaluate, each process computes on its shard and the results are collected. With 10 samples,
# batches of 3 and 2 processes, the shards do not divide evenly: Accelerate keeps every process busy by
# **repeating** samples from the start. `gather` returns those duplicates; `gather_for_metrics` drops them:

# %% tags=["demonstration"]
for r in accel.launch(accel.gather_worker, 2, args=(10, 3)):
    print(f"process {r['rank']} saw {r['local']}")
print("gather:            ", len(r["gather"]), r["gather"])
print("gather_for_metrics:", len(r["gather_for_metrics"]), r["gather_for_metrics"])


# %% [markdown]
# An accuracy computed from `gather` would count samples 0 and 1 twice.
#
# ### Exercise 2 — how many samples come back? (2 points)
# `gather_lengths(n_samples, batch_size, num_processes)` returns `(len_gather, len_gather_for_metrics)`
# for an evaluation loop like the one above, on `num_processes` ≥ 2 processes (every process iterates its whole shard, batches padded to
# even counts as Accelerate does by default). Two `int`s.

# %% nbgrader={"grade": false, "grade_id": "gather", "locked": false, "schema_version": 3, "solution": true}
def gather_lengths(n_samples, batch_size, num_processes):
    ### BEGIN SOLUTION
    per_step = batch_size * num_processes
    steps = -(-n_samples // per_step)
    return steps * per_step, n_samples
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "gather_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_got = gather_lengths(10, 3, 2)
assert type(_got) is tuple and len(_got) == 2 and all(type(v) is int for v in _got), f"return a tuple of two ints, got {_got!r}"
assert _got == (12, 10), f"10 samples, batches of 3, 2 processes: gather gave 12 samples above, gather_for_metrics 10; got {_got}"
print("✓ gather_lengths passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new cases for every submission graded (helpers.grading)
_processes = sorted(_rng.sample(range(2, 9), 3))  # three process counts, 2 to 8
_cases = [(1, 1), (2, 4), (7, 7)]  # fewer samples than a step: every process pads
_cases += [(_rng.randint(1, 150), _rng.randint(1, 16)) for _ in range(9)]
_batch = _rng.randint(1, 8)
_cases.append((_batch * _processes[0] * _rng.randint(1, 6), _batch))  # whole steps on the first process count: no padding
# [collect]
_got = grading.collect("gather_tests", [[gather_lengths(_n, _b, _p) for _n, _b in _cases] for _p in _processes])
# [judge]
assert type(_got) is list and len(_got) == len(_processes), "a result for each process count"
for _p, _mine in zip(_processes, _got):
    assert type(_mine) is list and len(_mine) == len(_cases), "a result for each case"
    for (_n, _b), _g in zip(_cases, _mine):
        assert type(_g) is tuple and len(_g) == 2 and all(type(v) is int for v in _g), f"return a tuple of two ints, got {_g!r}"
        # what gather and gather_for_metrics return on _p processes, from Accelerate's own sharding in this process
        assert _g == accel.gather_lengths_reference(_n, _b, _p), "wrong for other sample counts, batch sizes or process counts"
### END HIDDEN TESTS

# %% [markdown]
# ## A3. Gradient accumulation, mixed precision, checkpoints
#
# * `Accelerator(gradient_accumulation_steps=k)` plus `with accelerator.accumulate(model):` around the
#   step: the optimizer really steps every `k` batches and DDP skips the all-reduce in between
#   (lesson 2's `no_sync`).
# * `Accelerator(mixed_precision="bf16")` runs the forward under autocast (lesson 3). On a CPU, `"fp16"`
#   is accepted and silently ignored — see the dtype the first layer computes in:

# %% tags=["demonstration"]
acc_runs = accel.launch(accel.train_worker, 2, args=(256, 8, 2, 0.05, 0, "no", 2))
print("batch 8 x 2 processes x 2 accumulation steps equals batch 16 x 2 processes:",
      ddp.same_state(acc_runs[0]["state"], accel.reference()["state"]))
for precision in ("bf16", "fp16"):
    r = accel.launch(accel.train_worker, 2, args=(256, 16, 1, 0.05, 0, precision))[0]
    print(f"mixed_precision={precision!r} on {r['device']}: the first layer computes in {r['compute_dtype']}")

# %% [markdown]
# `accelerator.save_state(folder)` writes the model, the optimizer, the RNG states (and a GradScaler's)
# in one go; `load_state(folder)` restores them. `accelerator.print` prints on the main process only:

# %% tags=["demonstration"]
with tempfile.TemporaryDirectory() as folder:
    r = accel.launch(accel.checkpoint_worker, 2, args=(folder,))
print("weights restored on every process:", [x["equal"] for x in r])

# %% [markdown]
# ## A4. Launching
#
# * From a notebook: `notebook_launcher(fn, args, num_processes=k)` **forks** the notebook's own process
#   `k` times. Three traps come with it, and they are why `accel.launch` starts its processes from a
#   fork server instead (a clean process that imported torch but never ran it), with the variables
#   torchrun would set:
#   1. After the notebook has run any multi-threaded operation (a matmul is enough), the children can
#      **hang** forever in their first matmul: GNU OpenMP's thread pool does not survive a fork. CUDA,
#      once initialised in the notebook, does not survive one either.
#   2. On **Colab** with fewer than two GPUs it ignores `num_processes` and runs `fn` once, in the
#      notebook ("Launching training on one CPU.").
#   3. With **one GPU** it still starts `k` processes, all on `cuda:0`; NCCL refuses two ranks on one GPU.
# * Scripts: `accelerate launch` or `torchrun`. `helpers/accelerate_script.py` is the loop above as a script.
#   On GPUs: `accelerate launch --multi_gpu --num_processes 2 -m helpers.accelerate_script`.
#   On CPUs there is a trap: `accelerate launch --cpu --num_processes 2` starts **one** process. Two
#   commands that really give two CPU processes are `accelerate launch --multi_gpu --num_processes 2 ...`
#   with an `Accelerator(cpu=True)` in the script (what `accel.accelerator()` does without a GPU), and:

# %% tags=["demonstration"]
# commands.TORCHRUN is `python -m torch.distributed.run`: torchrun, wherever the interpreter is (on Colab the
# `torchrun` command is not next to `sys.executable`); commands.run stops it and its workers if interrupted
out = commands.run([*commands.TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "helpers.accelerate_script"],
                   env={"ACCELERATE_USE_CPU": "true"}, timeout_s=180)
for line in sorted(l for l in out.stdout.splitlines() if l.startswith("{")):
    print(line)

# %% [markdown]
# ## A5. One script, any hardware
#
# | hardware | launch | what Accelerate picks |
# |---|---|---|
# | CPU only | `ACCELERATE_USE_CPU=true torchrun --nproc_per_node=N ...` | `MULTI_CPU`, gloo |
# | 1 GPU | `python script.py` | `NO` (single process), `cuda:0` |
# | N GPUs | `accelerate launch --multi_gpu --num_processes N ...` | `MULTI_GPU`, nccl, DDP |
# | TPU (1 chip on Colab, 8 on Kaggle) | `accelerate launch --tpu ...`, or `notebook_launcher(fn)` in a Colab/Kaggle TPU notebook | `XLA`, one process per TPU device |
#
# ## A6. A trap: Accelerate and `torch_xla`
#
# When `torch_xla` is installed, Accelerate believes it is on a TPU — even with `cpu=True` — and puts
# everything on `xla:0`. That is why `helpers.accel` sets `USE_TORCH_XLA=0` before importing
# accelerate (unless a TPU is really there). Here is the trap: `accel.accelerator_device(extra_env)` asks
# `Accelerator(cpu=True)` in a process of its own, whose environment is this notebook's without `USE_TORCH_XLA`,
# plus `extra_env`. (That process is forked from a server that has imported torch alone: Accelerate and
# `torch_xla` read these variables when they are imported, so each probe imports them anew.)

# %% tags=["demonstration"]
print("without USE_TORCH_XLA:", accel.accelerator_device({}))


# %% [markdown]
# ### Exercise 3 — fix the trap (2 points)
# Write `accelerate_env(tpu_present)`: the environment variables (a `dict` of `str` to `str`) to set
# before importing accelerate so that, with `torch_xla` installed, `Accelerator(cpu=True)` runs on the
# CPU when there is no TPU — and nothing that would stop it from using a real TPU when there is one
# (with a TPU, only variables known to keep Accelerate and `torch_xla` on it, or none: the tests refuse any other).

# %% nbgrader={"grade": false, "grade_id": "trap", "locked": false, "schema_version": 3, "solution": true}
def accelerate_env(tpu_present):
    ### BEGIN SOLUTION
    return {} if tpu_present else {"USE_TORCH_XLA": "0"}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "trap_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_env = accelerate_env(False)
assert type(_env) is dict and all(type(k) is str and type(v) is str for k, v in _env.items()), f"return a dict of str to str, got {_env!r}"
_device = accel.accelerator_device(_env)
assert _device.startswith("cpu"), f"with {_env}, Accelerator(cpu=True) still runs on: {_device}"
print("✓ accelerate_env passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
# [collect]
_got = grading.collect("trap_tests", {"no TPU": accelerate_env(False), "TPU": accelerate_env(True)})
# [judge]
def _is_env(env):
    return type(env) is dict and all(type(k) is str and type(v) is str for k, v in env.items())


assert compare.is_record(_got, {"no TPU": None, "TPU": None}), "the collected results are incomplete"
_env, _tpu_env = _got["no TPU"], _got["TPU"]
assert _is_env(_env), f"return a dict of str to str, got {_env!r}"
_device = grading.reference(f"04 Accelerator(cpu=True) with {sorted(_env.items())}", lambda: accel.accelerator_device(_env))
assert _device.startswith("cpu"), f"with {_env}, Accelerator(cpu=True) still runs on: {_device}"
assert _device == "cpu DistributedType.NO", "not a plain CPU Accelerator"
assert _is_env(_tpu_env), "with a TPU: return a dict of str to str"
# judged by meaning, not probed: a probe's verdict would depend on the judging machine (without a TPU,
# PJRT_DEVICE=TPU fails, rightly so). Accepted: any subset of USE_TORCH_XLA true, PJRT_DEVICE=TPU, ACCELERATE_USE_CPU false
_problem = accel.tpu_env_problem(_tpu_env)
assert _problem is None, _problem
### END HIDDEN TESTS

# %% [markdown]
# # Part B — TPUs with `torch_xla`
#
# ## B1. XLA devices
#
# A TPU is driven through XLA, a compiler. `torch_xla` gives PyTorch an `xla` device; PJRT is the
# runtime that talks to the hardware (`PJRT_DEVICE=TPU`), or to the CPU (`PJRT_DEVICE=CPU`, with
# `CPU_NUM_DEVICES` virtual devices). The experiments below run in fresh processes, because
# `torch_xla` reads these settings once per process. (Without a TPU, `xla.run` forks each one from a
# server process that has already imported `torch_xla`: the import takes seconds, the fork a moment.)

# %% tags=["demonstration"]
if XLA:
    print(xla.run(xla.device_summary))

# %% [markdown]
# ## B2. Lazy tensors and compilation
#
# Operations on an XLA tensor do not run: they are **recorded** into a graph. `torch_xla.sync()` (once
# `xm.mark_step()`) cuts the graph, compiles it — the first time a graph of that shape is seen — and
# runs it. Compilation is slow; a cached graph is fast. So the rule on TPUs is: **the same shapes,
# step after step**. Count the compilations (`torch_xla.debug.metrics`) for a training loop under
# changes you will meet. The five runs share one XLA process, one after the other
# (`xla.count_compiles_each`); the graph cache lasts as long as the process, so each run gets a feature
# size of its own and finds none of the others' graphs already compiled. (Every `xla.run` is a new process
# that compiles afresh; a program of your own can keep compiled graphs across processes with torch_xla's
# persistent cache, `torch_xla.runtime.initialize_cache(path)`, called before any XLA computation.)

# %% tags=["demonstration"]
experiments = {
    "fixed batch of 8": dict(batch_sizes=[8] * 8),
    "smaller last batch": dict(batch_sizes=[8] * 7 + [5]),
    "Adam instead of SGD": dict(batch_sizes=[8] * 8, optimizer="adam"),
    "loss.item() every step": dict(batch_sizes=[8] * 8, item_every_step=True),
    "no sync in the loop": dict(batch_sizes=[8] * 8, sync_every_step=False),
}
if XLA:
    counts = dict(zip(experiments, xla.run(xla.count_compiles_each, list(experiments.values()))))
    for name, c in counts.items():
        print(f"{name:24} compilations {c['compiles']:2}   graph executions {c['executions']:2}")
    fig, axes = plt.subplots(1, 2, figsize=(12, 3))
    plotting.plot_bars({k.replace(" ", "\n", 1): v["compiles"] for k, v in counts.items()}, "compilations", ax=axes[0])
    axes[0].tick_params(axis="x", labelsize=7)
    axes[1].plot([s * 1e3 for s in counts["fixed batch of 8"]["step_seconds"]], "o-", label="fixed batch")
    axes[1].plot([s * 1e3 for s in counts["smaller last batch"]["step_seconds"]], "s-", label="smaller last batch")
    axes[1].set_yscale("log"); axes[1].set_xlabel("step"); axes[1].set_ylabel("ms"); axes[1].legend(fontsize=8)
    axes[1].set_title("step time: compiling steps stand out", fontsize=9);


# %% [markdown]
# * A smaller last batch is a new shape: a second compilation (use `drop_last=True`, or pad).
# * Adam's first step creates its state — a graph of its own.
# * `loss.item()` needs the value *now*: the pending graph runs early, then the rest at the sync — twice
#   the executions. Log every N steps instead.
# * Without any sync the whole loop becomes one huge graph that only runs at the end.
#
# ### Exercise 4 — predict the compilations (2 points)
# `predict_compiles(batch_sizes, optimizer)` returns the number of compilations of this loop (a sync
# after every step) for the given batch size at each step, with `optimizer` `"sgd"` or `"adam"`.

# %% nbgrader={"grade": false, "grade_id": "compiles", "locked": false, "schema_version": 3, "solution": true}
def predict_compiles(batch_sizes, optimizer):
    ### BEGIN SOLUTION
    if optimizer == "adam":
        return 1 + len(set(batch_sizes[1:]))
    return len(set(batch_sizes))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "compiles_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_got = predict_compiles([8] * 8, "sgd")
assert type(_got) is int, f"return an int, got {type(_got).__name__}"
assert _got == 1, f"a fixed batch of 8 with SGD compiled once above; got {_got}"
_got = predict_compiles([8] * 7 + [5], "sgd")
assert _got == 2, f"a smaller last batch compiled twice above; got {_got}"
_got = predict_compiles([8] * 8, "adam")
assert type(_got) is int and _got == 2, f"a fixed batch of 8 with Adam compiled twice above; got {_got!r}"
print("✓ predict_compiles passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_cases = [([4, 8, 8, 4, 2], "sgd"), ([8, 8, 4], "adam"), ([4, 8, 8, 8], "adam"), ([8], "adam"),
          ([8] * 8, "sgd"), ([8] * 7 + [5], "sgd"), ([8] * 8, "adam")]  # measured once for a grading's submissions
_rng = grading.hidden_random()  # new sequences for every submission graded (helpers.grading)
_sizes = _rng.sample(range(1, 33), 3)
_sgd = [_rng.choice(_sizes[:2]) for _ in range(_rng.randint(1, 4))] + _sizes[:2]  # both sizes: two graphs
_rng.shuffle(_sgd)
_adam = [_sizes[2]] + [_rng.choice(_sizes[1:]) for _ in range(_rng.randint(1, 4))]  # Adam's first step, then one or two sizes
_drawn = [(_sgd, "sgd"), (_adam, "adam")]  # at most 5 graphs to compile for the judge
# [collect]
_got = grading.collect("compiles_tests", [predict_compiles(list(b), o) for b, o in _cases + _drawn])
# [judge]
assert type(_got) is list and len(_got) == len(_cases) + len(_drawn), "a result for each case"
assert all(type(g) is int for g in _got), "return an int"
if XLA:
    def _count_each(cases):  # in one XLA process: a feature size of its own per case keeps the cases' graphs apart
        return [xla.count_compiles(b, optimizer=o, features=3 + i)["compiles"] for i, (b, o) in enumerate(cases)]

    _real = grading.reference(f"04 count_compiles of {_cases}", lambda: xla.run(_count_each, _cases))
    _real_drawn = grading.reference(f"04 count_compiles of {_drawn}", lambda: xla.run(_count_each, _drawn))
    assert _got[len(_cases):] == _real_drawn, "wrong for other batch-size sequences"
else:
    _real = [3, 3, 2, 1, 1, 2, 2]  # measured with torch_xla 2.9 on XLA:CPU (the drawn sequences need torch_xla to judge)
    _flag = grading.JUDGED_WITHOUT_XLA
assert _got[:len(_cases)] == _real, "wrong for other batch-size sequences"
### END HIDDEN TESTS

# %% [markdown]
# ## B3. Dynamic shapes: pad to buckets
#
# Text comes in every length. Twelve different sequence lengths mean twelve compilations. Padding each
# batch up to one of a few **bucket** lengths (with a mask, so the padding changes nothing) caps the
# count at the number of buckets:

# %% tags=["demonstration"]
lengths = list(range(2, 14))
if XLA:
    raw, bucketed = xla.run(xla.count_compiles_each, [
        dict(batch_sizes=[4] * len(lengths), lengths=lengths),
        dict(batch_sizes=[4] * len(lengths), lengths=lengths, pad_to=lambda n: min(b for b in (4, 8, 16) if b >= n)),
    ])
    print(f"{len(set(lengths))} lengths as they come: {raw['compiles']} compilations; padded to buckets 4/8/16: {bucketed['compiles']}")


# %% [markdown]
# ### Exercise 5 — bucketing (2 points)
# `bucket_length(length, buckets)` returns the smallest bucket (from the sorted tuple `buckets`) that
# is `>= length`, and raises `ValueError` when `length` is larger than every bucket.

# %% nbgrader={"grade": false, "grade_id": "bucket", "locked": false, "schema_version": 3, "solution": true}
def bucket_length(length, buckets):
    ### BEGIN SOLUTION
    for bucket in buckets:
        if bucket >= length:
            return bucket
    raise ValueError(f"length {length} exceeds the largest bucket {buckets[-1]}")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "bucket_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_got = bucket_length(5, (4, 8, 16))
assert type(_got) is int and _got == 8, f"a length of 5 goes into the bucket of 8; got {_got!r}"
_got = bucket_length(4, (4, 8, 16))
assert _got == 4, f"a length of 4 fits the bucket of 4; got {_got!r}"
print("✓ bucket_length passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new buckets and lengths for every submission graded (helpers.grading)
_buckets = [(4, 8, 16), (3, 5, 12, 100), (7,), (1, 2)]
_buckets += [tuple(sorted(_rng.sample(range(1, 129), _rng.randint(1, 6)))) for _ in range(3)]
_cases = [(_l, _b) for _b in _buckets for _l in [*range(1, _b[-1] + 1), _b[-1] + 1, _rng.randint(_b[-1] + 2, 10**6)]]
_padded = tuple(sorted(_rng.sample(range(2, 33), 4)))  # the XLA run's buckets, and lengths that fit them
_lengths = [_rng.randint(1, _padded[-1]) for _ in range(10)]
# [collect]
def _bucket(length, buckets):  # a subclass of ValueError counts as ValueError
    try:
        return bucket_length(length, buckets)
    except ValueError:
        raise ValueError from None


_got = grading.collect("bucket_tests", {
    "outcomes": [grading.outcome(_bucket, _l, _b) for _l, _b in _cases],
    "compiles": xla.run(xla.count_compiles, [2] * len(_lengths), _lengths, pad_to=lambda n: bucket_length(n, _padded))["compiles"] if XLA else None})
# [judge]
def _smallest_bucket(length, buckets):  # torch's own search: the first bucket >= length, None past the last
    i = int(torch.bucketize(torch.tensor(length), torch.tensor(buckets)))
    return buckets[i] if i < len(buckets) else None


assert compare.is_record(_got, {"outcomes": list, "compiles": None}), "the collected results are incomplete"
assert len(_got["outcomes"]) == len(_cases), "a result for each case"
for (_l, _b), _o in zip(_cases, _got["outcomes"]):
    assert type(_o) is tuple and len(_o) == 2, "the collected results are incomplete"
    _want = _smallest_bucket(_l, _b)
    if _want is not None:
        assert _o[0] == "returned", f"a length that fits a bucket must not raise, got {_o[1]}"
        assert type(_o[1]) is int and _o[1] == _want, "not the smallest bucket that holds the length"
    else:
        assert _o[0] == "raised", "a length above every bucket must raise ValueError"
        assert _o[1] == "ValueError", f"a length above every bucket must raise ValueError, not {_o[1]}"
if XLA:
    _used = {_smallest_bucket(_l, _padded) for _l in _lengths}
    assert compare.same_values(_got["compiles"], len(_used)), f"padded to buckets, the loop should compile one graph per bucket used ({len(_used)})"
else:
    assert _got["compiles"] is None, "the collected results are incomplete"
    _flag = grading.JUDGED_WITHOUT_XLA
### END HIDDEN TESTS

# %% [markdown]
# ## B4. Data parallel over every device with SPMD
#
# The modern way to use all cores is **SPMD**: one program, and the compiler splits the work. You
# describe the devices as a `Mesh` and *annotate* the batch as split along its first dimension over the
# mesh's `"data"` axis; XLA partitions the graph and inserts the gradient all-reduces itself:
#
# ```python
# xr.use_spmd()
# mesh = xs.Mesh(np.arange(n_devices), (n_devices, 1), ("data", "model"))
# xs.mark_sharding(batch, mesh, ("data", None))      # dim 0 over "data", dim 1 not split
# ```
#
# `xla.spmd_data_parallel` trains this way on every XLA device, next to the same model on the same batches
# run twice more: on one XLA device (the single-device run: the batches not split, the matrices multiplied at
# the same precision) and in fp32 on the CPU. Sharding changes nothing but the order of the sums: the first
# difference stays below 1e-5. The second does too on XLA:CPU, whose fp32 products are exact, but not on a TPU:
# there torch_xla's default precision multiplies fp32 matrices in bf16 (B6). XLA:CPU made to round the products'
# inputs to bf16 as a TPU does ends these five steps about 6e-4 from the CPU run (computed so on the CPU, not
# measured on a TPU). "Equal" means equal at the same precision.
#
# With a single device (Colab's v5e-1) there is nothing to split: the batch's sharding comes back
# `{replicated}`, so the cell also runs the same code on 8 virtual XLA:CPU devices to show the split:

# %% tags=["demonstration"]
if XLA:
    spmd, log = xla.run(xla.spmd_data_parallel, with_log=True)
    runs = {f"this machine's {spmd['devices']} XLA device(s)": spmd}
    if spmd["devices"] == 1:
        runs["8 virtual XLA:CPU devices"], log = xla.run(xla.spmd_data_parallel, n_devices=8, virtual=True, with_log=True)
    for name, r in runs.items():
        print(f"{name}: batch sharding {r['sharding']}, largest difference from the single-device run "
              f"{r['max_abs_diff']:.1e} (from an fp32 CPU run {r['fp32_cpu_diff']:.1e}), {r['compiles']} compilation(s)")
    print("\n".join(line[line.find("GSPMD"):] for line in log.splitlines() if "Shardy" in line))


# %% [markdown]
# On a real TPU you will also meet the classic, per-device style: one process per TPU device, each with
# its own loader, and `xm.optimizer_step` to all-reduce the gradients. It is TPU-only here (on XLA:CPU its
# multi-process launch is unreliable), so it is shown, not run. Put it in a script (`train.py`):
# `torch_xla.launch` *spawns* its processes, and spawn can only start a function it can import by name —
# not one defined in a notebook.
#
# ```python
# # train.py — run with: python train.py
# import torch, torch.nn.functional as F
# import torch_xla, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
# import torch_xla.distributed.parallel_loader as pl
#
# def train_per_device(index):
#     device = torch_xla.device()
#     model = MyModel().to(device)
#     optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
#     loader = make_loader(rank=xr.global_ordinal(), world_size=xr.world_size())  # a DistributedSampler
#     for x, y in pl.MpDeviceLoader(loader, device):    # moves batches to the device, syncs every step
#         optimizer.zero_grad()
#         F.cross_entropy(model(x), y).backward()
#         xm.optimizer_step(optimizer)                 # all-reduce the gradients, then step
#
# if __name__ == "__main__":
#     torch_xla.launch(train_per_device)               # one process per TPU device (1 on v5e-1, 8 on v5e-8)
# ```
#
# ### Exercise 6 — shard the batch (2 points)
# Write `shard_batch(tensor, mesh)`: annotate `tensor` (a batch, dim 0 = samples) so it is split along
# dim 0 over the mesh axis `"data"` and not split along its other dimension. Import what you need
# *inside* the function: it runs in the XLA process, not in this notebook's.

# %% nbgrader={"grade": false, "grade_id": "spmd", "locked": false, "schema_version": 3, "solution": true}
def shard_batch(tensor, mesh):
    ### BEGIN SOLUTION
    import torch_xla.distributed.spmd as xs

    xs.mark_sharding(tensor, mesh, ("data", None))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "spmd_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# on 2 virtual XLA:CPU devices, whatever this machine has: a split needs more than one device
if XLA:
    _r = xla.run(xla.spmd_data_parallel, shard=shard_batch, n_devices=2, virtual=True)
    assert _r["sharding"].startswith("{devices=[2,1]"), f"the batch is not split along dim 0 over the data axis: {_r['sharding']}"
    assert _r["max_abs_diff"] < 1e-5, "the sharded run does not equal the single-device run"
    print("✓ shard_batch passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new meshes and runs for every submission graded (helpers.grading)
_virtual = _rng.choice([4, 8])  # the virtual XLA:CPU devices of the first run
_meshes = [((2, _virtual // 2), ("model", "data"))]  # both axes split, "data" the second
for _ in range(3):  # meshes of 2 or 3 axes of _virtual devices, "data" anywhere among them
    _names, _left, _shape = ["data"] + _rng.sample(["model", "stage"], _rng.choice([1, 2])), _virtual, []
    _rng.shuffle(_names)
    for _axis in _names[1:]:
        _shape.append(_rng.choice([_d for _d in range(1, _left + 1) if _left % _d == 0]))
        _left //= _shape[-1]
    _meshes.append((tuple([_left] + _shape), tuple(_names)))
_batch, _seed = _virtual * _rng.randint(1, 6), _rng.randrange(2**31)
_here_batch, _here_seed = 8 * _rng.randint(1, 4), _rng.randrange(2**31)
# [collect]
if XLA:
    def _train_and_annotate(shard):  # in one XLA process: train with `shard`, then annotate batches on other meshes
        return xla.spmd_data_parallel(steps=3, batch=_batch, shard=shard, seed=_seed), xla.shardings(_meshes, shard)

    _trained, _specs = xla.run(_train_and_annotate, shard_batch, n_devices=_virtual, virtual=True)
    _here = xla.run(xla.spmd_data_parallel, steps=2, batch=_here_batch, shard=shard_batch, seed=_here_seed)  # this machine's devices
    _got = grading.collect("spmd_tests", {"virtual devices": _trained, "specs": _specs, "here": _here})
else:
    import inspect
    _got = grading.collect("spmd_tests", {"source": inspect.getsource(shard_batch)})
# [judge]
if XLA:
    _run = {"devices": int, "max_abs_diff": float, "fp32_cpu_diff": float, "sharding": str, "compiles": int, "executions": int}
    assert compare.is_record(_got, {"virtual devices": None, "specs": None, "here": None}) and all(
        compare.is_record(_got[_k], _run) for _k in ("virtual devices", "here")), "the collected results are incomplete"
    assert all(0 <= _got[_k]["fp32_cpu_diff"] < float("inf") for _k in ("virtual devices", "here")), "a difference that is not a number"
    _r = _got["virtual devices"]
    assert _r["devices"] == _virtual and _r["sharding"].startswith(f"{{devices=[{_virtual},1]") and 0 <= _r["max_abs_diff"] < 1e-5, f"not split along dim 0 over {_virtual} devices"
    _want = grading.reference(f"04 mark_sharding data specs on {_virtual} virtual devices, meshes {_meshes}",
                              lambda: xla.run(xla.shardings, _meshes, n_devices=_virtual, virtual=True))
    assert type(_got["specs"]) is list and _got["specs"] == _want, "not split over the mesh's \"data\" axis only, on meshes of other shapes"
    _n = grading.reference("04 XLA devices of this machine", lambda: xla.run(xla.device_summary)["devices"])
    _r = _got["here"]
    assert _r["devices"] == _n, "not run on this machine's devices"
    assert 0 <= _r["max_abs_diff"] < 1e-5, "the sharded run does not equal the single-device run on this machine's devices"
    assert _r["sharding"].startswith(f"{{devices=[{_n},1]") if _n > 1 else _r["sharding"] == "{replicated}", "not split along dim 0 over this machine's devices"
else:
    assert compare.is_record(_got, {"source": str}), "the collected results are incomplete"
    assert "mark_sharding" in _got["source"], "annotate the batch with mark_sharding"
    _flag = grading.JUDGED_WITHOUT_XLA
### END HIDDEN TESTS

# %% [markdown]
# ## B5. Batch sizes and shapes for TPUs
#
# * A TPU core multiplies 128×128 tiles (8×128 for the vector unit): batch and feature sizes that are
#   multiples of 8 — better 128 — waste no padding the hardware would add anyway.
# * The **global** batch is the per-device batch × devices; pick the per-device batch first (memory per
#   chip is fixed: 16 GB of HBM on a v5e chip — Colab's and Kaggle's TPUs —, 32 GB on v4 and v6e, 95 GB on
#   v5p, per the system-architecture pages of Google Cloud's TPU documentation), then scale the learning
#   rate as in lesson 2.
# * Keep shapes fixed: `drop_last=True`, padding to buckets, no `.item()` or prints inside the step,
#   no Python branching on tensor values.
# * Resource limits: host memory feeds all cores, and input pipelines can starve a TPU — use the
#   loader's workers and `torch_xla`'s parallel loader (`pl.MpDeviceLoader`) on real TPUs.
#
# ### Exercise 7 — batch sizes for any number of TPU devices (2 points)
# `tpu_batch(global_batch, cores)` returns `(per_core, actual_global)`: the batch per TPU device (per core)
# needed to reach at least `global_batch` samples per step over `cores` devices, rounded **up** to a
# multiple of 8, and the global batch that results. (1 device on Colab's v5e-1, 8 on Kaggle's v5e-8.)

# %% nbgrader={"grade": false, "grade_id": "tpu_batch", "locked": false, "schema_version": 3, "solution": true}
def tpu_batch(global_batch, cores):
    ### BEGIN SOLUTION
    per_core = -(-global_batch // cores)
    per_core = -(-per_core // 8) * 8
    return per_core, per_core * cores
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "tpu_batch_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_got = tpu_batch(1000, 8)
assert type(_got) is tuple and len(_got) == 2 and all(type(v) is int for v in _got), f"return a tuple of two ints, got {_got!r}"
assert _got == (128, 1024), f"1000 / 8 = 125 per core, rounded up to 128; got {_got}"
print("✓ tpu_batch passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_cases = [(_g, _c) for _g in list(range(1, 300)) + [511, 512, 513, 1000, 1023, 1024, 1025, 4095, 4096, 4097, 10**6 + 1]
          for _c in (1, 2, 3, 4, 6, 8, 16, 64)]
_rng = grading.hidden_random()  # new batches and device counts for every submission graded (helpers.grading)
_cases += [(_rng.randint(1, 10 ** _rng.randint(2, 7)), _rng.randint(1, 1024)) for _ in range(400)]
# [collect]
_got = grading.collect("tpu_batch_tests", [tpu_batch(_g, _c) for _g, _c in _cases])
# [judge]
assert type(_got) is list and len(_got) == len(_cases), "a result for each case"
for (_g, _c), _r in zip(_cases, _got):
    assert type(_r) is tuple and len(_r) == 2 and all(type(v) is int for v in _r), f"return a tuple of two ints, got {_r!r}"
    _p, _a = _r
    assert _p % 8 == 0 and _a == _p * _c and _a >= _g and (_p - 8) * _c < _g, "not the smallest multiple of 8 per core that reaches the global batch"
### END HIDDEN TESTS

# %% [markdown]
# ## B6. Mixed precision on TPUs: bf16
#
# Lesson 3's 16-bit formats meet their hardware here. **bf16** is the TPU's own 16-bit format (Google
# Cloud's TPU documentation: the matrix units multiply in bf16 and accumulate in fp32). It has fp32's
# range, so there is no loss scaling and no `GradScaler`. The autocast is lesson 3's, with the device
# type `"xla"`:
#
# ```python
# with torch.autocast("xla", dtype=torch.bfloat16):
#     loss = loss_fn(model(x), y)
# loss.backward()          # no scaler
# optimizer.step()
# torch_xla.sync()
# ```
#
# (`torch_xla.amp.autocast(device)` does the same on a TPU but refuses XLA:CPU.) `xla.autocast_bf16`
# runs in an XLA process: it asks lesson 3's probe ops which dtype they compute in under XLA autocast,
# then trains one MLP twice on the same batches, in fp32 and under bf16 autocast. On a TPU it runs
# on the TPU device; on XLA:CPU it shows what is cast, not the TPU's speed:

# %% tags=["demonstration"]
if XLA:
    bf16_run = xla.run(xla.autocast_bf16)
    print(f"under torch.autocast('xla', dtype=torch.bfloat16), on {bf16_run['device_type']}:")
    for op, dtype in bf16_run["dtypes"].items():
        print(f"  {op:24} {dtype}")
    curves = bf16_run["losses"]
    print(f"training loss computed under autocast: {bf16_run['loss_dtype']}; after {len(curves['fp32'])} steps "
          f"fp32 {curves['fp32'][-1]:.4f}, bf16 {curves['bf16'][-1]:.4f} "
          f"(largest relative difference {bf16_run['max_rel_diff']:.1e})")
    print("torch_xla's precision for fp32 matrix products (the fp32 run):", bf16_run["fp32_matmul_precision"])
    plotting.plot_losses({"fp32": curves["fp32"], "bf16 autocast": curves["bf16"]})
else:
    print("skipped: torch_xla is not installed (see the setup cell)")

# %% [markdown]
# Matrix products (`linear`, `matmul`, `conv2d`) come out in bf16 and the losses in fp32, as in
# lesson 3. The rest follows XLA autocast's own op lists, which are neither lesson 3's CPU table nor
# its CUDA table: with torch_xla 2.9, `softmax` is promoted to fp32 while `layer_norm`, `sum` and `exp`
# of a bf16 input stay bf16. The two loss curves lie on top of each other, without a scaler.
#
# One more TPU habit hides in the last printed line: torch_xla multiplies **fp32** matrices at the precision
# `torch_xla.backends.get_mat_mul_precision()` reports, and in torch_xla 2.9 that is `"default"`, which
# on a TPU downcasts fp32 inputs to bf16 before multiplying (`"high"` takes three bf16 passes,
# `"highest"` six, close to fp32: `torch_xla.backends.set_mat_mul_precision`). So on a TPU even the
# "fp32" run's matrix products were bf16 products. What autocast adds there is bf16 *storage*: half the
# bytes to keep in HBM and to move, which Google's bfloat16 guide for Cloud TPU names as the gain.

# %% [markdown]
# ## B7. PyTorch Lightning on TPUs
#
# Lightning hides all of this behind the `Trainer`. For every device of the TPU:
#
# ```python
# trainer = L.Trainer(accelerator="tpu", devices="auto")  # all of them: 1 on Colab's v5e-1, 8 on Kaggle's v5e-8
# trainer.fit(model, train_loader)                        # a plain DataLoader: no DistributedSampler of yours
# ```
#
# `devices` may be `"auto"`, `1`, or the number of devices the TPU has (`8` on a v5e-8; Lightning < 1.7
# spelled it `Trainer(tpu_cores=8)`); any other count raises. With several devices Lightning replicates the
# model on each and **inserts a `DistributedSampler` by itself**, so each trains on its own part of the data;
# with one device there is nothing to shard and your loader stays as it is. Asking for a TPU where there is
# none gives Lightning's own error (run in an XLA process, as Lightning imports `torch_xla` for it):

# %% tags=["demonstration"]
if XLA:
    print(xla.run(xla.lightning_tpu_trainer))

# %% [markdown]
# The automatic sampler is the same machinery Lightning uses for DDP, and that runs everywhere: on a TPU
# with every TPU device (`lightning_demo.trainer_kwargs()`), elsewhere on two CPU processes with Lightning's
# fork-based DDP strategy. The Trainer runs in a fresh process (a fork of this notebook could hang, as in
# A4). Each process writes down the sampler it found in its loader:

# %% tags=["demonstration"]
print("Trainer arguments on this machine:", lightning_demo.trainer_kwargs())
seen = lightning_demo.samplers_seen(n_samples=10, batch_size=2)
for s in seen:
    print({k: s[k] for k in ("rank", "sampler", "num_replicas", "sampler_rank", "shuffle", "indices")})
if len(seen) > 1:
    print("the same shards as torch's DistributedSampler(shuffle=True, seed=0):",
          all(s["indices"] == ddp.shard_indices(10, len(seen), s["rank"], shuffle=True) for s in seen))
else:
    print("one device: Lightning left the loader's own sampler in place (nothing to shard)")

# %% [markdown]
# ### Exercise 8 — quick check (2 points)
# * **q1** — the `Trainer` keyword arguments for all eight chips of Kaggle's TPU v5e-8, as a `dict`
# * **q2** — what `Trainer(tpu_cores=8)` meant in old Lightning: (a) 8 TPU hosts (b) the 8 cores of one TPU device (c) 8 processes per core
# * **q3** — must you wrap your training `DataLoader` in a `DistributedSampler` for Lightning on TPUs? (`True`/`False`)
# * **q4** — how many processes does `accelerate launch --cpu --num_processes 2 script.py` start? (an `int`)
# * **q5** — the batch sizes per step are `[32] * 99 + [20]`, with SGD and a sync after every step: how many compilations? (an `int`)

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true}
quiz = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None}
### BEGIN SOLUTION
quiz = {"q1": {"accelerator": "tpu", "devices": 8}, "q2": "b", "q3": False, "q4": 1, "q5": 2}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "quiz_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert type(quiz) is dict and set(quiz) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five"
assert type(quiz["q1"]) is dict, "q1: a dict of Trainer keyword arguments"
assert type(quiz["q2"]) is str, 'q2: "a", "b" or "c"'
assert type(quiz["q3"]) is bool, "q3: True or False"
assert type(quiz["q4"]) is int and type(quiz["q5"]) is int, "q4 and q5: an int each"
print("✓ quiz is answered in the right form; the hidden tests check the answers when your notebook is graded")
### BEGIN HIDDEN TESTS
# [collect]
_got = grading.collect("quiz_tests", quiz)
# [judge]
assert type(_got) is dict and set(_got) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five"
_q1 = _got["q1"]
assert type(_q1) is dict, "q1: a dict of Trainer keyword arguments"
assert type(_got["q2"]) is str, 'q2: "a", "b" or "c"'
assert type(_got["q3"]) is bool, "q3: True or False"
assert type(_got["q4"]) is int and type(_got["q5"]) is int, "q4 and q5: an int each"
# q1: the accelerator and the devices, and at most the other arguments that choose the hardware and the precision,
# judged by what Lightning makes of them on the v5e-8: its own connector builds the run from them there (a simulated
# TPU of 8 devices), which must be the run of Trainer(accelerator="tpu", devices=8). Every spelling Lightning reads
# the same way passes (devices "8" or "auto", strategy "XLA", precision 32, ...); another strategy, bf16, more nodes
# or an argument Lightning refuses (tpu_cores, accelerator "TPU") configures another run, or none.
assert {"accelerator", "devices"} <= set(_q1) <= set(lightning_demo.DEVICE_ARGS), "q1 is wrong"
_run = grading.reference(f"04 Lightning's run of Trainer(**{_q1!r}) on a TPU v5e-8", lambda: lightning_demo.trainer_on_tpu(_q1))
assert _run == grading.reference("04 Lightning's run of Trainer(accelerator='tpu', devices=8) on a TPU v5e-8",
                                 lambda: lightning_demo.trainer_on_tpu({"accelerator": "tpu", "devices": 8})), "q1 is wrong"
assert _got["q2"].strip().strip("()").strip().lower() == "b", "q2 is wrong"
assert _got["q3"] is False, "q3 is wrong"
assert _got["q4"] == 1, "q4 is wrong"
assert _got["q5"] == len({32, 20}), "q5 is wrong"
### END HIDDEN TESTS

# %% [markdown]
# ## B8. Where TPU support stands: torch_xla 2.9, and TorchTPU
#
# **What ran, and what did not.** Part B was checked with torch_xla 2.9.0, the version this course pins, on XLA:CPU.
# TorchTPU has **not run** for this course: it had no TPU to run it on. Everything said about TorchTPU below comes from
# TorchTPU's own documentation and source, cited, not from a run; the cell after this text prints which TPU stack your
# runtime has.
#
# * **torch_xla stopped at 2.9.** Its last release is 2.9.0, and a torch_xla X.Y runs with torch X.Y only; its
#   repository has had no commit since December 2025 (pytorch/xla#9752). A runtime with a newer torch (Colab's and
#   Kaggle's CPU and GPU images bring torch 2.10) has no torch_xla to install. In 2.9 it runs on **PJRT** only
#   (`PJRT_DEVICE=TPU`, or `CPU` as here); `xm.mark_step()` and `xm.xla_device()` still work in 2.9 but are marked
#   deprecated in favour of `torch_xla.sync()` and `torch_xla.device()`, the spellings this lesson uses. When SPMD splits a graph, its
#   XLA logs (the line printed under B4) that GSPMD sharding propagation "is going to be deprecated", pointing to
#   **Shardy**, "already the default partitioner in JAX".
# * **TorchTPU, the native successor.** In October 2025 the torch_xla team proposed a native, eager-first TPU backend
#   with `tensor.to("tpu")` (RFC pytorch/xla#9684). Google Cloud's "PyTorch on Cloud TPU" documentation now puts
#   **TorchTPU** at the foundation of its PyTorch stack. It is `torch-tpu` on PyPI (pypi.org/project/torch-tpu; user
#   guide torchtpu.readthedocs.io; source github.com/google-pytorch/torch_tpu): an out-of-tree **PrivateUse1** backend
#   that torch loads by itself on `import torch` (torch_tpu's `torch.backends` entry point) and names `"tpu"`, so a
#   model moves with `model.to("tpu")` as it would with `"cuda"`. `torch-tpu` 0.2.0 (October 2026) needs torch 2.11.0 to
#   2.15.0, libtpu 0.0.50 or newer and Python 3.11 or newer (its PyPI metadata), on a Cloud TPU VM (its getting-started
#   guide). Its PyPI page lists `torch.compile()` for graph mode and distributed training (data and tensor
#   parallelism); its user guide covers DDP and FSDP, and Google Cloud's page names DTensor.
# * **Free TPUs.** Colab's free TPU has been one v5e chip (v5e-1) since September 2025 (googlecolab/colabtools#5566);
#   Kaggle offers a TPU v5e-8 with torch 2.8 and torch_xla 2.8. Both bring their own torch: where it is 2.6 to 2.9 with
#   its torch_xla (Kaggle's), Part B runs on the TPU; only a torch 2.11 to 2.15 can take TorchTPU.
#
# **What carries over to TorchTPU** (from its user guide and source, not run here):
#
# * *Compilation, and recompilation on a new shape* (B2, B3). Under `torch.compile` TorchTPU compiles through XLA
#   (its backend `"tpu"`, which torch_tpu makes `torch.compile`'s default for TPU tensors, with `dynamic=False`): a
#   new batch shape is a new graph, so fixed shapes, `drop_last` and buckets still pay. Its user guide has a page on its
#   compilation cache.
# * *Sharding* (B4). A device mesh with the batch split along `"data"` stays the idea; the API is PyTorch's own:
#   `DeviceMesh` and DTensor, DDP and FSDP, with torch_tpu's `"tpu"` process-group backend.
# * *bf16 and matmul precision* (B5, B6). Its user guide has pages on mixed precision (bf16, autocast) and precision
#   management, and on the TPU's tile sizes and padding; torch_tpu maps `torch.set_float32_matmul_precision` onto the
#   TPU's precision.
#
# **What does not** (torch_xla's own):
#
# * *Lazy tensors and `torch_xla.sync()`* (B2). TorchTPU is eager first: each operation is dispatched as the program
#   reaches it (its user guide's Eager Mode page describes how it defers and fuses them), with no `torch_xla.sync()`
#   to call; `.cpu()` brings a result back.
# * *`PJRT_DEVICE`, XLA:CPU's virtual devices, `torch_xla.debug.metrics`, `xr.use_spmd()` and `xs.mark_sharding`*:
#   torch_xla's API; TorchTPU uses PyTorch's own. Its guide runs on a Cloud TPU VM, and the course found no CPU stand-in
#   in its documentation: without a TPU, Part B's XLA:CPU runs remain the way to see these ideas. Lightning's
#   `accelerator="tpu"` (B7) drives a TPU through torch_xla.
#
# **The same step on TorchTPU.** The cell below runs B4's model on B4's batches (the last one smaller, a new shape) on
# `device="tpu"`, eager and under `torch.compile`, next to an fp32 run on the CPU, where a TPU and a torch that TorchTPU
# supports are present (in a fresh process, which then holds the TPU). Anywhere else it says why it skipped the step: no
# TPU; a TPU without torch_tpu (with the pip command that keeps this runtime's torch); or a torch, libtpu or Python that
# TorchTPU does not support.

# %% tags=["demonstration"]
stack = tpu_stack.status()  # reads the PCI bus, /dev and the installed versions: imports neither torch_tpu nor torch_xla
print("TPU stack here:", stack.name or "none")
print(stack.why)
if stack.name == "torchtpu":
    tpu_run = tpu_stack.torchtpu_step()
    print(f"on {tpu_run['device']} (torch {tpu_run['torch']}, torch_tpu {tpu_run['torch_tpu']}), batches of "
          f"{tpu_run['batch_sizes']} rows:")
    for name, curve in tpu_run["losses"].items():
        print(f"  {name:9} losses " + " ".join(f"{v:.4f}" for v in curve))
    print(f"torch.compile made {tpu_run['graphs_compiled']} graph(s); largest loss difference compiled vs eager "
          f"{tpu_run['compiled_vs_eager']:.1e}, eager vs fp32 CPU {tpu_run['eager_vs_cpu']:.1e}")
else:
    print("The TorchTPU step was skipped: nothing ran on TorchTPU here.")

# %% [markdown]
# ## Summary
#
# * Accelerate: `prepare`, `accelerator.backward`, `gather_for_metrics` (not `gather`) for metrics,
#   `accumulate`, `mixed_precision` (bf16 on CPUs; fp16 is a no-op there), `save_state`/`load_state`.
# * Launch from notebooks with `notebook_launcher` (it forks: mind the traps of A4); scripts with `accelerate launch` or `torchrun`
#   (`--cpu --num_processes 2` is one process). With `torch_xla` installed, set `USE_TORCH_XLA=0` off-TPU.
# * torch_xla records graphs lazily and compiles each new shape: fixed shapes, `drop_last`, buckets, no
#   `.item()` in the step, a `torch_xla.sync()` per step.
# * On TPUs mixed precision is bf16: `torch.autocast("xla", dtype=torch.bfloat16)`, no GradScaler.
# * SPMD shards the batch over a device mesh (every device the machine has) and equals a single-device run at the
#   same matmul precision (a TPU's default multiplies fp32 matrices in bf16: ~6e-4 from an fp32 CPU run).
# * Lightning: `Trainer(accelerator="tpu", devices="auto")` on every TPU device, with the distributed sampler
#   inserted for you when there are several.
