"""What the lessons and the hardware page say about torch, NCCL, torch_xla and the machines they ran on is what
the installed packages do and what was really run."""

import importlib.util
import warnings
from pathlib import Path

import nbformat
import pytest
import torch
from torch import nn

REPO = Path(__file__).resolve().parent.parent


def _text(lesson: str) -> str:
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return " ".join("\n".join(c.source for c in nb.cells if c.cell_type == "markdown").split())


def _code(lesson: str, needle: str) -> str:
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and needle in c.source)


# ---- lesson 3: the LR scheduler's warning ------------------------------------------------------


def _scheduler_warnings(overflow) -> tuple[int, int]:
    weight = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    scaler = torch.amp.GradScaler("cpu")
    skipped = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for bad in overflow:
            optimizer.zero_grad()
            scaler.scale((weight * (float("inf") if bad else 1.0)).sum()).backward()
            scale = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            skipped += scaler.get_scale() < scale
            scheduler.step()
    return skipped, sum("lr_scheduler.step()` before `optimizer.step()" in str(w.message) for w in caught)


@pytest.mark.parametrize("overflow, skipped, warned", [
    ([True, False, False, False, False], 1, 1),
    ([False, True, True, True, True], 4, 0),     # four skipped steps, silent
    ([True, True, True], 3, 1),                  # once, however many follow
])
def test_the_scheduler_warns_only_when_the_very_first_step_is_skipped(overflow, skipped, warned):
    assert _scheduler_warnings(overflow) == (skipped, warned)


def test_lesson_3_says_when_the_scheduler_warns_and_measures_it():
    text = _text("03-amp")
    assert "if it keeps happening, the scale keeps collapsing" not in text
    assert "only on the scheduler's **first** step" in text and "every later skipped step is silent" in text
    demo = _code("03-amp", "def scheduler_warnings")
    assert '"step 1 good, steps 2-5 overflow": 0' in demo and '[False, True, True, True, True]' in demo


# ---- lesson 2: all-reduce algorithms and buckets ------------------------------------------------


def test_lesson_2_says_the_backend_picks_the_algorithm_and_ddp_reduces_per_bucket():
    text = _text("02-ddp")
    assert "DDP uses a **ring all-reduce**" not in text and "with a single all-reduce" not in text
    assert "NCCL chooses ring, tree or NVLS" in text and "gloo has algorithms of its own" in text
    assert "one all-reduce per bucket" in text and "`dist._DEFAULT_FIRST_BUCKET_BYTES`" in text
    assert "a 2 MiB model all-reduces twice per backward" in text  # measured in tests/test_ddp.py


# ---- lesson 4: where TPU support stands ---------------------------------------------------------


needs_xla = pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")


def _torch_xla_source(relative: str) -> str:
    # read, not imported: importing torch_xla here would make Accelerate pick XLA in later tests
    folder = importlib.util.find_spec("torch_xla").submodule_search_locations[0]
    return (Path(folder) / relative).read_text()


@needs_xla
def test_lesson_4s_b8_states_what_torch_xla_2_9_does():
    from importlib.metadata import version

    text = _text("04-accelerate-tpu")
    assert "heading" not in text.split("## Summary")[0].split("## B8.")[-1]
    assert "torch_xla 2.1 was the last release" not in text  # not checked against anything installed
    pinned = (REPO / "requirements.lock").read_text()
    assert f"torch-xla=={version('torch_xla')}" in pinned.lower().replace("_", "-") or \
        f"torch_xla=={version('torch_xla')}" in pinned
    assert f"checked with torch_xla {version('torch_xla')}, the version this course pins" in text
    model = _torch_xla_source("core/xla_model.py")
    assert '@deprecated("Use torch_xla.sync instead")\ndef mark_step' in model
    assert '@deprecated("Use torch_xla.device instead")\ndef xla_device' in model
    assert "XRT_TPU_CONFIG" not in _torch_xla_source("runtime.py")
    assert "`xm.mark_step()` and `xm.xla_device()` still work in 2.9 but are marked deprecated" in text
    assert "Colab's free TPU has been one v5e chip (v5e-1) since September 2025" in text and "RFC pytorch/xla#9684" in text


def test_lesson_4_has_a_bf16_section_in_part_b():
    nb = nbformat.read(REPO / "solutions" / "04-accelerate-tpu" / "04-accelerate-tpu.ipynb", as_version=4)
    part_b = next(i for i, c in enumerate(nb.cells) if c.source.startswith("# Part B"))
    section = next(i for i, c in enumerate(nb.cells) if c.source.startswith("## B6. Mixed precision on TPUs: bf16"))
    assert section > part_b and 'torch.autocast("xla", dtype=torch.bfloat16)' in nb.cells[section].source
    assert "xla.run(xla.autocast_bf16)" in nb.cells[section + 1].source


# ---- the hardware page: what ran where ----------------------------------------------------------


def test_the_hardware_page_says_exactly_what_ran_on_the_gpu():
    page = (REPO / "website" / "pages" / "hardware.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| ") and "|" in line[2:]}
    gpu = rows["one GPU (Linux)"]
    assert "lessons 1–4 end to end" not in page
    for fact in ("one H200", "2026-11-30", "torch 2.11.0+cu130", "no torch_xla", "lessons 1–3 and lesson 4 part A",
                 "part B not run"):
        assert fact in gpu, fact
    for runtime in ("Colab CPU", "Colab T4 (1 GPU)", "Kaggle 2×T4", "Colab TPU v5e-1", "Kaggle TPU v5e-8",
                    "multi-GPU node (Linux)"):
        assert "simulated:" in rows[runtime] and "**verified**" not in rows[runtime], runtime
    for test in ("tests/test_backend_behaviour.py", "tests/test_nccl_watchdog.py", "tests/test_xla.py", "tests/test_tpu_precision.py", "tests/test_runtimes.py"):
        assert test in page and (REPO / test).exists(), test
    assert "the TPU's own bf16 is lesson 4)" not in page and "lesson 4's B6" in page


# ---- where part B runs, and native Windows ------------------------------------------------------


def _flat(path: str) -> str:
    return " ".join((REPO / path).read_text().split())


def _rows(path: str) -> dict[str, str]:
    return {line.split("|")[1].strip(): line for line in (REPO / path).read_text().splitlines()
            if line.startswith("| ") and "|" in line[2:]}


def test_no_page_promises_part_b_on_runtimes_without_torch_xla():
    """Colab's and Kaggle's CPU/GPU images bring a torch for which no torch_xla exists: part B cannot run there,
    and neither the README, the hardware page nor the landing page may say it does."""
    from helpers import versions

    torch_version, xla_version = versions.RUNTIME_STACKS["Colab and Kaggle CPU/GPU"]
    assert xla_version is None and versions.torch_xla_wheel(torch_version, "3.11", "linux x86_64")
    name = "{}.{}".format(*versions.minor(torch_version))
    rows = _rows("website/pages/hardware.md")
    for runtime in ("Colab CPU", "Colab T4 (1 GPU)", "Kaggle 2×T4"):
        assert "all run" not in rows[runtime], runtime
        assert f"part B cannot run (torch {name}: no torch_xla exists for it)" in rows[runtime], runtime
    lesson_4 = rows["4 Accelerate / TPU"]
    assert "XLA part as on CPU |" not in lesson_4
    assert f"not Colab CPU's torch {name}" in lesson_4 and f"not on Colab T4 (torch {name})" in lesson_4
    assert f"not on Kaggle 2×T4 (torch {name})" in lesson_4
    readme, readme_rows = _flat("README.md"), _rows("README.md")
    assert "XLA as on CPU" not in readme and "| as on CPU |" not in readme_rows["4 Accelerate / TPU"]
    for runtime in ("Colab CPU", "Colab T4", "Kaggle 2×T4"):
        assert f"not on {runtime} (torch {name})" in readme_rows["4 Accelerate / TPU"], runtime
    assert f"Colab's and Kaggle's CPU and GPU runtimes (CPU, T4, 2×T4) bring torch {name}: part B cannot run there" \
        in readme
    landing = _flat("website/pages/landing.md")
    assert "Every cell runs for real" not in landing and "Every cell runs for real" not in readme
    assert f"not on Colab's and Kaggle's CPU and GPU runtimes (torch {name})" in landing


def test_the_docs_say_native_windows_needs_wsl2():
    """Every launch fails on native Windows: no page may list Windows beside macOS as running lessons 1–3."""
    rows = _rows("website/pages/hardware.md")
    assert "macOS, Windows" not in rows and "Windows" not in rows["macOS"]
    windows = rows["Windows (native)"]
    assert "the course needs WSL2 (`wsl --install` in PowerShell run as administrator)" in windows
    assert "simulated" in windows and "**verified**" not in windows
    readme = _flat("README.md")
    assert "**Windows: WSL2 only.**" in readme and "PowerShell run as administrator with `wsl --install`" in readme
    assert "**macOS and Windows.**" not in readme
    assert "(on Windows, WSL2: `wsl --install` in PowerShell run as administrator)" in _flat("website/pages/landing.md")


def test_the_hardware_table_places_lesson_5_on_every_runtime():
    """Issue 42: lesson 5 has its place in the table of what ran: each runtime's lessons say where it runs, and no
    GPU row claims it ran on a GPU."""
    page = (REPO / "website" / "pages" / "hardware.md").read_text()
    assert "| runtime | lessons 1–5 | how it was checked |" in page
    for runtime, row in _rows("website/pages/hardware.md").items():
        if "TPU stack:" not in row or runtime.startswith("Windows"):
            continue
        lessons = row.split("|")[2]
        assert "all run" in lessons or "lesson 5" in lessons, runtime
    rows = _rows("website/pages/hardware.md")
    assert "lesson 5 (written later) not run there" in rows["one GPU (Linux)"]
    assert "lesson 5's FSDP2 on nccl neither" in rows["Kaggle 2×T4"]
