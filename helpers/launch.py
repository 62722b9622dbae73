"""Run a worker function on N processes, one per device, and bring each rank's result back.

    results = launch(worker, n_procs=2, args=(...))   # worker(rank, world_size, *args)

* backend: nccl with one GPU per rank when there are at least `n_procs` GPUs, else gloo on the
  CPU with the cores split between the ranks;
* a free port for every launch (re-running a notebook cell just works), and a process-group
  timeout on every group, so a rank that misses a collective fails instead of hanging 30 minutes;
* when a rank fails, every rank is stopped within seconds and the launch raises `WorkerFailed`
  showing that rank's traceback and the end of what it wrote on stderr; a rank killed by a signal
  (nccl's watchdog aborts a rank whose collective timed out: SIGABRT, no Python traceback; a
  segfault; the OOM killer's SIGKILL) is reported with the signal's name and that stderr. The error,
  the launch's deadline's included, also carries the end of the stderr of every rank that had no
  result yet;
* nccl's watchdog waits for a debugging dump before it aborts a rank (a minute by default since torch
  2.8): the ranks get a short wait (`nccl_watchdog.RANK_DEFAULTS`), and the launch's deadline, the
  group's timeout + 30 s, also covers whatever wait they have (`nccl_watchdog.dump_wait_s`);
* a worker may start processes, as under torchrun (a DataLoader's workers, a Pool); they stop with the launch,
  whether it returns, fails, times out or is interrupted, and when the launcher dies;
* the worker is shipped by value (cloudpickle), so it may live in a module *or* in the notebook.
  Plain `mp.spawn` can only start workers it can import by name (see lesson 2);
* a worker that counts its steps (`progress`) gets one progress bar in the notebook for all ranks.

With `init_process_group=False` the launcher only sets the environment that torchrun sets
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) and the worker calls
`dist.init_process_group` itself.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import cloudpickle
import torch
import torch.distributed as dist

from . import nccl_watchdog, refusal, windows
from ._validate import function, positive_int, positive_number, str_dict
from .fresh import child_error, raise_at, start_in_background
from .hardware import threads_per_rank
from .language import message, say

STOP_GRACE_S = 3.0
THIS_RANKS_STDERR = message("--- this rank's stderr ---")  # where a failure's stderr begins
# Imported once by the fork server, not by every rank of every launch. torch._dynamo (with sympy,
# triton, ...) is what DDP and Accelerate import when they first wrap a model: a second or more per rank.
FORKSERVER_PRELOAD = ["helpers.forkserver_heap", "torch", "torch.distributed", "torch._dynamo", "helpers.launch"]


class WorkerFailed(RuntimeError):
    """A rank raised or died; the message carries that rank's traceback (or how its process ended) and the end of
    what it wrote on stderr.

    `exitcode`: the rank's exit code when it ended without a result (negative: killed by that signal), else None;
    `signal`: then the signal's name ("SIGABRT", "SIGSEGV", "SIGKILL"), else None; `stderr`: the end of the rank's
    stderr, where a rank killed by a signal left its only words (nccl's watchdog: "Watchdog caught collective
    operation timeout ..."); `unfinished`: {rank: the end of its stderr} for every other rank that had no result
    yet (also in the message when not empty); `where`: the frames of the worker's own code (a notebook's, outside any library) as
    (file, line, function), outermost first. `launch` shows those as its traceback's last frames; the message then
    holds only the exception (`summary`), and `details` the rank's whole traceback, less the launcher's frames."""

    def __init__(self, rank: int, details: str, *, exitcode: int | None = None, stderr: str = "", where: tuple = (),
                 summary: str | None = None, unfinished: dict | None = None):
        self.rank = rank
        self.details = details
        self.exitcode = exitcode
        self.signal = signal_name(exitcode)
        self.stderr = stderr
        self.where = where
        self.unfinished = dict(unfinished or {})
        failed = say("rank {rank} failed:", rank=rank)
        super().__init__(f"{failed} {summary}" if summary else f"{failed}\n{details}")


def signal_name(exitcode: int | None) -> str | None:
    """The name of the signal that killed a process with this exit code (multiprocessing's: minus the signal's
    number), or None when no signal did."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


@dataclass(frozen=True)
class _Failure:
    """How a rank failed: its traceback, or how its process ended, and the end of its stderr."""

    what: str
    stderr: str = ""
    silent: bool = False  # it ended without a report: os._exit, or a signal
    exitcode: int | None = None
    where: tuple = ()  # the frames of the worker's own code (fresh.child_error)
    exception: str = ""  # the exception's own lines

    def error(self, rank: int, note: str = "", unfinished: dict | None = None) -> WorkerFailed:
        section = "\n" + say(THIS_RANKS_STDERR) + f"\n{self.stderr}" if self.stderr.strip() else ""
        section += _unfinished_sections(unfinished or {})
        summary = self.exception.strip() + note + section if self.where else None
        return WorkerFailed(rank, self.what + note + section, exitcode=self.exitcode, stderr=self.stderr,
                            where=self.where, summary=summary, unfinished=unfinished)


def _unfinished_sections(unfinished: dict) -> str:
    return "".join("\n" + say("--- rank {rank}'s stderr (no result yet) ---", rank=rank) + f"\n{tail}"
                   for rank, tail in sorted(unfinished.items()) if tail.strip())


@dataclass(frozen=True)
class Plan:
    n_procs: int
    backend: str
    threads_per_rank: int

    def device(self, rank: int) -> torch.device:
        return torch.device("cuda", rank) if self.backend == "nccl" else torch.device("cpu")


def plan(n_procs: int, backend: str | None = None) -> Plan:
    """nccl + one GPU per rank when there are enough GPUs, gloo + a share of the CPU cores otherwise."""
    positive_int("n_procs", n_procs)
    if backend is None:
        backend = "nccl" if torch.cuda.device_count() >= n_procs else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(say("backend must be 'gloo' or 'nccl', got {backend!r}", backend=backend))
    if backend == "nccl" and torch.cuda.device_count() < n_procs:
        raise ValueError(say("backend 'nccl' needs one GPU per rank: {n_procs} ranks, {gpus} GPUs", n_procs=n_procs,
                             gpus=torch.cuda.device_count()))
    return Plan(n_procs, backend, threads_per_rank(n_procs))


# Where free_port looks: below 29500 (torchrun's and Accelerate's default port) and below the system's ephemeral
# range (where a bind to port 0 and every outgoing connection take theirs: Jupyter kernels, Dask, Lightning). A port
# found free there can then be taken before rank 0 listens on it only by another launch doing the same, which the
# launch survives (RENDEZVOUS_ATTEMPTS), never by a kernel starting next to it, which would die.
PORTS = (20000, 29500)
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def free_port() -> int:
    """A port that nothing listens on now, for a launch's rank 0 (MASTER_PORT): a random one from PORTS, below the
    ephemeral range; where that range starts lower (a tuned machine), whatever port the system hands out."""
    low, high = PORTS[0], min(PORTS[1], _ephemeral_start())
    if high - low >= 1000:
        pick = random.SystemRandom()  # not the random module's generator: a notebook may seed that one
        for _ in range(100):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", pick.randrange(low, high)))
                except OSError:  # taken
                    continue
                return s.getsockname()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_start() -> int:
    try:
        with open(EPHEMERAL_RANGE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152  # macOS's and Windows' (IANA's)


def device() -> torch.device:
    """This rank's device, inside a worker started by `launch` or torchrun."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return torch.device("cpu")


def launch(worker, n_procs: int = 2, args: tuple = (), *, backend: str | None = None, timeout_s: float = 60.0,
           init_process_group: bool = True, env: dict | None = None) -> list:
    """Run `worker(rank, world_size, *args)` on `n_procs` processes; return the ranks' results in rank order.

    `env`: extra environment variables, set in every rank before the worker is unpickled (so they
    are in place before the worker's modules are imported)."""
    __tracebackhide__ = True  # a notebook shows a failed rank's traceback from the cell straight to the worker's code
    function("worker", worker)
    if not isinstance(args, tuple):
        raise ValueError(say("args must be a tuple, got {kind}", kind=type(args).__name__))
    env = nccl_watchdog.rank_environment(str_dict("env", env))
    positive_number("timeout_s", timeout_s)
    waits_s = timeout_s + nccl_watchdog.dump_wait_s({**os.environ, **env}) + DEADLINE_MARGIN_S
    windows.refuse_native("helpers.launch")  # its ranks' pipes need file descriptors: Win32 handles would fail later
    p = plan(n_procs, backend)
    payload = cloudpickle.dumps((refusal.carried(worker), args))  # a hidden test's refusals go with it
    ctx = _context()
    for attempt in range(RENDEZVOUS_ATTEMPTS):
        logs = tempfile.mkdtemp(prefix="launch-")  # the ranks' stderr; removed even when a rank is killed
        port = free_port()
        pipes = [ctx.Pipe(duplex=False) for _ in range(n_procs)]
        stdouts = [ctx.Pipe(duplex=False) for _ in range(n_procs)]
        lifelines = [ctx.Pipe(duplex=False) for _ in range(n_procs)]  # a rank reads end of file once the launch is over
        counts = ctx.RawArray("q", 2 * n_procs)  # each rank's steps, to take and taken: what the progress bar shows
        procs = [
            ctx.Process(target=_run_rank, args=(payload, rank, p, port, timeout_s, init_process_group, env, sender,
                                                stdouts[rank][1], logs, counts, lifelines[rank][0]), daemon=True)
            for rank, (_, sender) in enumerate(pipes)
        ]
        output = RankOutput([reader for reader, _ in stdouts])
        bar = ProgressBar(counts)
        try:
            for proc in procs:
                proc.start()
            for _, sender in pipes + stdouts:
                sender.close()  # the rank holds the only writing end: its death reads as end of file
            for lifeline, _ in lifelines:
                lifeline.close()
            return _collect(procs, [reader for reader, _ in pipes], output, bar, logs,
                            deadline=time.monotonic() + waits_s)
        except WorkerFailed as failure:
            if attempt + 1 == RENDEZVOUS_ATTEMPTS or not _rendezvous_failed(failure):
                if failure.where:
                    raise_at(failure, failure.where)
                raise
        finally:
            _stop(procs)
            output.drain()
            bar.close()
            for ends in pipes + stdouts + lifelines:
                for end in ends:
                    end.close()
            shutil.rmtree(logs, ignore_errors=True)


# After the group's timeout and nccl's dump wait: the ranks' start, a rank's report, a slow machine's seconds.
DEADLINE_MARGIN_S = 30

# The port free_port() found can be taken by another program before rank 0 listens on it (a busy machine, tests
# in parallel), and on a loaded machine rank 0's store has been seen to reset a peer's connection while the
# group formed (gloo's connectFullMesh, TCPStore::get): the process group then cannot form. Before any worker
# code ran, that is worth another try; two more, as both have happened in one launch (a taken port, then a reset
# while another test's XLA devices kept the machine busy, make test 2026-12-02).
RENDEZVOUS_ATTEMPTS = 3
RENDEZVOUS_ERRORS = ("address already in use", "connectfullmesh failed", "connection reset by peer")


def warm_up() -> None:
    """Start the server the ranks fork from now, in the background (it imports torch: seconds), so that the first
    launch starts at once instead of waiting for it. Only in a notebook's kernel (`fresh.in_kernel`)."""
    if sys.platform.startswith("linux"):
        from multiprocessing import forkserver

        _context()  # the preload the ranks' server imports
        start_in_background(forkserver.ensure_running)


def _rendezvous_failed(failure: "WorkerFailed") -> bool:
    text = failure.details.lower()
    # the frame's header, not its source line (which a traceback shows only when the file is readable and unchanged)
    return ", in init_process_group\n" in text and any(error in text for error in RENDEZVOUS_ERRORS)


def _context():
    # forkserver: each rank forks from a server that already imported torch, but never ran a
    # kernel. Forking the notebook itself is unsafe: once it has run a multi-threaded op, GNU
    # OpenMP's thread pool does not survive a fork and the child can hang in its first matmul;
    # CUDA, once initialised, does not survive one either. Elsewhere (macOS, Windows), spawn.
    if sys.platform.startswith("linux"):
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
        return ctx
    return mp.get_context("spawn")


def _collect(procs, readers, output: "RankOutput", bar: "ProgressBar", logs: str, deadline):
    """Each rank sends one report on its own pipe, before it tears its process group down: a rank that then hangs
    on its way out (destroy_process_group, a thread) has already delivered its result. Meanwhile what the ranks
    print is shown as it comes, and the progress bar follows their steps."""
    __tracebackhide__ = True
    values: dict[int, object] = {}
    while len(values) < len(procs):
        pending = [rank for rank in range(len(procs)) if rank not in values]
        waiting = [readers[rank] for rank in pending] + [procs[rank].sentinel for rank in pending] + output.open()
        left = deadline - time.monotonic()
        if left <= 0:
            raise _past_deadline(pending, logs)
        ready = mp_connection.wait(waiting, timeout=min(left, BAR_EVERY_S))
        bar.show()
        output.pump(ready)
        for rank in pending:
            report = _report(procs[rank], readers[rank], _log(logs, rank))
            if report is None:
                continue
            ok, value = report
            if not ok:
                raise _root_cause(procs, readers, logs, values, rank, value)
            values[rank] = cloudpickle.loads(value)
    end = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        proc.join(timeout=max(0.0, end - time.monotonic()))
    return [values[rank] for rank in range(len(procs))]


def _past_deadline(pending: list, logs: str) -> WorkerFailed:
    """The ranks without a result at the launch's deadline, each with the end of its stderr: a rank stuck after its
    collective timed out (nccl's watchdog with TORCH_NCCL_ASYNC_ERROR_HANDLING=0, or still in its dump wait) said so
    there."""
    tails = {rank: _tail(_log(logs, rank)) for rank in pending}
    ranks = ", ".join(map(str, pending))
    what = (say("no result from ranks {ranks} before the launch's deadline (a rank may be stuck)", ranks=ranks)
            if len(pending) > 1 else
            say("no result from rank {ranks} before the launch's deadline (a rank may be stuck)", ranks=ranks))
    return WorkerFailed(pending[0], what + _unfinished_sections(tails), stderr=tails[pending[0]],
                        unfinished={rank: tail for rank, tail in tails.items() if rank != pending[0]})


def _report(proc, reader, log: str):
    """(True, the pickled result) or (False, a _Failure) once the rank has reported or died, None while it runs."""
    if reader.poll():
        try:
            ok, value = pickle.loads(reader.recv_bytes())
        except EOFError:
            proc.join(timeout=5)
            return False, _death(proc.exitcode, log)
        if ok:
            return True, value
        what, where, exception, stderr = value
        return False, _Failure(what, stderr, where=tuple(where), exception=exception)
    if proc.exitcode is not None:  # everything it wrote is in the pipe, so it wrote nothing
        return False, _death(proc.exitcode, log)
    return None


def _death(exitcode: int | None, log: str) -> _Failure:
    """A rank that ended without a report. Killed by a signal, it left no traceback: only what it wrote on stderr
    before (nccl's watchdog explains its SIGABRT there)."""
    name = signal_name(exitcode)
    what = (say("the process was killed by {name} (exit code {exitcode}) without a result", name=name,
                exitcode=exitcode) if name else
            say("the process exited with code {exitcode} without a result", exitcode=exitcode))
    return _Failure(what, _tail(log), silent=True, exitcode=exitcode)


def _log(logs: str, rank: int) -> str:
    return os.path.join(logs, f"rank{rank}.log")


class RankOutput:
    """What each rank prints, shown in the caller's output (the notebook) line by line as "[rank1]: ...", the way
    torchrun's --tee shows it. (A rank's stderr goes to a file: its tail comes with the rank's error.)"""

    NOISE = ("[Gloo] Rank ",)  # gloo's "[Gloo] Rank r is connected to ..." for every rank of every group

    def __init__(self, readers):
        self.readers = dict(enumerate(readers))
        self.partial = {rank: b"" for rank in self.readers}

    def open(self) -> list:
        return list(self.readers.values())

    def pump(self, ready) -> None:
        for rank, reader in list(self.readers.items()):
            if reader in ready:
                self._read(rank, reader)

    def drain(self) -> None:
        """Everything still in the pipes (call once the ranks have exited or been stopped)."""
        for rank, reader in list(self.readers.items()):
            while rank in self.readers and reader.poll(0):
                self._read(rank, reader)
            self._show(rank, self.partial[rank], final=True)

    def _read(self, rank: int, reader) -> None:
        try:
            data = os.read(reader.fileno(), 65536)
        except OSError:
            data = b""
        if not data:  # end of file: the rank has exited
            del self.readers[rank]
            self._show(rank, self.partial[rank], final=True)
            return
        self._show(rank, self.partial[rank] + data)

    def _show(self, rank: int, data: bytes, final: bool = False) -> None:
        *lines, rest = data.split(b"\n")
        if final and rest:
            lines, rest = lines + [rest], b""
        self.partial[rank] = rest
        for line in lines:
            text = line.decode("utf-8", errors="replace").rstrip("\r")
            if not text.startswith(self.NOISE):
                print(f"[rank{rank}]: {text}", flush=True)


BAR_EVERY_S = 0.1  # how often the progress bar follows the ranks


def progress(total: int) -> "Progress":
    """In a worker started by `launch`: this rank's share of the launch's progress bar, `total` steps long; call
    `.update()` after each step (a write to memory the launch shares with the rank: nothing waits for the notebook).
    The launch shows one bar for all ranks: their steps added up, out of their totals added up (steps x world size
    when every rank takes as many). Outside a launch (torchrun, one process) it counts nothing."""
    positive_int("total", total, minimum=0)
    return Progress(total)


class Progress:
    """A rank's step counter for the launch's progress bar (`progress`)."""

    def __init__(self, total: int):
        self.shared = _SHARED
        if self.shared is not None:
            counts, slot = self.shared
            counts[slot] += total

    def update(self, n: int = 1) -> None:
        if self.shared is not None:
            counts, slot = self.shared
            counts[slot + 1] += n


_SHARED = None  # in a rank: (the launch's counts, which ProgressBar reads; this rank's first slot there)


class ProgressBar:
    """The launch's one progress bar (tqdm.auto: a widget in a notebook, text elsewhere), read from `counts`, where
    rank r keeps its steps to take at 2r and its steps taken at 2r+1. It appears once a rank has counted steps, and
    only reads: a rank that dies, or stops counting, leaves it where it was."""

    def __init__(self, counts):
        self.counts = counts
        self.bar = None

    def show(self) -> None:
        total, done = sum(self.counts[0::2]), sum(self.counts[1::2])
        if not total:
            return
        if self.bar is None:
            self.bar = _new_bar(total, say("{n} ranks", n=len(self.counts) // 2))
        elif total != self.bar.total:  # a rank counted its steps after the bar appeared
            self.bar.reset(total)
        if done != self.bar.n:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.show()
        if self.bar is not None:
            self.bar.close()


def _new_bar(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=say("step"))


# What a rank sees when a peer's process has gone: an echo of that peer's own failure.
ECHOES = ("connection closed by peer", "connection reset by peer")
SILENT_EXIT = "without a result"


def _root_cause(procs, readers, logs, values, rank, failure: _Failure) -> WorkerFailed:
    """A peer's error is often the echo of a rank that died silently first (os._exit, a signal), or that failed
    and left (a collective's timeout, whose rank exits and closes its connections): report that rank."""
    def unfinished(reported: int) -> dict:
        return {r: _tail(_log(logs, r)) for r in range(len(procs)) if r != reported and r not in values}

    if failure.silent:
        return failure.error(rank, unfinished=unfinished(rank))
    is_echo = _is_echo(failure)
    others = [other for other in range(len(procs)) if other != rank and other not in values]
    if is_echo:  # the failure it echoes is on its way
        mp_connection.wait([readers[other] for other in others], timeout=ROOT_CAUSE_WAIT_S)
    last_line = failure.what.strip().splitlines()[-1]
    for other in others:
        report = _report(procs[other], readers[other], _log(logs, other))
        if report is None or report[0]:
            continue
        theirs = report[1]
        if theirs.silent:
            return theirs.error(other, " " + say("(then rank {rank} failed: {line})", rank=rank, line=last_line),
                                unfinished(other))
        if is_echo and not _is_echo(theirs):
            return theirs.error(other, "\n" + say("(then rank {rank} lost its connection to rank {other})", rank=rank,
                                                   other=other), unfinished(other))
    return failure.error(rank, unfinished=unfinished(rank))


def _is_echo(failure: _Failure) -> bool:
    return any(echo in failure.what.lower() for echo in ECHOES)


ROOT_CAUSE_WAIT_S = 2.0  # only spent when no other rank has failed


def _stop(procs) -> None:
    """Stop the ranks and every process they started: a rank leads a process group (`_lead_own_group`), signalled
    whole, also once the rank has ended (what a rank killed by a signal started outlives it)."""
    started = [proc for proc in procs if proc.pid is not None]  # an interrupt can come between two starts
    for proc in started:
        if proc.is_alive():
            proc.terminate()  # also a rank that has not made its group yet
    _signal_groups(started, "SIGTERM")
    end = time.monotonic() + STOP_GRACE_S
    for proc in started:
        proc.join(timeout=max(0.0, end - time.monotonic()))
    for proc in started:
        if proc.is_alive():
            proc.kill()
    _signal_groups(started, "SIGKILL")
    for proc in started:
        proc.join(timeout=5)


def _signal_groups(procs, name: str) -> None:
    """Signal `name` to the process group of each rank: what it started. The group's id is the rank's pid, which no
    other process can take while anyone is left in the group, and the rank's watcher (WATCHER) stays in it until the
    launch is over."""
    if not hasattr(os, "killpg"):  # Windows: no process groups
        return
    for proc in procs:
        try:
            os.killpg(proc.pid, getattr(signal, name))
        except (ProcessLookupError, PermissionError):  # nobody left in it
            pass


def _run_rank(payload, rank, p: Plan, port, timeout_s, init_process_group, env, sender, stdout, logs, counts,
              lifeline):
    __tracebackhide__ = True  # left out of the traceback a failing rank reports
    # A worker may start processes, as under torchrun (a DataLoader's workers, a Pool). The rank is daemonic to the
    # launcher, whose exit then ends a rank left running, but not to multiprocessing, which refuses children to a
    # daemonic process. It starts them as a fresh process does (fork on Linux), not from a fork server of its own
    # (multiprocessing's default for a forkserver's child), to which a DataLoader would pickle its dataset: one the
    # worker defines (a notebook's, come by value) cannot be, and each worker would import torch again (seconds).
    mp.current_process().daemon = False
    mp.set_start_method(None, force=True)
    global _SHARED
    _SHARED = (counts, 2 * rank)
    _stderr_to_file(os.path.join(logs, f"rank{rank}.log"))
    _lead_own_group(lifeline)
    os.dup2(stdout.fileno(), 1)  # the launcher shows it, line by line
    stdout.close()
    sys.stdout = open(1, "w", closefd=False, buffering=1, encoding="utf-8", errors="replace")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(p.n_procs), LOCAL_WORLD_SIZE=str(p.n_procs),
                      OMP_NUM_THREADS=str(p.threads_per_rank), **env)
    torch.set_num_threads(p.threads_per_rank)
    _keep_process_groups_alive()
    try:
        worker, args = cloudpickle.loads(payload)
        if p.backend == "nccl":
            torch.cuda.set_device(rank)
        if init_process_group:
            with _quiet_stdout():  # gloo prints "[Gloo] Rank r is connected to ..." for every rank
                dist.init_process_group(p.backend, rank=rank, world_size=p.n_procs, timeout=timedelta(seconds=timeout_s))
        value = _to_cpu(worker(rank, p.n_procs, *args))
        # plain pickle bytes: torch's pickling would share memory with a process about to exit
        report = (True, cloudpickle.dumps(value))
    except BaseException as error:
        sys.stderr.flush()
        report = (False, (*child_error(error), _tail(os.environ["HELPERS_RANK_LOG"])))
    try:
        sender.send_bytes(pickle.dumps(report))  # in this thread, now: nothing later can hold it back
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# A rank's watcher (`_lead_own_group`): it reads its stdin, the rank's lifeline, to end of file (the launcher never
# writes on it: it has closed it or died), then kills its process group, the rank's.
WATCHER = ["/bin/sh", "-c", "cat >/dev/null; kill -s KILL 0"]
_WATCHER = None  # in a rank: its watcher (subprocess.Popen), running until the launch is over


def _lead_own_group(lifeline) -> None:
    """Make this rank the leader of a process group of its own, where the processes it starts stay: `_stop` signals
    the group whole. Out of the launcher's group, the rank would outlive a kernel restart (which kills the kernel's
    group): a watcher kills the group once the launcher has gone. A process, not a thread: a rank that hangs holding
    the GIL (see _keep_process_groups_alive) cannot hold it back; a small one, not a fork of the rank (tenths of a
    second of a launch)."""
    global _WATCHER
    if not hasattr(os, "setpgid"):  # Windows: no process groups
        return
    os.setpgid(0, 0)
    with lifeline:
        _WATCHER = subprocess.Popen(WATCHER, stdin=lifeline.fileno(), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)


_DESTROYED_GROUPS: list = []


def _keep_process_groups_alive() -> None:
    """A rank that calls destroy_process_group() while its DDP model is alive (the usual end of a worker) frees the
    gloo process group later, with the model: its destructor then joins gloo's threads while holding the GIL, and
    a gloo thread releasing a tensor waits for the GIL: the rank hangs for good (seen in CI and here, one run in
    a few hundred). Destroyed groups are kept referenced, so no process group is freed before the rank exits."""
    from torch.distributed import distributed_c10d as c10d

    destroy = c10d.destroy_process_group

    def destroy_process_group(group=None):
        _DESTROYED_GROUPS.extend(list(c10d._world.pg_map) if group is None else [group])
        return destroy(group)

    destroy_process_group.__doc__ = destroy.__doc__
    c10d.destroy_process_group = dist.destroy_process_group = destroy_process_group


def _stderr_to_file(path: str) -> None:
    """A rank's C++ and Python warnings go to a file, not into the notebook: in a graded cell,
    anything on stderr counts as a failed test (nbgrader). A failing rank's report carries the tail."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    # a plain stream on fd 2: a process forked from a Jupyter kernel inherits the kernel's stderr
    # object, whose flush waits for an I/O thread the child does not have
    sys.stderr = open(2, "w", closefd=False, buffering=1)
    os.environ["HELPERS_RANK_LOG"] = path


STDERR_TAIL_BYTES = 4000  # room for a C++ error with its stack frames (nccl's watchdog writes one)


def _tail(path: str) -> str:
    """The end of a rank's stderr file ("" when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - STDERR_TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


@contextmanager
def _quiet_stdout():
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value
