"""Fork servers for the grader's own processes: nbgrader, and the judge.

    python -m graders.forkserver nbgrader | judge

A server never runs student code. It imports what its jobs need once (nbgrader's start-up alone costs
about two CPU-seconds, torch's more), then forks a fresh copy of itself per job: one JSON request per
line on stdin, replies "pid N" once the job runs and "done STATUS" when it ended. Each job is a session
of its own, so the client can kill it with everything it started (`os.killpg`). When the client goes
away (its end of the pipe closes: it exited, or it was killed), the server kills the job and exits.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from graders import warm_kernel

REPO = Path(__file__).resolve().parent.parent

# What each kind of job imports before it forks. (graders.* are not preloaded: the nbgrader config imports
# graders.execute, which reads its settings from the job's environment when imported.)
PRELOAD = {
    "nbgrader": ("nbgrader.apps.nbgraderapp", "nbgrader.apps.autogradeapp", "nbgrader.preprocessors",
                 "nbclient", "jupyter_client.manager", "sqlalchemy", "alembic"),
    # Not helpers.accel: importing it sets USE_TORCH_XLA, which lesson 4's judgements set for themselves.
    # torch._dynamo: torch.optim imports it with the first optimizer a judgement makes (0.9 CPU-s a notebook).
    "judge": ("graders.judge", "torch", "torch._dynamo", "torch.distributed", "torch.multiprocessing",
              "matplotlib.pyplot", "helpers.amp", "helpers.checkpoints", "helpers.data", "helpers.dataparallel",
              "helpers.ddp", "helpers.launch", "helpers.memory", "helpers.models", "helpers.plotting", "helpers.training"),
}


# ---- the server ----------------------------------------------------------------------------------------------

def _nbgrader_job(request: dict) -> int:
    """`nbgrader ARGS` as its command line would run it, in `cwd` with exactly `env`, its output in files."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _redirect(1, request["stdout"])
    _redirect(2, request["stderr"])
    sys.argv = ["nbgrader", *request["args"]]
    from nbgrader.apps.nbgraderapp import main

    try:
        main()
    except SystemExit as exit:
        return exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    return 0


def _judge_job(request: dict) -> int:
    from graders import judge

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # stdout is the server's reply channel
    os.environ["GRADER_JUDGE_MEMO"] = request.get("memo") or ""
    return judge.main([request["solution"], request["graded"], request["out"]])


JOBS = {"nbgrader": _nbgrader_job, "judge": _judge_job}


def _redirect(fd: int, path: str) -> None:
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(target, fd)
    os.close(target)
    stream = open(fd, "w", closefd=False, buffering=1, encoding="utf-8", errors="replace")
    if fd == 1:
        sys.stdout = stream
    else:
        sys.stderr = stream


def _warm_up_the_exporter() -> None:
    """Render a small notebook to HTML once, so that each feedback job's fork finds the highlighters' and the
    Markdown parser's compiled patterns (per process, made on first use) ready: 1.1 -> 0.55 CPU-s a page, measured."""
    import nbformat
    from nbconvert.exporters import HTMLExporter

    outputs = [nbformat.v4.new_output("error", ename="E", evalue="v", traceback=["\x1b[31mE\x1b[0m"]),
               nbformat.v4.new_output("stream", text="x")]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T\n*a* `b` [c](https://example.org)"),
                                         nbformat.v4.new_code_cell("import os\nprint(1)", outputs=outputs)])
    HTMLExporter().from_notebook_node(nb)


def serve(kind: str, requests=sys.stdin, replies=sys.stdout) -> None:
    gc.disable()  # imports for forks, as helpers.fresh.import_for_forks says
    for name in PRELOAD[kind]:
        importlib.import_module(name)
    if kind == "nbgrader":
        _warm_up_the_exporter()
    gc.enable()
    gc.freeze()
    job, server = JOBS[kind], os.getpid()
    while True:
        line = requests.readline()
        if not line:
            return
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: run the job, leave without running the server's cleanup
            status = 1
            try:
                os.setsid()
                with contextlib.suppress(OSError, AttributeError):  # (no prctl: not Linux)
                    warm_kernel.die_with_parent(server)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)  # stdin carries the server's requests
                _limit_memory(request.get("memory_bytes"))
                status = job(request)
            except BaseException:  # noqa: BLE001 - the job's failure is its exit status and its stderr
                traceback.print_exc()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                os._exit(status if isinstance(status, int) and 0 <= status < 256 else 1)
        replies.write(f"pid {pid}\n")
        replies.flush()
        replies.write(f"done {_wait(pid, requests)}\n")
        replies.flush()


def _limit_memory(memory_bytes) -> None:
    """A job's address space, when its request bounds it (the judge, a feedback page: their work grows with what
    a submission sent)."""
    import resource

    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (int(memory_bytes), int(memory_bytes)))


def _wait(pid: int, requests) -> int:
    """The job's exit status; if the client goes away first, kill the job's session and leave."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        readable, _, _ = select.select([requests], [], [], 0.2)
        if readable and not os.read(requests.fileno(), 1):  # end of file: the client is gone
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            sys.exit(0)


# ---- the client ----------------------------------------------------------------------------------------------

@dataclass
class Ended:
    status: int | None  # the job's exit status; None when it was stopped or never ran
    problem: str | None = None  # why it was stopped, or why the server could not run it
    server_failed: bool = False  # the server could not run the job, or died with it


class Server:
    """A client's handle on one `python -m graders.forkserver KIND`, started on first use and again after it dies.
    One job at a time (one server per grading slot)."""

    def __init__(self, kind: str, stderr_path: str):
        if kind not in JOBS:
            raise ValueError(f"kind must be one of {sorted(JOBS)}, got {kind!r}")
        self.kind, self.stderr_path, self.proc, self.replies = kind, stderr_path, None, None

    def _start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "graders.forkserver", self.kind], cwd=REPO, env=env,
                                         text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         start_new_session=True)
        self.replies = queue.Queue()
        threading.Thread(target=lambda out, q: [q.put(line) for line in out] + [q.put(None)],
                         args=(self.proc.stdout, self.replies), daemon=True).start()

    def run(self, request: dict, timeout: float, stop_when=None, start_timeout: float = 120) -> Ended:
        """Run one job. `stop_when()`, asked every 0.2 s, returns a reason to stop it (or None)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            self.close()
            return Ended(None, f"the {self.kind} server exited", server_failed=True)
        try:
            pid = int(self.replies.get(timeout=start_timeout).split()[1])  # the server is up once it answers
        except (queue.Empty, AttributeError, IndexError, ValueError):
            self.close()
            return Ended(None, f"the {self.kind} server did not answer", server_failed=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                done = self.replies.get(timeout=0.2)
            except queue.Empty:
                why = f"timed out after {timeout:.0f} s" if time.monotonic() > deadline else (stop_when() if stop_when else None)
                if why:
                    self._kill(pid)
                    return Ended(None, why)
                continue
            if done is None:  # the server died with its job
                self.close()
                return Ended(None, f"the {self.kind} server exited", server_failed=True)
            return Ended(int(done.split()[1]))

    def _kill(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        try:
            done = self.replies.get(timeout=10)  # the server reaps it and answers
        except queue.Empty:
            done = None
        if done is None:
            self.close()

    def stderr_tail(self, limit: int = 500) -> str:
        """The end of the server's log, read from there (the log of a long grading run can be large)."""
        with contextlib.suppress(OSError), open(self.stderr_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4 * limit))
            return f.read().decode(errors="replace")[-limit:]
        return ""

    def close(self) -> None:
        """Stop the server; a job it runs is killed with it (the server kills it when its requests end, and the
        job dies with the server in any case)."""
        if self.proc is not None:
            stop(self.proc, grace_s=2)
            self.proc = None


def stop(proc: subprocess.Popen, grace_s: float) -> None:
    """End a server started in a session of its own that reads requests on stdin: close its stdin, give it
    `grace_s` to leave, then kill its session's process group (what it forked with it)."""
    with contextlib.suppress(OSError):
        proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


if __name__ == "__main__":
    serve(sys.argv[1])
