# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 3 — Mixed precision training (AMP)
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/03-amp/03-amp.ipynb) [![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/multi-device-course/pytorch-multi-device-course/blob/main/notebooks/03-amp/03-amp.ipynb)
#
# Most of a network's arithmetic does not need 32-bit floats. **Mixed precision** runs the big
# matrix products in a 16-bit format — half the bytes to store and move, and on modern GPUs several
# times the throughput — while keeping the numerically delicate parts in fp32. PyTorch does this with
# `torch.autocast`, and for fp16 adds `torch.amp.GradScaler` to keep small gradients alive.
#
# Everything below is measured on the device you run it on: `cuda` when there is a GPU, `cpu`
# otherwise. The CPU and CUDA autocast differ in places; the lesson says where.

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
import copy
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from helpers import grading, amp, compare, data, launch, models, plotting, training
from helpers import dataparallel as dp

DEVICE = amp.device_type()
torch.set_num_threads(max(1, min(4, hw.cpu_cores)))
print("autocast device:", DEVICE)
print(hw.bf16_note())  # on a T4 (Colab, Kaggle): bf16 runs emulated

# %% [markdown]
# ## 1. Three formats
#
# A float is a sign, an **exponent** (which sets the range) and a **mantissa** (which sets the
# precision). fp16 spends 5 bits on the exponent and 10 on the mantissa; bf16 ("brain float") keeps
# fp32's 8 exponent bits and only 7 mantissa bits. `torch.finfo` knows the consequences:

# %% tags=["demonstration"]
rows = amp.format_table()
print(f"{'':6}{'bits':>5}{'exp':>5}{'mant':>6}{'largest':>12}{'smallest normal':>17}{'smallest subnormal':>20}{'eps':>11}")
for r in rows:
    print(f"{r['format']:6}{r['bits']:>5}{r['exponent bits']:>5}{r['mantissa bits']:>6}{r['largest']:>12.4g}"
          f"{r['smallest normal']:>17.4g}{r['smallest subnormal']:>20.4g}{r['eps (1 -> next)']:>11.3g}")
plotting.plot_formats(rows);

# %% [markdown]
# fp16's range is narrow. Values round to the nearest fp16 (a tie goes to the even neighbour). At the
# top, 65504 is the largest: 65519 still rounds down to it while 65520 rounds up to `inf`. At the
# bottom, the smallest subnormal is 2⁻²⁴ ≈ 5.96·10⁻⁸ and the next value down is 0, so everything at or
# below the halfway point 2⁻²⁵ ≈ 2.98·10⁻⁸ becomes 0 (2⁻²⁵ itself is a tie and goes to the even 0), while
# a value strictly between 2⁻²⁵ and 2⁻²⁴ rounds *up* to 2⁻²⁴: 3·10⁻⁸ is stored as 5.96·10⁻⁸. bf16 has
# fp32's range, at the price of precision: 8 significant bits (7 stored plus the implicit leading 1),
# about log₁₀(2⁸) ≈ 2.4 significant decimal digits, against fp16's 11 bits, about 3.3 digits:

# %%
for value in (65519.0, 65520.0, 1e-4, 3e-8, 1e-8, 3.14159265):
    print(f"{value:>12g}:  fp16 {torch.tensor(value).half().item():<12g} ({amp.representable(value, torch.float16):9})"
          f"  bf16 {torch.tensor(value).bfloat16().item():<12g} ({amp.representable(value, torch.bfloat16)})")


# %% [markdown]
# ### Exercise 1 — what fp16 does to a number (2 points)
# * `fp16_fate(values)` returns, for each float in `values`, `"overflow"` if it becomes ±inf in fp16,
#   `"underflow"` if a non-zero value becomes 0, and `"ok"` otherwise.
# * `rescuing_scale(grad)` returns the smallest power of two `s` (an `int`, `s >= 1`) for which `grad * s`
#   is at least fp16's smallest *normal* number (`torch.finfo(torch.float16).smallest_normal`), so the
#   gradient keeps its full 11 bits of precision. `grad` is positive and below 1.

# %% nbgrader={"grade": false, "grade_id": "fp16", "locked": false, "schema_version": 3, "solution": true}
def fp16_fate(values):
    ### BEGIN SOLUTION
    fates = []
    for v in values:
        stored = torch.tensor(v, dtype=torch.float64).to(torch.float16)
        if torch.isinf(stored):
            fates.append("overflow")
        elif stored == 0 and v != 0:
            fates.append("underflow")
        else:
            fates.append("ok")
    return fates
    ### END SOLUTION


def rescuing_scale(grad):
    ### BEGIN SOLUTION
    scale = 1
    while grad * scale < torch.finfo(torch.float16).smallest_normal:
        scale *= 2
    return scale
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "fp16_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert fp16_fate([1.0, 70000.0, 1e-9]) == ["ok", "overflow", "underflow"], "1.0 is exact, 70000 is past 65504, 1e-9 is below half of 2**-24"
assert type(rescuing_scale(1e-6)) is int and rescuing_scale(1e-6) == 64, "1e-6 * 64 is the first power of two past 6.1e-5"
print("✓ fp16_fate and rescuing_scale pass these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_normal = torch.finfo(torch.float16).smallest_normal  # 2**-14
_values = [65504.0, 65519.0, 65519.99, 65520.0, -65520.0, -70000.0, 1e38, 2**-24, 2**-25, 2**-25 * 1.0001,
           2**-25 * 1.5, 2**-26, 3e-8, 1e-7, 0.0, -0.0, 1.0, -1e-30, 123.456, _normal, -2**-25, 70000.0, 1e-9]
_grads = [1e-3, 1e-5, 6.1e-5, 3e-8, 1e-10, 0.5, 0.999, _normal, _normal * 1.0001, _normal * 0.9999, 1e-6]
_grads += [_normal * 2.0**-k for k in range(1, 40)] + [_normal * 2.0**-k * 1.5 for k in range(1, 20)]
_rng = grading.hidden_random()  # new values for every submission graded (helpers.grading)
_values += [_rng.choice([-1, 1]) * _rng.uniform(1, 2) * 2.0 ** _rng.randint(-30, 17) for _ in range(60)]
_grads += [_rng.uniform(1, 1.99) * 2.0 ** _rng.randint(-50, -1) for _ in range(60)]
# [collect]
_got = grading.collect("fp16_tests", {"fates": fp16_fate(list(_values)), "scales": [rescuing_scale(_g) for _g in _grads]})
# [judge]
assert compare.is_record(_got, {"fates": None, "scales": list}), "the collected results are incomplete"
assert type(_got["fates"]) is list and _got["fates"] == [amp.representable(v, torch.float16) for v in _values], "compare with torch.tensor(v).half()"
assert len(_got["scales"]) == len(_grads), "one scale per step"
for _g, _s in zip(_grads, _got["scales"]):
    _expected = next(2**k for k in range(200) if torch.tensor(_g * 2**k, dtype=torch.float64) >= _normal)
    assert type(_s) is int and _s == _expected, (_g, _s, _expected)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. `torch.autocast`: which ops go low
#
# Inside `with torch.autocast(device_type, dtype=...)`, PyTorch casts the inputs of selected ops on the
# fly: matrix products and convolutions run in the low-precision type; ops that need range or
# accuracy (losses, reductions, `exp`, `softmax`…) are kept in or promoted to fp32 — **on CUDA**. The
# CPU's list is shorter: there, many of those ops simply follow the dtype of their input. The model's
# weights stay fp32 either way; only the computation changes. Measured here, on `DEVICE`:

# %%
table = {name: amp.autocast_dtypes(DEVICE, dt) for name, dt in amp.LOW_PRECISION.items()}
print(f"{'op':24}{'fp16 autocast':>16}{'bf16 autocast':>16}   ({DEVICE})")
for op in table["bf16"]:
    print(f"{op:24}{str(table['fp16'][op]).replace('torch.', ''):>16}{str(table['bf16'][op]).replace('torch.', ''):>16}")

# %% [markdown]
# On a CPU you will see `softmax`, `layer_norm`, `sum` and `exp` of a bf16 `linear` output stay bf16;
# on a CUDA GPU the same cell shows them promoted to fp32 (CUDA autocast's "float32" op list). Losses
# (`mse_loss`, `cross_entropy`) are fp32 on both. The current API is `torch.autocast(device_type, ...)`
# / `torch.amp.GradScaler(device_type)`; the older `torch.cuda.amp.*` and `torch.cpu.amp.*` spellings
# are deprecated.
#
# ### Exercise 2 — predict autocast (2 points)
# Fill `predicted` with the output dtype of every op in the table under **bf16** autocast on **this**
# device (`DEVICE`). Reason from the rules above, then check against the table.

# %% nbgrader={"grade": false, "grade_id": "predict_dtypes", "locked": false, "schema_version": 3, "solution": true}
predicted = {op: None for op in amp.probe_ops("cpu")}
### BEGIN SOLUTION
if DEVICE == "cuda":
    low = {"linear", "matmul", "conv2d", "relu(linear)"}
else:
    low = {"linear", "matmul", "conv2d", "relu(linear)", "softmax(linear)", "layer_norm(linear)", "sum(linear)", "exp(linear)"}
predicted = {op: torch.bfloat16 if op in low else torch.float32 for op in amp.probe_ops("cpu")}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "predict_dtypes_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert set(predicted) == set(amp.probe_ops("cpu")), "one entry per op"
assert all(type(v) is torch.dtype for v in predicted.values()), "each value is a torch.dtype such as torch.float32"
assert predicted["linear"] == torch.bfloat16 and predicted["mse_loss(linear)"] == torch.float32, "under autocast(bfloat16) linear computes in bfloat16 and mse_loss in float32"
print("✓ predicted passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
# [collect]
_got = grading.collect("predict_dtypes_tests", {"device": DEVICE, "predicted": predicted})
# [judge]
assert compare.is_record(_got, {"device": str, "predicted": None}), "the collected results are incomplete"
_predicted = _got["predicted"]
assert type(_predicted) is dict and set(_predicted) == set(amp.probe_ops("cpu")), "one entry per op"
assert all(type(v) is torch.dtype for v in _predicted.values()), "each value is a torch.dtype such as torch.float32"
# the grading kernel may see no GPU where the judge does: the table is the one of the kernel's autocast device
assert _got["device"] in {"cpu", DEVICE}, f"DEVICE is {_got['device']!r}, not this machine's autocast device"
assert _predicted == amp.autocast_dtypes(_got["device"], torch.bfloat16), "some ops compute in another dtype on this device"
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Loss scaling and `GradScaler`
#
# Gradients are often tiny. In fp16 a gradient at or below 2⁻²⁵ becomes 0 and the weight it belongs to
# stops learning; one just above it comes back as 2⁻²⁴ (3·10⁻⁸ is stored as 5.96·10⁻⁸, twice its size),
# and every subnormal keeps fewer significant bits the smaller it is. The fix is to multiply the loss
# by a large **scale** before backward — every gradient is multiplied by the same factor, lifting it
# into fp16's normal range — and to divide the gradients by it again before the optimizer step:

# %%
true_grad = torch.tensor([1e-8, 3e-8, 1e-6, 1e-3])
print("in fp16:              ", true_grad.half().tolist())
scaled = (true_grad * 65536).half()
print("scaled x 65536, fp16: ", scaled.tolist())
print("unscaled in fp32:     ", (scaled.float() / 65536).tolist())

# %% [markdown]
# bf16 does not need any of this: its range is fp32's. `torch.amp.GradScaler` picks the scale for
# you, dynamically: it starts high (2¹⁶ = 65536), and whenever the scaled gradients contain `inf` or
# `nan` it **skips** that optimizer step and halves the scale; after `growth_interval` clean steps in a
# row (2000 by default) it doubles it. Here is a real scaler driven through a run with overflows
# injected at chosen steps (growth interval 3 to see it grow):

# %% tags=["demonstration"]
overflow = [False] * 4 + [True, True] + [False] * 7 + [True] + [False] * 8
trajectory = amp.scaler_trajectory(overflow, growth_interval=3, device=DEVICE)
plotting.plot_scaler(trajectory)
plt.title("torch.amp.GradScaler, overflows injected at steps 4, 5 and 13", fontsize=9);

# %% [markdown]
# The loop with a scaler, including gradient clipping — which must see the **true** gradients, so
# `unscale_` comes first:
#
# ```python
# scaler = torch.amp.GradScaler(device_type)
# with torch.autocast(device_type, dtype=torch.float16):
#     loss = loss_fn(model(x), y)
# scaler.scale(loss).backward()
# scaler.unscale_(optimizer)                       # gradients back to their true size
# nn.utils.clip_grad_norm_(model.parameters(), 1.0)
# scaler.step(optimizer)                           # skipped if the gradients hold inf/nan
# scaler.update()                                  # adjust the scale
# ```
#
# `helpers.training.step` is this loop. The scale is state: checkpoint it with
# `scaler.state_dict()` and restore it with `load_state_dict`, or a resumed run starts again at 65536
# and skips steps while it finds its level:

# %%
scaler = torch.amp.GradScaler(DEVICE, init_scale=2.0**10)
state = scaler.state_dict()
resumed = torch.amp.GradScaler(DEVICE)
resumed.load_state_dict(state)
print(state, "-> resumed scale", resumed.get_scale())


# %% [markdown]
# A skipped step has a side effect: the learning-rate scheduler still steps, so the schedule moves on
# while the weights did not. torch warns about it at most once: `lr_scheduler.step()` checks whether
# `optimizer.step()` has ever run only on the scheduler's **first** step. So "Detected call of
# `lr_scheduler.step()` before `optimizer.step()`" appears when the very first optimizer step is
# skipped (GradScaler's first scale, 65536, often overflows at the start), and every later skipped step
# is silent. Two runs with a real scaler and real overflows, counting the warnings:

# %%
def scheduler_warnings(overflow):
    """Train one weight with a GradScaler and a StepLR scheduler; step i's gradient is inf when overflow[i].
    Returns the steps the scaler skipped and the scheduler's warnings."""
    weight = nn.Parameter(torch.ones(1, device=DEVICE))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    scaler = torch.amp.GradScaler(DEVICE)
    skipped = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for bad in overflow:
            optimizer.zero_grad()
            scaler.scale((weight * (float("inf") if bad else 1.0)).sum()).backward()
            scale = scaler.get_scale()
            scaler.step(optimizer)  # skipped when the gradient is inf
            scaler.update()         # and then the scale halves
            skipped += scaler.get_scale() < scale
            scheduler.step()
    return skipped, [str(w.message) for w in caught if "lr_scheduler.step()" in str(w.message)]


runs = {"step 1 overflows": [True, False, False, False, False],
        "step 1 good, steps 2-5 overflow": [False, True, True, True, True]}
counted = {}
for name, overflow in runs.items():
    skipped, caught = scheduler_warnings(overflow)
    counted[name] = len(caught)
    print(f"{name:32} skipped steps {skipped}, warnings {len(caught)}  {caught[0][:62] + '...' if caught else ''}")
assert counted == {"step 1 overflows": 1, "step 1 good, steps 2-5 overflow": 0}, counted


# %% [markdown]
# Four skipped steps, no warning: the warning only tells you that the first step was skipped, which is
# harmless (the schedule runs one step ahead). To see later skips, watch the scale, as `scheduler_warnings`
# does: it halves at every skipped step. If skips keep happening, the scale keeps collapsing — look for a
# real numerical problem.
#
# ### Exercise 3 — predict the scaler (2 points)
# `scaler_after(overflow, init_scale, growth_interval)` returns `(scale, skipped)`: the scale after a run
# whose step `i` overflows when `overflow[i]` is true, and how many steps were skipped — for the default
# growth factor 2 and backoff factor 0.5. Work it out by the rules, without a GradScaler. The scale is a
# `float`, the count an `int`.

# %% nbgrader={"grade": false, "grade_id": "scaler", "locked": false, "schema_version": 3, "solution": true}
def scaler_after(overflow, init_scale, growth_interval):
    ### BEGIN SOLUTION
    scale, clean, skipped = float(init_scale), 0, 0
    for bad in overflow:
        if bad:
            scale *= 0.5
            clean = 0
            skipped += 1
        else:
            clean += 1
            if clean == growth_interval:
                scale *= 2.0
                clean = 0
    return scale, skipped
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "scaler_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_got = scaler_after([False, True, False, False], 1024.0, 2)
assert type(_got) is tuple and type(_got[0]) is float and type(_got[1]) is int, "return (float, int)"
assert _got == (1024.0, 1), "halved at step 1, doubled after two clean steps"
print("✓ scaler_after passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new runs for every submission graded (helpers.grading)
_cases = [([False, True, False, False], 1024.0, 2), ([True] * 6, 2.0, 3), ([True] * 3 + [False] * 4, 0.5, 2),
          ([False, True] * 5, 1.0, 1), ([False] * 7, 4.0, 7), ([False] * 6 + [True], 4.0, 3)]
for _case in range(14):
    _cases.append(([_rng.random() < 0.4 for _ in range(_rng.randint(1, 25))], 2.0 ** _rng.randint(-3, 16), _rng.randint(1, 5)))
# [collect]
_got = grading.collect("scaler_tests", [scaler_after(list(_overflow), _init, _interval) for _overflow, _init, _interval in _cases])
# [judge]
_runs = grading.reference(f"03-amp scaler_trajectory {_cases}", lambda: [
    amp.scaler_trajectory(_overflow, init_scale=_init, growth_interval=_interval, device="cpu") for _overflow, _init, _interval in _cases])
assert type(_got) is list and len(_got) == len(_cases), "one answer per hidden case"
for (_overflow, _init, _interval), _result, _real in zip(_cases, _got, _runs):
    assert type(_result) is tuple and len(_result) == 2 and type(_result[0]) is float and type(_result[1]) is int, "return (float, int)"
    assert _result == (_real[-1]["next_scale"], sum(s["skipped"] for s in _real)), (_overflow, _init, _interval)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Memory: what autocast saves
#
# Backward needs the activations that forward saved. Under autocast the matrix products save their
# inputs in 16 bits, so the saved bytes shrink — not to exactly half, because some tensors are not
# floats (max-pooling saves int64 indices), some ops keep fp32, and autocast saves the 16-bit *copies
# of the weights* it made for the matmuls (for a small batch those copies can outweigh the savings).
# Measured by hooking every tensor autograd saves:

# %%
cases = {
    "MLP": (models.MLP(64, 256, 10, depth=3), torch.randn(1024, 64)),
    "CNN": (models.SmallCNN(3, 10, width=16, size=32), torch.randn(32, 3, 32, 32)),
}
ratios = {}
for name, (net, x) in cases.items():
    net, x = net.to(DEVICE), x.to(DEVICE)
    fp32 = amp.saved_activation_bytes(net, x)
    bf16 = amp.saved_activation_bytes(net, x, torch.bfloat16)
    ratios[name] = bf16 / fp32
    print(f"{name}: {fp32 / 2**20:.2f} MiB saved in fp32, {bf16 / 2**20:.2f} MiB under bf16 autocast -> x{ratios[name]:.2f}")
if DEVICE == "cuda":
    for name, (net, x) in cases.items():
        for dtype in (None, torch.bfloat16):
            torch.cuda.reset_peak_memory_stats()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype is not None):
                net.to("cuda")(x.to("cuda")).float().sum().backward()
            print(f"{name} peak CUDA memory ({'bf16' if dtype else 'fp32'}): {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
plotting.plot_bars(ratios, "saved bytes, bf16 / fp32", title=f"activation memory under autocast ({DEVICE})");


# %% [markdown]
# ### Exercise 4 — measure it yourself (2 points)
# Write `activation_ratio(model, x, dtype)`: the bytes autograd saves for backward in one forward under
# `torch.autocast(x.device.type, dtype=dtype)`, divided by the bytes it saves in plain fp32. Count each
# saved tensor's storage once (`t.untyped_storage()`: its `data_ptr()` and `nbytes()`), and leave out the
# model's parameters and `x` itself. Use `torch.autograd.graph.saved_tensors_hooks(pack, unpack)`.

# %% nbgrader={"grade": false, "grade_id": "activation_ratio", "locked": false, "schema_version": 3, "solution": true}
def activation_ratio(model, x, dtype):
    ### BEGIN SOLUTION
    def measure(enabled):
        skip = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + [x]}
        seen = {}

        def pack(t):
            s = t.untyped_storage()
            if s.data_ptr() not in skip:
                seen[s.data_ptr()] = s.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast(x.device.type, dtype=dtype, enabled=enabled):
                model(x)
        return sum(seen.values())

    return measure(True) / measure(False)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "activation_ratio_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_net, _x = models.MLP(32, 64, 4), torch.randn(512, 32)
_r = activation_ratio(_net, _x, torch.bfloat16)
assert type(_r) is float and 0 < _r < 1, f"with a batch of 512, expected a ratio below 1, got {_r!r}"
print("✓ activation_ratio passes this check; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_rng = grading.hidden_random()  # new models and batches for every submission graded (helpers.grading)
_cases = [(models.MLP(32, 64, 4), torch.randn(16, 32)), (models.SmallCNN(3, 5, width=8, size=16), torch.randn(4, 3, 16, 16))]
for _ in range(2):
    _in = _rng.randint(4, 64)
    _cases.append((models.MLP(_in, _rng.randint(8, 128), _rng.randint(1, 16), depth=_rng.randint(1, 4)),
                   torch.randn(_rng.randint(1, 512), _in)))
_size = _rng.choice([8, 16, 32])
_cases.append((models.SmallCNN(3, _rng.randint(2, 10), width=_rng.choice([4, 8, 16]), size=_size),
               torch.randn(_rng.randint(1, 8), 3, _size, _size)))
_dtypes = (torch.bfloat16, torch.float16)
# [collect]
_got = grading.collect("activation_ratio_tests", {
    "ratios": [[activation_ratio(_net, _x, _dt) for _dt in _dtypes] for _net, _x in _cases],
    "elsewhere": [[activation_ratio(_net, amp.elsewhere(_x), _dt) for _dt in _dtypes] for _net, _x in _cases]})
# [judge]
assert compare.is_record(_got, {"ratios": list, "elsewhere": list}), "the collected results are incomplete"
assert len(_got["ratios"]) == len(_cases), "one answer per hidden case"
for (_net, _x), _ratios in zip(_cases, _got["ratios"]):
    assert type(_ratios) is list and len(_ratios) == len(_dtypes), "one ratio per dtype"
    for _dt, _r in zip(_dtypes, _ratios):
        assert type(_r) is float, f"return the ratio as a float, not {type(_r).__name__}"
        _expected = amp.saved_activation_bytes(_net, _x, _dt) / amp.saved_activation_bytes(_net, _x)
        assert abs(_r - _expected) < 1e-9, "not the ratio of the saved storages' bytes"
# with x on another device (simulated: amp.elsewhere): the ratio torch's own count gives there, under that device's autocast
# (which changes nothing computed on the CPU); the CPU's autocast would give the CPU's ratio
assert type(_got["elsewhere"]) is list and len(_got["elsewhere"]) == len(_cases), "one answer per hidden case"
for (_net, _x), _ratios in zip(_cases, _got["elsewhere"]):
    assert type(_ratios) is list and len(_ratios) == len(_dtypes), "one ratio per dtype"
    for _dt, _r in zip(_dtypes, _ratios):
        assert type(_r) is float, f"return the ratio as a float, not {type(_r).__name__}"
        _there = amp.elsewhere(_x)
        _expected = amp.saved_activation_bytes(_net, _there, _dt) / amp.saved_activation_bytes(_net, _there)
        assert abs(_r - _expected) < 1e-9, f"with x on another device ({amp.SIMULATED_DEVICE}), not the ratio autocast for x.device.type gives there (a device type written in the code?)"
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Speed: measure, don't assume
#
# 16-bit math is faster only where the hardware has fast 16-bit units: tensor cores on NVIDIA GPUs
# since Volta (fp16) and Ampere (bf16), AMX or AVX-512-BF16 on recent server CPUs. A **T4** (Colab's
# free GPU, Kaggle's 2×T4; compute capability 7.5) has fp16 tensor cores but none for bf16: bf16
# still runs there, and `torch.cuda.is_bf16_supported()` even returns `True`, but it is *emulated*:
# no bf16 tensor cores, so no tensor-core speed (the bars below show what it costs there). The setup cell
# said which kind your GPU is. On a T4 the fast format is fp16, with a GradScaler. Elsewhere it can be
# *slower* — the CPU may convert back and forth, and small models are dominated by overheads that
# precision does not touch. A training step of a larger and a tiny MLP, on this machine:

# %% tags=["demonstration"]
speeds = {}
# a smaller batch on a CPU: without fp16 units one fp16 step of the large MLP can take seconds there
# (max_seconds: once the measured steps took a second, one is enough)
for label, shape, batch in [("large MLP", (1024, 2048, 1024), 256 if DEVICE == "cuda" else 64), ("tiny MLP", (16, 32, 4), 32)]:
    for fmt, dtype in [("fp32", None), ("bf16", torch.bfloat16), ("fp16", torch.float16)]:
        net = models.seeded(models.MLP, 0, in_features=shape[0], hidden=shape[1], out_features=shape[2]).to(DEVICE)
        x, y = torch.randn(batch, shape[0], device=DEVICE), torch.randn(batch, shape[2], device=DEVICE)
        speeds[f"{label}\n{fmt}"] = amp.step_seconds(net, x, y, dtype, steps=3, max_seconds=1.0) * 1e3
for name, ms in speeds.items():
    print(f"{name.replace(chr(10), ' '):18} {ms:8.2f} ms per step")
plotting.plot_bars(speeds, "ms per training step", title=f"measured on {DEVICE} ({hw.cpu_cores} cores)" if DEVICE == "cpu"
                   else f"measured on {torch.cuda.get_device_name(0)}")
plt.xticks(fontsize=7);
if DEVICE == "cuda":
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        print(f"matmul 4096x4096 {str(dtype)[6:]}: {amp.matmul_tflops(4096, dtype):.0f} TFLOP/s")


# %% [markdown]
# Whatever these bars show on your machine is the answer for your machine — a GPU with tensor cores
# typically runs the large MLP several times faster in bf16/fp16; a CPU without bf16 units may not.
#
# ## 6. AMP with the other lessons' tools
#
# **DataParallel** has a pitfall. It runs each replica in its own thread, and autocast state is
# per thread. torch's `parallel_apply` passes only *whether* autocast is on into the replica threads,
# not its dtype: each thread enters `torch.autocast("cuda", enabled=True)`, which takes the device's
# default dtype, **fp16 on CUDA**. So a bf16 autocast around a DataParallel forward runs the replicas
# in fp16 (pytorch#125186), with fp16's narrow range and no GradScaler to protect it. The fix is to put
# the autocast **inside the model's `forward`**, which runs in each replica's thread, or to use DDP.
#
# The cell asks for each dtype both ways and prints what the replicas computed in. On ≥ 2 GPUs it is
# the real `nn.DataParallel` (expect fp16 for a bf16 request around it). Otherwise it is the course's
# emulation, which does what torch does, with the CPU's default autocast dtype, bf16, in place of
# CUDA's fp16: there a bf16 request happens to survive and an fp16 request becomes bf16.

# %%
class DtypeProbe(nn.Module):
    """A Linear that records the dtype it computed in (the replicas share the list)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 4)
        self.seen = []

    def forward(self, x):
        out = self.lin(x)
        self.seen.append(str(out.dtype).removeprefix("torch."))
        return out


class AutocastInside(nn.Module):
    """The fix: autocast entered inside forward, in each replica's own thread."""

    def __init__(self, module, dtype):
        super().__init__()
        self.module, self.dtype = module, dtype

    def forward(self, x):
        with torch.autocast(x.device.type, dtype=self.dtype):
            return self.module(x)


probe = DtypeProbe()
for asked in (torch.bfloat16, torch.float16):
    for how, net in [("autocast around DataParallel", probe), ("autocast inside forward", AutocastInside(probe, asked))]:
        wrapped = dp.make_data_parallel(net, device_ids=[0, 1])
        probe.seen.clear()
        with torch.autocast(wrapped.primary_device.type, dtype=asked):
            wrapped(torch.randn(8, 32).to(wrapped.primary_device))
        print(f"{how:29} asked {str(asked).removeprefix('torch.'):9} replicas computed in {probe.seen}")
print(wrapped.label)

# %% [markdown]
# **DDP** needs nothing special: each process wraps its own forward in autocast (and keeps its own
# GradScaler for fp16; the scalers stay in step because all ranks see the same all-reduced gradients).
# Two processes, fp32 against bf16 autocast, same data:

# %% tags=["demonstration"]
curves = {name: launch.launch(amp.amp_worker, 2, args=(name,))[0]["losses"] for name in ("fp32", "bf16")}
plotting.plot_losses({f"DDP x2, {k}": v for k, v in curves.items()})
print(f"final loss fp32 {curves['fp32'][-1]:.4f}, bf16 {curves['bf16'][-1]:.4f}")


# %% [markdown]
# ### Exercise 5 — mixed precision with gradient accumulation (3 points)
# When a batch does not fit in memory, split it into `k` equal **micro-batches**: run the forward and
# backward of one micro-batch at a time (so only one micro-batch's activations are ever alive), let the
# gradients add up in `.grad`, and take **one** optimizer step for all of them. Combine this with the
# fp16 loop above.
#
# Write `amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm)`, where
# `micro_batches` is a list of `k` pairs `(x, y)` of equal size. One call is one optimizer step that
# must equal one AMP step (`helpers.training.step`) on the whole batch — the micro-batches concatenated —
# up to fp16 rounding:
# * zero the gradients first; run each micro-batch's forward under `torch.autocast` to **fp16** on
#   `x.device.type`, and its backward through the scaler before the next micro-batch's forward;
# * the accumulated gradients must be those of the **whole batch's** mean loss;
# * clip them to `max_norm` on their true (unscaled) values, step through the scaler, update the scale;
# * return the whole batch's loss (the mean of the micro-batch losses) as a Python float.
#
# Think about what each scaler call does, and how many times each may run per optimizer step. The test
# steps it next to torch taking these steps itself, on the same micro-batches, and checks, after every step,
# what each forward saw and computed in, that earlier micro-batches' activations were freed, the loss, the
# scale and the weights (fp16 rounding and all) — including steps where one micro-batch's gradients are not finite.

# %% nbgrader={"grade": false, "grade_id": "amp_step", "locked": false, "schema_version": 3, "solution": true}
def amp_accumulation_step(model, optimizer, scaler, micro_batches, loss_fn, max_norm):
    ### BEGIN SOLUTION
    k = len(micro_batches)
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss / k).backward()  # the mean over the whole batch: each micro-batch weighs 1/k
        total += loss.item()
    scaler.unscale_(optimizer)  # once: the gradients are complete only now
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return total / k
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "amp_step_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
import math
import weakref


class _Saved:
    """A tensor autograd saved for backward; it lives as long as autograd keeps it."""
    __slots__ = ("tensor", "__weakref__")


def _watch(model):
    """Record, for each forward of `model`: the rows it saw, the dtype each Linear computed in, how many tensors
    saved by earlier forwards were still alive when it started, and torch's autocast state in it (enter the returned
    context)."""
    seen, live = {"rows": [], "dtypes": [], "alive": [], "autocast": []}, weakref.WeakSet()

    def pack(t):
        saved = _Saved()
        saved.tensor = t
        live.add(saved)
        return saved

    def before(mod, args):
        seen["rows"].append(args[0].shape[0])
        seen["alive"].append(len(live))
        seen["autocast"].append(amp.autocast_state())

    hooks = [model.register_forward_pre_hook(before)]
    hooks += [m.register_forward_hook(lambda mod, args, out: seen["dtypes"].append(out.dtype)) for m in model.modules()
              if isinstance(m, nn.Linear)]
    return seen, hooks, torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved.tensor)


def _student_steps(k, rows, max_norm, steps=5, seed=0, lr=0.05, bad=(), init_scale=2.0**16, growth_interval=2000,
                   elsewhere=False):
    """Step a model with amp_accumulation_step on k micro-batches of `rows` rows (amp.accumulation_batches), every step
    from the weights the reference run started it from (amp.micro_batch_reference: torch doing the step as the exercise
    asks, on the same micro-batches, with fp16 autocast, GradScaler and clipping after unscale_). bad = {step: micro-batch}:
    that micro-batch holds an inf, so the step's gradients are not finite and it must be skipped. elsewhere=True: the
    micro-batches' x say they are on another device (amp.elsewhere). Returns, per step: the loss returned, the rows
    each forward saw, the dtype each Linear computed in, how many tensors saved by earlier forwards were alive at each
    forward, the autocast state in each forward, the scale after the step, and how the weights moved."""
    starts = [s["start"] for s in amp.micro_batch_reference(k, rows, max_norm, steps, seed, lr, bad, init_scale, growth_interval,
                                                            elsewhere)]
    mine = models.seeded(models.MLP, seed, in_features=16, hidden=32, out_features=2)
    optimizer = torch.optim.SGD(mine.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    seen, hooks, saved_hooks = _watch(mine)
    records = []
    try:
        for start, micro in zip(starts, amp.accumulation_batches(k, rows, steps, seed, bad)):
            with torch.no_grad():
                mine.load_state_dict(start)
            before = [p.detach().clone() for p in mine.parameters()]
            for v in seen.values():
                v.clear()
            if elsewhere:
                micro = [(amp.elsewhere(x), y) for x, y in micro]
            with saved_hooks:
                loss = amp_accumulation_step(mine, optimizer, scaler, micro, F.mse_loss, max_norm)
            moved = torch.cat([(a.detach() - b).flatten() for a, b in zip(mine.parameters(), before)])
            records.append({"loss": loss, "rows": list(seen["rows"]), "dtypes": list(seen["dtypes"]),
                            "alive": list(seen["alive"]), "autocast": list(seen["autocast"]), "scale": scaler.get_scale(),
                            "moved": moved})
    finally:
        for h in hooks:
            h.remove()
    return records


def _against_reference(**case):
    """_student_steps next to the reference run. Checks after every step: what each forward saw and computed in, that
    earlier micro-batches' saved activations were freed, loss, scale, weights."""
    k, rows = case["k"], case["rows"]
    for i, (mine, ref) in enumerate(zip(_student_steps(**case), amp.micro_batch_reference(**case))):
        got, expected = mine["loss"], ref["loss"]
        assert type(got) is float, f"step {i}: return the loss as a Python float, not {type(got).__name__}"
        assert mine["rows"] == [rows] * k, f"step {i}: the forwards saw {mine['rows']} rows: expected one forward per micro-batch of {rows} rows"
        assert set(mine["dtypes"]) == {torch.float16}, f"step {i}: the forward computed in {set(mine['dtypes'])}, not fp16 (autocast on x.device.type?)"
        assert not any(mine["alive"]), f"step {i}: tensors saved by earlier micro-batches were still alive at each forward: {mine['alive']} (backward each micro-batch before the next forward, without retain_graph)"
        assert compare.same_values(got, expected, atol=1e-5, rtol=1e-5), f"step {i}: loss {got}, the whole batch's is {expected}"
        assert mine["scale"] == ref["scale"], f"step {i}: scale {mine['scale']}, the reference's {ref['scale']} (a step skipped that should not have been, e.g. stale gradients? the scale not updated once per step?)"
        assert torch.isfinite(mine["moved"]).all(), f"step {i}: non-finite weights: a step with inf/nan gradients must be skipped (scaler.step)"
        if not ref["moved"].any():
            assert not mine["moved"].any(), f"step {i}: the gradients were not finite, so the step must be skipped"
        else:
            error = ((mine["moved"] - ref["moved"]).norm() / ref["moved"].norm()).item()
            assert error < 1e-5, f"step {i}: the weights moved {error:.1e} (relative) away from the reference step's update (fp16 autocast? the whole batch's mean loss? clipped once, after unscale_?)"


_against_reference(k=4, rows=16, max_norm=1.0)
_against_reference(k=2, rows=8, max_norm=0.1, steps=3, bad={1: 1})
print("✓ amp_accumulation_step passes these checks; the hidden tests run when your notebook is graded")
### BEGIN HIDDEN TESTS
_cases = [dict(k=3, rows=8, max_norm=100.0, seed=2, steps=6, bad={0: 2, 3: 0}, init_scale=2.0**10, growth_interval=2),
          dict(k=8, rows=2, max_norm=0.5, seed=4, steps=6, bad={1: 7, 2: 3}, init_scale=2.0**10, growth_interval=3),
          dict(k=4, rows=8, max_norm=100.0, seed=6, steps=4, init_scale=1.0)]  # scale 1: stale gradients weigh as much as new ones
_rng = grading.hidden_random()  # new runs for every submission graded (helpers.grading)
for _ in range(4):
    _k, _steps = _rng.randint(1, 6), _rng.randint(2, 6)
    _bad = {_step: _rng.randrange(_k) for _step in range(_steps) if _rng.random() < 0.3}
    _cases.append(dict(k=_k, rows=_rng.randint(2, 16), max_norm=_rng.choice([0.05, 0.5, 1.0, 100.0]), seed=_rng.randrange(2**31),
                       steps=_steps, bad=_bad, init_scale=2.0 ** _rng.randint(0, 8), growth_interval=_rng.randint(2, 4)))
# (scales stay below 2**11: larger ones overflow fp16 by themselves, where the reference's single forward and the
# micro-batches' may round differently)
_elsewhere = dict(k=_rng.randint(2, 4), rows=_rng.randint(2, 8), max_norm=1.0, seed=_rng.randrange(2**31), steps=2)  # micro-batches said to be on another device
# [collect]
_got = grading.collect("amp_step_tests", {"cases": [_student_steps(**_case) for _case in _cases],
                                          "elsewhere": [{"loss": _step["loss"], "scale": _step["scale"], "moved": _step["moved"]}
                                                        for _step in _student_steps(**_elsewhere, elsewhere=True)]})
# [judge]
import math

_linears = sum(isinstance(m, nn.Linear) for m in models.MLP(in_features=16, hidden=32, out_features=2).modules())
_fields = {"loss": None, "rows": list, "dtypes": list, "alive": list, "autocast": list, "scale": None, "moved": None}
assert compare.is_record(_got, {"cases": list, "elsewhere": list}), "the collected results are incomplete"
assert len(_got["cases"]) == len(_cases), "one answer per hidden case"
for _case, _steps in zip(_cases, _got["cases"]):
    _k, _rows = _case["k"], _case["rows"]
    _reference = grading.reference(f"03-amp micro_batch_reference {_case}", lambda: amp.micro_batch_reference(**_case))
    assert type(_steps) is list and len(_steps) == len(_reference), f"{len(_steps)} steps recorded, not {len(_reference)}"
    for _i, (_mine, _ref) in enumerate(zip(_steps, _reference)):
        assert compare.is_record(_mine, _fields), f"step {_i}: the collected results are incomplete"
        _loss, _expected = _mine["loss"], _ref["loss"]
        assert type(_loss) is float, f"step {_i}: return the loss as a Python float, not {type(_loss).__name__}"
        assert compare.same_values(_mine["rows"], [_rows] * _k), f"step {_i}: the forwards saw {_mine['rows']} rows: expected one forward per micro-batch of {_rows} rows"
        assert compare.same_values(_mine["dtypes"], [torch.float16] * (_k * _linears)), f"step {_i}: the forward computed in {set(_mine['dtypes'])}, not fp16 (autocast on x.device.type?)"
        assert compare.same_values(_mine["autocast"], [amp.autocast_on("cpu", torch.float16)] * _k), f"step {_i}: autocast was not entered for the micro-batches' device (x.device.type) alone, with fp16"
        assert compare.same_values(_mine["alive"], [0] * _k), f"step {_i}: tensors saved by earlier micro-batches were still alive at each forward: {_mine['alive']} (backward each micro-batch before the next forward, without retain_graph)"
        assert compare.same_values(_loss, _expected, atol=1e-5, rtol=1e-5), f"step {_i}: loss {_loss}, the whole batch's is {_expected}"
        assert compare.same_values(_mine["scale"], _ref["scale"]), f"step {_i}: scale {_mine['scale']}, the reference's {_ref['scale']} (a step skipped that should not have been, e.g. stale gradients? the scale not updated once per step?)"
        _moved, _moved_ref = _mine["moved"], _ref["moved"]
        assert compare.tensor_like(_moved, _moved_ref), f"step {_i}: the update of the weights was not recorded"
        assert torch.isfinite(_moved).all(), f"step {_i}: non-finite weights: a step with inf/nan gradients must be skipped (scaler.step)"
        if not _moved_ref.any():
            assert not _moved.any(), f"step {_i}: the gradients were not finite, so the step must be skipped"
        else:
            _error = ((_moved - _moved_ref).norm() / _moved_ref.norm()).item()
            assert _error < 1e-5, f"step {_i}: the weights moved {_error:.1e} (relative) away from the reference step's update (fp16 autocast? the whole batch's mean loss? clipped once, after unscale_?)"
# the micro-batches said to be on another device (simulated: amp.elsewhere): autocast must follow them there, where it
# changes nothing computed on the CPU; judged by the step torch takes there (the CPU's autocast would compute in fp16)
_reference = grading.reference(f"03-amp micro_batch_reference {_elsewhere}, elsewhere",
                               lambda: amp.micro_batch_reference(**_elsewhere, elsewhere=True))
assert type(_got["elsewhere"]) is list and len(_got["elsewhere"]) == len(_reference), "one record per step"
_there = f"with micro-batches on another device ({amp.SIMULATED_DEVICE}), the step is not the one autocast for x.device.type takes there (a device type written in the code?)"
for _i, (_mine, _ref) in enumerate(zip(_got["elsewhere"], _reference)):
    assert compare.is_record(_mine, {"loss": None, "scale": None, "moved": None}), f"step {_i}: the collected results are incomplete"
    assert type(_mine["loss"]) is float and compare.same_values(_mine["loss"], _ref["loss"], atol=1e-5, rtol=1e-5), f"step {_i}: {_there}"
    assert compare.same_values(_mine["scale"], _ref["scale"]), f"step {_i}: {_there}"
    assert compare.tensor_like(_mine["moved"], _ref["moved"]) and torch.isfinite(_mine["moved"]).all(), f"step {_i}: {_there}"
    assert ((_mine["moved"] - _ref["moved"]).norm() / _ref["moved"].norm()).item() < 1e-5, f"step {_i}: {_there}"
### END HIDDEN TESTS

# %% [markdown]
# ## 7. Quick check: fp16 or bf16?
#
# For each situation answer `"fp16"` or `"bf16"`:
# * **q1** — A GPU without bf16 tensor cores (e.g. a V100 or T4: bf16 runs there only emulated), and you want tensor-core speed.
# * **q2** — An A100/H100, and you would rather not manage a loss scale at all.
# * **q3** — Activations that sometimes exceed 100 000 in magnitude.
# * **q4** — Values that must keep about 3 significant decimal digits near 1.0, in a 16-bit format, with
#   magnitudes always between 10⁻⁴ and 10⁴.
# * **q5** — Training on a recent CPU with AMX (its 16-bit units are bf16 units).

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true}
quiz = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None}
### BEGIN SOLUTION
quiz = {"q1": "fp16", "q2": "bf16", "q3": "bf16", "q4": "fp16", "q5": "bf16"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "quiz_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert type(quiz) is dict and set(quiz) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five"
assert all(quiz[q] in ("fp16", "bf16") and type(quiz[q]) is str for q in quiz), 'answer "fp16" or "bf16"'
print("✓ quiz is answered in the right form; the hidden tests check the answers when your notebook is graded")
### BEGIN HIDDEN TESTS
# [collect]
_got = grading.collect("quiz_tests", quiz)
# [judge]
assert type(_got) is dict and set(_got) == {"q1", "q2", "q3", "q4", "q5"}, "answer all five"
assert all(type(_got[q]) is str and _got[q] in ("fp16", "bf16") for q in _got), 'answer "fp16" or "bf16"'
assert amp.representable(100000.0, torch.float16) == "overflow" and amp.representable(100000.0, torch.bfloat16) == "ok", "100000 overflows fp16 and fits bf16"
assert torch.finfo(torch.float16).eps < 1e-3 < torch.finfo(torch.bfloat16).eps, "fp16 has the finer steps (eps), bf16 the coarser"
assert _got == {"q1": "fp16", "q2": "bf16", "q3": "bf16", "q4": "fp16", "q5": "bf16"}, "at least one answer is wrong"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
#
# * fp16: 5 exponent bits (max 65504; subnormals down to 2⁻²⁴, values at or below 2⁻²⁵ become 0) and
#   10 mantissa bits, about 3.3 significant digits; bf16: fp32's range, 7 mantissa bits, about 2.4 digits.
# * `torch.autocast(device_type, dtype)` runs matmuls and convolutions in 16 bits and keeps sensitive ops
#   in fp32 — the lists differ between CPU and CUDA, so measure on your device.
# * fp16 needs loss scaling: `torch.amp.GradScaler` skips overflowing steps, halves the scale, and grows
#   it after clean intervals; unscale before clipping; save its state with the checkpoint. bf16 does not.
#   With gradient accumulation over k micro-batches: each loss divided by k, and `unscale_`, `step` and
#   `update` once per optimizer step.
# * Autocast shrinks saved activations (about half for matmul-heavy models); speed depends on the
#   hardware's 16-bit units — measure, never assume.
# * DataParallel loses autocast's dtype in its replica threads (they run in the device default, fp16 on
#   CUDA): put autocast inside `forward`. Under DDP each process simply runs its own autocast.
#
# Next: lesson 4, Hugging Face Accelerate and TPUs.
