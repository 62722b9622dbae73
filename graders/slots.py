"""A grading process's slots: one per submission graded at the same time, each with its own sandbox uid (from a
block no other grading run on this machine holds), its cgroups, and its servers for nbgrader and the judge; and the
process's warm kernel server, which all its slots share.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

from graders import forkserver, limits, runs, sandbox, warm_kernel
from graders.course import REPO

SANDBOX_UID_BASE = 61000  # unprivileged uids with no account: one per parallel grading job


UID_BLOCK = 64  # uids of one grading run: concurrent runs (two `make grade`s) take different blocks


UID_BLOCKS = 64

# Submissions are graded side by side on one machine (JOBS, Dask workers): GNU OpenMP's idle threads, which spin
# by default, would burn the CPU the other kernels need (10-17% of it with three lessons on two cores, measured).
# Passive waiting changes no result; an instructor's own OMP_WAIT_POLICY wins.
SHARED_MACHINE_OMP = "PASSIVE"
GRADED_KERNEL = "COURSE_GRADED_KERNEL"  # helpers/refusal.py GRADED (the grader imports no helpers here)


def shared_machine_environ() -> dict[str, str]:
    """What a grading job adds to this process's environment whatever it grades (its kernel reads it): OpenMP's
    passive waiting, and that the kernel is the grader's (helpers/refusal.py GRADED: no notice to a student there)."""
    return {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", SHARED_MACHINE_OMP), GRADED_KERNEL: "1"}


class Slots:
    """The sandbox uids (a block no other grading process on this machine holds) and their cgroups, and the
    scratch space of one grading process: one slot per submission graded at the same time."""

    def __init__(self, jobs: int, sandboxed: bool, memo: str | None = None):
        """`memo`: a folder of the judge's references that other grading processes share (a local cluster's workers:
        graders/cluster.py), instead of one of this process's own."""
        if not 1 <= jobs <= UID_BLOCK:
            raise ValueError(f"jobs must be between 1 and {UID_BLOCK}, got {jobs}")
        if memo is not None:
            private_folder("memo", memo)
        self.sandboxed = sandboxed
        self.block, self._lock = uid_block()
        sweep(self.block)
        self.scratch = tempfile.mkdtemp(prefix=scratch_prefix(self.block))
        self.ipc_prefix = sandbox.ipc_prefix(self.block)
        self.spec_dir = sandbox.kernelspec(self.scratch) if sandboxed else None
        self.memo = memo or os.path.join(self.scratch, "judge-memo")  # the judge's references, shared by the submissions
        os.makedirs(self.memo, mode=0o700, exist_ok=True)
        self.free, self.groups = queue.Queue(), {}
        for slot in range(jobs):
            uid = SANDBOX_UID_BASE + self.block * UID_BLOCK + slot
            self.groups[uid] = limits.JobGroups(f"course-grader-{uid}", limits.default_memory_bytes(jobs),
                                                int(os.environ.get("GRADER_MAX_PROCESSES", "512"))).create() if sandboxed else None
            self.free.put(uid)
        # nbgrader and the judge never run student code: each slot forks them from servers that imported them once
        self.judges = {uid: forkserver.Server("judge", os.path.join(self.scratch, f"judge-{uid}.log")) for uid in self.groups}
        self.nbgraders = {uid: forkserver.Server("nbgrader", os.path.join(self.scratch, f"nbgrader-{uid}.log"))
                          for uid in self.groups}
        # the kernels' imports, once for all the slots (the server starts with the first kernel a slot asks for)
        self.kernels = KernelServer(self.scratch, sandbox.jail_environment(
            warm_kernel.NO_HOME, runs.job_environ(shared_machine_environ()))) if sandboxed else None

    def describe(self) -> str:
        return next(iter(self.groups.values())).describe() if self.sandboxed else "unsandboxed"

    def take(self) -> tuple[int, dict]:
        uid = self.free.get()
        return uid, self.groups[uid].env() if self.groups[uid] else {}

    def give_back(self, uid: int) -> None:
        self.free.put(uid)

    def close(self) -> None:
        for server in [*self.judges.values(), *self.nbgraders.values(), *filter(None, [self.kernels])]:
            server.close()
        for job in filter(None, self.groups.values()):
            job.remove()
        self._lock.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class KernelServer:
    """A grading process's warm kernel server (graders/warm_kernel.py), started on first use (and again if it died),
    with `env` as its whole environment: the jail's (graders/sandbox.py `jail_environment`)."""

    def __init__(self, folder: str, env: dict[str, str]):
        self.path, self.env, self.proc = os.path.join(folder, "kernels.sock"), env, None
        self.log, self._lock = os.path.join(folder, "kernels.log"), threading.Lock()

    def socket_path(self) -> str:
        with self._lock:  # the slots' threads ask at once
            if self.proc is None or self.proc.poll() is not None:
                self._start()
        return self.path

    def _start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "graders.warm_kernel", self.path], cwd=REPO,
                                         env=self.env, stdin=subprocess.PIPE, stdout=log, stderr=log,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.path) and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # it listens before it imports: milliseconds

    def close(self) -> None:
        if self.proc is not None:  # it ends when its stdin does; its forks for running kernels with it
            forkserver.stop(self.proc, grace_s=5)
            self.proc = None


def private_folder(name: str, path: str) -> None:
    """Refuse a folder that anybody but this process's user could write to (a judge trusts what it reads there)."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError as error:
        raise ValueError(f"{name} must be an existing folder, got {path!r} ({error.strerror})") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise ValueError(f"{name} must be a folder of this user's that nobody else may open (0700), got {path!r}")


def scratch_prefix(block: int) -> str:
    return f"course-grader-{block}-"


def sweep(block: int) -> None:
    """Remove what a killed grading process of this uid block left (SIGKILL skips close() and the jobs' own
    clean-up): its scratch folder and its kernels' socket folders, tmpfs unmounted. Only a holder of the block's
    lock calls this, so no live process owns them."""
    for name in os.listdir(tempfile.gettempdir()):
        if name.startswith(scratch_prefix(block)):
            shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)
    sandbox.remove_ipc_folders(sandbox.ipc_prefix(block))


def uid_block():
    """A block of sandbox uids no other grading run on this machine holds (an flock per block, held
    until the run ends), so that two runs never share a uid and its process limit."""
    import fcntl

    folder = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    for block in range(UID_BLOCKS):
        lock = open(os.path.join(folder, f"course-grader-uids-{block}.lock"), "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return block, lock
        except OSError:
            lock.close()
    raise RuntimeError(f"all {UID_BLOCKS} blocks of sandbox uids are held by other grading runs")
