"""Native Windows: the course says it needs WSL2 before a launch is attempted (simulated: the platform's names are
patched; no Windows here). The setup cells' own check is tested in tests/test_setup_cell.py."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers import commands, windows

NATIVE_WINDOWS = [("sys", "platform", "win32"), ("os", "name", "nt")]


@pytest.fixture(params=NATIVE_WINDOWS, ids=lambda p: f"{p[0]}.{p[1]}")
def native_windows(request, monkeypatch):
    """One of the two names a native Windows Python goes by (each alone must be enough), and no process may start."""
    module, name, value = request.param
    monkeypatch.setattr({"sys": sys, "os": os}[module], name, value)

    def refuse(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", refuse)


def test_commands_say_wsl2_before_starting_a_launcher(native_windows):
    with pytest.raises(RuntimeError) as error:
        commands.run([*commands.TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "helpers.ddp_scripts.step3"])
    message = str(error.value)
    assert message.startswith("A launcher started by helpers.commands (torchrun, accelerate launch) cannot run on "
                              "native Windows: the course needs WSL2")
    assert "`wsl --install`" in message and "PowerShell run as administrator" in message


def test_bad_arguments_are_still_named_first(native_windows):
    with pytest.raises(ValueError, match="timeout_s"):
        commands.run([sys.executable, "-c", "pass"], timeout_s=0)


def test_linux_and_wsl2_are_not_native_windows(monkeypatch):
    """WSL2 is Linux to Python (sys.platform "linux", os.name "posix"), whatever kernel release it reports."""
    assert not windows.native()
    monkeypatch.setattr("platform.release", lambda: "6.6.87.2-microsoft-standard-WSL2")
    windows.refuse_native("anything")  # does not raise
    out = commands.run([sys.executable, "-c", "print('ran')"])
    assert out.stdout == "ran\n"


def test_the_setup_cell_and_the_helpers_give_the_same_command():
    """The setup cell cannot import the helpers before it has checked: it carries the same advice."""
    lesson = Path(__file__).resolve().parent.parent / "solutions" / "01-dataparallel" / "01-dataparallel.ipynb"
    cell = next(c for c in nbformat.read(lesson, as_version=4).cells if c.cell_type == "code").source
    for words in ("the course needs WSL2", "PowerShell run as administrator with `wsl --install`",
                  "restart the computer"):
        assert words in " ".join(cell.split()) and words in windows.NEEDS_WSL2, words


def test_launch_says_wsl2_before_starting_a_rank(native_windows, monkeypatch):
    """helpers.launch (and accel.launch, which uses it) refuses before its first rank: on native Windows the ranks'
    pipes would fail in os.dup2 with a Win32 handle, in a traceback that says nothing of WSL2."""
    from helpers import launch

    monkeypatch.setattr(launch, "_context", lambda: pytest.fail("a rank was about to start"))
    with pytest.raises(RuntimeError, match="helpers.launch cannot run on native Windows: the course needs WSL2"):
        launch.launch(_worker, 2)


def _worker(rank, world_size):
    return rank
