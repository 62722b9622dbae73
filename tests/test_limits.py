"""Each grading job's cgroups: created with the bounds, joined by the kernel launcher, emptied and removed;
where cgroups are missing, the grader says what it cannot bound."""

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
    assert all(not limits._pids(p) for p in job.paths), "nothing of the job is left"


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
