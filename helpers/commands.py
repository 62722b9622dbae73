"""Run command-line launchers (torchrun, accelerate launch) from a notebook cell, and clean up after them.

    out = commands.run([*commands.TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "my_script"])
    node0, node1 = commands.run_all([node0_command, node1_command])      # two "machines" at once

A launcher starts worker processes of its own. Interrupting a cell that waits on plain `subprocess.run`
kills the launcher and leaves its workers running, and a `Popen` nobody waits for stays a defunct
process until the kernel restarts. Here each command runs in a session of its own; when a command runs
past its time, or the cell is interrupted (Jupyter's stop button), every process of every command gets
SIGTERM (torchrun passes it on to its workers), then SIGKILL, and all are reaped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from . import windows
from .language import message, say
from ._validate import positive_number, str_dict

# torchrun is `python -m torch.distributed.run`: the module form works wherever the interpreter does (on Colab the
# `torchrun` command does not sit next to sys.executable).
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]
STOP_GRACE_S = 5.0


def run(command: list[str], timeout_s: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """One command, its output captured (text). Raises TimeoutError past `timeout_s`, with nothing left running."""
    if not isinstance(command, (list, tuple)):
        raise ValueError(say("command must be a list of arguments, got {kind}", kind=type(command).__name__))
    return run_all([command], timeout_s=timeout_s, env=env)[0]


def run_all(commands: list[list[str]], timeout_s: float = 300, env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Several commands at once (all must end within `timeout_s`); their results in order."""
    if not isinstance(commands, list) or not commands or not all(
            isinstance(c, (list, tuple)) and c and all(isinstance(a, str) for a in c) for c in commands):
        raise ValueError(say("commands must be a non-empty list of argument lists, got {commands!r}",
                             commands=commands))
    positive_number("timeout_s", timeout_s)
    full_env = {**os.environ, **str_dict("env", env)}
    windows.refuse_native(message("A launcher started by helpers.commands (torchrun, accelerate launch)"))
    procs, outputs, readers = [], [], []
    try:
        for command in commands:
            proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=full_env, start_new_session=True)
            procs.append(proc)
            output = {}
            outputs.append(output)
            for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                reader = threading.Thread(target=lambda o, n, s: o.__setitem__(n, s.read()), args=(output, name, stream),
                                          daemon=True)
                reader.start()
                readers.append(reader)
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop(procs)
        raise TimeoutError(say("the command ran past timeout_s={timeout_s} s and was stopped, with every process it "
                               "started", timeout_s=timeout_s)) from None
    except BaseException:  # an interrupt, or a command that could not start
        stop(procs)
        raise
    for reader in readers:
        reader.join(timeout=10)
    return [subprocess.CompletedProcess(list(command), proc.returncode, output.get("stdout", ""), output.get("stderr", ""))
            for command, proc, output in zip(commands, procs, outputs)]


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to each process's session (a launcher and its workers), SIGKILL to what is left, and reap."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)  # the session's process group: the launcher and its workers
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        if all(proc.poll() is not None and not _group_alive(proc.pid) for proc in procs):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
