"""Run a function in a fresh Python process and bring its result back.

For work that must not share the notebook's process: torch_xla reads its settings once per
process, and launchers that fork (Lightning's `ddp_notebook`) are only safe from a process that
has not yet run a multi-threaded op (GNU OpenMP's thread pool does not survive a fork).

If a job fails, or the caller is interrupted (Jupyter's stop button), every process still running
is killed at once, so the kernel answers again right away.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import traceback

import cloudpickle

from ._validate import boolean, positive_int, positive_number, str_dict


def run(fn, *args, env: dict | None = None, timeout_s: float = 300, with_log: bool = False, **kwargs):
    """`fn(*args, **kwargs)` in a fresh process (with `env` added to this one's environment).
    With `with_log=True`: `(result, what the process wrote on stderr)`."""
    boolean("with_log", with_log)
    children = _Children()
    try:
        value, log = _run(fn, args, kwargs, env, timeout_s, children)
        return (value, log) if with_log else value
    finally:
        children.stop()


def run_many(jobs, env: dict | None = None, timeout_s: float = 300, workers: int | None = None) -> list:
    """Several `(fn, args, kwargs)` jobs, each in its own fresh process, `workers` at a time
    (default: one per job, at most one per core). The first failure is raised at once."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    jobs = list(jobs)
    if workers is not None:
        positive_int("workers", workers)
    workers = workers or max(1, min(len(jobs), os.cpu_count() or 1))
    children = _Children()
    with ThreadPoolExecutor(workers) as pool:
        try:
            futures = [pool.submit(_run, fn, args, kwargs, env, timeout_s, children) for fn, args, kwargs in jobs]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:
                if f in done and f.exception() is not None:
                    raise f.exception()
            return [f.result()[0] for f in futures]
        finally:
            children.stop()


class _Children:
    """The processes of one call; `stop` kills those running and refuses new ones."""

    def __init__(self):
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self._stopped = False

    def start(self, cmd, env) -> subprocess.Popen:
        with self._lock:
            if self._stopped:
                raise RuntimeError("stopped before it started: another job failed or the run was interrupted")
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self._procs.add(proc)
            return proc

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                proc.kill()  # a no-op for one that has exited


def _run(fn, args, kwargs, env, timeout_s: float, children: _Children):
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    positive_number("timeout_s", timeout_s)
    env = str_dict("env", env)
    with tempfile.TemporaryDirectory() as folder:
        job, result = os.path.join(folder, "job.pkl"), os.path.join(folder, "result.pkl")
        with open(job, "wb") as f:
            cloudpickle.dump((fn, args, kwargs), f)
        proc = children.start([sys.executable, "-m", "helpers.fresh", job, result], {**os.environ, **env})
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise TimeoutError(f"the process ran past timeout_s={timeout_s} s and was stopped") from None
        if not os.path.exists(result):
            raise RuntimeError(f"the process exited with code {proc.returncode}:\n{stderr[-3000:]}")
        with open(result, "rb") as f:
            ok, value = cloudpickle.load(f)
    if not ok:
        raise RuntimeError(f"in the fresh process:\n{value}")
    return value, stderr


def _child(job: str, result: str) -> None:
    try:
        with open(job, "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
        outcome = (True, fn(*args, **kwargs))
    except BaseException:
        outcome = (False, traceback.format_exc())
    with open(result, "wb") as f:
        cloudpickle.dump(outcome, f)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
