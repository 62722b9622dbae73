"""What this machine can train on — the one place every lesson asks.

CPU cores, CUDA GPUs (names, compute capability, bf16/fp16 support), TPU chips (found the way
torch_xla finds them: Google's PCI vendor id and the TPU device ids), and the runtime (Colab,
Kaggle or local). Nothing here initialises CUDA or imports torch_xla: fork-based launchers refuse
to run once CUDA is initialised, and torch_xla grabs the TPU when imported.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import torch

from ._validate import positive_int
from .language import say

PCI_DEVICES = "/sys/bus/pci/devices"
GOOGLE_PCI_VENDOR = "0x1ae0"
# TPU PCI device id -> (generation, TensorCores per chip that PyTorch sees as devices): the ids torch_xla 2.9's
# _internal/tpu.py matches, named as it names them (0x0056 and 0x0062 it lists as "testing only", with no generation).
# From v4 on a chip is "megacore": one device per chip.
TPU_PCI_DEVICES = {"0x0027": ("v2/v3", 2), "0x005e": ("v4", 1), "0x0063": ("v5e", 1), "0x006f": ("v6e", 1),
                   "0x0076": ("7x", 1), "0x0056": ("(unnamed, torch_xla: testing only)", 1),
                   "0x0062": ("(unnamed, torch_xla: testing only)", 1)}
# Without torch_xla's PJRT client a TPU-less machine has no XLA devices; the lessons then run
# XLA:CPU with this many virtual devices (the shape of Kaggle's TPU v5e-8), unless told otherwise.
VIRTUAL_XLA_DEVICES_ENV = "COURSE_XLA_CPU_DEVICES"
DEFAULT_VIRTUAL_XLA_DEVICES = 8


@dataclass(frozen=True)
class GPU:
    name: str
    capability: tuple[int, int] | None = None  # None when it could not be read without initialising CUDA

    @property
    def bf16(self) -> bool | None:
        """Native bf16 (tensor cores): compute capability 8.0 (Ampere) and newer; a T4 (7.5) has none."""
        return None if self.capability is None else self.capability >= (8, 0)

    @property
    def fp16_tensor_cores(self) -> bool | None:
        return None if self.capability is None else self.capability >= (7, 0)

    @property
    def bf16_support(self) -> str | None:
        """"native" (bf16 tensor cores, compute capability >= 8.0), "emulated" (below 8.0: bf16 tensors and
        autocast still work, and `torch.cuda.is_bf16_supported()` even says True, but the math runs without bf16
        tensor cores), or None when the capability could not be read."""
        return None if self.capability is None else "native" if self.bf16 else "emulated"

    def __str__(self) -> str:
        if self.capability is None:
            return self.name
        cc = ".".join(map(str, self.capability))
        fp16 = say("yes") if self.fp16_tensor_cores else say("no")
        return say("{name} (sm {cc}, fp16 tensor cores {fp16}, bf16 {bf16})", name=self.name, cc=cc, fp16=fp16,
                   bf16=say("native") if self.bf16 else say("emulated"))


@dataclass(frozen=True)
class TPU:
    chips: int
    generation: str
    cores_per_chip: int = 1

    @property
    def devices(self) -> int:
        """XLA devices PyTorch sees: one per TensorCore (v2/v3), one per chip from v4 on."""
        return self.chips * self.cores_per_chip

    def __str__(self) -> str:
        chips = say("1 chip") if self.chips == 1 else say("{n} chips", n=self.chips)
        devices = say("1 XLA device") if self.devices == 1 else say("{n} XLA devices", n=self.devices)
        return f"TPU {self.generation}, {chips}, {devices}"


@dataclass
class Hardware:
    cpu_cores: int
    gpus: list[GPU] = field(default_factory=list)
    tpu: TPU | None = None
    runtime: str = "local"  # "colab", "kaggle" or "local"
    torch_xla_installed: bool = False

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)

    @property
    def tpu_present(self) -> bool:
        return self.tpu is not None

    @property
    def in_colab(self) -> bool:
        return self.runtime == "colab"

    @property
    def best_device(self) -> str:
        return "cuda" if self.gpus else "cpu"

    def xla_devices(self) -> int:
        """XLA devices lesson 4 uses: the TPU's, or virtual XLA:CPU devices."""
        return self.tpu.devices if self.tpu else virtual_xla_devices()

    def data_parallel_mode(self) -> str:
        if self.n_gpus >= 2:
            return say("real nn.DataParallel over {n} GPUs", n=self.n_gpus)
        return say("emulated nn.DataParallel (virtual devices on the CPU)")

    def ddp_mode(self, n_procs: int = 2) -> str:
        positive_int("n_procs", n_procs)
        if self.n_gpus >= n_procs:
            return say("nccl, one GPU per process ({n} processes)", n=n_procs)
        why = "" if not self.n_gpus else say("; 1 GPU cannot give each rank its own") if self.n_gpus == 1 else \
            say("; {n} GPUs cannot give each rank its own", n=self.n_gpus)
        threads = max(1, self.cpu_cores // n_procs)
        if threads == 1:
            return say("gloo, CPU processes ({n} processes, 1 thread each{why})", n=n_procs, why=why)
        return say("gloo, CPU processes ({n} processes, {threads} threads each{why})", n=n_procs, threads=threads,
                   why=why)

    def xla_mode(self) -> str:
        if self.tpu:
            return f"{self.tpu} (PJRT_DEVICE=TPU)" + ("" if self.torch_xla_installed else say(", but torch_xla is "
                                                                                              "missing"))
        if self.torch_xla_installed:
            return say("no TPU: XLA:CPU with {n} virtual devices (PJRT_DEVICE=CPU)", n=virtual_xla_devices())
        return say("torch_xla not installed")

    def bf16_note(self) -> str:
        """What bf16 autocast runs on here: the CPU, or cuda:0 with native bf16 tensor cores (compute capability
        >= 8.0) or emulated (a T4, sm 7.5: it runs, without tensor cores; fp16 with a GradScaler is the fast format
        there)."""
        if not self.gpus:
            return say("bf16 on the CPU: fast only with bf16 units (AMX, AVX-512-BF16); measure")
        gpu = self.gpus[0]
        if gpu.bf16_support is None:
            return say("bf16 on cuda:0 ({name}): compute capability unknown (bf16 tensor cores need 8.0, Ampere, or "
                       "newer)", name=gpu.name)
        cc = ".".join(map(str, gpu.capability))
        if gpu.bf16_support == "native":
            return say("bf16 on cuda:0 ({name}, sm {cc}): native (bf16 tensor cores)", name=gpu.name, cc=cc)
        return say("bf16 on cuda:0 ({name}, sm {cc}): EMULATED. torch.cuda.is_bf16_supported() says True, but this "
                   "GPU has no bf16 tensor cores (they start at sm 8.0): bf16 runs without tensor-core speed. "
                   "Its fast format is fp16, with a GradScaler.", name=gpu.name, cc=cc)

    def summary(self) -> str:
        gpus = "; ".join(f"cuda:{i} {g}" for i, g in enumerate(self.gpus)) or say("none")
        runtime = {"colab": "Google Colab", "kaggle": "Kaggle"}.get(self.runtime) or say("local machine")
        return "\n".join([
            say("torch {version} on a {runtime}", version=torch.__version__, runtime=runtime),
            say("CPU cores : {n}", n=self.cpu_cores),
            say("CUDA GPUs : {n} ({gpus})", n=self.n_gpus, gpus=gpus),
            f"XLA / TPU : {self.xla_mode()}",
            f"DataParallel: {self.data_parallel_mode()}",
            f"DDP         : {self.ddp_mode()}",
        ])


def cpu_cores() -> int:
    """The cores this process may run on: `os.sched_getaffinity(0)` where the OS has it (Linux), which reflects a
    container's or SLURM's cpuset and `taskset`, all of which can allow fewer than the machine has; else
    `os.cpu_count()`."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def threads_per_rank(local_ranks: int) -> int:
    """CPU threads for each of `local_ranks` processes on this machine: the cores this process may run on
    (`cpu_cores`, not `os.cpu_count()`: under SLURM or in a container that can be far more than allotted) shared
    out among them, at least 1 each."""
    positive_int("local_ranks", local_ranks)
    return max(1, cpu_cores() // local_ranks)


def virtual_xla_devices() -> int:
    value = os.environ.get(VIRTUAL_XLA_DEVICES_ENV, str(DEFAULT_VIRTUAL_XLA_DEVICES))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(say("{virtual_xla_devices_env} must be a positive integer, got {value!r}",
                             virtual_xla_devices_env=VIRTUAL_XLA_DEVICES_ENV, value=value))
    return int(value)


def tpu(pci_devices: str | None = None) -> TPU | None:
    """The TPU chips on this machine's PCI bus (TPU VMs: v2-v6e), or an old remote Colab TPU."""
    pci_devices = pci_devices or PCI_DEVICES
    found = []
    for name in _safe_listdir(pci_devices):
        if _read(os.path.join(pci_devices, name, "vendor")) == GOOGLE_PCI_VENDOR:
            device = _read(os.path.join(pci_devices, name, "device"))
            if device in TPU_PCI_DEVICES:
                found.append(TPU_PCI_DEVICES[device])
    if found:
        generation, cores = found[0]
        return TPU(chips=len(found), generation=generation, cores_per_chip=cores)
    if os.environ.get("COLAB_TPU_ADDR"):  # Colab's retired TPU v2-8, reached over the network
        return TPU(chips=4, generation="v2 (remote, Colab)", cores_per_chip=2)
    return None


def runtime() -> str:
    """'colab', 'kaggle' or 'local' — decided by the markers Accelerate and the runtimes themselves use."""
    if any(key.startswith("KAGGLE") for key in os.environ):  # accelerate's notebook_launcher checks this
        return "kaggle"
    if "google.colab" in sys.modules or os.environ.get("COLAB_RELEASE_TAG") or os.environ.get("COLAB_GPU") is not None:
        return "colab"
    return "local"


def gpus() -> list[GPU]:
    """The CUDA GPUs this process may use, without initialising CUDA (NVML counts them; nvidia-smi names them).

    nvidia-smi lists every GPU of the machine whatever CUDA_VISIBLE_DEVICES says; torch's count honours the
    variable, and so do the names here: "2,3" -> the machine's GPUs 2 and 3 as cuda:0 and cuda:1, "GPU-<uuid>"
    entries (or unique prefixes of them) by UUID, "" or "-1" -> none. The parsing is CUDA's (and torch's): it stops
    at the first entry that is not a GPU, and a repeated GPU gives none at all."""
    count = torch.cuda.device_count()
    if count == 0:
        return []
    if torch.cuda.is_initialized():
        return [GPU(torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i)) for i in range(count)]
    rows = _nvidia_smi_rows()
    visible = visible_gpu_indices(len(rows), _nvidia_smi_uuids) if rows else None
    if visible is not None and len(visible) >= count and _numbered_alike(rows):
        return [GPU(*rows[i]) for i in visible[:count]]
    return [GPU("GPU")] * count


def _numbered_alike(rows: list) -> bool:
    """Whether CUDA numbers these GPUs as nvidia-smi lists them: in PCI bus order only with
    CUDA_DEVICE_ORDER=PCI_BUS_ID (its default, FASTEST_FIRST, may put another first), or when all are alike."""
    return os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" or len(set(map(tuple, rows))) <= 1


def visible_gpu_indices(n_machine_gpus: int, uuids=None) -> list[int] | None:
    """The machine's GPU indices (nvidia-smi's numbering) that CUDA_VISIBLE_DEVICES lets this process use, in the
    order CUDA numbers them (cuda:0 first); all of them when it is unset. `uuids`: a callable that returns the
    machine's GPU UUIDs in nvidia-smi's order (only called for UUID entries). None when that cannot be said here
    (MIG instances, or UUIDs that could not be read)."""
    positive_int("n_machine_gpus", n_machine_gpus, minimum=0)
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(range(n_machine_gpus))
    entries = value.split(",")
    if entries[0].startswith("MIG-"):
        return None
    picked: list[int] = []
    if entries[0].startswith("GPU-"):
        known = uuids() if uuids is not None else []
        if not known:
            return None
        for entry in entries:
            matches = [i for i, uuid in enumerate(known) if entry.startswith("GPU-") and uuid.startswith(entry)]
            if len(matches) != 1:  # not one of the GPUs, or an ambiguous prefix: the list ends here
                break
            if matches[0] in picked:  # a GPU named twice: CUDA then sees none
                return []
            picked.append(matches[0])
        return picked
    for entry in entries:
        number = re.match(r"\+?(\d+)", entry.strip())  # read like strtoul: "1gpu2" is 1
        if number is None:  # "-1", "" or not a number: the list ends here
            break
        index = int(number.group(1))
        if index in picked:  # a GPU named twice: CUDA then sees none
            return []
        picked.append(index)
    for position, index in enumerate(picked):
        if index >= n_machine_gpus:  # past the machine's last GPU: the list ends there
            return picked[:position]
    return picked


def _nvidia_smi_rows() -> list[tuple[str, tuple[int, int] | None]]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    for query in ("name,compute_cap", "name"):  # drivers older than 510 know no compute_cap
        try:
            out = subprocess.run([smi, f"--query-gpu={query}", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return []
        if out.returncode == 0:
            return [_gpu_row(line) for line in out.stdout.splitlines() if line.strip()]
    return []


def _nvidia_smi_uuids() -> list[str]:
    """The machine's GPU UUIDs ("GPU-..."), in nvidia-smi's order; [] when nvidia-smi cannot say."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def _gpu_row(line: str) -> tuple[str, tuple[int, int] | None]:
    name, _, cap = line.rpartition(",")
    major, _, minor = cap.strip().partition(".")
    if not name or not (major.isdigit() and minor.isdigit()):
        return line.strip(), None
    return name.strip(), (int(major), int(minor))


def _safe_listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def detect() -> Hardware:
    """Look at the machine without initialising anything expensive."""
    return Hardware(cpu_cores=cpu_cores(), gpus=gpus(), tpu=tpu(), runtime=runtime(),
                    torch_xla_installed=importlib.util.find_spec("torch_xla") is not None)


def tpu_present() -> bool:
    return tpu() is not None


def print_summary() -> Hardware:
    hw = detect()
    print(hw.summary())
    return hw
