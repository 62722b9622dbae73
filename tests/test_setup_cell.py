"""Each lesson's setup cell (its first code cell, tagged "prelude"), run for real in a fresh Python: a helpers.py of
the student's own that would hide the course's package, a torch outside the supported range, lesson 4 without
torch_xla. The supported range itself is stated once, in helpers/versions.py; the docs and the Makefile agree."""

import difflib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
import torch

from helpers import versions

REPO = Path(__file__).resolve().parent.parent
LESSONS = ("01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu")


def setup_cell(lesson: str) -> str:
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    assert "prelude" in cell.metadata.get("tags", []) and "COURSE_REPO =" in cell.source
    return cell.source


def run(source: str, cwd, before: str = "") -> subprocess.CompletedProcess:
    """The cell in a fresh Python (as a kernel runs it: the working folder first on sys.path), after `before`."""
    code = textwrap.dedent(before) + "\n" + source
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


# torch_xla hidden from the import system, as on a runtime that lacks it (its metadata stays: find_spec decides)
HIDE_TORCH_XLA = """
import importlib.machinery, sys
class Hidden(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name.split(".")[0] == "torch_xla" else super().find_spec(name, path, target)
sys.meta_path[:] = [Hidden if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def fake_torch(version: str) -> str:
    return f"import torch\ntorch.__version__ = {version!r}\n"


def test_the_setup_cell_is_the_same_in_every_lesson():
    """Lessons 1-3 have the same cell; lesson 4's differs only by what it needs (accelerate, lightning, torch_xla)."""
    first = setup_cell(LESSONS[0])
    assert setup_cell("02-ddp") == first and setup_cell("03-amp") == first
    changed = [line[2:] for line in difflib.ndiff(first.splitlines(), setup_cell("04-accelerate-tpu").splitlines())
               if line[:2] in ("- ", "+ ")]
    assert changed, "lesson 4 needs more"
    for line in changed:
        assert re.search(r"NEEDS|lesson4|accelerate|lightning|COURSE_REPO|torch_xla|TORCH_XLA|^# ", line), line


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_setup_cell_runs_quietly_on_the_course_environment(lesson, tmp_path):
    out = run(setup_cell(lesson), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"torch {torch.__version__}" in out.stdout and "CPU cores" in out.stdout
    assert "outside" not in out.stdout and "not installed" not in out.stdout and not out.stderr.strip(), out


# Every process the cell (or a launch after it) would start fails loudly: what native Windows cannot do.
NO_PROCESS = """
import multiprocessing.process, os, subprocess
def refuse(*args, **kwargs):
    raise AssertionError("a process was started")
subprocess.Popen.__init__ = multiprocessing.process.BaseProcess.start = os.fork = refuse
"""
NATIVE_WINDOWS = {"sys.platform": "import sys\nsys.platform = 'win32'\n", "os.name": "import os\nos.name = 'nt'\n"}


@pytest.mark.parametrize("signal", NATIVE_WINDOWS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_native_windows_is_told_it_needs_wsl2_before_anything_runs(lesson, signal, tmp_path):
    """helpers.launch and torchrun cannot run on native Windows (a pipe's fileno() is a Win32 handle; Windows' torch
    has no libuv): the setup cell says so, with the command that installs WSL2, before pip, the helpers or a launch."""
    launch = "\nfrom helpers import launch\nlaunch.launch(lambda rank, world_size: rank, 2)\n"
    out = run(setup_cell(lesson) + launch, tmp_path, before=NO_PROCESS + NATIVE_WINDOWS[signal])
    assert out.returncode != 0
    error = out.stderr.strip().splitlines()[-1]
    assert error.startswith("RuntimeError: This is native Windows: the course needs WSL2"), out.stderr[-2000:]
    assert "`wsl --install`" in error and "PowerShell run as administrator" in error and "Colab" in error
    assert "a process was started" not in out.stdout + out.stderr


@pytest.mark.parametrize("mine", ["helpers.py", "helpers/__init__.py"])
def test_a_helpers_module_of_ones_own_is_named_with_what_to_do(mine, tmp_path):
    """A helpers.py or a helpers/ folder next to the notebook comes first on sys.path and hides the course's package
    (it used to be a bare ImportError later). The cell names it and says to rename it; it installs nothing."""
    (tmp_path / mine).parent.mkdir(exist_ok=True)
    (tmp_path / mine).write_text("def plot():\n    pass\n")
    out = run(setup_cell("01-dataparallel"), tmp_path)
    assert out.returncode != 0
    error = out.stderr.strip().splitlines()[-1]
    shown = tmp_path / ("helpers.py" if mine == "helpers.py" else "helpers")
    assert error.startswith("ImportError: ") and f"{shown} hides the course's `helpers` package" in error, out.stderr
    assert "rename it" in error and "restart the kernel" in error
    assert "pip" not in out.stdout


def test_a_plain_helpers_folder_is_never_a_bare_error(tmp_path):
    """A folder helpers/ without __init__.py is a namespace portion: an installed course package still wins over it,
    an editable one (a course checkout's `pip install -e .`) does not. Either the lesson runs or the cell names it."""
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "plots.py").write_text("def plot():\n    pass\n")
    out = run(setup_cell("01-dataparallel"), tmp_path)
    if out.returncode:
        error = out.stderr.strip().splitlines()[-1]
        assert f"ImportError: {tmp_path / 'helpers'} hides the course's `helpers` package" in error, out.stderr
    else:
        assert "CPU cores" in out.stdout


@pytest.mark.parametrize("version, says", [
    ("2.5.1", "older than the course supports"),
    ("2.15.0+cu130", "newer than the newest the course is tested with"),
])
def test_a_torch_outside_the_supported_range_is_said_plainly(version, says, tmp_path):
    out = run(setup_cell("01-dataparallel"), tmp_path, before=fake_torch(version))
    assert out.returncode == 0, out.stderr[-3000:]
    low, high = versions.SUPPORTED_TORCH
    assert f"This runtime has torch {version}, {says}" in out.stdout and f"torch {low} to {high}" in out.stdout
    assert "Traceback" not in out.stderr and "CPU cores" in out.stdout  # it says so, and the lesson goes on


@pytest.mark.parametrize("version", [None, "2.6.0+cu124"])
def test_lesson_4_offers_the_torch_xla_that_matches_torch(version, tmp_path):
    """Without torch_xla, where a wheel for this torch exists (Linux x86-64), lesson 4's setup prints the exact pip
    command instead of leaving part B to say it cannot run."""
    if sys.platform != "linux" or versions.torch_xla_wheel(version or torch.__version__):
        pytest.skip("no torch_xla wheel for this machine")
    before = HIDE_TORCH_XLA + (fake_torch(version) if version else "")
    out = run(setup_cell("04-accelerate-tpu"), tmp_path, before=before)
    assert out.returncode == 0, out.stderr[-3000:]
    major, minor = versions.minor(version or torch.__version__)
    assert f'pip install "torch_xla=={major}.{minor}.*"' in out.stdout, out.stdout
    assert "set INSTALL_TORCH_XLA = True in this cell" in out.stdout


def test_lesson_4_installs_torch_xla_when_asked(tmp_path):
    """INSTALL_TORCH_XLA = True runs pip with that requirement (here pip is replaced by a stand-in that records it)."""
    if sys.platform != "linux" or versions.torch_xla_wheel(torch.__version__):
        pytest.skip("no torch_xla wheel for this machine")
    cell = setup_cell("04-accelerate-tpu")
    assert cell.count("INSTALL_TORCH_XLA = False\n") == 1
    stand_in = HIDE_TORCH_XLA + """
import subprocess
real_run = subprocess.run
def run(command, *args, **kwargs):
    if "pip" in command:
        print("PIP:", " ".join(command[1:]))
        return subprocess.CompletedProcess(command, 0, "", "")
    return real_run(command, *args, **kwargs)
subprocess.run = run
"""
    out = run(cell.replace("INSTALL_TORCH_XLA = False\n", "INSTALL_TORCH_XLA = True\n"), tmp_path, before=stand_in)
    assert out.returncode == 0, out.stderr[-3000:]
    major, minor = versions.minor(torch.__version__)
    assert f"PIP: -m pip install -q torch_xla=={major}.{minor}.*" in out.stdout, out.stdout


def test_part_b_without_torch_xla_says_exactly_where_it_runs():
    """Colab's and Kaggle's CPU/GPU runtimes bring torch 2.10, for which no torch_xla exists: part B's message
    (xla.MISSING) says where part B runs (versions.PART_B_WHERE) instead of promising it there, and still sends the
    student to the setup cell's switch where a matching wheel exists."""
    from helpers import xla

    missing = " ".join(xla.MISSING.split())
    assert versions.PART_B_WHERE in missing, xla.MISSING
    assert "Kaggle's GPU runtime or any Linux x86-64 machine you can add it" not in missing
    switch = re.search(r"set (\w+) = True in the lesson's setup cell", missing)
    assert switch and switch.group(1) == "INSTALL_TORCH_XLA", xla.MISSING
    assert f"\n{switch.group(1)} = False\n" in setup_cell("04-accelerate-tpu")
    assert "macOS or Windows" in missing and "Linux x86-64 only" in missing
    low, high = versions.SUPPORTED_TORCH_XLA
    assert f"torch {low} to {high}" in missing


def test_where_part_b_runs_follows_the_versions():
    """versions.PART_B_WHERE names each runtime's stack as RUNTIME_STACKS has it, and the course's own pinned pair."""
    where = versions.PART_B_WHERE
    for torch_version, xla_version in versions.RUNTIME_STACKS.values():
        name = "{}.{}".format(*versions.minor(torch_version))
        if xla_version:
            assert f"(torch {name} + torch_xla {name})" in where and versions.torch_xla_wheel(torch_version, "3.11",
                                                                                               "linux x86_64") is None
        else:
            assert f"runtimes (torch {name}), nor" in where and versions.torch_xla_wheel(torch_version, "3.11",
                                                                                           "linux x86_64")
    pinned = re.search(r"^torch==(\d+\.\d+)", (REPO / "requirements.txt").read_text(), re.M).group(1)
    assert f"(`make lab`: torch {pinned} + torch_xla {pinned})" in where


def test_lesson_4_says_why_when_no_torch_xla_fits(tmp_path):
    out = run(setup_cell("04-accelerate-tpu"), tmp_path, before=HIDE_TORCH_XLA + fake_torch("2.12.0"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch_xla is not installed, and torch_xla has no wheel for torch 2.12" in out.stdout
    assert 'pip install "torch_xla' not in out.stdout


# ---- helpers/versions.py: the range, stated once ------------------------------------------------------------


def test_the_supported_range_is_what_make_test_versions_tests():
    low, high = versions.SUPPORTED_TORCH
    assert versions.minor(low) < versions.minor(high)
    tested = sorted(versions.TESTED, key=versions.minor)
    assert (tested[0], tested[-1]) == (low, high), "the ends of the range are tested pairs"
    for runtime, stack in versions.RUNTIME_STACKS.items():
        assert stack in versions.TESTED.values(), f"{runtime}'s torch {stack[0]} is not a pair make test-versions runs"
    for name, (torch_version, xla_version) in versions.TESTED.items():
        assert versions.minor(torch_version) == versions.minor(name)
        assert xla_version is None or versions.minor(xla_version) == versions.minor(name)
    wheels = sorted(versions.TORCH_XLA_WHEELS, key=versions.minor)
    assert (wheels[0], wheels[-1]) == versions.SUPPORTED_TORCH_XLA
    assert versions.TESTED[low][1] is not None, "the oldest pair tests torch_xla too"
    pinned = re.search(r"^torch==(\S+)$", (REPO / "requirements.txt").read_text(), re.M).group(1)
    assert versions.minor(low) <= versions.minor(pinned) <= versions.minor(high)
    assert versions.torch_problems(pinned) == []
    printed = subprocess.run([sys.executable, "-m", "helpers.versions"], cwd=REPO, capture_output=True, text=True).stdout
    assert printed.split() == [part for name, pair in versions.TESTED.items() for part in (name, *filter(None, pair))]


def test_make_test_versions_runs_the_runtimes_stacks():
    """Kaggle's TPU image brings torch 2.8 with torch_xla 2.8, Colab's and Kaggle's CPU/GPU images torch 2.10: each is
    a pair make test-versions runs, not only the two ends of the range."""
    assert versions.RUNTIME_STACKS["Kaggle TPU v5e-8"] == versions.TESTED["2.8"] == ("2.8.0", "2.8.0")
    assert versions.RUNTIME_STACKS["Colab and Kaggle CPU/GPU"] == versions.TESTED["2.10"] == ("2.10.0", None)


def test_the_docs_name_the_versions_that_ran():
    """The README and the hardware page name each pair make test-versions ran, exactly, not a range implying more."""
    for text in (" ".join((REPO / "README.md").read_text().split()),
                 " ".join((REPO / "website" / "pages" / "hardware.md").read_text().split())):
        assert "tested with torch 2.6 to 2.14" not in text
        for torch_version, xla_version in versions.TESTED.values():
            assert f"torch {torch_version}" + (f" + torch_xla {xla_version}" if xla_version else "") in text


def test_the_docs_state_the_range():
    low, high = versions.SUPPORTED_TORCH
    xla_low, xla_high = versions.SUPPORTED_TORCH_XLA
    page = " ".join((REPO / "website" / "pages" / "hardware.md").read_text().split())
    readme = " ".join((REPO / "README.md").read_text().split())
    for text in (page, readme):
        assert f"torch {low} to {high}" in text and f"torch_xla {xla_low} to {xla_high}" in text
    assert "make test-versions" in page and "python -m helpers.hw_check" in page
    makefile = (REPO / "Makefile").read_text()
    assert "-m helpers.versions" in makefile and ".venv-torch" in makefile
    assert "/.venv-torch*/" in (REPO / ".gitignore").read_text()
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    assert "make test-versions TORCH_VERSIONS=${{ matrix.torch }}" in workflow
    assert "torch: [" + ", ".join(f'"{name}"' for name in versions.TESTED) + "]" in workflow


@pytest.mark.parametrize("version, expected", [
    ("2.9.0+cu128", (2, 9)), ("2.10.0a0+git1234", (2, 10)), ("2.14.1", (2, 14)), ("3.0", (3, 0)),
])
def test_minor(version, expected):
    assert versions.minor(version) == expected


@pytest.mark.parametrize("bad", ["", "2", "two.nine", None])
def test_minor_rejects_what_is_no_version(bad):
    with pytest.raises(ValueError, match="not a version"):
        versions.minor(bad)


def test_torch_xla_wheels():
    assert versions.torch_xla_wheel("2.9.0", python="3.12.3", machine="linux x86_64") is None
    assert versions.torch_xla_wheel("2.6.0", python="3.11.7", machine="linux x86_64") is None
    assert "Python 3.10 to 3.11, not 3.12" in versions.torch_xla_wheel("2.6.0", python="3.12.1", machine="linux x86_64")
    assert "no wheel for torch 2.14" in versions.torch_xla_wheel("2.14.1", python="3.11.0", machine="linux x86_64")
    assert "Linux x86-64 only" in versions.torch_xla_wheel("2.9.0", python="3.11.0", machine="darwin arm64")
    assert versions.torch_xla_requirement("2.8.1+cu126") == "torch_xla==2.8.*"
    assert versions.torch_xla_requirement("2.6.0", tpu=True) == "torch_xla[tpu]==2.6.*"  # libtpu comes with [tpu]
    mismatch = versions.torch_problems("2.9.0", "2.6.0")
    assert len(mismatch) == 1 and "torch_xla 2.6.0 does not match torch 2.9.0" in mismatch[0]
