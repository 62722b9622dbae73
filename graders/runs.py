"""nbgrader as the grader runs it: a process of its own or a fork of a server (graders/forkserver.py), under a
time limit, a watchdog for kernels that die or hang unnoticed, and an optional memory limit.

The result is a CompletedProcess whose `why` says, in the grader's own words, why the watchdog stopped the run
(None when it ended by itself): a status is never read from what the run printed (a kernel writes there too).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from graders import forkserver
from graders.course import CONFIG

STALLED = "the grading run stalled"
# What the grader keeps of a run's stdout and of its stderr (the first and the last half): nbgrader's log carries
# what a kernel wrote, so the rest is read and dropped, never held.
KEPT_OUTPUT_BYTES = 256 * 2**10
DROPPED = "\n[... the middle of this output was dropped ...]\n"


def nbgrader(root: Path, *args: str, timeout: float | None = None, env: dict | None = None,
             stalled_after: float | None = None, server: forkserver.Server | None = None,
             memory_bytes: int | None = None):
    """`nbgrader ARGS` for the course at `root`: a new process, or a fork of `server` (nbgrader imported once);
    `memory_bytes` caps its address space."""
    exe = Path(sys.executable).with_name("nbgrader")
    full_env = job_environ(env)
    args = [*args, f"--JupyterApp.config_file={CONFIG}", f"--CourseDirectory.root={root}"]
    progress = full_env.get("GRADER_PROGRESS_FILE")
    if server is not None:
        served = run_served(server, args, root, full_env, timeout, progress, stalled_after, memory_bytes)
        if served is not None:
            return served
    cmd = [str(exe), *args]
    if memory_bytes and shutil.which("prlimit"):
        cmd = ["prlimit", f"--as={memory_bytes}", "--", *cmd]
    return run_watched(cmd, root, full_env, timeout, progress, stalled_after)


def job_environ(env: dict | None = None) -> dict[str, str]:
    """The environment nbgrader runs in, and its kernel launcher: this process's, with `env`."""
    full_env = {**os.environ, **(env or {})}
    bin_folder = Path(sys.executable).parent  # nbgrader runs `alembic` from PATH
    return {**full_env, "PATH": f"{bin_folder}{os.pathsep}{full_env.get('PATH', '')}"}


def run_watched(cmd, cwd, env, timeout, progress: str | None = None, stalled_after: float | None = None):
    """subprocess.run, with a watchdog: when the progress file (rewritten before each cell) has not changed
    for `stalled_after` seconds, the kernel died or hung without nbclient noticing (its cell timeout did not
    end the cell): the run is stopped and reported as STALLED, so that the pipeline skips that cell instead
    of letting the submission run out its whole time limit."""
    deadline = None if timeout is None else time.monotonic() + timeout
    if shutil.which("setpriv"):  # dies with the thread that started it: a killed Dask worker leaves no grading behind
        cmd = ["setpriv", "--pdeathsig", "KILL", "--", *cmd]
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True) as proc:
        outputs = {}
        readers = [threading.Thread(target=lambda name, stream: outputs.__setitem__(name, read_bounded(stream)),
                                    args=(name, stream), daemon=True) for name, stream in (("out", proc.stdout), ("err", proc.stderr))]
        for reader in readers:
            reader.start()
        why = None
        while proc.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                why = f"timed out after {timeout} s"
            else:
                why = _stalled(progress, stalled_after)
            if why:
                _kill_group(proc)
                break
            time.sleep(0.2)
        proc.wait()
        for reader in readers:
            reader.join(timeout=10)
    stderr = outputs.get("err", "") + (f"\n{why}" if why else "")
    return _completed(cmd, -1 if why else proc.returncode, outputs.get("out", ""), stderr, why)


def run_served(server: forkserver.Server, args, cwd, env, timeout, progress: str | None = None,
               stalled_after: float | None = None, memory_bytes: int | None = None):
    """run_watched's twin for a job of a fork server: the same watchdog, the same result; None when the server
    itself failed (the caller then starts a process of its own)."""
    with tempfile.TemporaryDirectory(prefix="nbgrader-") as out:
        paths = {"stdout": os.path.join(out, "stdout"), "stderr": os.path.join(out, "stderr")}
        request = {"args": list(args), "cwd": str(cwd), "env": dict(env), "memory_bytes": memory_bytes, **paths}
        ended = server.run(request, timeout=1e9 if timeout is None else timeout,
                           stop_when=lambda: _stalled(progress, stalled_after))
        if ended.server_failed:
            return None
        stdout, stderr = (read_bounded(open(paths[name], "rb")) if os.path.exists(paths[name]) else ""
                          for name in ("stdout", "stderr"))
    why = ended.problem
    return _completed(args, -1 if why else ended.status, stdout, stderr + (f"\n{why}" if why else ""), why)


def read_bounded(stream, limit: int = KEPT_OUTPUT_BYTES) -> str:
    """The first and the last `limit`/2 bytes of a binary stream (a pipe read to its end, a file's end sought), as
    text, and the stream closed: never more in memory, however much was written."""
    if limit < 2:
        raise ValueError(f"limit must be at least 2 bytes (a first and a last byte), got {limit}")
    half = limit // 2
    with stream:
        head, tail, dropped = stream.read(half), b"", False
        if stream.seekable() and os.fstat(stream.fileno()).st_size - stream.tell() > half:
            stream.seek(-half, os.SEEK_END)
            dropped = True
        while chunk := stream.read(2**16):
            dropped = dropped or len(tail) + len(chunk) > half
            tail = (tail + chunk)[-half:]
    return head.decode(errors="replace") + (DROPPED if dropped else "") + tail.decode(errors="replace")


def _completed(args, status: int, stdout: str, stderr: str, why: str | None) -> subprocess.CompletedProcess:
    """The run's result; `why` is the watchdog's own reason for stopping it (None if it ended by itself)."""
    done = subprocess.CompletedProcess(args, status, stdout, stderr)
    done.why = why
    return done


def _stalled(progress: str | None, stalled_after: float | None) -> str | None:
    if stalled_after and progress and time.time() - _mtime(progress) > stalled_after:
        return f"{STALLED}: no cell finished for {stalled_after:.0f} s"
    return None


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # nbgrader and the kernel launcher it started
    except OSError:
        proc.kill()


def check(proc, what: str) -> None:
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
