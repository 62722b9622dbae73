"""Mixed precision: number formats, what autocast does to each op, GradScaler's dynamics,
activation memory and step time — all measured on the device at hand."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import training
from ._saved import saved_bytes
from ._validate import low_precision_dtype, one_of, positive_int, positive_number
from . import refusal
from .language import say

FORMATS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
LOW_PRECISION = {"fp16": torch.float16, "bf16": torch.bfloat16}


def device_type() -> str:
    """The autocast device for this machine: "cuda" when a GPU is present, else "cpu"."""
    return "cuda" if torch.cuda.is_available() else "cpu"


# The device a batch says it is on in the hidden tests (`elsewhere`): autocast for it can be entered on any machine.
SIMULATED_DEVICE = "xla"
WATCHED = ("cpu", SIMULATED_DEVICE)  # the device types autocast_state reports


class _Elsewhere(torch.Tensor):
    """A CPU tensor whose `.device` says SIMULATED_DEVICE; whatever is computed from it is a plain CPU tensor."""

    @property
    def device(self):
        return torch.device(SIMULATED_DEVICE)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def elsewhere(x: torch.Tensor) -> torch.Tensor:
    """`x`, still computed on the CPU, but saying it is on SIMULATED_DEVICE (`x.device.type`). Code that takes its
    autocast device from the batch enters autocast for that device there; code that names "cpu" enters it for the
    CPU: `autocast_state`, read inside the forward, tells which, on a machine without such a device. (Autocast for
    SIMULATED_DEVICE changes nothing computed on the CPU: what comes out is fp32.)"""
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        raise ValueError(say("x must be a tensor on the CPU, got {x!r:.60}", x=x))
    return x.as_subclass(_Elsewhere)


_said_elsewhere = elsewhere  # for the functions whose argument `elsewhere` hides it


def autocast_state() -> dict:
    """torch's own autocast state now, for each device type of WATCHED: its autocast dtype, or None where it is off."""
    return {d: torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else None for d in WATCHED}


def autocast_on(device_type: str | None, dtype: torch.dtype | None = None) -> dict:
    """The autocast_state() under `torch.autocast(device_type, dtype=dtype)` alone (None: outside any autocast)."""
    if device_type is not None:
        one_of("device_type", device_type, set(WATCHED))
        low_precision_dtype("dtype", dtype, allow_none=False)
    return {d: dtype if d == device_type else None for d in WATCHED}


def format_table() -> list[dict]:
    """Bits, range and precision of fp32, fp16 and bf16, read from torch.finfo."""
    rows = []
    for name, dtype in FORMATS.items():
        info = torch.finfo(dtype)
        mantissa = round(-torch.log2(torch.tensor(info.eps)).item())
        rows.append({
            "format": name, "bits": info.bits, "exponent bits": info.bits - 1 - mantissa, "mantissa bits": mantissa,
            "largest": info.max, "smallest normal": info.smallest_normal,
            "smallest subnormal": info.smallest_normal * info.eps, "eps (1 -> next)": info.eps,
        })
    return rows


@refusal.reference
def representable(value: float, dtype: torch.dtype) -> str:
    """What happens to `value` stored in `dtype`: "ok", "overflow" (inf) or "underflow" (0)."""
    stored = torch.tensor(value, dtype=torch.float64).to(dtype)
    if torch.isinf(stored) and value == value and abs(value) != float("inf"):
        return "overflow"
    if stored == 0 and value != 0:
        return "underflow"
    return "ok"


def probe_ops(device: str) -> dict:
    """Small callables for the autocast table. Each takes fp32 tensors on `device`."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g).to(device)
    w = torch.randn(4, 16, generator=g).to(device)
    img = torch.randn(2, 3, 8, 8, generator=g).to(device)
    kernel = torch.randn(4, 3, 3, 3, generator=g).to(device)
    target = torch.zeros(8, dtype=torch.long, device=device)
    return {
        "linear": lambda: F.linear(x, w),
        "matmul": lambda: x @ x.T,
        "conv2d": lambda: F.conv2d(img, kernel),
        "relu(linear)": lambda: F.relu(F.linear(x, w)),
        "softmax(linear)": lambda: F.softmax(F.linear(x, w), -1),
        "layer_norm(linear)": lambda: F.layer_norm(F.linear(x, w), (4,)),
        "sum(linear)": lambda: F.linear(x, w).sum(),
        "exp(linear)": lambda: F.linear(x, w).exp(),
        "mse_loss(linear)": lambda: F.mse_loss(F.linear(x, w), torch.zeros(8, 4, device=device)),
        "cross_entropy(linear)": lambda: F.cross_entropy(F.linear(x, w), target),
    }


@refusal.reference
def autocast_dtypes(device: str | None = None, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.dtype]:
    """Run each probe op under `torch.autocast(device, dtype)` and return its output dtype."""
    device = device or device_type()
    one_of("device", device, {"cpu", "cuda"})
    low_precision_dtype("dtype", dtype, allow_none=False)
    ops = probe_ops(device)
    with torch.autocast(device, dtype=dtype):
        return {name: op().dtype for name, op in ops.items()}


@refusal.reference
def saved_activation_bytes(model: nn.Module, x: torch.Tensor, dtype: torch.dtype | None = None) -> int:
    """Bytes autograd saves for backward in one forward of `model` (parameters and input excluded),
    in fp32 (`dtype=None`) or under autocast to `dtype`."""
    if not isinstance(model, nn.Module):
        raise ValueError(say("model must be an nn.Module, got {kind}", kind=type(model).__name__))
    low_precision_dtype("dtype", dtype)
    with saved_bytes(list(model.parameters()) + [x]) as saved:
        with torch.autocast(x.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            model(x)
    return saved["bytes"]


@refusal.reference
def scaler_trajectory(overflow: Sequence[bool], init_scale: float = 2.0**16, growth_interval: int = 2000,
                      device: str | None = None) -> list[dict]:
    """Drive a real `torch.amp.GradScaler` through steps whose gradients are finite or not.

    `overflow[i]` makes step i's gradient inf. Returns, per step, the scale used, whether the
    optimizer step was skipped, and the scale after `update()`.
    """
    positive_number("init_scale", init_scale)
    positive_int("growth_interval", growth_interval)
    device = device or device_type()
    weight = nn.Parameter(torch.ones(1, device=device))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=init_scale, growth_interval=growth_interval)
    steps = []
    for bad in overflow:
        optimizer.zero_grad()
        loss = (weight * (float("inf") if bad else 1.0)).sum()
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        before = weight.detach().clone()
        scaler.step(optimizer)
        scaler.update()
        steps.append({"scale": scale, "skipped": bool(torch.equal(before, weight.detach())), "next_scale": scaler.get_scale()})
    return steps


def step_seconds(model: nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype | None, steps: int = 10,
                 loss_fn=F.mse_loss, max_seconds: float | None = None) -> float:
    """Mean seconds of a training step (forward, backward, SGD step) in fp32 or under autocast, over `steps`
    steps after a warm-up step; with `max_seconds`, fewer once the measured steps have taken that long (at least
    one): an fp16 step on a CPU without fp16 units can take seconds, and more of them would not say more."""
    positive_int("steps", steps)
    low_precision_dtype("dtype", dtype)
    if max_seconds is not None:
        positive_number("max_seconds", max_seconds)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    device = x.device.type
    times = []
    for _ in range(steps + 1):  # the first step warms up
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        training.step(model, optimizer, x, y, loss_fn, dtype)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if max_seconds is not None and len(times) > 1 and sum(times[1:]) >= max_seconds:
            break
    return sum(times[1:]) / len(times[1:])


def matmul_tflops(n: int = 4096, dtype: torch.dtype = torch.bfloat16, repeats: int = 10) -> float:
    """Measured matrix-multiply throughput on the GPU (tensor cores for fp16/bf16)."""
    positive_int("n", n)
    positive_int("repeats", repeats)
    if not torch.cuda.is_available():
        raise ValueError(say("matmul_tflops measures a GPU; this machine has none"))
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12


def amp_worker(rank: int, world_size: int, dtype_name: str, steps: int = 20) -> dict:
    """DDP + autocast: each rank trains under autocast; returns the loss curve."""
    from . import data, ddp, launch, models

    one_of("dtype_name", dtype_name, set(FORMATS))
    positive_int("steps", steps)
    dtype = LOW_PRECISION.get(dtype_name)
    device = launch.device()
    model = ddp.wrap(models.seeded(models.MLP, 0, in_features=16, hidden=64, out_features=2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype is torch.float16)
    x, y = data.regression(64 * world_size, 16, 2).tensors
    x, y = x[rank::world_size].to(device), y[rank::world_size].to(device)
    losses = []
    for _ in range(steps):
        losses.append(training.step(model, optimizer, x, y, F.mse_loss, dtype, scaler).item())
    return {"losses": losses}


def quiet_fp16_cpu_warnings():
    """Silence the one-time notice some CPU kernels give for fp16."""
    warnings.filterwarnings("ignore", message=".*fp16.*CPU.*")


def accumulation_batches(k: int, rows: int, steps: int = 5, seed: int = 0, bad=()) -> list[list[tuple]]:
    """The batches of lesson 3's accumulation exercise: for each step, k micro-batches (x, y) of `rows` rows,
    cut in turn from one regression set (256 rows, 16 features, 2 targets). `bad` = {step: micro-batch}: that
    micro-batch's first row holds an inf, so the step's gradients are not finite."""
    from . import data

    positive_int("k", k)
    positive_int("rows", rows)
    positive_int("steps", steps)
    if k * rows >= 256:
        raise ValueError(say("k * rows must be below 256, got {k} * {rows}", k=k, rows=rows))
    bad = dict(bad)
    x, y = data.regression(256, 16, 2, seed=seed).tensors
    batches = []
    for i in range(steps):
        start = i * 8 % (256 - k * rows)
        xb, yb = x[start:start + k * rows].clone(), y[start:start + k * rows]
        if i in bad:
            xb[bad[i] * rows, 0] = float("inf")
        batches.append(list(zip(xb.split(rows), yb.split(rows))))
    return batches


@refusal.reference
def micro_batch_reference(k: int, rows: int, max_norm: float, steps: int = 5, seed: int = 0, lr: float = 0.05, bad=(),
                          init_scale: float = 2.0**16, growth_interval: int = 2000, elsewhere: bool = False) -> list[dict]:
    """Lesson 3's accumulation exercise done as it asks, by torch: the model, optimizer, scaler and batches of
    accumulation_reference, and each step on that step's k micro-batches one after the other (each forward under fp16
    autocast for its batch's device type, `scaler.scale(loss / k).backward()` before the next forward), then once:
    unscale_, clipping to `max_norm`, scaler.step, scaler.update. `elsewhere`: the micro-batches' x say they are on
    SIMULATED_DEVICE (`elsewhere`), whose autocast changes nothing computed on the CPU: the step is fp32 there.
    Per step as accumulation_reference: "start", "loss" (the mean of the micro-batch losses), "scale", "moved"."""
    from . import models

    positive_number("max_norm", max_norm)
    positive_number("lr", lr)
    if not isinstance(elsewhere, bool):
        raise ValueError(say("elsewhere must be a bool, got {elsewhere!r}", elsewhere=elsewhere))
    model = models.seeded(models.MLP, seed, in_features=16, hidden=32, out_features=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    trajectory = []
    for micro in accumulation_batches(k, rows, steps, seed, bad):
        start = {name: t.detach().clone() for name, t in model.state_dict().items()}
        before = [p.detach().clone() for p in model.parameters()]
        optimizer.zero_grad()
        total = 0.0
        for x, y in micro:
            x = _said_elsewhere(x) if elsewhere else x
            with torch.autocast(x.device.type, dtype=torch.float16):
                loss = F.mse_loss(model(x), y)
            scaler.scale(loss / k).backward()
            total += loss.item()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
        trajectory.append({"start": start, "loss": total / k, "scale": scaler.get_scale(), "moved": moved})
    return trajectory


@refusal.reference
def accumulation_reference(k: int, rows: int, max_norm: float, steps: int = 5, seed: int = 0, lr: float = 0.05, bad=(),
                           init_scale: float = 2.0**16, growth_interval: int = 2000) -> list[dict]:
    """The reference run of lesson 3's accumulation exercise: an MLP(16, 32, 2) seeded with `seed`, SGD with `lr`,
    one `training.step` per step (fp16 autocast, a CPU GradScaler, clipping to `max_norm` after unscale_) on that
    step's micro-batches (accumulation_batches) concatenated. Per step: "start", the weights it started from (a
    state dict); "loss"; "scale", the scale after the step; "moved", how the parameters moved (one flat tensor)."""
    from . import models

    positive_number("max_norm", max_norm)
    positive_number("lr", lr)
    model = models.seeded(models.MLP, seed, in_features=16, hidden=32, out_features=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    trajectory = []
    for micro in accumulation_batches(k, rows, steps, seed, bad):
        x, y = torch.cat([xb for xb, _ in micro]), torch.cat([yb for _, yb in micro])
        start = {name: t.detach().clone() for name, t in model.state_dict().items()}
        before = [p.detach().clone() for p in model.parameters()]
        loss = training.step(model, optimizer, x, y, F.mse_loss, autocast_dtype=torch.float16, scaler=scaler,
                             max_grad_norm=max_norm).item()
        moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
        trajectory.append({"start": start, "loss": loss, "scale": scaler.get_scale(), "moved": moved})
    return trajectory
