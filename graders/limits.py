"""CPU share, memory (tmpfs included) and processes of each grading job, bounded with cgroups.

prlimit (graders/sandbox.py) bounds each process; a cgroup bounds a job's processes together:
* CPU share: every job's group has the same weight, so a submission's busy processes get their job's
  share of the CPUs when others need them, however many processes it starts;
* memory: the job's resident memory *and* what it writes into its tmpfs folders (/tmp, /dev/shm, its
  working folder: the jail has no other writable place, so this bounds its disk use too);
* processes: a count for the whole job;
* CPU time: counted for the whole job (cpuacct, or cgroup v2's cpu.stat), which a cell's time limit is counted in
  (graders/cell_limit.py).

cgroup v2 (one unified hierarchy with the cpu, memory and pids controllers) is used where it has them;
on a hybrid host (v1 controllers, like this project's CI machine) the v1 cpu, memory and pids
hierarchies. What cannot be bounded here is said by `JobGroups.describe()` (printed by `make grade`);
grading then goes on with prlimit's bounds alone.
"""

from __future__ import annotations

import os
import signal
import threading
import time

ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("cpu", "memory", "pids")


def _own_v1_path(controller: str) -> str | None:
    """This process's group in a v1 hierarchy (new groups go below it, as a container allows)."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                if controller in names.split(","):
                    return path
    except OSError:
        pass
    return None


def _v2_root() -> str | None:
    for root in (ROOT, os.path.join(ROOT, "unified")):
        try:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                if set(CONTROLLERS) <= set(f.read().split()):
                    return root
        except OSError:
            continue
    return None


def write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class JobGroups:
    """The cgroups of one grading job: created with `create()`, joined by the kernel launcher
    (GRADER_CGROUPS, see `join`), emptied and removed with `remove()`."""

    def __init__(self, name: str, memory_bytes: int, max_processes: int):
        self.name, self.memory_bytes, self.max_processes = name, memory_bytes, max_processes
        self.paths: list[str] = []
        self.bounded: list[str] = []
        self.unbounded: list[str] = []

    def create(self) -> "JobGroups":
        root = _v2_root()
        if root:
            self._create_v2(root)
        else:
            self._create_v1()
        return self

    def _create_v2(self, root: str) -> None:
        path = os.path.join(root, self.name)
        try:
            write(os.path.join(root, "cgroup.subtree_control"), " ".join(f"+{c}" for c in CONTROLLERS))
            os.makedirs(path, exist_ok=True)
            write(os.path.join(path, "cpu.weight"), "100")
            write(os.path.join(path, "memory.max"), str(self.memory_bytes))
            write(os.path.join(path, "memory.swap.max"), "0") if os.path.exists(os.path.join(path, "memory.swap.max")) else None
            write(os.path.join(path, "pids.max"), str(self.max_processes))
        except OSError as error:
            self.unbounded.append(f"CPU share, memory and processes (cgroup v2 at {root}: {error.strerror})")
            return
        self.paths.append(path)
        self.bounded.append("CPU share, memory (tmpfs included) and processes (cgroup v2)")

    def _create_v1(self) -> None:
        settings = {"cpu": ("CPU share", {"cpu.shares": "1024"}),
                    "memory": ("memory (tmpfs included)", {"memory.limit_in_bytes": str(self.memory_bytes)}),
                    "pids": ("processes", {"pids.max": str(self.max_processes)})}
        for controller, (what, files) in settings.items():
            own = _own_v1_path(controller)
            base = os.path.join(ROOT, controller)
            if own is None or not os.path.isdir(base):
                self.unbounded.append(f"{what} (no cgroup {controller} controller here)")
                continue
            path = os.path.join(base, own.lstrip("/"), self.name)
            try:
                os.makedirs(path, exist_ok=True)
                for name, value in files.items():
                    write(os.path.join(path, name), value)
            except OSError as error:
                self.unbounded.append(f"{what} (cgroup v1 {controller}: {error.strerror})")
                continue
            self.paths.append(path)
            self.bounded.append(f"{what} (cgroup v1)")
        self._count_cpu_v1()

    def _count_cpu_v1(self) -> None:
        """A cpuacct group too, where the host mounts that controller apart from cpu's: it counts the CPU time of the
        job's processes (`cpu_seconds`), which a cell's time limit is counted in (graders/cell_limit.py)."""
        if cpu_seconds(self.paths) is not None:  # cpu and cpuacct mounted together: the cpu group counts already
            return
        own, base = _own_v1_path("cpuacct"), os.path.join(ROOT, "cpuacct")
        if own is None or not os.path.isdir(base):
            return
        path = os.path.join(base, own.lstrip("/"), self.name)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            return
        self.paths.append(path)

    def describe(self) -> str:
        text = "bounded per grading job: " + (", ".join(self.bounded) or "nothing")
        if self.unbounded:
            text += "; NOT bounded: " + ", ".join(self.unbounded) + " (prlimit's per-process limits still apply)"
        if cpu_seconds(self.paths) is None:
            text += "; no cgroup counts a job's CPU time here, so a cell's time limit counts wall-clock time"
        return text

    def env(self) -> dict[str, str]:
        return {"GRADER_CGROUPS": os.pathsep.join(self.paths)} if self.paths else {}

    def remove(self) -> None:
        """Kill what is left in the groups (a submission's orphans) and remove them, the cells' groups first."""
        kill_all(self.paths)
        for path in self.paths:
            for folder, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
                try:
                    os.rmdir(folder)
                except OSError:
                    pass


def kill_all(paths: list[str]) -> None:
    """SIGKILL every process in the groups, round after round: a process can fork while the others die."""
    for path in paths:
        for _ in range(50):
            pids_left = pids(path)
            if not pids_left:
                break
            for pid in pids_left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)


def pids(path: str, below: bool = True) -> list[int]:
    """The processes in the group at `path` and (`below`) in the groups below it (graders/cell_groups.py: a cell's)."""
    found = []
    for folder in [folder for folder, _, _ in os.walk(path)] if below else [path]:
        try:
            with open(os.path.join(folder, "cgroup.procs")) as f:
                found += [int(line) for line in f if line.strip()]
        except OSError:
            continue
    return found


def threads(path: str) -> int:
    """How many threads are in the group at `path` itself (what its job's process limit counts: pids.max counts
    threads), v1's `tasks` or v2's `cgroup.threads`."""
    for name in ("tasks", "cgroup.threads"):
        try:
            with open(os.path.join(path, name)) as f:
                return sum(1 for line in f if line.strip())
        except OSError:
            continue
    return 0


def empty(paths: list[str], wait_s: float = 10.0) -> None:
    """Kill every process of the job's groups and wait (up to `wait_s`) until none counts against the job: a new
    try of a submission starts with all of its job's processes free, whatever the last try left dying."""
    kill_all(paths)
    deadline = time.monotonic() + wait_s
    for path in paths:
        while time.monotonic() < deadline and (pids(path) or _read_int(os.path.join(path, "pids.current"))):
            time.sleep(0.05)


def _read_int(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def cpu_seconds(paths: list[str]) -> float | None:
    """The CPU time (user and system) that the processes of a job's groups have used so far, in seconds: those still
    running and those that ended (cgroup v1 cpuacct, cgroup v2 cpu.stat); None where no group counts it."""
    for path in paths:
        try:
            with open(os.path.join(path, "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        except (OSError, ValueError):
            pass
        try:
            with open(os.path.join(path, "cpu.stat")) as f:
                for line in f:
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
        except (OSError, ValueError, IndexError):
            pass
    return None


def job_paths(environ=None) -> list[str]:
    """This job's groups, from the environment the pipeline gives the job (GRADER_CGROUPS; `environ`, or this one's)."""
    return [p for p in (os.environ if environ is None else environ).get("GRADER_CGROUPS", "").split(os.pathsep) if p]


def process_limit_hits(paths: list[str]) -> int:
    """How many times a process or thread of the job could not start because the job had used up its processes
    (the "max" count of pids.events, cgroup v1 and v2 alike)."""
    hits = 0
    for path in paths:
        try:
            with open(os.path.join(path, "pids.events")) as f:
                hits += sum(int(line.split()[1]) for line in f if line.startswith("max "))
        except (OSError, ValueError, IndexError):
            continue
    return hits


PROCESS_LIMIT = "the cell used up its job's processes"


class ProcessLimitReached(RuntimeError):
    """The cell used up its job's processes: the job was stopped, the cell is skipped (graders/worker.py)."""


class ProcessLimitWatch:
    """While a cell runs, stop the job as soon as it reaches its process limit: a fork bomb's copies fill the
    limit in a moment and then spin on failing forks, and the kernel can no longer start a thread. Waiting for
    the cell's timeout would burn it (300 s by default) on every CPU the job's share allows, and the cells after
    it could hang or crash at random. Every process of the job is killed (the kernel with them): the pipeline
    grades the submission again with this cell skipped, like a cell that killed its kernel.
    Without a process cgroup (limits not bounded here) it watches nothing; prlimit's bound still holds."""

    POLL_S = 0.2

    def __init__(self, paths: list[str] | None = None, blame=None, since: int | None = None):
        """`blame`: a function that names the cell whose processes these are (graders/cell_groups.py), asked once,
        before they are killed; its answer is `culprit`. `since`: the count of hits the last cell's watch ended with
        (`hits`), so that hits between two cells (a cell's processes filled the job after it ended) count too."""
        self.paths = [p for p in (job_paths() if paths is None else paths) if os.path.exists(os.path.join(p, "pids.events"))]
        self.fired, self.culprit, self._blame, self._since = False, None, blame, since
        self.hits: int | None = None
        self._done = threading.Event()

    def __enter__(self) -> "ProcessLimitWatch":
        if self.paths:
            self._start = process_limit_hits(self.paths) if self._since is None else self._since
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(self.POLL_S):
            if self._check():
                return

    def _check(self) -> bool:
        if not self.fired and process_limit_hits(self.paths) > self._start:
            try:
                self.culprit = self._blame() if self._blame else None
            except Exception:  # noqa: BLE001 - whoever is to blame, the job is stopped
                self.culprit = None
            self.fired = True
            kill_all(self.paths)
        return self.fired

    def __exit__(self, *exc) -> None:
        if self.paths:
            self._done.set()
            self._thread.join()
            self._check()  # a cell that ended (its fork failed) with the job still at its limit
            self.hits = process_limit_hits(self.paths) if self.fired else self._start  # (a later hit is the next's)


def join(pid: int | None = None, paths: list[str] | None = None) -> None:
    """Move this process (the kernel launcher, before it starts the jail; the warm kernel server's child, before it
    forks the kernel) into the job's groups (`paths`, or this job's environment's)."""
    for path in job_paths() if paths is None else paths:
        write(os.path.join(path, "cgroup.procs"), str(pid or os.getpid()))


def default_memory_bytes(jobs: int) -> int:
    """Each job's share of 80% of this machine's memory, at least 4 GiB (GRADER_JOB_MEMORY_BYTES overrides)."""
    if os.environ.get("GRADER_JOB_MEMORY_BYTES"):
        return int(os.environ["GRADER_JOB_MEMORY_BYTES"])
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(4 * 2**30, int(total * 0.8) // max(1, jobs))
