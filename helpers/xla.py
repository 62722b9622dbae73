"""torch_xla on XLA devices: the TPU when there is one, otherwise PJRT's CPU client with
virtual devices (as many as `hardware.virtual_xla_devices()`: 8, the shape of Kaggle's TPU v5e-8,
unless COURSE_XLA_CPU_DEVICES says otherwise; 1 is the shape of Colab's TPU v5e-1).

XLA experiments run in a fresh Python process (`run`): torch_xla reads its settings
(PJRT_DEVICE, CPU_NUM_DEVICES, SPMD mode) once per process, and importing it where Accelerate
lives makes Accelerate pick `xla:0`. On XLA:CPU (no TPU here) that process is forked from a server
that imported torch_xla once (`fresh.ForkServer`): it starts in a fraction of a second, and its
runtime, devices and graph cache are still its own. The functions below the runner are what those
processes do.
"""

from __future__ import annotations

import importlib.util
import time

from . import fresh, hardware, tpu_precision, versions
from ._validate import boolean, one_of, positive_int, positive_number
from . import refusal
from .language import message, say

# Part B needs a torch_xla of the same minor as torch (versions.PART_B_WHERE says where one exists). Where this
# runtime lacks it and a matching wheel exists, lesson 4's setup cell offers it (INSTALL_TORCH_XLA).
MISSING_TEMPLATE = message(
    "torch_xla is not installed here: part B (XLA) of lesson 4 cannot run; everything else still runs. {where} Where a "
    "torch_xla matching this runtime's torch exists, set INSTALL_TORCH_XLA = True in the lesson's setup cell (its first "
    "code cell), then run that cell and the ones after it again: it installs that torch_xla, or says why none fits. "
    "torch_xla cannot run on macOS or Windows at all: it has wheels for Linux x86-64 only, for torch {oldest} to "
    "{newest}.")
_VERSIONS = {"oldest": versions.SUPPORTED_TORCH_XLA[0], "newest": versions.SUPPORTED_TORCH_XLA[1]}
MISSING = MISSING_TEMPLATE.format(where=versions.PART_B_WHERE, **_VERSIONS)


def missing() -> str:
    """MISSING in the language the helpers speak: what the lesson prints and XLAUnavailable says."""
    return say(MISSING_TEMPLATE, where=versions.part_b_where(), **_VERSIONS)


class XLAUnavailable(RuntimeError):
    pass


def available() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def environment(n_devices: int | None = None, virtual: bool = False) -> dict[str, str]:
    """PJRT settings: the TPU when present (unless `virtual`), else `n_devices` virtual CPU devices
    (default: `hardware.virtual_xla_devices()`). `virtual=True` gives a shape the TPU does not have,
    e.g. 4 devices on a one-chip TPU v5e-1."""
    if n_devices is not None:
        positive_int("n_devices", n_devices)
    boolean("virtual", virtual)
    if hardware.tpu_present() and not virtual:
        return {"PJRT_DEVICE": "TPU"}
    return {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(n_devices or hardware.virtual_xla_devices())}


def _env(n_devices, virtual):
    env = {**environment(n_devices, virtual), "TF_CPP_MIN_LOG_LEVEL": "1", "GRPC_VERBOSITY": "ERROR"}  # warnings stay in the log
    # the job's own: a forked child has the fork server's environment, from when the server started
    return {**env, tpu_precision.ENV: tpu_precision.setting()} if env["PJRT_DEVICE"] == "CPU" else env


# XLA:CPU's fork server: torch_xla imported once, with the settings it reads on import; each job's
# CPU_NUM_DEVICES is read when its child first asks for a device. Never on a TPU machine: there
# torch_xla configures the TPU on import, and every job starts afresh.
CPU_SERVER = fresh.ForkServer(
    ["torch", "torch_xla", "torch_xla.runtime", "torch_xla.core.xla_model", "torch_xla.debug.metrics",
     "torch_xla.distributed.spmd", "helpers.xla"],
    env={"PJRT_DEVICE": "CPU", "TF_CPP_MIN_LOG_LEVEL": "1", "GRPC_VERBOSITY": "ERROR"})


def warm_up() -> None:
    """XLA:CPU's fork server starts importing torch_xla now, in the background (seconds), so that the first `run`
    starts at once. Only in a notebook's kernel, where torch_xla is installed and there is no TPU."""
    if available() and not hardware.tpu_present():
        CPU_SERVER.start_in_background()


def run(fn, *args, n_devices: int | None = None, virtual: bool = False, timeout_s: float = 300,
        with_log: bool = False, **kwargs):
    """Run `fn(*args, **kwargs)` in a fresh process on XLA devices and return its result
    (with `with_log=True`, also what XLA logged on stderr). `timeout_s` counts its CPU-seconds (helpers.fresh)."""
    __tracebackhide__ = True  # an error shows the student's code, not the launcher (IPython hides this frame)
    if not available():
        raise XLAUnavailable(missing())
    env = _env(n_devices, virtual)
    server = CPU_SERVER if env["PJRT_DEVICE"] == "CPU" and not hardware.tpu_present() else None
    return fresh.run(tpu_precision.as_set(fn), *args, env=env, timeout_s=timeout_s,
                     with_log=with_log, server=server, **kwargs)


def run_many(jobs, n_devices: int | None = None, virtual: bool = False, timeout_s: float = 300) -> list:
    """Several `(fn, args, kwargs)` jobs, each in its own fresh process on XLA devices, side by side
    (one at a time on a TPU: a chip serves one process; on XLA:CPU each a child of the fork server)."""
    if not available():
        raise XLAUnavailable(missing())
    env = _env(n_devices, virtual)
    on_tpu = hardware.tpu_present() and not virtual
    server = CPU_SERVER if env["PJRT_DEVICE"] == "CPU" and not hardware.tpu_present() else None
    jobs = [(tpu_precision.as_set(fn), args, kwargs) for fn, args, kwargs in jobs]
    return fresh.run_many(jobs, env=env, timeout_s=timeout_s, workers=1 if on_tpu else None, server=server)


# ---- what the XLA processes do ----------------------------------------------------------------


def device_summary() -> dict:
    import torch_xla
    import torch_xla.runtime as xr

    return {"device_type": xr.device_type(), "devices": xr.global_runtime_device_count(),
            "first": str(torch_xla.device()), "torch_xla": torch_xla.__version__}


def _metric_count(name: str) -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data(name)
    return int(data[0]) if data else 0


@refusal.reference
def count_compiles(batch_sizes, lengths=None, optimizer: str = "sgd", item_every_step: bool = False,
                   sync_every_step: bool = True, pad_to=None, features: int = 8) -> dict:
    """Train a small model on one XLA device and count graph compilations and executions.

    `batch_sizes[i]` rows at step i; with `lengths`, step i's inputs are sequences of length
    `lengths[i]`, padded to `pad_to(length)` when `pad_to` is given (a mask keeps the maths exact).
    """
    one_of("optimizer", optimizer, {"sgd", "adam"})
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(features, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    met.clear_all()
    losses, seconds = [], []
    for i, rows in enumerate(batch_sizes):
        start = time.perf_counter()
        length = lengths[i] if lengths is not None else 1
        padded = pad_to(length) if pad_to is not None else length
        x = torch.zeros(rows, padded, features)
        x[:, :length] = torch.randn(rows, length, features, generator=g)
        mask = torch.zeros(rows, padded, 1)
        mask[:, :length] = 1.0
        y = torch.randn(rows, 1, generator=g)
        x, mask, y = x.to(device), mask.to(device), y.to(device)
        opt.zero_grad()
        pooled = (model[0](x).relu() * mask).sum(1) / mask.sum(1)  # mean over the real positions only
        loss = torch.nn.functional.mse_loss(model[2](pooled), y)
        loss.backward()
        opt.step()
        if item_every_step:
            losses.append(loss.item())  # forces the pending graph to run now
        if sync_every_step:
            torch_xla.sync()
        seconds.append(time.perf_counter() - start)
    torch_xla.sync()
    xm.wait_device_ops()
    return {"compiles": _metric_count("CompileTime"), "executions": _metric_count("ExecuteTime"),
            "step_seconds": seconds, "losses": losses}


def count_compiles_each(experiments) -> list[dict]:
    """`count_compiles(**experiment)` for each experiment (a dict of its arguments), one after the other in
    this process: one torch_xla start-up for all. The graph cache lives as long as the process, so each
    experiment gets a feature size of its own (8, 9, 10, ...) and finds none of the others' graphs."""
    if not isinstance(experiments, (list, tuple)) or not all(
            isinstance(e, dict) and "features" not in e for e in experiments):
        raise ValueError(say("experiments must be a list of dicts of count_compiles' arguments, without features; got "
                             "{experiments!r}", experiments=experiments))
    return [count_compiles(**experiment, features=8 + i) for i, experiment in enumerate(experiments)]


def autocast_bf16(steps: int = 10, batch: int = 64, lr: float = 0.2, seed: int = 0) -> dict:
    """bf16 mixed precision on this process's XLA device, with `torch.autocast("xla", dtype=torch.bfloat16)`.

    bf16 is the TPU's own 16-bit format (its matrix units multiply bf16 and accumulate in fp32), with fp32's range:
    no GradScaler. The same autocast runs on XLA:CPU, where it shows what is cast
    but not the TPU's speed (`torch_xla.amp.autocast` refuses the CPU). Call it in an XLA process:
    `xla.run(xla.autocast_bf16)`.

    Returns {"device_type", "dtypes": {op: dtype name} for lesson 3's probe ops (`amp.probe_ops`) under XLA
    autocast, "losses": {"fp32": [...], "bf16": [...]} for `steps` SGD steps (learning rate `lr`) of one
    seeded MLP(16, 64, 2) per precision on the same batches of `batch` rows, "max_rel_diff": the largest
    relative difference between the two loss curves, "loss_dtype": the dtype of the loss computed under
    autocast, "fp32_matmul_precision": torch_xla's precision for fp32 matrix products
    (`mat_mul_precision()`: on a TPU "default" multiplies them in bf16 too, "highest" in six
    passes close to fp32), which the fp32 run used}.
    """
    positive_int("steps", steps)
    positive_int("batch", batch)
    positive_number("lr", lr)
    positive_int("seed", seed, minimum=0)
    import torch
    import torch.nn.functional as F
    import torch_xla
    import torch_xla.runtime as xr

    from . import amp, data, models

    device = torch_xla.device()
    ops = amp.probe_ops(device)
    with torch.autocast("xla", dtype=torch.bfloat16):
        dtypes = {name: str(op().dtype).replace("torch.", "") for name, op in ops.items()}
    x, y = data.regression(batch * steps, 16, 2, seed=seed).tensors
    losses, loss_dtype = {}, None
    for name, autocast in (("fp32", False), ("bf16", True)):
        model = models.seeded(models.MLP, seed, in_features=16, hidden=64, out_features=2).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        curve = []
        for step in range(steps):
            xb, yb = x[step * batch:(step + 1) * batch].to(device), y[step * batch:(step + 1) * batch].to(device)
            optimizer.zero_grad()
            with torch.autocast("xla", dtype=torch.bfloat16, enabled=autocast):
                loss = F.mse_loss(model(xb), yb)
            if autocast:
                loss_dtype = str(loss.dtype).replace("torch.", "")
            loss.backward()
            optimizer.step()
            torch_xla.sync()
            curve.append(loss.detach())
        losses[name] = [v.item() for v in curve]  # read after the loop: no .item() inside the step
    diff = max(abs(a - b) / abs(a) for a, b in zip(losses["fp32"], losses["bf16"]))
    return {"device_type": xr.device_type(), "dtypes": dtypes, "losses": losses, "max_rel_diff": diff,
            "loss_dtype": loss_dtype, "fp32_matmul_precision": mat_mul_precision()}


def mat_mul_precision() -> str:
    """torch_xla's precision for fp32 matrix products, as `torch_xla.backends.get_mat_mul_precision()` reports it.
    torch_xla 2.6 has no `torch_xla.backends` (nor any other way to read it back): there it is XLA's "default", the
    precision torch_xla starts with, since nothing in the course sets it."""
    try:
        import torch_xla.backends
    except ImportError:
        return "default"
    return torch_xla.backends.get_mat_mul_precision()


def spmd_data_parallel(steps: int = 5, batch: int = 64, shard=None, seed: int = 0) -> dict:
    """Data parallel over every XLA device with SPMD, next to two runs of the same model on the same batches: on one
    XLA device (the batches not annotated, so every device computes all of it) and in fp32 on the CPU.

    `shard(tensor, mesh)` annotates a batch; by default it is split along dim 0 ("data"). "max_abs_diff": the largest
    weight difference from the one-device run, which multiplies at the same precision: what sharding changed.
    "fp32_cpu_diff": from the CPU's run; on a TPU that also holds its default fp32 matmul precision (bf16 products,
    `mat_mul_precision`), about 6e-4 here.
    """
    import copy

    import numpy as np
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ("data", "model"))
    shard = shard or (lambda t, m: xs.mark_sharding(t, m, ("data", None)))
    torch.manual_seed(seed)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    device = torch_xla.device()
    sharded, one_device = (copy.deepcopy(cpu).to(device) for _ in range(2))
    runs = [(model, torch.optim.SGD(model.parameters(), lr=0.1)) for model in (sharded, one_device, cpu)]
    g = torch.Generator().manual_seed(seed)
    met.clear_all()
    spec = None
    for _ in range(steps):
        x, y = torch.randn(batch, 16, generator=g), torch.randn(batch, 2, generator=g)
        xd, yd = x.to(device), y.to(device)
        shard(xd, mesh)
        shard(yd, mesh)
        spec = torch_xla._XLAC._get_xla_sharding_spec(xd)
        for (model, opt), batch_xy in zip(runs, ((xd, yd), (x.to(device), y.to(device)), (x, y))):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(batch_xy[0]), batch_xy[1]).backward()
            opt.step()
        torch_xla.sync()
    xm.wait_device_ops()

    def largest_difference(a, b):
        return max((p.detach().cpu() - q.detach().cpu()).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))

    return {"devices": n, "max_abs_diff": largest_difference(sharded, one_device),
            "fp32_cpu_diff": largest_difference(sharded, cpu), "sharding": spec,
            "compiles": _metric_count("CompileTime"), "executions": _metric_count("ExecuteReplicatedTime")}


def fsdpv2_adam(cfg, steps: int | None = None) -> dict:
    """Lesson 5's FSDP on torch_xla: `cfg`'s model (a helpers.sharding.ShardConfig) wrapped in FSDPv2
    (SpmdFullyShardedDataParallel: every parameter marked sharded along its largest dimension over a mesh axis "fsdp"
    of every XLA device, the batch along dim 0), trained with Adam on cfg's global batches, next to the same model on
    one XLA device (same precision, nothing annotated). "shardings": each parameter's sharding as XLA holds it;
    "max_abs_diff": the largest weight difference between the two runs."""
    import copy

    import numpy as np
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel

    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)
    device = torch_xla.device()
    plain = cfg.model()
    one_device = copy.deepcopy(plain).to(device)
    sharded = SpmdFullyShardedDataParallel(plain.to(device))
    runs = [(model, torch.optim.Adam(model.parameters(), lr=cfg.lr)) for model in (sharded, one_device)]
    for step in range(cfg.steps if steps is None else steps):
        x, y = cfg.batch(step, n)
        for model, optimizer in runs:
            xd, yd = x.to(device), y.to(device)
            if model is sharded:
                xs.mark_sharding(xd, mesh, ("fsdp", None))
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(xd), yd).backward()
            optimizer.step()
        torch_xla.sync()
    xm.wait_device_ops()
    names = [name.removeprefix("_orig_module.") for name, _ in sharded.named_parameters()]
    return {"devices": n,
            "shardings": {name: torch_xla._XLAC._get_xla_sharding_spec(p) for name, p in zip(names, sharded.parameters())},
            "max_abs_diff": max((p.detach().cpu() - q.detach().cpu()).abs().max().item()
                                for p, q in zip(sharded.parameters(), one_device.parameters()))}


def shardings(meshes, shard=None) -> list[str]:
    """The sharding spec that `shard(tensor, mesh)` gives an (8, 6) batch on each mesh `(shape, axis_names)`
    of every XLA device, in SPMD mode (by default: split along dim 0 over the "data" axis, as in B4)."""
    if not isinstance(meshes, (list, tuple)) or not meshes or not all(
            isinstance(m, (list, tuple)) and len(m) == 2 and len(m[0]) == len(m[1])
            and all(isinstance(d, int) and d > 0 for d in m[0]) and all(isinstance(a, str) for a in m[1]) for m in meshes):
        raise ValueError(say("meshes must be a non-empty list of (shape, axis_names) of equal lengths, got {meshes!r}",
                             meshes=meshes))
    if shard is not None and not callable(shard):
        raise ValueError(say("shard must be callable or None, got {kind}", kind=type(shard).__name__))
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    n = xr.global_runtime_device_count()
    shard = shard or (lambda t, m: xs.mark_sharding(t, m, ("data", None)))
    specs = []
    for shape, names in meshes:
        batch = torch.zeros(8, 6).to(torch_xla.device())
        shard(batch, xs.Mesh(np.arange(n), tuple(shape), tuple(names)))
        specs.append(torch_xla._XLAC._get_xla_sharding_spec(batch))
    return specs


def lightning_tpu_trainer() -> dict:
    """Ask Lightning for every device of the TPU (`devices="auto"`): a Trainer on a TPU, Lightning's own error elsewhere."""
    import lightning as L

    try:
        trainer = L.Trainer(accelerator="tpu", devices="auto", logger=False, enable_checkpointing=False)
        return {"ok": True, "strategy": type(trainer.strategy).__name__, "devices": trainer.num_devices}
    except Exception as error:
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}
