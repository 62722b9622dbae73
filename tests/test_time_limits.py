"""A grade never depends on how busy the machine is (issue 39): a cell's time limit counts the CPU-seconds of its job
(graders/cell_limit.py), and the wall clock is only a backstop that ends in "not graded", never in lost points.

Under load, lesson 4's first XLA cell waited for its fork server's import of torch_xla past the cell's limit, counted
then in wall-clock seconds: a right notebook lost its bucket and spmd points, and got them when graded again. Here the
machine's slowness is simulated deterministically: a right answer whose first call waits (as a cell starved by a busy
machine, or waiting for a server's imports, does) without computing.
"""

import csv
import os
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from conftest import REPO
from graders import cell_limit, limits, pipeline, sandbox, submission

LESSON = "01-dataparallel"
SANDBOXED = sandbox.available() is None
CELL_CPU_S = 8  # the cell limit, in CPU-seconds of the job
WALL_S = 30  # the wall-clock backstop (GRADER_CELL_WALL_TIMEOUT)
SLOW_S = 14  # a right answer that takes this long (waiting): past the limit's seconds, within the backstop
STUCK_S = 120  # one that waits past the backstop


def _waiting_answer(wait_s: float) -> str:
    """lesson 1's right answer to split_sizes, whose first call waits `wait_s` seconds (its visible tests' first line)."""
    return ("import time as _time\n"
            f"_waits = [{wait_s}]\n\n\n"
            "def my_split_sizes(batch_size, n_devices):\n"
            "    if _waits:\n"
            "        _time.sleep(_waits.pop())  # the machine's load, simulated\n"
            "    rows = -(-batch_size // n_devices)\n"
            "    sizes = [rows] * (batch_size // rows)\n"
            "    if batch_size % rows:\n"
            "        sizes.append(batch_size % rows)\n"
            "    return sizes\n")


def _looping_answer(runs) -> str:
    """lesson 1's split_sizes answer as an infinite loop that first notes, in the file `runs`, that it ran."""
    return f"with open({str(runs)!r}, 'a') as _runs:\n    _runs.write('ran\\n')\nwhile True:\n    pass\n"


def _submit(root, student, wait_s=None, answer=None):
    nb = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "split_sizes"]
    cell.source = answer or _waiting_answer(wait_s)
    folder = root / "submitted" / student / LESSON
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{LESSON}.ipynb")


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
def test_a_slow_right_answer_keeps_its_points_and_a_stuck_one_is_not_graded(tmp_path, monkeypatch, sandboxed):
    """A right answer that takes longer than its cell's limit in seconds, without computing, keeps its points (it
    lost them before: 13 of 15); one that waits past the wall-clock backstop gets no grade and a status that says to
    grade it again, not a zero. In the sandbox the job's cgroup counts its CPU time, unsandboxed the kernel's tree."""
    if sandboxed and not SANDBOXED:
        pytest.skip(sandbox.available())
    shutil.copytree(REPO / "solutions", tmp_path / "solutions")
    _submit(tmp_path, "slow", SLOW_S)
    _submit(tmp_path, "stuck", STUCK_S)
    runs = tmp_path / "loop-runs.txt"  # only an unsandboxed kernel can write outside its jail
    if not sandboxed:
        _submit(tmp_path, "looping", answer=_looping_answer(runs))
    monkeypatch.setenv("GRADER_CELL_WALL_TIMEOUT", str(WALL_S))
    start = time.monotonic()
    pipeline.grade(tmp_path, cell_timeout=CELL_CPU_S, submission_timeout=900, jobs=2, sandboxed=sandboxed,
                   only_lessons=[LESSON])
    with open(tmp_path / "grades.csv") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    slow, stuck = rows["slow"], rows["stuck"]
    assert slow["status"] == "graded" and slow["score"] == slow["max_score"], slow
    assert float(slow[f"{LESSON}:split_sizes_tests"]) == 2, slow
    assert stuck["status"].startswith("not graded: " + submission.TOO_SLOW), stuck
    assert time.monotonic() - start < STUCK_S, "the backstop stopped the stuck cell, not its own end"
    if not sandboxed:
        # an answer past its limit scores 0 and runs once: the hidden run leaves it out, as it leaves out one that
        # killed the kernel (it ran there too, using up its limit a second time: graders/execute.py OVER_LIMIT)
        looping = rows["looping"]
        assert looping["status"] == "graded" and float(looping[f"{LESSON}:split_sizes_tests"]) == 0, looping
        assert float(looping["score"]) == float(looping["max_score"]) - 2, looping
        assert runs.read_text() == "ran\n", "the looping answer ran again in the hidden run"


def test_the_backstop_is_generous_and_can_be_set():
    assert cell_limit.wall_seconds(20) >= 20 + cell_limit.WALL_MARGIN_S
    assert cell_limit.wall_seconds(300) >= cell_limit.WALL_FACTOR * 300
    os.environ["GRADER_CELL_WALL_TIMEOUT"] = "7"
    try:
        assert cell_limit.wall_seconds(300) == 7
    finally:
        del os.environ["GRADER_CELL_WALL_TIMEOUT"]


BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.6:\n    pass\n"


def test_a_jobs_cpu_time_is_counted_by_its_cgroup_or_its_process_tree():
    """What a cell's limit reads: a job's CPU-seconds, those of processes that ended included."""
    job = limits.JobGroups(f"course-grader-test-cpu-{os.getpid()}", 4 * 2**30, 64).create()
    try:
        if limits.cpu_seconds(job.paths) is None:
            pytest.skip(job.describe())
        before = limits.cpu_seconds(job.paths)
        subprocess.run([sys.executable, "-c", "from graders import limits; limits.join()\n" + BURN], check=True,
                       env={**os.environ, **job.env(), "PYTHONPATH": str(REPO)})
        assert limits.cpu_seconds(job.paths) - before >= 0.5
    finally:
        job.remove()
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time\n"
                               f"subprocess.run([sys.executable, '-c', {BURN!r}])\ntime.sleep(60)"])
    try:
        deadline = time.monotonic() + 60
        while (cell_limit.tree_cpu_seconds(parent.pid) or 0) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cell_limit.tree_cpu_seconds(parent.pid) >= 0.5, "an unsandboxed kernel's children count too"
    finally:
        parent.kill()
        parent.wait()
