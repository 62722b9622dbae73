"""A cell's time limit: the CPU-seconds its job uses, with the wall clock only as a backstop that grades nothing.

What a cell computes takes about the same CPU time however busy the machine is; its wall-clock time does not. A
limit in wall-clock seconds (nbgrader's, until issue 39) made a busy machine's slowness a failed test: lesson 4's
first XLA cell waits for its fork server's import of torch_xla (a few CPU-seconds, started in the background by the
lesson's import cell; tens of seconds when the machine is loaded), and a right answer lost its points to that wait.
So the cell's limit (`--cell-timeout`, GRADER_CELL_TIMEOUT, nbgrader's Execute.timeout) counts the CPU-seconds of
every process of its job (graders/limits.py `cpu_seconds`; unsandboxed, the kernel's process tree): a cell past it is
interrupted and fails, whatever the load (an infinite loop does). The wall clock is a generous backstop, for a cell
that waits without computing: one that reaches it before its CPU limit stops the run with CellTooSlow, and the
submission is not graded (graders/worker.py: grade it again), instead of losing that cell's points. Where nothing
counts the job's CPU time (no cgroup, sandboxed), the limit counts wall-clock seconds, as before, and says so
(`JobGroups.describe`).
"""

from __future__ import annotations

import os
import time

from graders import cell_groups, limits

CELL_POLL_S = 1.0  # how often a running cell's job's CPU time is read
# The backstop: WALL_FACTOR times the CPU limit, and at least WALL_MARGIN_S more than it, so that a busy loop with a
# fraction of a core (a quarter, or a twentieth for a short limit) still reaches its CPU limit first and fails.
WALL_FACTOR, WALL_MARGIN_S = 4, 300


class CellTooSlow(RuntimeError):
    """A cell reached its wall-clock backstop (or its outputs trailed its reply too long) before it had used its
    CPU-time limit: the machine was too busy to run it, or it waited on something. No verdict on the cell: the run
    stops and the submission is not graded (graders/worker.py), instead of losing the cell's points to the load."""


def wall_seconds(cpu_seconds: float) -> float:
    """The wall-clock backstop of a cell whose limit is `cpu_seconds` of CPU time (GRADER_CELL_WALL_TIMEOUT overrides
    it). The pipeline's watchdog (graders/runs.py) waits this long, and more, before it calls a kernel hung."""
    if os.environ.get("GRADER_CELL_WALL_TIMEOUT"):
        return float(os.environ["GRADER_CELL_WALL_TIMEOUT"])
    return max(WALL_FACTOR * cpu_seconds, cpu_seconds + WALL_MARGIN_S)


def tree_cpu_seconds(pid) -> float | None:
    """CPU-seconds used by process `pid` and its descendants, those running and those they waited for (an unsandboxed
    kernel: nbgrader's child, with its fork servers and their jobs); None when it cannot be read."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.Error, TypeError, ValueError):
        return None
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # it ended meanwhile: its time went to its parent's children_* (or, orphaned, nowhere)
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


class CellTimeLimit:
    """nbclient's wait for a cell's reply, with the limit counted in CPU-seconds (a mixin of graders/execute.py's
    CrashSafeExecute, before nbgrader's Execute). nbclient waits CELL_POLL_S at a time and then asks
    `_async_handle_timeout`, which interrupts the cell past its CPU limit (nbgrader's timeout error, as before),
    raises CellTooSlow past the wall-clock backstop, and otherwise lets it wait on."""

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        return CELL_POLL_S if cell is not None and timeout else timeout

    def preprocess(self, nb, resources=None, km=None):
        self.cell_groups = cell_groups.CellGroups()  # one run, one kernel
        try:
            return super().preprocess(nb, resources, km)
        finally:
            self.cell_groups.close()

    def start_cell_clock(self, index: int, student: bool = True) -> None:
        """Before cell `index`: its limit counts from here, and what it starts is born in its own group (where it stays
        for a `student` cell, one that runs the student's code: graders/cell_groups.py)."""
        self.cell_over_limit = False
        self.cell_groups.start(index, student)
        self._cell_started = (time.monotonic(), self._job_cpu_seconds())

    def _job_cpu_seconds(self) -> float | None:
        used = limits.cpu_seconds(limits.job_paths())
        if used is None and os.environ.get("GRADER_SANDBOX") != "1":  # the jail's kernel is no child of nbgrader
            used = tree_cpu_seconds(getattr(getattr(getattr(self, "km", None), "provisioner", None), "pid", None))
        if used is not None:  # a process that ended unwaited takes its time along: never count backwards
            used = self._cpu_seen = max(used, getattr(self, "_cpu_seen", 0.0))
        return used

    async def _async_handle_timeout(self, timeout, cell=None):
        limit = float(self.timeout)
        started_at, cpu_at_start = getattr(self, "_cell_started", (time.monotonic(), None))
        waited = time.monotonic() - started_at
        cpu = self._job_cpu_seconds()
        counted = cpu is not None and cpu_at_start is not None
        used = cpu - cpu_at_start if counted else waited  # nothing counts CPU time here: wall-clock time, as before
        if counted and used >= limit and not getattr(self, "cell_over_limit", False):
            culprit = self.cell_groups.culprit_by_cpu()
            if culprit != self.cell_groups.running:  # an earlier cell's processes used most of the time
                raise cell_groups.LeftBehind(culprit)
        if getattr(self, "cell_over_limit", False) or used >= limit:
            self.cell_over_limit = True
            reply = await super()._async_handle_timeout(int(limit), cell)  # interrupts the kernel
            if reply is not None:
                why = f"the cell ran past its time limit, {limit:g} {'CPU-seconds' if counted else 'seconds'}"
                ename = reply["content"].get("ename", "CellTimeoutError")
                reply["content"] = {**reply["content"], "evalue": why, "traceback": [f"\x1b[0;31m{ename}\x1b[0m: {why}"]}
            return reply
        backstop = wall_seconds(limit)
        if waited >= backstop:
            raise CellTooSlow(f"the cell ran {waited:.0f} s of wall-clock time (the backstop: {backstop:g} s) while its "
                              f"job used {used:.1f} of its {limit:g} CPU-seconds")
        return None
