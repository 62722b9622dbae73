"""A grading process's slots: one per submission graded at the same time, each with its own sandbox uid (from a
block no other grading run on this machine holds), its cgroups, and its servers for nbgrader and the judge.
"""

from __future__ import annotations

import os
import queue
import shutil
import tempfile

from graders import forkserver, limits, sandbox

SANDBOX_UID_BASE = 61000  # unprivileged uids with no account: one per parallel grading job


UID_BLOCK = 64  # uids of one grading run: concurrent runs (two `make grade`s) take different blocks


UID_BLOCKS = 64


class Slots:
    """The sandbox uids (a block no other grading process on this machine holds) and their cgroups, and the
    scratch space of one grading process: one slot per submission graded at the same time."""

    def __init__(self, jobs: int, sandboxed: bool):
        if not 1 <= jobs <= UID_BLOCK:
            raise ValueError(f"jobs must be between 1 and {UID_BLOCK}, got {jobs}")
        self.sandboxed = sandboxed
        self.block, self._lock = uid_block()
        self.scratch = tempfile.mkdtemp(prefix="grader-")
        self.spec_dir = sandbox.kernelspec(self.scratch) if sandboxed else None
        self.memo = os.path.join(self.scratch, "judge-memo")  # the judge's references, shared by the submissions
        os.makedirs(self.memo, mode=0o700)
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

    def describe(self) -> str:
        return next(iter(self.groups.values())).describe() if self.sandboxed else "unsandboxed"

    def take(self) -> tuple[int, dict]:
        uid = self.free.get()
        return uid, self.groups[uid].env() if self.groups[uid] else {}

    def give_back(self, uid: int) -> None:
        self.free.put(uid)

    def close(self) -> None:
        for server in [*self.judges.values(), *self.nbgraders.values()]:
            server.close()
        for job in filter(None, self.groups.values()):
            job.remove()
        self._lock.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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
