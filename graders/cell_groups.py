"""Each cell's processes in a cgroup of their own: what they use counts against the cell that started them.

A cell can leave processes running after it ends: a fork bomb whose first fork returns at once, a program started in
the background that spins, a process that forks and exits generation after generation. When they use up the job's
processes or CPU time, a later cell is the one running, and that cell used to take the blame (skipped on the next
try, its points lost) while the cell that started them ran again. Here, before each cell runs, the processes the job
had before its first cell (the kernel and its jail) move into a new group of the job's CPU-counting hierarchy
(graders/limits.py). Every process the cell starts, and every process those start, is born in that group: a
process's group is inherited at fork, survives reparenting and a new session, and no process of the jail can move
itself. A cell that runs the student's code (an answer, or a test that calls it) keeps what it left running in its
own group. What the lesson's other cells leave, and the servers the helpers start for every later cell (the ranks'
fork server: from a kernel thread, in whatever cell runs then; known by their command lines, which is all a process
that calls itself one gains: what it uses counts as the running cell's, as before), move along with the kernel into
the running cell's group. A job that reaches its process limit, or the running cell's CPU-seconds, is stopped for the
cell whose group has most of its threads, or used most of that CPU time: the running one on a tie. Where the job has
no such group (no cgroups here, or unsandboxed), everything is the running cell's, as before.
"""

from __future__ import annotations

import itertools
import os

from graders import limits

LEFT_BEHIND = "processes the cell left running used up its job's processes or CPU time"
_runs = itertools.count()
SERVERS = (b"from multiprocessing.forkserver import main", b"from multiprocessing.resource_tracker import main",
           b"helpers.fresh\x00--serve\x00")


class LeftBehind(RuntimeError):
    """Processes that `cell`, an earlier cell, left running used up the job's processes or CPU time: the run stops,
    and that cell is the one skipped (graders/worker.py), not the one running."""

    def __init__(self, cell: int):
        super().__init__(f"processes that cell {cell} left running used up its job's processes or CPU time")
        self.cell = cell


class CellGroups:
    """The groups of one run of a notebook (one kernel): `start(index, student)` before each cell, `close()` after."""

    def __init__(self, paths: list[str] | None = None):
        paths = limits.job_paths() if paths is None else paths
        self.root = next((p for p in paths if limits.cpu_seconds([p]) is not None), None)
        self.first: set[tuple[int, int]] | None = None  # the job's processes before its first cell: (pid, start time)
        self.groups: dict[int, str] = {}  # cell index -> its group, while it has processes
        self.running: int | None = None
        self._carried: set[int] = set()  # the cells (not the student's) whose processes move along with the kernel
        self._cpu_at_start: dict[int, float] = {}
        self._name = f"cell-{os.getpid()}-{next(_runs)}"

    def start(self, index: int, student: bool = True) -> None:
        """Cell `index` runs next: the job's first processes, what the lesson's own cells left running and the helpers'
        servers move into its group, where what it starts is born. `student`: a cell that runs the student's code,
        whose processes stay its own."""
        self.running = index
        if self.root is None:
            return
        if self.first is None:  # (the job's own group: the cells' groups below it are none of them)
            self.first = {identity for pid in limits.pids(self.root, below=False) if (identity := _identity(pid))}
            _sweep(self.root)  # the groups of earlier runs, left while their jails were dying
        path = os.path.join(self.root, f"{self._name}-{index}")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:  # (no more groups: the job's time and processes are the running cell's, as without groups)
            self.root, self.groups = None, {}
            return
        moving = [pid for pid, started in self.first if _identity(pid) == (pid, started)]  # (not a later one's number)
        for cell, folder in list(self.groups.items()):
            moving += [pid for pid in limits.pids(folder) if cell in self._carried or _serves_the_kernel(pid)]
        for pid in moving:
            try:
                limits.write(os.path.join(path, "cgroup.procs"), str(pid))
            except OSError:
                pass  # it ended meanwhile
        self.groups[index] = path
        for cell, folder in list(self.groups.items()):
            if cell != index and _removed(folder):  # an earlier cell that left nothing running
                del self.groups[cell]
        self._carried = (self._carried & set(self.groups)) | ({index} if not student else set())
        self._cpu_at_start = {cell: limits.cpu_seconds([folder]) or 0.0 for cell, folder in self.groups.items()}

    def culprit_by_processes(self) -> int | None:
        """The cell whose group has most of the job's threads now (what its process limit counts)."""
        return self._most({cell: limits.threads(folder) for cell, folder in list(self.groups.items())})  # (a thread's)

    def culprit_by_cpu(self) -> int | None:
        """The cell whose processes used most of the job's CPU time since the running cell started."""
        return self._most({cell: (limits.cpu_seconds([folder]) or 0.0) - self._cpu_at_start.get(cell, 0.0)
                           for cell, folder in list(self.groups.items())})

    def _most(self, amounts: dict[int, float]) -> int | None:
        """The cell with the largest amount: the running one on a tie, and where there are no groups."""
        return max(amounts, key=lambda cell: (amounts[cell], cell == self.running)) if amounts else self.running

    def close(self) -> None:
        """After the run: its empty groups are removed now; those whose processes were still dying, by the next run's
        first cell, or with the job's groups (limits.JobGroups.remove)."""
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
    started = _stat_field(pid, 19)
    return None if started is None else (pid, started)


def _stat_field(pid: int | None, index: int) -> int | None:
    """Field `index` of /proc/`pid`/stat, counted after the command's name (1: the parent, 19: the start time)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[index])
    except (OSError, IndexError, ValueError):
        return None


def _serves_the_kernel(pid: int) -> bool:
    """One of the servers the course's helpers start for later cells, from a thread of the kernel, in whatever cell runs
    then: the ranks' fork server (multiprocessing's, and its resource tracker) and helpers.fresh's; not what a server
    forked (a rank keeps its server's command line), which is the cell's that asked for it."""
    return _is_server(pid) and not _is_server(_stat_field(pid, 1))


def _is_server(pid: int | None) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read(4096)
    except OSError:
        return False
    return any(marker in command for marker in SERVERS)



def _sweep(root: str) -> None:
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if name.startswith("cell-"):
            _removed(os.path.join(root, name))


def _removed(folder: str) -> bool:
    try:
        os.rmdir(folder)  # refused while a process is in it
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
