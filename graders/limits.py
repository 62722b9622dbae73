"""CPU share, memory (tmpfs included) and processes of each grading job, bounded with cgroups.

prlimit (graders/sandbox.py) bounds each process; a cgroup bounds a job's processes together:
* CPU share: every job's group has the same weight, so a submission's busy processes get their job's
  share of the CPUs when others need them, however many processes it starts;
* memory: the job's resident memory *and* what it writes into its tmpfs folders (/tmp, /dev/shm, its
  working folder: the jail has no other writable place, so this bounds its disk use too);
* processes: a count for the whole job.

cgroup v2 (one unified hierarchy with the cpu, memory and pids controllers) is used where it has them;
on a hybrid host (v1 controllers, like this project's CI machine) the v1 cpu, memory and pids
hierarchies. What cannot be bounded here is said by `JobGroups.describe()` (printed by `make grade`);
grading then goes on with prlimit's bounds alone.
"""

from __future__ import annotations

import os
import signal
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


def _write(path: str, value: str) -> None:
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
            _write(os.path.join(root, "cgroup.subtree_control"), " ".join(f"+{c}" for c in CONTROLLERS))
            os.makedirs(path, exist_ok=True)
            _write(os.path.join(path, "cpu.weight"), "100")
            _write(os.path.join(path, "memory.max"), str(self.memory_bytes))
            _write(os.path.join(path, "memory.swap.max"), "0") if os.path.exists(os.path.join(path, "memory.swap.max")) else None
            _write(os.path.join(path, "pids.max"), str(self.max_processes))
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
                    _write(os.path.join(path, name), value)
            except OSError as error:
                self.unbounded.append(f"{what} (cgroup v1 {controller}: {error.strerror})")
                continue
            self.paths.append(path)
            self.bounded.append(f"{what} (cgroup v1)")

    def describe(self) -> str:
        text = "bounded per grading job: " + (", ".join(self.bounded) or "nothing")
        if self.unbounded:
            text += "; NOT bounded: " + ", ".join(self.unbounded) + " (prlimit's per-process limits still apply)"
        return text

    def env(self) -> dict[str, str]:
        return {"GRADER_CGROUPS": os.pathsep.join(self.paths)} if self.paths else {}

    def remove(self) -> None:
        """Kill what is left in the groups (a submission's orphans) and remove them."""
        for path in self.paths:
            for _ in range(50):
                pids = _pids(path)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.1)
            try:
                os.rmdir(path)
            except OSError:
                pass


def _pids(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []


def join(pid: int | None = None) -> None:
    """Move this process (the kernel launcher, before it starts the jail) into the job's groups."""
    for path in filter(None, os.environ.get("GRADER_CGROUPS", "").split(os.pathsep)):
        _write(os.path.join(path, "cgroup.procs"), str(pid or os.getpid()))


def default_memory_bytes(jobs: int) -> int:
    """Each job's share of 80% of this machine's memory, at least 4 GiB (GRADER_JOB_MEMORY_BYTES overrides)."""
    if os.environ.get("GRADER_JOB_MEMORY_BYTES"):
        return int(os.environ["GRADER_JOB_MEMORY_BYTES"])
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(4 * 2**30, int(total * 0.8) // max(1, jobs))
