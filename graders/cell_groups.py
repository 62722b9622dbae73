"""Each cell's processes in a cgroup of their own: what they use counts against the cell that started them.

A cell can leave processes running after it ends: a fork bomb whose first fork returns at once, a program started in
the background that spins, a process that forks and exits generation after generation. When they use up the job's
processes or CPU time, a later cell is the one running, and that cell used to take the blame (skipped on the next
try, its points lost) while the cell that started them ran again. Here, before each cell runs, the processes the job
had before its first cell (the kernel and its jail) move into a new group of the job's CPU-counting hierarchy
(graders/limits.py). Every process the cell starts, and every process those start, is born in that group: a
process's group is inherited at fork, survives reparenting and a new session, and no process of the jail can move
itself. So the kernel, not /proc and not anything a submission writes, says which cell each process and each
CPU-second of the job belongs to. Where the job has no such group (no cgroups here, or unsandboxed), every process
is the running cell's, as before.
"""

from __future__ import annotations

import itertools
import os

from graders import limits

LEFT_BEHIND = "processes the cell left running used up its job's processes or CPU time"
_runs = itertools.count()


class LeftBehind(RuntimeError):
    """Processes that `cell`, an earlier cell, left running used up the job's processes or CPU time: the run stops,
    and that cell is the one skipped (graders/worker.py), not the one running."""

    def __init__(self, cell: int):
        super().__init__(f"processes that cell {cell} left running used up its job's processes or CPU time")
        self.cell = cell


class CellGroups:
    """The groups of one run of a notebook (one kernel): `start(index)` before each cell, `close()` after the run."""

    def __init__(self, paths: list[str] | None = None):
        paths = limits.job_paths() if paths is None else paths
        self.root = next((p for p in paths if limits.cpu_seconds([p]) is not None), None)
        self.first: set[tuple[int, int]] | None = None  # the job's processes before its first cell: (pid, start time)
        self.groups: dict[int, str] = {}  # cell index -> its group, while it has processes
        self.running: int | None = None
        self._cpu_at_start: dict[int, float] = {}
        self._name = f"cell-{os.getpid()}-{next(_runs)}"

    def start(self, index: int) -> None:
        """Cell `index` runs next: the job's first processes move into its group, where what it starts is born."""
        self.running = index
        if self.root is None:
            return
        if self.first is None:  # (the job's own group: the cells' groups below it are none of them)
            self.first = {identity for pid in limits.pids(self.root, below=False) if (identity := _identity(pid))}
        path = os.path.join(self.root, f"{self._name}-{index}")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:  # (no more groups: the job's time and processes are the running cell's, as without groups)
            self.root, self.groups = None, {}
            return
        for pid, started in self.first:
            if _identity(pid) == (pid, started):  # (the same process, not a later one with its number)
                try:
                    limits.write(os.path.join(path, "cgroup.procs"), str(pid))
                except OSError:
                    pass  # it ended meanwhile
        self.groups[index] = path
        for cell, folder in list(self.groups.items()):
            if cell != index and _removed(folder):  # an earlier cell that left nothing running
                del self.groups[cell]
        self._cpu_at_start = {cell: limits.cpu_seconds([folder]) or 0.0 for cell, folder in self.groups.items()}

    def culprit_by_processes(self) -> int | None:
        """The cell whose processes are most of the job's now (the running one on a tie)."""
        counts = {cell: len(limits.pids(folder)) for cell, folder in list(self.groups.items())}  # (the watch's thread)
        return max(counts, key=lambda cell: (counts[cell], cell == self.running)) if counts else self.running

    def culprit_by_cpu(self, limit: float) -> int | None:
        """The cell whose processes alone used `limit` CPU-seconds since the running cell started: the running cell
        first, else the earlier cell whose processes used most; None when no cell's did yet (each cell's processes
        have the limit to themselves). Without groups, the running cell: the job's time is all its own."""
        used = {cell: (limits.cpu_seconds([folder]) or 0.0) - self._cpu_at_start.get(cell, 0.0)
                for cell, folder in list(self.groups.items())}
        if not used or used.get(self.running, 0.0) >= limit:
            return self.running
        over = {cell: seconds for cell, seconds in used.items() if seconds >= limit}
        return max(over, key=over.get) if over else None

    def close(self) -> None:
        """After the run (its kernel and jail are gone): the groups that are empty are removed; the job's own
        removal (limits.JobGroups.remove) kills and removes what is left."""
        for folder in self.groups.values():
            _removed(folder)
        self.groups = {}


def stopped(index: int, watch: limits.ProcessLimitWatch, error: Exception | None) -> Exception:
    """Why the run stops at cell `index` (graders/execute.py). When an earlier cell's processes used up the job's
    processes or CPU time, that cell is the one the pipeline skips next time: its index replaces the running one."""
    culprit = error.cell if isinstance(error, LeftBehind) else watch.culprit if watch.fired else index
    if culprit is not None and culprit != index:
        limits.kill_all(limits.job_paths())
        write_progress(culprit)
        return LeftBehind(culprit)
    return limits.ProcessLimitReached(limits.PROCESS_LIMIT) if watch.fired else error


def write_progress(index: int) -> None:
    """The cell the pipeline skips if the run stops (GRADER_PROGRESS_FILE): the running one, or the one to blame."""
    progress = os.environ.get("GRADER_PROGRESS_FILE")
    if progress:
        with open(progress, "w") as f:
            f.write(str(index))


def _identity(pid: int) -> tuple[int, int] | None:
    """(pid, its start time in clock ticks since boot): one process, whatever number the system gives later."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return pid, int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _removed(folder: str) -> bool:
    try:
        os.rmdir(folder)  # refused while a process is in it
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
