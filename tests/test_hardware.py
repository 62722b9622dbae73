"""helpers.hardware's view of the machine: the GPUs CUDA_VISIBLE_DEVICES leaves this process (what it reports and
what launch plans use), and the CPUs a rank may run on (its affinity, not the machine's core count)."""

import ast
import os
from pathlib import Path

import pytest
import torch

from helpers import hardware, launch

REPO = Path(__file__).resolve().parent.parent
MACHINE = [("GPU A", (8, 0)), ("GPU B", (9, 0)), ("GPU C", (7, 5)), ("GPU D", (8, 6))]  # nvidia-smi's order
UUIDS = ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-cccc3333-0000", "GPU-dddd4444-0000"]


@pytest.fixture
def four_gpus(monkeypatch):
    """A machine with four GPUs, as NVML and nvidia-smi report them. torch's own device_count runs (it reads
    CUDA_VISIBLE_DEVICES itself); nvidia-smi lists all four whatever the variable says, as the real one does."""
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "_raw_device_count_nvml", lambda: len(MACHINE))
    monkeypatch.setattr(torch.cuda, "_raw_device_uuid_nvml", lambda: list(UUIDS))
    monkeypatch.setattr(hardware, "_nvidia_smi_rows", lambda: list(MACHINE))
    monkeypatch.setattr(hardware, "_nvidia_smi_uuids", lambda: list(UUIDS))
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA numbers them as nvidia-smi lists them
    assert not torch.cuda.is_initialized()

    def visible(value):
        if value is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)

    return visible


@pytest.mark.parametrize("order", [None, "FASTEST_FIRST"])
def test_unlike_gpus_go_unnamed_unless_cuda_numbers_them_in_pci_order(four_gpus, monkeypatch, order):
    """CUDA's default order (FASTEST_FIRST) may put another GPU first than nvidia-smi's PCI order: naming cuda:0 from
    nvidia-smi's first row would then name the wrong GPU. Alike GPUs are named whatever the order."""
    four_gpus(None)
    if order is None:
        monkeypatch.delenv("CUDA_DEVICE_ORDER")
    else:
        monkeypatch.setenv("CUDA_DEVICE_ORDER", order)
    assert [g.name for g in hardware.gpus()] == ["GPU"] * 4
    monkeypatch.setattr(hardware, "_nvidia_smi_rows", lambda: [("Tesla T4", (7, 5))] * 4)
    assert [g.name for g in hardware.gpus()] == ["Tesla T4"] * 4


@pytest.mark.parametrize("value, expected", [
    (None, "ABCD"),
    ("2,3", "CD"),                    # cuda:0 is the machine's GPU 2
    ("3,0", "DA"),
    ("", ""),                         # none
    ("-1", ""),                       # none
    ("1,-1,2", "B"),                  # a negative index ends the list
    ("0,7,1", "A"),                   # so does a GPU the machine does not have
    ("1,1", ""),                      # a repeated GPU: none at all
    ("GPU-dddd4444-0000,GPU-aaaa", "DA"),  # UUIDs, or unique prefixes of them
    ("GPU-bbbb,GPU-zzzz,GPU-aaaa", "B"),   # an unknown UUID ends the list
])
def test_gpus_and_launch_plans_honour_cuda_visible_devices(four_gpus, value, expected):
    four_gpus(value)
    assert torch.cuda.device_count() == len(expected), "torch's own count (the fixture must make it real)"
    gpus = hardware.gpus()
    assert [g.name[-1] for g in gpus] == list(expected)
    assert [g.capability for g in gpus] == [MACHINE["ABCD".index(n)][1] for n in expected]
    hw = hardware.detect()
    assert hw.n_gpus == len(expected) and all(f"cuda:{i} {g}" in hw.summary() for i, g in enumerate(gpus))
    for n_procs in (1, 2, 3):
        p = launch.plan(n_procs)
        assert p.backend == ("nccl" if len(expected) >= n_procs else "gloo")
        assert all(p.device(r).index < len(expected) for r in range(n_procs) if p.backend == "nccl")


def test_visible_gpu_indices_rules_and_arguments(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    assert hardware.visible_gpu_indices(2) is None  # MIG instances: torch asks the driver
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa")
    assert hardware.visible_gpu_indices(4) is None and hardware.visible_gpu_indices(4, lambda: []) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", " 1 , +2,3gpu")
    assert hardware.visible_gpu_indices(4) == [1, 2, 3]  # read like strtoul, as CUDA and torch do
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="n_machine_gpus"):
            hardware.visible_gpu_indices(bad)


# ---- threads per rank --------------------------------------------------------------------------


def test_threads_per_rank_come_from_the_cpus_this_process_may_use(monkeypatch):
    """Under SLURM or in a container the process may use 4 of the machine's 64 cores: os.cpu_count() says 64,
    os.sched_getaffinity(0) says 4."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert hardware.cpu_cores() == 4
    assert [hardware.threads_per_rank(n) for n in (1, 2, 3, 4, 8)] == [4, 2, 1, 1, 1]
    assert launch.plan(2, backend="gloo").threads_per_rank == 2
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS, Windows
    assert hardware.threads_per_rank(2) == 32
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="local_ranks"):
            hardware.threads_per_rank(bad)


def _calls(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]


@pytest.mark.parametrize("path", sorted((REPO / "helpers" / "ddp_scripts").glob("*.py")) + [REPO / "helpers" / "launch.py"],
                         ids=lambda p: p.name)
def test_no_rank_sizes_its_threads_from_the_machines_core_count(path):
    calls = _calls(path)
    assert not [c for c in calls if ast.unparse(c.func) == "os.cpu_count"], f"{path.name} uses os.cpu_count()"
    for call in calls:
        if ast.unparse(call.func) == "torch.set_num_threads" and path.parent.name == "ddp_scripts":
            assert "threads_per_rank(" in ast.unparse(call.args[0]), ast.unparse(call)
