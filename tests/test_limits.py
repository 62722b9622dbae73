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
