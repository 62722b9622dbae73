"""Which TPU stack this runtime has (TorchTPU, torch_xla or none) and why; and lesson 4's training step on TorchTPU.

torch_xla's last release is 2.9, for torch 2.9 only; its repository has had no commit since December 2025
(pytorch/xla#9752). TorchTPU (`torch-tpu` on PyPI, github.com/google-pytorch/torch_tpu, user guide at
torchtpu.readthedocs.io) is Google's PyTorch-native TPU backend: an out-of-tree PrivateUse1 backend that torch loads by
itself on import (torch_tpu's `torch.backends` entry point), with the device "tpu". Its 0.2.0 (October 2026) needs
torch 2.11.0 to 2.15.0, libtpu 0.0.50 or newer and Python 3.11 or newer (its PyPI metadata, `DOCUMENTED`); an installed
torch_tpu is judged by its own metadata.

Deciding reads the PCI bus and /dev, the installed packages' metadata and torch's version: nothing here imports
torch_tpu or torch_xla, which take the TPU. Each input is a function of its own, so tests simulate any runtime.
`torchtpu_step` runs in a fresh process. Nothing here has run on a TPU: the course had none to run it on.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import platform
import re
from dataclasses import dataclass

from . import fresh, hardware
from ._validate import positive_int, positive_number
from .language import say

PYPI_NAME = "torch-tpu"
# torch-tpu 0.2.0's metadata on PyPI (Requires-Python, Requires-Dist): what a runtime without it would need.
DOCUMENTED = {"version": "0.2.0", "python": ">=3.11", "torch": ">=2.11.0,<=2.15.0", "libtpu": ">=0.0.50"}
# B4's model on B4's batches, the last one smaller: a new shape under torch.compile (B2).
BATCH_SIZES = (64, 64, 64, 64, 48)


class TorchTPUUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class Stack:
    name: str | None  # "torchtpu", "torch_xla" or None
    why: str


# ---- the inputs (each replaceable in tests) ------------------------------------------------------------------


def tpu_device_files(dev: str = "/dev") -> list[str]:
    """The TPU chips' device files: /dev/accel* (TPU v2 to v5e VMs) and the VFIO groups under /dev/vfio (newer
    TPU VMs; not /dev/vfio/vfio, the container device every VFIO host has)."""
    accel = glob.glob(os.path.join(dev, "accel*"))
    vfio = [path for path in glob.glob(os.path.join(dev, "vfio", "*")) if os.path.basename(path) != "vfio"]
    return sorted(accel + vfio)


def tpu_found() -> str | None:
    """What shows a TPU here (the course's PCI scan, else its device files), or None."""
    chips = hardware.tpu()
    if chips is not None:
        return str(chips)
    files = tpu_device_files()
    return say("TPU device files {files}", files=", ".join(files)) if files else None


def installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_version() -> str:
    import torch

    return torch.__version__


def python_version() -> str:
    return platform.python_version()


def torchtpu_requirements() -> dict[str, str]:
    """What TorchTPU needs ("python", "torch", "libtpu": specifiers): the installed torch_tpu's own metadata, else
    torch-tpu 0.2.0's (DOCUMENTED)."""
    try:
        metadata = importlib.metadata.metadata(PYPI_NAME)
    except importlib.metadata.PackageNotFoundError:
        return {key: DOCUMENTED[key] for key in ("python", "torch", "libtpu")}
    needs = {"python": metadata.get("Requires-Python") or ""}
    for line in metadata.get_all("Requires-Dist") or []:
        match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*\(?([^;)]*)", line.split(";")[0])
        if match and match.group(1).lower() in ("torch", "libtpu"):
            needs[match.group(1).lower()] = match.group(2).replace(" ", "")
    return {"torch": "", "libtpu": "", **needs}


# ---- versions ------------------------------------------------------------------------------------------------


def release(version: str) -> tuple[int, int, int]:
    """The release triple, as torch_tpu matches torch builds: "2.15.0+cpu" -> (2, 15, 0), "2.11.0a0+git" -> (2, 11, 0),
    "3.12" -> (3, 12, 0)."""
    match = re.match(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(version).strip())
    if not match:
        raise ValueError(say("version must look like 2.11.0, got {version!r}", version=version))
    return tuple(int(part or 0) for part in match.groups())


def satisfies(version: str, specifier: str) -> bool:
    """`version` meets every clause of `specifier` (">=2.11.0,<=2.15.0"; "" meets anything), compared by release."""
    have = release(version)
    for clause in filter(None, specifier.replace(" ", "").split(",")):
        op, wanted = re.match(r"(==|!=|<=|>=|<|>)?(.*)", clause).groups()
        if wanted.endswith(".*"):
            parts = wanted[:-2].split(".")
            same = have[:len(parts)] == release(wanted[:-2])[:len(parts)]
            if same != (op != "!="):
                return False
            continue
        want = release(wanted)
        ok = {"==": have == want, "!=": have != want, "<=": have <= want, ">=": have >= want, "<": have < want,
              ">": have > want, None: have == want}[op]
        if not ok:
            return False
    return True


def public(version: str) -> str:
    """A version without its local label: "2.12.0+cpu" -> "2.12.0" (pip's `torch==2.12.0` keeps a +cpu build)."""
    return str(version).split("+")[0]


# ---- the decision --------------------------------------------------------------------------------------------


def torchtpu_problem(torch: str, python: str, torch_tpu: str | None, libtpu: str | None,
                     needs: dict[str, str]) -> str | None:
    """Why TorchTPU cannot run on this TPU runtime, or None when it can."""
    if not satisfies(python, needs["python"]):
        return say("TorchTPU needs Python{needs}, and this runtime has Python {python}: TorchTPU cannot run here.",
                   needs=needs['python'], python=python)
    if not satisfies(torch, needs["torch"]):
        who = say("torch_tpu {version} is installed, but it", version=torch_tpu) if torch_tpu else \
            f"TorchTPU {DOCUMENTED['version']}"
        return say("{who} needs torch{needs}, and this runtime has torch {torch}: TorchTPU cannot run with this torch "
                   "(installing {name} would replace it; the kernel's torch stays as it is).", who=who,
                   needs=needs['torch'], torch=torch, name=PYPI_NAME)
    if torch_tpu is None:
        return say("torch_tpu is not installed. TorchTPU {version} supports this runtime's torch {torch}: install "
                   "it, keeping this torch, with\n    pip install \"{name}=={version}\" \"torch=={public}\"\nthen "
                   "restart the kernel and run the lesson again.", version=DOCUMENTED['version'], torch=torch,
                   name=PYPI_NAME, public=public(torch))
    if libtpu is None or not satisfies(libtpu, needs["libtpu"]):
        return say("torch_tpu {version} needs libtpu{needs}, and this runtime has {libtpu}: pip install "
                   "\"libtpu{needs}\", then restart the kernel.", version=torch_tpu, needs=needs['libtpu'],
                   libtpu=say("no libtpu") if libtpu is None else f"libtpu {libtpu}")
    return None


def status() -> Stack:
    """Which TPU stack this runtime has, and why: "torchtpu" where a TPU, torch_tpu and the torch, libtpu and Python
    it needs are all here; else "torch_xla" where a TPU and torch_xla are; else None."""
    xla = installed("torch_xla")
    tpu = tpu_found()
    if tpu is None:
        part_b = (say("torch_xla is installed: Part B runs on XLA:CPU") if xla else
                  say("torch_xla is not installed either: Part B says so where it cannot run"))
        return Stack(None, say("No TPU here (none on the PCI bus, no /dev/accel* or /dev/vfio device): TorchTPU needs "
                               "one, so its step is skipped. {part_b}.", part_b=part_b))
    torch_tpu = installed(PYPI_NAME)
    problem = torchtpu_problem(torch_version(), python_version(), torch_tpu, installed("libtpu"),
                               torchtpu_requirements())
    if problem is None:
        return Stack("torchtpu", say("{tpu}, torch_tpu {version} with torch {torch} and libtpu {libtpu}: the "
                                     "TorchTPU step runs on device \"tpu\".", tpu=tpu, version=torch_tpu,
                                     torch=torch_version(), libtpu=installed('libtpu')))
    if xla:
        return Stack("torch_xla", say("{tpu}: {problem} The TPU runs Part B through torch_xla {xla}.", tpu=tpu,
                                      problem=problem, xla=xla))
    return Stack(None, say("{tpu}: {problem} torch_xla is not installed either.", tpu=tpu, problem=problem))


# ---- the step ------------------------------------------------------------------------------------------------


def torchtpu_step(batch_sizes=BATCH_SIZES, seed: int = 0, timeout_s: float = 900) -> dict:
    """Lesson 4's step on TorchTPU's device "tpu", eager and under `torch.compile`, in a fresh process (the TPU is
    its, not the kernel's). TorchTPUUnavailable saying why, where `status()` is not "torchtpu"."""
    _batch_sizes(batch_sizes)
    positive_int("seed", seed, minimum=0)
    positive_number("timeout_s", timeout_s)
    stack = status()
    if stack.name != "torchtpu":
        raise TorchTPUUnavailable(stack.why)
    return fresh.run(train_on, "tpu", tuple(batch_sizes), seed, "tpu", timeout_s=timeout_s)


def train_on(device: str, batch_sizes=BATCH_SIZES, seed: int = 0, backend: str = "tpu") -> dict:
    """B4's model (16 -> 32 -> 2, SGD at 0.1, MSE) on B4's seeded batches, on `device`: eager, compiled with
    `torch.compile(model, backend=backend, dynamic=False)`, and in fp32 on the CPU. Plain data: the device, each run's
    losses, the graphs torch.compile made (one per batch shape), the largest loss differences."""
    _batch_sizes(batch_sizes)
    import torch

    if device == "tpu" and not (hasattr(torch, "tpu") and torch.tpu.is_available()):
        raise TorchTPUUnavailable(say("torch did not load torch_tpu's \"tpu\" device in this process (torch_tpu "
                                      "registers it on import only where it finds a TPU)"))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    (eager, on), (compiled, _) = _losses(device, None, batch_sizes, seed), _losses(device, backend, batch_sizes, seed)
    losses = {"eager": eager, "compiled": compiled, "cpu fp32": _losses("cpu", None, batch_sizes, seed)[0]}
    return {"device": on, "torch": torch.__version__,
            "torch_tpu": installed(PYPI_NAME), "batch_sizes": list(batch_sizes), "losses": losses,
            "graphs_compiled": int(torch._dynamo.utils.counters["stats"]["unique_graphs"]),
            "compiled_vs_eager": _largest_gap(losses["compiled"], losses["eager"]),
            "eager_vs_cpu": _largest_gap(losses["eager"], losses["cpu fp32"])}


def _losses(device: str, backend: str | None, batch_sizes, seed: int) -> tuple[list[float], str]:
    """The losses of one run, and the device its weights ended on ("tpu:0")."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    forward = torch.compile(model, backend=backend, dynamic=False) if backend else model
    g = torch.Generator().manual_seed(seed)
    curve = []
    for rows in batch_sizes:
        x, y = torch.randn(rows, 16, generator=g).to(device), torch.randn(rows, 2, generator=g).to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(forward(x), y)
        loss.backward()
        optimizer.step()
        curve.append(loss.detach())
    # read after the loop: no .item() inside the step
    return [float(v) for v in torch.stack(curve).cpu()], str(next(model.parameters()).device)


def _largest_gap(a: list[float], b: list[float]) -> float:
    return max(abs(p - q) for p, q in zip(a, b))


def _batch_sizes(batch_sizes) -> None:
    if not isinstance(batch_sizes, (list, tuple)) or not batch_sizes or not all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in batch_sizes):
        raise ValueError(say("batch_sizes must be a non-empty list of positive ints, got {batch_sizes!r}",
                             batch_sizes=batch_sizes))
