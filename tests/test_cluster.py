"""Grading on a real Dask cluster: worker processes over TCP, one killed mid-submission; the commands of the
website's cluster page (website/pages/cluster.md), as written."""

import csv
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import course_docs
from corpus import CLASS, LESSON, write_class_submission
from graders import sandbox

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SANDBOXED = sandbox.available() is None


def _gradebook_submissions(root: Path) -> list:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return sorted((s.student.id, s.assignment.name) for a in gb.assignments for s in gb.assignment_submissions(a.name))


def test_a_worker_killed_mid_submission_costs_a_retry_elsewhere(graded_class):
    """The session's class was graded by two worker processes over TCP, one of which was killed mid-submission:
    that submission was graded again by another worker, recorded once, by the coordinator alone; the killed
    worker's nbgrader and kernel did not keep running."""
    killed = graded_class.killed
    assert killed, "no worker was caught mid-submission"
    student, lesson = re.match(r"grade-(.+)-(\d\d-[a-z-]+)-\w+$", killed["key"]).groups()
    assert graded_class.results[student, lesson].status.startswith("graded"), graded_class.results[student, lesson].status
    regraded = next(line for line in graded_class.log if f"] {student} " in line and lesson in line)
    assert f":{killed['pid']})" not in regraded, "the killed worker's submission was graded by another worker"
    assert not _still_running(killed["children"]), "the killed worker's nbgrader and kernel kept running"
    graded = sorted(key for key, r in graded_class.results.items() if r.status.startswith("graded"))
    assert _gradebook_submissions(graded_class.root) == graded, "each graded submission recorded exactly once"
    assert not list(graded_class.root.glob("autograded/*/*/.*.recording")), "a partial write was left behind"


def test_the_local_workers_keep_no_statistical_profile(graded_class):
    """graders.cluster.local_cluster, which graded the class: no dashboard shows a profile, so no worker samples one
    (the worker restarted after the kill included)."""
    assert len(graded_class.profiling) == 2 and set(graded_class.profiling.values()) == {False}


def test_the_local_workers_share_the_judges_references(graded_class):
    """The judge's references (torch's own results) are computed once for all of a local cluster's workers (the
    worker restarted after the kill included), in the one folder local_cluster made for them."""
    memos = [memo for found in graded_class.memos.values() for memo in found]
    assert len(memos) == 2 and len({folder for folder, _ in memos}) == 1, memos
    folder, files = memos[0]
    assert os.path.basename(folder).startswith("judge-memo-") and files and all(f.endswith(".json") for f in files)


def test_a_local_cluster_needs_a_worker():
    from graders import cluster

    for bad in (0, -1, "2", True, 1.5):
        with pytest.raises(ValueError, match="workers"):
            cluster.local_cluster(bad)
    for bad in ("", "local:0", "local:x", "local:"):
        with pytest.raises(ValueError, match="scheduler"):
            cluster.connect(bad)


def test_the_readme_commands_grade_on_a_scheduler_and_worker_the_same(graded_class, tmp_path):
    """The cluster page's three commands as written (this machine as coordinator and worker) grade a submission of the
    session's class again, in another course root: the same grade."""
    shutil.copytree(REPO / "solutions", tmp_path / "solutions")
    folder = tmp_path / "submitted" / "turkish" / LESSON
    folder.mkdir(parents=True)
    write_class_submission(folder, REPO, LESSON, CLASS["turkish"][LESSON])
    _grade_with_the_readme_commands(tmp_path)
    with open(tmp_path / "grades.csv") as f:
        (row,) = list(csv.DictReader(f))
    before = graded_class.rows["turkish", LESSON]
    assert row["status"] == "graded"
    assert {k: row[k] for k in row if k != "seconds"} == {k: before[k] for k in row if k != "seconds"}
    assert _gradebook_submissions(tmp_path) == [("turkish", LESSON)]


def _still_running(processes: list, wait: float = 10) -> list:
    deadline = time.monotonic() + wait
    while True:
        alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _readme_commands() -> list[str]:
    """The three commands of the cluster page (it was the README's section), as written."""
    block = course_docs.bash_block("cluster.md", "Many machines: grading on a Dask cluster")
    return [line for line in block.strip().splitlines() if line and not line.startswith("#")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _grade_with_the_readme_commands(root: Path) -> None:
    """The cluster page's three commands as written, with this machine as coordinator and worker, on a free port,
    and the class's root instead of the repository's."""
    from graders import cluster

    scheduler, worker, grade = _readme_commands()
    certs = root / "certs"  # `make certs`, for this class's root
    cluster.make_certificates(certs)
    scheduler, worker = (c.replace("certs/", f"{certs}/") for c in (scheduler, worker))
    port = str(_free_port())
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", COORDINATOR="127.0.0.1")
    started = []
    try:
        for command in (scheduler, worker):
            command = command.replace("8786", port).rstrip("& ")
            started.append(subprocess.Popen(["bash", "-c", command], cwd=REPO, env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        grade = grade.replace("8786", port).replace("make grade SCHEDULER=",
                                                    f"{BIN}/python -m graders.pipeline grade --root {root} --certs {certs} --scheduler ")
        if not SANDBOXED:
            grade += " --unsandboxed"
        out = subprocess.run(["bash", "-c", grade], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert "grading on tls://" in out.stdout and "1 workers" in out.stdout
    finally:
        for proc in started:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


def test_the_slurm_workers_run_the_readme_worker_command():
    sbatch = (REPO / "graders" / "dask-workers.sbatch").read_text()
    worker = _readme_commands()[1].rstrip("& ").replace("--nthreads 2", "")
    assert worker.split(".venv/bin/dask worker")[0] == "PYTHONPATH=$PWD "
    assert worker.split(".venv/bin/dask worker ")[1].split(" --nthreads")[0].replace("tls://$COORDINATOR:8786", "") \
        in sbatch.replace('"tls://$COORDINATOR:8786"', "") and "PYTHONPATH=$PWD" in sbatch
    assert subprocess.run(["bash", "-n", REPO / "graders" / "dask-workers.sbatch"]).returncode == 0
