"""Grading survives broken and hostile submissions, and none of the attacks works (the sandbox)."""

import csv
import os
import json
import shutil
import socket
import sqlite3
import tempfile
import threading
from pathlib import Path

import nbformat
import pytest

from graders import pipeline, sandbox
from corpus import CASES, LESSON, POINTS

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}")


class Listener:
    """A TCP server on the host's loopback that records whether anybody reached it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                pass

    def close(self):
        self.running = False
        self.thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    host_tmp = Path(tempfile.mkdtemp(prefix="corpus-canary-"))
    secret = host_tmp / "secret.txt"  # a root-only file outside the course
    secret.write_text("TOPSECRET")
    secret.chmod(0o600)
    os.environ["INSTRUCTOR_TOKEN"] = "token-only-the-instructor-has"  # must not reach the jail
    elsewhere = Path(tempfile.mkdtemp(prefix="course-canary-", dir="/var/lib" if os.access("/var/lib", os.W_OK) else None))
    (elsewhere / "data.txt").write_text("ELSEWHERE-CONTENT")
    elsewhere.chmod(0o755)
    (elsewhere / "data.txt").chmod(0o644)  # readable by anyone: only the jail's view of the machine protects it
    shutil.copytree(REPO / "solutions", root / "solutions")
    listener = Listener()
    ctx = {"repo": REPO, "root": root, "host_tmp": host_tmp, "host_tmp_name": host_tmp.name, "port": listener.port,
           "secret": secret, "env_secret": os.environ["INSTRUCTOR_TOKEN"], "elsewhere": elsewhere / "data.txt"}
    for case in CASES:
        folder = root / "submitted" / case.name / LESSON
        folder.mkdir(parents=True)
        case.write(folder, REPO, ctx)
    try:
        results = pipeline.grade(root, cell_timeout=20, submission_timeout=900, jobs=2)
    finally:
        listener.close()
    with open(root / "grades.csv") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    yield root, {r.student: r for r in results}, rows, ctx, listener
    shutil.rmtree(host_tmp, ignore_errors=True)
    shutil.rmtree(elsewhere, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_submission_gets_its_expected_grade(graded, case):
    root, results, rows, ctx, _ = graded
    assert results[case.name].status.startswith(case.status), results[case.name].status
    got = {k: float(rows[case.name][f"{LESSON}:{k}"]) for k in POINTS}
    assert got == {k: float(v) for k, v in case.points.items()}
    assert bool(rows[case.name]["flags"]) == case.flagged, f"flags: {rows[case.name]['flags']!r}"
    for canary in case.canaries:
        assert not Path(canary.format(**{k: str(v) for k, v in ctx.items()})).exists(), canary
    if case.check:
        case.check(root, ctx)


def test_the_students_file_is_kept(graded):
    """A notebook the grader had to repair (stripped metadata, a lone surrogate) is kept as it was submitted."""
    root = graded[0]
    for name in ("stripped_metadata", "lone_surrogate"):
        folder = root / "submitted" / name / LESSON
        original = json.loads((folder / f"{LESSON}.ipynb.submitted").read_text())
        assert not any("nbgrader" in cell["metadata"] for cell in original["cells"])


def test_nothing_was_stolen(graded):
    root = graded[0]
    notebook = nbformat.read(root / "autograded" / "reads_solutions_and_gradebook" / LESSON / f"{LESSON}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))
    assert "STOLEN" not in printed
    assert "BEGIN SOLUTION" not in printed and "BEGIN HIDDEN" not in printed


def test_no_connection_left_the_sandbox(graded):
    assert graded[4].connections == 0


def test_the_gradebook_is_intact_and_complete(graded):
    root, results, rows, _, _ = graded
    db = sqlite3.connect(root / "gradebook.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT COUNT(*) FROM grade WHERE manual_score = 999").fetchone()[0] == 0
    graded_names = {name for name, r in results.items() if r.status.startswith("graded")}
    students = {r[0] for r in db.execute("SELECT student.id FROM submitted_assignment JOIN student ON student.id = submitted_assignment.student_id")}
    assert graded_names <= students


def test_regrading_is_idempotent(graded):
    """Grade two of the submissions again (the whole batch again would double this test's time)."""
    root, _, rows, _, _ = graded
    keep = {"syntax_error", "renamed_notebook"}
    parked = root / "parked"
    parked.mkdir()
    for folder in list((root / "submitted").iterdir()):
        if folder.name not in keep:
            shutil.move(str(folder), str(parked / folder.name))
    try:
        pipeline.grade(root, cell_timeout=20, submission_timeout=900, jobs=2)
        with open(root / "grades.csv") as f:
            again = {row["student"]: row for row in csv.DictReader(f)}
    finally:
        for folder in parked.iterdir():
            shutil.move(str(folder), str(root / "submitted" / folder.name))
        with open(root / "grades.csv", "w", newline="") as f:  # leave the batch's CSV for the tests after this one
            writer = csv.DictWriter(f, fieldnames=list(next(iter(rows.values()))))
            writer.writeheader()
            writer.writerows(rows.values())
    assert set(again) == keep
    for name in keep:
        assert {k: v for k, v in again[name].items() if k != "seconds"} == {k: v for k, v in rows[name].items() if k != "seconds"}


def test_reports_plot_where_points_were_lost(graded):
    root = graded[0]
    png = pipeline.report(root)
    assert png.stat().st_size > 5000


def test_grading_refuses_without_a_sandbox(tmp_path, monkeypatch):
    shutil.copytree(REPO / "solutions", tmp_path / "solutions")
    monkeypatch.setattr(sandbox, "available", lambda: "bwrap is not installed")
    with pytest.raises(pipeline.SandboxUnavailable, match="--unsandboxed"):
        pipeline.grade(tmp_path)
