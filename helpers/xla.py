"""torch_xla on XLA devices: a real TPU when there is one, otherwise PJRT's CPU client with
virtual devices (8 by default, like an 8-core TPU).

XLA experiments run in a fresh Python process (`run`): torch_xla reads its settings
(PJRT_DEVICE, CPU_NUM_DEVICES, SPMD mode) once per process, and importing it where Accelerate
lives makes Accelerate pick `xla:0`. The functions below the runner are what those processes do.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import cloudpickle

from ._validate import one_of, positive_int, positive_number
from .hardware import _tpu_present

MISSING = ("torch_xla is not installed here. It ships wheels for Linux x86-64 only (not macOS or Windows): "
           "the XLA part of this lesson needs Linux, Colab, or a TPU VM. Everything else still runs.")


class XLAUnavailable(RuntimeError):
    pass


def available() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def environment(n_devices: int = 8) -> dict[str, str]:
    """PJRT settings: the TPU when present, else `n_devices` virtual CPU devices."""
    positive_int("n_devices", n_devices)
    if _tpu_present():
        return {"PJRT_DEVICE": "TPU"}
    return {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(n_devices)}


def run(fn, *args, n_devices: int = 8, timeout_s: float = 300, **kwargs):
    """Run `fn(*args, **kwargs)` in a fresh process on XLA devices and return its result."""
    children = _Children()
    try:
        return _run(fn, args, kwargs, n_devices, timeout_s, children)
    finally:
        children.stop()


def run_many(jobs, n_devices: int = 8, timeout_s: float = 300) -> list:
    """Several `(fn, args, kwargs)` jobs, each in its own fresh process, side by side.

    If one job fails, or the caller is interrupted (Jupyter's stop button), every process still
    running is killed at once, so the kernel answers again right away.
    """
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    jobs = list(jobs)
    # a TPU serves one process at a time; virtual CPU devices can run side by side
    workers = 1 if _tpu_present() else max(1, min(len(jobs), os.cpu_count() or 1))
    children = _Children()
    with ThreadPoolExecutor(workers) as pool:
        try:
            futures = [pool.submit(_run, fn, args, kwargs, n_devices, timeout_s, children) for fn, args, kwargs in jobs]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:
                if f in done and f.exception() is not None:
                    raise f.exception()
            return [f.result() for f in futures]
        finally:
            children.stop()


class _Children:
    """The XLA processes of one call; `stop` kills those running and refuses new ones."""

    def __init__(self):
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self._stopped = False

    def start(self, cmd, env) -> subprocess.Popen:
        with self._lock:
            if self._stopped:
                raise RuntimeError("stopped before it started: another XLA job failed or the run was interrupted")
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self._procs.add(proc)
            return proc

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                proc.kill()  # a no-op for one that has exited


def _run(fn, args, kwargs, n_devices: int, timeout_s: float, children: _Children):
    if not available():
        raise XLAUnavailable(MISSING)
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    positive_number("timeout_s", timeout_s)
    env = {**os.environ, **environment(n_devices), "TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR"}
    with tempfile.TemporaryDirectory() as folder:
        job, result = os.path.join(folder, "job.pkl"), os.path.join(folder, "result.pkl")
        with open(job, "wb") as f:
            cloudpickle.dump((fn, args, kwargs), f)
        proc = children.start([sys.executable, "-m", "helpers.xla", job, result], env)
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise TimeoutError(f"the XLA process ran past timeout_s={timeout_s} s and was stopped") from None
        if not os.path.exists(result):
            raise RuntimeError(f"the XLA process exited with code {proc.returncode}:\n{stderr[-3000:]}")
        with open(result, "rb") as f:
            ok, value = cloudpickle.load(f)
    if not ok:
        raise RuntimeError(f"in the XLA process:\n{value}")
    return value


def _child(job: str, result: str) -> None:
    try:
        with open(job, "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
        outcome = (True, fn(*args, **kwargs))
    except BaseException:
        outcome = (False, traceback.format_exc())
    with open(result, "wb") as f:
        cloudpickle.dump(outcome, f)


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


def spmd_data_parallel(steps: int = 5, batch: int = 64, shard=None, seed: int = 0) -> dict:
    """Data parallel over every XLA device with SPMD, next to a plain CPU reference on the same batches.

    `shard(tensor, mesh)` annotates a batch; by default it is split along dim 0 ("data").
    """
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
    reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    model.load_state_dict(reference.state_dict())
    device = torch_xla.device()
    model = model.to(device)
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(reference.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(seed)
    met.clear_all()
    spec = None
    for _ in range(steps):
        x, y = torch.randn(batch, 16, generator=g), torch.randn(batch, 2, generator=g)
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
        xd, yd = x.to(device), y.to(device)
        shard(xd, mesh)
        shard(yd, mesh)
        spec = torch_xla._XLAC._get_xla_sharding_spec(xd)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xd), yd).backward()
        opt.step()
        torch_xla.sync()
    xm.wait_device_ops()
    diff = max((a.detach().cpu() - b.detach()).abs().max().item() for a, b in zip(model.parameters(), reference.parameters()))
    return {"devices": n, "max_abs_diff": diff, "sharding": spec, "compiles": _metric_count("CompileTime"),
            "executions": _metric_count("ExecuteReplicatedTime")}


def lightning_tpu_trainer() -> dict:
    """Ask Lightning for 8 TPU cores: a Trainer on a TPU, Lightning's own error elsewhere."""
    import lightning as L

    try:
        trainer = L.Trainer(accelerator="tpu", devices=8, logger=False, enable_checkpointing=False)
        return {"ok": True, "strategy": type(trainer.strategy).__name__, "devices": trainer.num_devices}
    except Exception as error:
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
