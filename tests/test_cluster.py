"""Grading on a real Dask cluster: worker processes over TCP, one killed mid-submission; the README's commands."""

import csv
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from corpus import LESSON, POINTS, _cell
from graders import pipeline, sandbox

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SANDBOXED = sandbox.available() is None


def _class(root: Path) -> dict:
    """Two lesson-1 submissions: the solution, and the solution with a wrong quiz answer. -> expected points"""
    shutil.copytree(REPO / "solutions", root / "solutions")
    wrong = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    _cell(wrong, "quiz").source += '\nquiz["q2"] = {"a": "b", "b": "a", "fp16": "bf16", "bf16": "fp16"}[quiz["q2"]]\n'
    for student, nb in (("ada", None), ("bob", wrong)):
        folder = root / "submitted" / student / LESSON
        folder.mkdir(parents=True)
        if nb is None:
            shutil.copy(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", folder)
        else:
            nbformat.write(nb, folder / f"{LESSON}.ipynb")
    return {"ada": POINTS, "bob": {**POINTS, "quiz_tests": 0}}


def _grades(root: Path) -> dict:
    with open(root / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len({(r["student"], r["lesson"]) for r in rows}), "a submission recorded twice"
    return {r["student"]: {k: float(r[f"{LESSON}:{k}"]) for k in POINTS} for r in rows if r["status"] == "graded"}


def _gradebook_submissions(root: Path) -> list:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return sorted((s.student.id, s.assignment.name) for s in gb.assignment_submissions(LESSON))


def _kill_a_busy_worker(client, killed: dict) -> None:
    """Once a worker runs nbgrader for a submission, kill the worker process (SIGKILL, no goodbye)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pids = client.run(os.getpid)
        for address, keys in client.processing().items():
            if not keys or address not in pids:
                continue
            worker = psutil.Process(pids[address])
            children = worker.children(recursive=True)
            if any("nbgrader" in " ".join(c.cmdline()) for c in children if c.is_running()):
                time.sleep(2)  # mid-submission: its kernel is running cells
                killed.update(pid=worker.pid, key=keys[0], children=worker.children(recursive=True))
                os.kill(worker.pid, signal.SIGKILL)
                return
        time.sleep(0.2)


def test_a_class_on_a_local_cluster_survives_a_killed_worker_and_regrades_the_same(tmp_path):
    """Two worker processes over TCP; one dies mid-submission. The submission is graded again elsewhere, each
    grade is recorded once, by the coordinator alone; then the README's scheduler and worker commands grade
    the class again, with the same grades."""
    from distributed import Client, LocalCluster

    expected = _class(tmp_path)
    lines = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol="tcp://",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        killed = {}
        killer = threading.Thread(target=_kill_a_busy_worker, args=(client, killed), daemon=True)
        killer.start()
        results = pipeline.grade(tmp_path, cell_timeout=120, submission_timeout=600, sandboxed=SANDBOXED,
                                 scheduler=client, log=lines.append)
        killer.join(timeout=5)
    assert killed, "no worker was caught mid-submission"
    assert all(r.status == "graded" for r in results), [r.status for r in results]
    assert _grades(tmp_path) == expected
    assert _gradebook_submissions(tmp_path) == [("ada", LESSON), ("bob", LESSON)]
    student = re.match(r"grade-(\w+)-", killed["key"]).group(1)
    regraded = next(line for line in lines if f"] {student} " in line)
    assert f":{killed['pid']})" not in regraded, "the killed worker's submission was graded by another worker"
    assert not _still_running(killed["children"]), "the killed worker's nbgrader and kernel kept running"
    assert (tmp_path / "feedback" / "bob" / LESSON / f"{LESSON}.html").is_file()
    assert not list(tmp_path.glob("autograded/*/*/.*.recording")), "a partial write was left behind"

    first = (tmp_path / "grades.csv").read_text()
    _grade_with_the_readme_commands(tmp_path)
    assert _grades(tmp_path) == expected
    assert _gradebook_submissions(tmp_path) == [("ada", LESSON), ("bob", LESSON)]
    assert _without_seconds(first) == _without_seconds((tmp_path / "grades.csv").read_text())


def _still_running(processes: list, wait: float = 10) -> list:
    deadline = time.monotonic() + wait
    while True:
        alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _without_seconds(text: str) -> list:
    rows = list(csv.DictReader(text.splitlines()))
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def _readme_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = readme.split("### Many machines: grading on a Dask cluster")[1].split("```bash")[1].split("```")[0]
    return [line for line in block.strip().splitlines() if line and not line.startswith("#")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _grade_with_the_readme_commands(root: Path) -> None:
    """The README's three commands as written, with this machine as coordinator and worker, on a free port,
    and the class's root instead of the repository's."""
    scheduler, worker, grade = _readme_commands()
    port = str(_free_port())
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", COORDINATOR="127.0.0.1")
    started = []
    try:
        for command in (scheduler, worker):
            command = command.replace("8786", port).rstrip("& ")
            started.append(subprocess.Popen(["bash", "-c", command], cwd=REPO, env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        grade = grade.replace("8786", port).replace("make grade SCHEDULER=",
                                                    f"{BIN}/python -m graders.pipeline grade --root {root} --scheduler ")
        if not SANDBOXED:
            grade += " --unsandboxed"
        out = subprocess.run(["bash", "-c", grade], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert "grading on tcp://" in out.stdout and "1 workers" in out.stdout
    finally:
        for proc in started:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


def test_the_slurm_workers_run_the_readme_worker_command():
    sbatch = (REPO / "graders" / "dask-workers.sbatch").read_text()
    worker = _readme_commands()[1].rstrip("& ").replace("--nthreads 2", "")
    assert worker.split(".venv/bin/dask worker")[0] == "PYTHONPATH=$PWD "
    assert ".venv/bin/dask worker \"tcp://$COORDINATOR:8786\" --nthreads" in sbatch and "PYTHONPATH=$PWD" in sbatch
    assert subprocess.run(["bash", "-n", REPO / "graders" / "dask-workers.sbatch"]).returncode == 0
