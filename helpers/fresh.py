"""Run a function in a fresh Python process and bring its result back.

For work that must not share the notebook's process: torch_xla reads its settings once per
process, and launchers that fork (Lightning's `ddp_notebook`) are only safe from a process that
has not yet run a multi-threaded op (GNU OpenMP's thread pool does not survive a fork).

If a job fails, or the caller is interrupted (Jupyter's stop button), every process still running
is killed at once, so the kernel answers again right away. "Every process" includes the workers a
job starts (Lightning's, `xmp.spawn`'s): each job runs in a process group of its own, killed whole
when the job times out, fails or ends (on a TPU an orphaned worker keeps the chip), and when its
caller dies.

A `ForkServer` saves the start-up: a process that imported the slow modules once (torch_xla takes
seconds) forks a child per job. The child has imported them but has run nothing (no device, no
graph, no thread pool yet): as fresh, for those settings, as a new process. It imports them as `import_for_forks` says.

A job that fails is raised here from the job's own frames (`raise_at`): a notebook shows the line of the student's
code that failed, not the helpers' frames in between (`helpers.launch` does the same for its ranks).

Time limits count CPU time, not the clock: `timeout_s` is the CPU-seconds a job's processes may use (its session's,
read from /proc; the clock only where there is no /proc), and a server's imports have SERVER_START_CPU_S. On a busy
machine a job takes longer, never fails for that: a right answer graded while the machine was loaded lost its points
to these limits counted in wall-clock seconds (issue 39). A job that waits without computing is stopped by its caller
(Jupyter's stop button; the grader's own wall-clock backstop, which grades nothing: graders/cell_limit.py).
"""

from __future__ import annotations

import gc
import importlib
import linecache
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
import types
from multiprocessing.connection import Connection, wait
from typing import NoReturn

import cloudpickle

from . import refusal
from ._validate import boolean, function, positive_int, positive_number, str_dict
from .language import say

SERVER_START_CPU_S = 300  # CPU-seconds a server's imports may take (torch_xla's: about 5)
POLL_S = 1.0  # how often a waiting call reads the CPU time its job has used


def run(fn, *args, env: dict | None = None, timeout_s: float = 300, with_log: bool = False,
        server: ForkServer | None = None, **kwargs):
    """`fn(*args, **kwargs)` in a fresh process (with `env` added to this one's environment), or in a child
    forked by `server`. With `with_log=True`: `(result, what the process wrote on stderr)`. Past `timeout_s`
    CPU-seconds of its processes, TimeoutError (the clock's seconds do not count: see the module's docstring)."""
    __tracebackhide__ = True  # IPython shows a failed job's traceback from the cell straight to the job's own code
    boolean("with_log", with_log)
    if server is not None and not isinstance(server, ForkServer):
        raise ValueError(say("server must be a ForkServer or None, got {kind}", kind=type(server).__name__))
    children = _Children()
    try:
        value, log = _run(fn, args, kwargs, env, timeout_s, children, server)
        return (value, log) if with_log else value
    finally:
        children.stop()


def run_many(jobs, env: dict | None = None, timeout_s: float = 300, workers: int | None = None,
             server: ForkServer | None = None) -> list:
    """Several `(fn, args, kwargs)` jobs, each in its own fresh process (or in a child forked by `server`, side by
    side: `ForkServer.run_apart`), `workers` at a time (default: one per job, at most one per core). The first
    failure is raised at once, and the other jobs are stopped."""
    __tracebackhide__ = True
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    jobs = list(jobs)
    if workers is not None:
        positive_int("workers", workers)
    if server is not None and not isinstance(server, ForkServer):
        raise ValueError(say("server must be a ForkServer or None, got {kind}", kind=type(server).__name__))
    workers = workers or max(1, min(len(jobs), os.cpu_count() or 1))
    children = _Children()
    with ThreadPoolExecutor(workers) as pool:
        try:
            futures = [pool.submit(_run, fn, args, kwargs, env, timeout_s, children, server, True)
                       for fn, args, kwargs in jobs]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:
                if f in done and f.exception() is not None:
                    raise f.exception()
            return [f.result()[0] for f in futures]
        finally:
            children.stop()


class _Children:
    """The processes of one call, and the process groups of its jobs forked side by side by a server; `stop` kills
    those running and refuses new ones."""

    def __init__(self):
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self._groups: set[int] = set()
        self._stopped = False

    def adopt(self, group: int) -> None:
        """A job's process group, forked by a server (not this process's child): killed by `stop`."""
        with self._lock:
            if self._stopped:
                _kill_group_id(group)
                raise RuntimeError(say("stopped before it started: another job failed or the run was interrupted"))
            self._groups.add(group)

    def release(self, group: int) -> None:
        with self._lock:
            self._groups.discard(group)

    def start(self, cmd, env, stderr) -> subprocess.Popen:
        with self._lock:
            if self._stopped:
                raise RuntimeError(say("stopped before it started: another job failed or the run was interrupted"))
            # a session of its own: its group holds the job and every worker it starts, and nothing else
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                    start_new_session=True)
            self._procs.add(proc)
            return proc

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                if proc.returncode is None:  # not yet waited for: its pid, and so its group's id, is still its own
                    _kill_group(proc)
            for group in self._groups:  # not yet released: its leader has not reported the job's end
                _kill_group_id(group)


def _run(fn, args, kwargs, env, timeout_s: float, children: _Children, server: ForkServer | None = None,
         apart: bool = False):
    __tracebackhide__ = True
    function("fn", fn)
    positive_number("timeout_s", timeout_s)
    env = str_dict("env", env)
    with tempfile.TemporaryDirectory() as folder:
        job, result = os.path.join(folder, "job.pkl"), os.path.join(folder, "result.pkl")
        with open(job, "wb") as f:
            cloudpickle.dump((refusal.carried(fn), args, kwargs), f)  # a hidden test's refusals go with it
        if server is None:
            code, stderr = _start_fresh(job, result, env, timeout_s, children)
        elif apart:
            code, stderr = server.run_apart(job, result, env, timeout_s, children)
        else:
            code, stderr = server.run(job, result, env, timeout_s)
        if not os.path.exists(result):
            raise RuntimeError(say("the process exited with code {code}:", code=code) + f"\n{stderr[-3000:]}")
        with open(result, "rb") as f:
            ok, value = cloudpickle.load(f)
    if not ok:
        text, where, exception = value
        if where:
            raise_at(RuntimeError(say("in the fresh process:") + f" {exception.strip()}"), where)
        raise RuntimeError(say("in the fresh process:") + f"\n{text}")
    return value, stderr


def _start_fresh(job: str, result: str, env: dict, timeout_s: float, children: _Children) -> tuple[int, str]:
    """Run the job in a new Python process: (its exit code, what it and its workers wrote on stderr).

    Its stderr goes to a file, not a pipe: the workers it started would hold a pipe open after it ended, and
    reading to the end would wait for them."""
    cmd = [sys.executable, "-m", "helpers.fresh", job, result, str(os.getpid())]
    with tempfile.TemporaryFile("w+", errors="replace") as log:
        proc = children.start(cmd, {**os.environ, **env}, log)
        if not _within(lambda wait_s: _ended(proc, wait_s), proc.pid, timeout_s):  # its session: proc.pid
            _kill_group(proc)
            proc.wait()
            raise _timeout(timeout_s)
        _kill_group(proc)  # the workers it left behind (the group outlives its leader while they run)
        log.seek(0)
        return proc.returncode, log.read()


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the process group `proc` leads: the job and every worker it started."""
    if not hasattr(os, "killpg"):  # Windows: no process groups to kill; the job alone
        proc.kill()
        return
    _kill_group_id(proc.pid)


def _kill_group_id(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # nobody left in it
        pass


def _timeout(timeout_s: float) -> TimeoutError:
    return TimeoutError(say("the process used more than timeout_s={timeout_s} CPU-seconds and was stopped",
                            timeout_s=timeout_s))


def _ended(proc: subprocess.Popen, wait_s: float) -> bool:
    try:
        proc.wait(timeout=wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def _within(done, session: int, cpu_s: float) -> bool:
    """Wait until `done(POLL_S)` says so (True), or until the processes of `session` have used `cpu_s` CPU-seconds
    more than when the wait began (False): the clock of a busy machine decides nothing. Where /proc cannot tell, the
    seconds of the clock count instead."""
    start, cpu_at_start = time.monotonic(), session_cpu_seconds(session)
    while not done(POLL_S):
        cpu = session_cpu_seconds(session)
        used = time.monotonic() - start if cpu is None or cpu_at_start is None else cpu - cpu_at_start
        if used > cpu_s:
            return False
    return True


def session_cpu_seconds(session: int) -> float | None:
    """The CPU time (user and system) of the processes of `session`, with what they waited for of their children's,
    in seconds; None where /proc cannot tell (not Linux)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    ticks = 0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # after the command's name: state is field 3
            if int(fields[3]) == session:  # field 6; utime, stime, cutime, cstime are fields 14 to 17
                ticks += sum(int(v) for v in fields[11:15])
        except (OSError, ValueError, IndexError):  # it ended meanwhile
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


class ForkServer:
    """A process that imported `modules` once (with `env` added to this one's environment) and forks a
    child per job, one job at a time: a job then starts in a fraction of a second, not in the seconds
    those imports take. A child's environment is the server's (this one's when the server started, with
    what the imports set) plus the job's `env`. The server starts at the first job. A timeout or an
    interrupt kills it with its child (it runs in a session of its own); the next job starts a new one.
    `run_apart` runs jobs side by side (`run_many`), each in a session of its own that its end, its timeout or
    an interrupt kills, leaving the server and the other jobs alone."""

    def __init__(self, modules, env: dict | None = None):
        self.modules = _module_names(modules)
        self.env = str_dict("env", env)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None

    def run(self, job: str, result: str, env: dict, timeout_s: float) -> tuple[int, str]:
        """Fork a child that runs the job with `env` added: (its exit code, what it wrote on stderr)."""
        __tracebackhide__ = True
        with self._lock, tempfile.NamedTemporaryFile("r", suffix=".log", errors="replace") as log:
            try:
                conn = self._connection()
                conn.send((job, result, log.name, env))
                if not _within(conn.poll, self._proc.pid, timeout_s):  # the job runs in the server's session
                    raise _timeout(timeout_s)
                return _receive(conn, self._proc), log.read()
            except BaseException:
                self.stop()
                raise

    def run_apart(self, job: str, result: str, env: dict, timeout_s: float, children: _Children) -> tuple[int, str]:
        """Like `run`, alongside other jobs: the server forks a leader for the job, in a session of its own (in
        `children`, which `stop` kills), that talks to this call on a connection of its own and forks the job's
        child. A timeout or a failure kills that session only: the server serves on."""
        __tracebackhide__ = True
        from multiprocessing import reduction

        ours, theirs = socket.socketpair()
        try:
            with self._lock:
                try:
                    conn = self._connection()
                    conn.send("apart")
                    reduction.send_handle(conn, theirs.fileno(), self._proc.pid)
                except BaseException:
                    self.stop()
                    raise
        finally:
            theirs.close()
        group = None
        with Connection(ours.detach()) as own, tempfile.NamedTemporaryFile("r", suffix=".log", errors="replace") as log:
            try:
                group = _receive_apart(own)
                children.adopt(group)
                own.send((job, result, log.name, env))
                if not _within(own.poll, group, timeout_s):  # the leader's session: the job and its workers
                    raise _timeout(timeout_s)
                code = _receive_apart(own)
                children.release(group)  # its leader killed the job's group once the job had ended
                return code, log.read()
            except BaseException:
                if group is not None:
                    children.release(group)
                    _kill_group_id(group)
                raise

    def start_in_background(self) -> None:
        """Start the server now, in a thread of this process, so that its imports overlap with what the caller does
        meanwhile: the first job then starts at once (a job that comes first waits for it). Only in a notebook's
        kernel (`in_kernel`): elsewhere the first job starts it. A server that cannot start is left to that job to
        report."""

        def start():
            with self._lock:
                try:
                    self._connection()
                except Exception:
                    self.stop()
                    raise

        start_in_background(start)

    def stop(self) -> None:
        """Kill the server and the child it runs (nothing when it is not running)."""
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._proc.wait()
        self._conn.close()
        self._proc = self._conn = None

    def _connection(self) -> Connection:
        if self._proc is not None and self._proc.poll() is None:
            return self._conn
        self.stop()
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "helpers.fresh", "--serve", str(theirs.fileno()), *self.modules],
                pass_fds=[theirs.fileno()], env={**_without_refusal(os.environ), **self.env}, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._conn = Connection(ours.detach())
        if not _within(self._conn.poll, self._proc.pid, SERVER_START_CPU_S):  # (a server that died: EOF, readable)
            raise RuntimeError(say("the fork server did not import {modules} within {seconds} CPU-seconds",
                                   modules=self.modules, seconds=SERVER_START_CPU_S))
        problem = _receive(self._conn, self._proc)
        if problem is not None:
            raise RuntimeError(say("the fork server could not start:") + f"\n{problem}")
        return self._conn


def _without_refusal(environment) -> dict:
    """A fork server's environment: its jobs refuse as the process that asks for each does (refusal.carried)."""
    from .refusal import ENV

    return {k: v for k, v in environment.items() if k != ENV}


def start_in_background(start) -> None:
    """`start()` (a server's start-up) in a thread of this process, only in a notebook's kernel (`in_kernel`). A
    server that cannot start is left to its first job, which starts it again and says why it cannot."""
    if not in_kernel():
        return

    def quietly():
        try:
            start()
        except Exception:  # noqa: BLE001 - reported by the first job (above)
            pass

    threading.Thread(target=quietly, name="server-start", daemon=True).start()


def in_kernel() -> bool:
    """Whether this process is a notebook's kernel (IPython's shell runs it). Servers are started ahead of their
    first job only there: a script, a test or the grader's judge (which runs a lesson's import cell too) would
    start processes that it may never use."""
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None


def _receive(conn: Connection, server: subprocess.Popen):
    try:
        return conn.recv()
    except EOFError:
        raise RuntimeError(say("the fork server exited with code {code}", code=server.wait())) from None


def _receive_apart(own: Connection):
    try:
        return own.recv()
    except EOFError:  # its leader was killed (a timeout or a failure elsewhere), or the server before it forked one
        raise RuntimeError(say("the job's process ended before it reported the job's end")) from None


def _child(job: str, result: str) -> None:
    __tracebackhide__ = True
    try:
        with open(job, "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
        outcome = (True, fn(*args, **kwargs))
    except BaseException as error:
        outcome = (False, child_error(error))
    with open(result, "wb") as f:
        cloudpickle.dump(outcome, f)


def import_for_forks(modules) -> None:
    """A fork server's imports: with the cyclic garbage collector off (torch with torch._dynamo makes about 250,000
    objects that live as long as the process: collecting while they are made took about a quarter of the imports'
    CPU time), then frozen (gc.freeze): its forks' collections never walk them, nor write to them (copying their
    pages on write)."""
    modules = _module_names(modules)
    gc.disable()
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        gc.enable()
        gc.freeze()


def _module_names(modules) -> list[str]:
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) and m for m in modules):
        raise ValueError(say("modules must be a list of module names, got {modules!r}", modules=modules))
    return list(modules)


def _serve(fd: int, modules: list[str]) -> None:
    """The fork server: import `modules`, then for each job received fork a child and answer its exit code."""
    conn = Connection(fd)
    try:
        import_for_forks(modules)
    except BaseException:
        conn.send(traceback.format_exc())
        return
    conn.send(None)
    while True:
        _reap_leaders()
        try:
            message = conn.recv()
        except EOFError:  # the caller has gone
            return
        if message == "apart":
            _fork_leader(conn)
            continue
        job, result, log, env = message
        pid = os.fork()
        if pid == 0:
            conn.close()
            _forked_child(job, result, log, env)
        code = _wait(pid, conn)
        if code is None:  # the caller has gone (killed, say), and the child with it
            return
        conn.send(code)


def _fork_leader(conn: Connection) -> None:
    """A job side by side with others (`ForkServer.run_apart`): a child of the server leads a session of its own
    (the job, the workers it starts) and serves that one job on the connection the caller sent, then kills its
    session (what the job left behind, and itself)."""
    from multiprocessing import reduction

    fd = reduction.recv_handle(conn)
    if os.fork() != 0:
        os.close(fd)
        return
    code = 1
    try:
        conn.close()
        os.setsid()
        own = Connection(fd)
        own.send(os.getpid())  # the session's (and its group's) id
        job, result, log, env = own.recv()
        pid = os.fork()
        if pid == 0:
            own.close()
            _forked_child(job, result, log, env)
        code = _wait(pid, own)
        if code is not None:
            own.send(code)
        code = 0
    except BaseException:  # noqa: BLE001 - the caller has gone: nothing to report to
        pass
    finally:
        os.killpg(0, signal.SIGKILL)
        os._exit(code)


def _reap_leaders() -> None:
    """The server collects its ended leaders (between its own jobs, whose child it waits for by pid)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _wait(pid: int, conn: Connection) -> int | None:
    """The exit code of child `pid`, or None when the caller hangs up first: the child is then killed."""
    if hasattr(os, "pidfd_open"):  # Linux: a descriptor that turns readable when the child exits
        exited = os.pidfd_open(pid)
        try:
            if conn in wait([conn, exited]):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None
        finally:
            os.close(exited)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _forked_child(job: str, result: str, log: str, env: dict) -> None:
    code = 1
    try:
        os.environ.update(env)
        with open(log, "w") as f:
            os.dup2(f.fileno(), 2)  # stderr, Python's and XLA's, goes to the caller's log
        _child(job, result)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def _die_with(caller: int) -> None:
    """Kill this process's group (the job and its workers) when `caller` dies: the job runs in a session of its
    own, where a kernel's restart (which kills the kernel's process group) does not reach it."""

    def watch():
        while os.getppid() == caller:  # once the caller has died, the job belongs to another parent
            time.sleep(CALLER_POLL_S)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


CALLER_POLL_S = 0.5


# ---- a child's error, shown in the caller as if it had happened there ----------------------------------------------

LIBRARY_DIRS = tuple({os.path.realpath(path) + os.sep for path in (
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
    os.path.dirname(__file__))})  # the standard library, installed packages and the course's helpers


def child_error(error: BaseException) -> tuple[str, list, str]:
    """What a child reports of `error`: (its traceback as text, without the frames that ran the job (those that set
    __tracebackhide__, as IPython hides them); the frames of the job's own code, outside any library (a notebook
    cell's, a test's), as (file, line, function, the function's first line), outermost first; the exception's own
    lines)."""
    shown = traceback.TracebackException.from_exception(error)
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    kept = [(entry, frame) for entry, frame in zip(shown.stack, frames) if not frame.f_locals.get("__tracebackhide__")]
    shown.stack = traceback.StackSummary.from_list([entry for entry, _ in kept])
    where = [(entry.filename, entry.lineno, entry.name, frame.f_code.co_firstlineno) for entry, frame in kept
             if entry.lineno and not _in_library(entry.filename)]
    return "".join(shown.format()), where, "".join(shown.format_exception_only())


def _in_library(filename: str) -> bool:
    return filename.startswith("<frozen ") or os.path.realpath(filename).startswith(LIBRARY_DIRS)


def raise_at(error: BaseException, where) -> NoReturn:
    """Raise `error` with a child's frames `where` (child_error's) as its traceback's end, as though they had run
    here. IPython always shows a traceback's last frame, even a hidden one: this way that is the line of the
    student's code that failed (with its source: a cell's is in this kernel's cache), not a helper's; the helpers'
    frames between the cell and it are hidden."""
    __tracebackhide__ = True
    tb = None
    try:
        for filename, lineno, name, first in reversed(where):
            tb = _entry(filename, lineno, name, first, tb)
    except Exception:  # noqa: BLE001 - never hide the child's error behind one of ours: raise it from here then
        tb = None
    raise error.with_traceback(tb)


class _Here(Exception):
    pass


def _entry(filename: str, lineno: int, name: str, first: int, tb_next) -> types.TracebackType:
    """A traceback entry at line `lineno` of `filename`, in function `name` that starts at line `first`: the frame of
    code compiled to raise there. That code is not the line's: its raise spans the whole line, so that no part of it
    is underlined; and it starts where the function does, where IPython looks for the function's source."""
    width = len(linecache.getline(filename, lineno).rstrip())
    source = "\n" * max(0, lineno - first) + "raise (_Here" + " " * (width - 13) + ")"
    code = compile(source, filename, "exec").replace(co_name=name, co_qualname=name, co_firstlineno=first)
    try:
        exec(code, {"_Here": _Here})
    except _Here as here:
        entry = here.__traceback__.tb_next
    return types.TracebackType(tb_next, entry.tb_frame, entry.tb_lasti, lineno)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        _serve(int(sys.argv[2]), sys.argv[3:])
        os._exit(0)  # at once: the modules' exit handlers have nothing to clean up in a server that ran nothing
    else:
        if hasattr(os, "killpg"):
            _die_with(int(sys.argv[3]))
        _child(sys.argv[1], sys.argv[2])
