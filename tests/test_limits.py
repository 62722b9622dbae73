"""Each grading job's cgroups: created with the bounds, joined by the kernel launcher, emptied and removed;
where cgroups are missing, the grader says what it cannot bound."""

import json
import os
import subprocess
import sys
import time

import pytest

from graders import limits


def test_a_job_group_bounds_what_its_processes_use_and_is_cleaned_up():
    job = limits.JobGroups(f"course-grader-test-{os.getpid()}", 4 * 2**30, 64).create()
    if not job.paths:
        pytest.skip(job.describe())
    try:
        child = subprocess.Popen([sys.executable, "-c", "from graders import limits; limits.join(); import time; time.sleep(60)"],
                                 env={**os.environ, **job.env(), "PYTHONPATH": os.getcwd()})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(str(child.pid) in open(f"{p}/cgroup.procs").read().split() for p in job.paths):
            time.sleep(0.1)
        for path in job.paths:
            assert str(child.pid) in open(f"{path}/cgroup.procs").read().split(), path
        values = {name: open(f"{p}/{name}").read().strip() for p in job.paths for name in os.listdir(p)
                  if name in ("memory.limit_in_bytes", "memory.max", "pids.max", "cpu.shares", "cpu.weight")}
        assert values.get("memory.limit_in_bytes", values.get("memory.max")) == str(4 * 2**30)
        assert values["pids.max"] == "64"
        assert "CPU share" in job.describe() and "NOT bounded" not in job.describe()
    finally:
        job.remove()
    assert child.wait(timeout=10) != 0, "what was left in the group is killed"
    assert not any(os.path.exists(p) for p in job.paths)


def test_without_cgroups_the_grader_says_what_it_cannot_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "ROOT", str(tmp_path))
    job = limits.JobGroups("course-grader-nowhere", 2**30, 8).create()
    assert job.paths == [] and job.env() == {}
    text = job.describe()
    assert "NOT bounded" in text and "CPU share" in text and "memory" in text and "prlimit" in text


def test_each_job_gets_a_share_of_memory():
    assert limits.default_memory_bytes(1) >= limits.default_memory_bytes(4) >= 4 * 2**30


def _bomb_in(job, code):
    """A process in the job's groups that runs `code` (as the grading kernel does once it joined them)."""
    return subprocess.Popen([sys.executable, "-c", "from graders import limits; limits.join()\n" + code],
                            env={**os.environ, **job.env(), "PYTHONPATH": os.getcwd()})


FORK_BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


@pytest.fixture
def job_of():
    """A job's groups with a process limit of `max_processes` (removed after the test); skipped without cgroups."""
    made = []

    def make(max_processes):
        job = limits.JobGroups(f"course-grader-test-{os.getpid()}", 4 * 2**30, max_processes).create()
        made.append(job)
        if not any(os.path.exists(os.path.join(p, "pids.events")) for p in job.paths):
            pytest.skip(job.describe())
        return job

    yield make
    for job in made:
        job.remove()


def test_a_fork_bomb_is_stopped_when_it_reaches_its_jobs_process_limit(job_of):
    """The watch kills every process of the job within moments of the limit, not at the cell's timeout."""
    job = job_of(24)
    with limits.ProcessLimitWatch(job.paths) as watch:
        bomb = _bomb_in(job, FORK_BOMB)
        start = time.monotonic()
        while not watch.fired and time.monotonic() - start < 30:
            time.sleep(0.05)
        assert watch.fired, "the watch should see the job at its process limit"
        assert bomb.wait(timeout=10) == -9, "the bomb is killed"
        assert time.monotonic() - start < 20
    assert all(not limits.pids(p) for p in job.paths), "nothing of the job is left"


def test_a_job_below_its_process_limit_is_left_alone(job_of):
    job = job_of(64)
    with limits.ProcessLimitWatch(job.paths) as watch:
        busy = _bomb_in(job, "import subprocess, sys\n"
                             "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1)']) for _ in range(8)]\n"
                             "assert all(k.wait() == 0 for k in kids)")
        assert busy.wait(timeout=60) == 0
    assert not watch.fired


def test_the_watch_needs_no_cgroups():
    with limits.ProcessLimitWatch([]) as watch:
        pass
    assert not watch.fired and limits.process_limit_hits(["/nonexistent"]) == 0


# A stand-in for the grading kernel: it runs each cell it reads (one JSON string a line), in its own process.
STAND_IN_KERNEL = """
import json, subprocess, sys, time
for line in sys.stdin:
    exec(json.loads(line))
"""
# A process that forks and exits, generation after generation, and spins: no process of it lives long, none is the
# kernel's child, and the CPU time it uses is still its cell's.
WALKER = """
import os, time
while True:
    if os.fork():
        os._exit(0)
    start = time.time()
    while time.time() - start < 0.05:
        pass
"""


def _cell(kernel, code):
    kernel.stdin.write(json.dumps(code) + "\n")
    kernel.stdin.flush()


def _until(condition, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_what_an_answer_cells_processes_use_after_it_ended_counts_against_that_cell(job_of):
    """graders/cell_groups.py: the kernel's new group for each cell; what an answer cell started stays in its own,
    what another cell started (an import cell's fork servers) goes along with the kernel."""
    from graders import cell_groups

    job = job_of(64)
    groups = cell_groups.CellGroups(job.paths)
    if groups.root is None:
        pytest.skip("no cgroup counts a job's CPU time here")
    kernel = subprocess.Popen([sys.executable, "-c", "from graders import limits; limits.join()\n" + STAND_IN_KERNEL],
                              stdin=subprocess.PIPE, text=True,
                              env={**os.environ, **job.env(), "PYTHONPATH": os.getcwd()})
    try:
        _until(lambda: kernel.pid in limits.pids(groups.root), "the kernel joins its job")
        groups.start(0)
        _cell(kernel, f"subprocess.Popen([sys.executable, '-c', {WALKER!r}])\n"
                      "kids = [subprocess.Popen(['sleep', '60']) for _ in range(3)]")
        _until(lambda: len(limits.pids(groups.groups[0])) == 5, "cell 0's processes are born in its group")
        groups.start(1)  # the kernel moves on; cell 0's processes stay
        assert limits.pids(groups.groups[1]) == [kernel.pid]
        _until(lambda: limits.cpu_seconds([groups.groups[0]]) - groups._cpu_at_start[0] >= 1.0, "the walker spins")
        assert groups.culprit_by_cpu() == 0, "the CPU time cell 1 waited through was cell 0's walker's"
        assert groups.culprit_by_processes() == 0
        limits.kill_all([groups.groups[0]])
        groups.start(2)
        assert set(groups.groups) == {2}, "a cell that left nothing running has no group left"
        _cell(kernel, "t = time.process_time()\nwhile time.process_time() - t < 1.5:\n    pass")
        _until(lambda: limits.cpu_seconds([groups.groups[2]]) - groups._cpu_at_start[2] >= 1.0, "the kernel spins")
        assert groups.culprit_by_cpu() == 2, "the running cell's own CPU time is its own"
        groups.start(3, student=False)  # a cell of the lesson's own: what it leaves follows the kernel
        _cell(kernel, "servers = [subprocess.Popen(['sleep', '60']) for _ in range(6)]")
        _until(lambda: len(limits.pids(groups.groups[3])) == 7, "cell 3's processes")
        groups.start(4)
        assert len(limits.pids(groups.groups[4])) == 7 and set(groups.groups) == {4}
        assert groups.culprit_by_processes() == 4
    finally:
        kernel.kill()
        groups.close()
    job.remove()
    assert not any(os.path.exists(p) for p in job.paths), "the cells' groups go with the job's"


def test_the_servers_the_helpers_start_for_later_cells_are_known_by_their_command_lines():
    """What lesson 2, 4 and 5's import cells start from a thread of the kernel (it may run in any later cell) moves
    along with the kernel (graders/cell_groups.py), or every later cell's ranks would be counted against one answer."""
    import psutil

    from graders import cell_groups

    code = ("import time\nfrom helpers import fresh, launch, xla\nfresh.in_kernel = lambda: True\n"
            "launch.warm_up()\nfresh.start_in_background(xla.CPU_SERVER.start_in_background)\ntime.sleep(60)")
    kernel = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        _until(lambda: len(psutil.Process(kernel.pid).children()) >= 2, "the servers start", seconds=120)
        time.sleep(2)  # (helpers.fresh's XLA server, where torch_xla is installed)
        children = psutil.Process(kernel.pid).children()
        assert all(cell_groups._serves_the_kernel(child.pid) for child in children), [c.cmdline() for c in children]
        assert not cell_groups._serves_the_kernel(kernel.pid)
    finally:
        for child in psutil.Process(kernel.pid).children(recursive=True):
            child.kill()
        kernel.kill()
