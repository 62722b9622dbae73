"""What this machine can train on: CPU cores, CUDA GPUs, XLA (TPU) devices."""

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass, field

import torch

from ._validate import positive_int


@dataclass
class Hardware:
    cpu_cores: int
    cuda_devices: list[str] = field(default_factory=list)
    torch_xla_installed: bool = False
    tpu_present: bool = False
    in_colab: bool = False

    @property
    def n_gpus(self) -> int:
        return len(self.cuda_devices)

    @property
    def best_device(self) -> str:
        return "cuda" if self.cuda_devices else "cpu"

    def data_parallel_mode(self) -> str:
        if self.n_gpus >= 2:
            return f"real nn.DataParallel over {self.n_gpus} GPUs"
        return "emulated nn.DataParallel (virtual devices on the CPU)"

    def ddp_mode(self, n_procs: int = 2) -> str:
        positive_int("n_procs", n_procs)
        if self.n_gpus >= n_procs:
            return f"nccl, one GPU per process ({n_procs} processes)"
        return f"gloo, CPU processes ({n_procs} processes, {max(1, self.cpu_cores // n_procs)} threads each)"

    def summary(self) -> str:
        gpus = ", ".join(f"cuda:{i} {name}" for i, name in enumerate(self.cuda_devices)) or "none"
        if self.tpu_present:
            xla = "TPU found" + ("" if self.torch_xla_installed else " (torch_xla missing)")
        else:
            xla = "torch_xla installed, no TPU" if self.torch_xla_installed else "torch_xla not installed"
        lines = [
            f"torch {torch.__version__}" + (" on Colab" if self.in_colab else ""),
            f"CPU cores : {self.cpu_cores}",
            f"CUDA GPUs : {self.n_gpus} ({gpus})",
            f"XLA / TPU : {xla}",
            f"DataParallel: {self.data_parallel_mode()}",
            f"DDP         : {self.ddp_mode()}",
        ]
        return "\n".join(lines)


def cpu_cores() -> int:
    """The cores this process may run on (a container or `taskset` can allow fewer than the machine has)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _tpu_present() -> bool:
    # TPU VMs expose /dev/accel*; older Colab TPU runtimes set COLAB_TPU_ADDR.
    return bool(os.environ.get("COLAB_TPU_ADDR")) or any(
        name.startswith("accel") for name in _safe_listdir("/dev")
    )


def _safe_listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def detect() -> Hardware:
    """Look at the machine without initialising anything expensive (torch_xla is not imported)."""
    cuda = _gpu_names(torch.cuda.device_count())
    return Hardware(
        cpu_cores=cpu_cores(),
        cuda_devices=cuda,
        torch_xla_installed=importlib.util.find_spec("torch_xla") is not None,
        tpu_present=_tpu_present(),
        in_colab=importlib.util.find_spec("google.colab") is not None if _has_google() else False,
    )


def _gpu_names(count: int) -> list[str]:
    """GPU names without initialising CUDA: fork-based launchers (Accelerate's notebook_launcher,
    Lightning's ddp_notebook) refuse to run once CUDA is initialised in the notebook."""
    if count == 0:
        return []
    if torch.cuda.is_initialized():
        return [torch.cuda.get_device_name(i) for i in range(count)]
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
            names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
            if len(names) >= count:
                return names[:count]
        except (OSError, subprocess.SubprocessError):
            pass
    return ["GPU"] * count


def _has_google() -> bool:
    return importlib.util.find_spec("google") is not None


def print_summary() -> Hardware:
    hw = detect()
    print(hw.summary())
    return hw
