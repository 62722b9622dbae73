"""The torch and torch_xla versions the course supports, stated once, and what each lesson's setup cell checks.

`make test` runs everything on the pinned torch 2.9.0 (requirements.txt), and `make test-versions` runs the
solutions and their hidden tests on each pair of TESTED, each in a virtual environment of its own: the two ends of
the supported range and the pairs that Colab's and Kaggle's images bring (RUNTIME_STACKS). Those runtimes keep
their own torch, which the course never replaces: the setup cell only says so when it is outside this range.
Nothing here imports torch_xla (on a TPU machine importing it takes the TPU), and nothing imports torch at module
level: `python -m helpers.versions` prints TESTED for the Makefile with any Python.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import subprocess
import sys

from .language import message, say

# The oldest and the newest torch minor the course is tested with (both ends by `make test-versions`).
SUPPORTED_TORCH = ("2.6", "2.14")
# torch_xla X.Y is built against torch X.Y and runs with it only. PyPI has its wheels for Linux x86-64 only,
# for these minors, each for the Python versions given (oldest, newest).
TORCH_XLA_WHEELS = {"2.6": ("3.10", "3.11"), "2.7": ("3.10", "3.11"), "2.8": ("3.10", "3.13"), "2.9": ("3.10", "3.13")}
SUPPORTED_TORCH_XLA = ("2.6", "2.9")
# What the free runtimes' images bring, (torch, torch_xla or None), as of December 2026: Kaggle's TPU image
# (Kaggle/docker-python tpu/config.txt; libtpu pinned to 0.0.17, Python 3.12) and the CPU/GPU images of Colab and
# Kaggle (Kaggle's builds on Colab's and keeps its torch; torch_xla has no release for torch 2.10).
RUNTIME_STACKS = {"Kaggle TPU v5e-8": ("2.8.0", "2.8.0"), "Colab and Kaggle CPU/GPU": ("2.10.0", None)}
# Where lesson 4's part B can run, said the same by xla.MISSING and the docs (tests/test_claims.py).
PART_B_WHERE_TEMPLATE = message(
    "Part B needs a torch_xla of the same minor as torch, and torch_xla exists for torch {oldest} to {newest} on "
    "Linux x86-64 only (its last release is {newest}.0): it runs in the course's own environment (`make lab`: torch "
    "2.9 + torch_xla 2.9), on Kaggle's TPU runtime (torch 2.8 + torch_xla 2.8), on Colab's TPU runtime if its image "
    "still brings a torch_xla (not checked since 2025) and on a Linux x86-64 machine with torch {oldest} to "
    "{newest}; not on Colab's and Kaggle's CPU and GPU runtimes (torch 2.10), nor on macOS or Windows.")
PART_B_WHERE = PART_B_WHERE_TEMPLATE.format(oldest=SUPPORTED_TORCH_XLA[0], newest=SUPPORTED_TORCH_XLA[1])


def part_b_where() -> str:
    """PART_B_WHERE in the language the helpers speak."""
    return say(PART_B_WHERE_TEMPLATE, oldest=SUPPORTED_TORCH_XLA[0], newest=SUPPORTED_TORCH_XLA[1])
# What `make test-versions` installs, torch minor -> (torch, torch_xla or None): the two ends of SUPPORTED_TORCH
# and the runtimes' stacks.
TESTED = {"2.6": ("2.6.0", "2.6.0"), "2.8": ("2.8.0", "2.8.0"), "2.10": ("2.10.0", None), "2.14": ("2.14.1", None)}


# Lesson 5's FSDP2 on CPU processes (gloo): torch 2.6's fails in its first backward (a CPU stream has no record_event),
# and before 2.9 gloo's reduce_scatter with ReduceOp.AVG returns the sum, so FSDP2's gradients come out world_size times
# too large, silently (pytorch/pytorch#162338; measured here: torch 2.8.0 gives 6.0 for the average of 1, 2 and 3).
# On GPUs (nccl) those torches average right.
FSDP2_ON_CPU_TORCH = "2.9"
FSDP2_ON_CPU_PROBLEM = message(
    "lesson 5 trains with FSDP2 on CPU processes (gloo) here, which needs torch {needed} or newer, and this runtime "
    "has torch {version}: before 2.9 gloo's reduce_scatter returns the sum where FSDP2 asks for the average, so every "
    "gradient would be {world} times too large, silently (pytorch/pytorch#162338). Open the lesson on a runtime with "
    "torch {needed} or newer (Colab's and Kaggle's CPU and GPU runtimes have 2.10; `make lab` brings 2.9), or on GPUs.")


def lesson_5_problem(torch_version: str, backend: str, world_size: int) -> str | None:
    """What stops lesson 5 on this torch and backend (None: nothing): FSDP2_ON_CPU_TORCH's reason."""
    if backend == "gloo" and minor(torch_version) < minor(FSDP2_ON_CPU_TORCH):
        return say(FSDP2_ON_CPU_PROBLEM, needed=FSDP2_ON_CPU_TORCH, version=torch_version, world=world_size)
    return None


def minor(version: str) -> tuple[int, int]:
    """(major, minor) of a version string: "2.9.0+cu128" -> (2, 9), "2.10.0a0+git1234" -> (2, 10)."""
    parts = str(version).split("+")[0].split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "x")
    except (IndexError, ValueError):
        raise ValueError(say("not a version: {version!r}", version=version)) from None


def _name(pair: tuple[int, int]) -> str:
    return f"{pair[0]}.{pair[1]}"


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_problems(torch_version: str, torch_xla_version: str | None = None) -> list[str]:
    """What is wrong with this pair of versions for the course (empty: nothing)."""
    have, (low, high) = minor(torch_version), (minor(SUPPORTED_TORCH[0]), minor(SUPPORTED_TORCH[1]))
    problems = []
    if have < low:
        problems.append(say("This runtime has torch {version}, older than the course supports (torch {low} to "
                            "{high}): some cells may fail. Use a newer runtime, or pip install \"{requirement}\" and "
                            "restart the kernel.", version=torch_version, low=SUPPORTED_TORCH[0],
                            high=SUPPORTED_TORCH[1],
                            requirement=f"torch>={SUPPORTED_TORCH[0]},<{high[0]}.{high[1] + 1}"))
    elif have > high:
        problems.append(say("This runtime has torch {version}, newer than the newest the course is tested with "
                            "(torch {low} to {high}): it should work; if a cell fails, please report it with the "
                            "output of `python -m helpers.hw_check`.", version=torch_version, low=SUPPORTED_TORCH[0],
                            high=SUPPORTED_TORCH[1]))
    if torch_xla_version is not None and minor(torch_xla_version) != have:
        problems.append(say("torch_xla {xla} does not match torch {version} (torch_xla X.Y runs with torch X.Y "
                            "only): the XLA cells will fail. {hint}", xla=torch_xla_version, version=torch_version,
                            hint=install_hint(torch_version)))
    return problems


def torch_xla_wheel(torch_version: str, python: str | None = None, machine: str | None = None) -> str | None:
    """Why no torch_xla wheel fits here (torch's minor, Python, Linux x86-64), or None when one does."""
    python = python or platform.python_version()
    machine = machine or f"{sys.platform} {platform.machine()}"
    wanted = _name(minor(torch_version))
    if machine not in ("linux x86_64", "linux amd64"):
        return say("torch_xla has wheels for Linux x86-64 only, not {machine}", machine=machine)
    if wanted not in TORCH_XLA_WHEELS:
        return say("torch_xla has no wheel for torch {wanted} (it exists for torch {low} to {high}, matching "
                   "torch's minor)", wanted=wanted, low=SUPPORTED_TORCH_XLA[0], high=SUPPORTED_TORCH_XLA[1])
    oldest, newest = TORCH_XLA_WHEELS[wanted]
    if not minor(oldest) <= minor(python) <= minor(newest):
        return say("torch_xla {wanted} has wheels for Python {oldest} to {newest}, not {python}", wanted=wanted,
                   oldest=oldest, newest=newest, python=_name(minor(python)))
    return None


def torch_xla_requirement(torch_version: str, tpu: bool = False) -> str:
    """The pip requirement of the torch_xla that runs with this torch: libtpu comes with the [tpu] extra."""
    return f"torch_xla{'[tpu]' if tpu else ''}=={_name(minor(torch_version))}.*"


def install_hint(torch_version: str, tpu: bool = False) -> str:
    why_not = torch_xla_wheel(torch_version)
    return why_not + "." if why_not else say("Install the matching one: pip install \"{requirement}\"",
                                             requirement=torch_xla_requirement(torch_version, tpu))


def check() -> bool:
    """The setup cell's check: print what is wrong with this runtime's torch (and torch_xla, when it is
    installed) for the course, in plain words; True when nothing is."""
    try:
        import torch
    except ImportError:
        raise ModuleNotFoundError(say("torch is not installed in this Python ({python}): install it (torch {oldest} to "
                                      "{newest}), then run this cell again.", python=sys.executable,
                                      oldest=SUPPORTED_TORCH[0], newest=SUPPORTED_TORCH[1])) from None
    xla = _installed("torch_xla") if importlib.util.find_spec("torch_xla") is not None else None
    problems = torch_problems(torch.__version__, xla)
    for problem in problems:
        print(problem)
    return not problems


def offer_torch_xla(install: bool = False) -> bool:
    """Lesson 4's setup: where torch_xla is missing and a wheel matching this runtime's torch exists, print
    the pip command (or run it, when `install`); on a TPU machine with the [tpu] extra, which brings libtpu.
    True when torch_xla is importable afterwards."""
    import torch

    from . import hardware

    if importlib.util.find_spec("torch_xla") is not None:
        return True
    why_not = torch_xla_wheel(torch.__version__)
    if why_not:
        print(say("torch_xla is not installed, and {why_not}: part B (XLA) will say it cannot run here; the rest "
                  "runs.", why_not=why_not))
        return False
    requirement = torch_xla_requirement(torch.__version__, tpu=hardware.tpu_present())
    command = [sys.executable, "-m", "pip", "install", "-q", requirement]
    if not install:
        print(say("torch_xla is not installed. Part B (XLA) needs it: set INSTALL_TORCH_XLA = True in this cell and "
                  "run it again, or run\n    pip install \"{requirement}\"\n(it matches this runtime's torch "
                  "{version}, which stays as it is).", requirement=requirement, version=torch.__version__))
        return False
    print(say("installing {requirement} (matching torch {version}) ...", requirement=requirement,
              version=torch.__version__))
    pip = subprocess.run(command, capture_output=True, text=True)
    if pip.returncode:
        print(" ".join(command), say("failed:") + "\n", (pip.stdout + pip.stderr)[-3000:])
        return False
    importlib.invalidate_caches()
    return importlib.util.find_spec("torch_xla") is not None


def main(argv: list[str] | None = None) -> int:
    """`python -m helpers.versions`: one line per TESTED pair, "minor torch [torch_xla]" (the Makefile reads it);
    `--lesson-runs LESSON`: exit 1 where this Python's torch cannot run LESSON on CPU processes."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--lesson-runs"]:
        import torch

        problem = lesson_5_problem(torch.__version__, "gloo", 2) if argv[1:] == ["05-sharding"] else None
        if problem:
            print(problem)
        return 1 if problem else 0
    for name, (torch_version, xla_version) in TESTED.items():
        print(name, torch_version, xla_version or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
