"""Grading survives broken and hostile submissions, and none of the attacks works (the sandbox)."""

import csv
import json
import shutil
import sqlite3
from pathlib import Path

import nbformat
import pytest

from classroom import CELL_TIMEOUT, LESSON_TIMEOUTS
from corpus import CASES, LESSON, POINTS
from graders import grades, pipeline, sandbox

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_submission_gets_its_expected_grade(graded_class, case):
    result, row, ctx = graded_class.results[case.name, LESSON], graded_class.rows[case.name, LESSON], graded_class.ctx
    assert result.status.startswith(case.status), result.status
    got = {k: float(row[f"{LESSON}:{k}"]) for k in POINTS}
    assert got == {k: float(v) for k, v in case.points.items()}
    assert bool(row["flags"]) == case.flagged, f"flags: {row['flags']!r}"
    for canary in case.canaries:
        assert not Path(canary.format(**{k: str(v) for k, v in ctx.items()})).exists(), canary
    if case.check:
        case.check(graded_class.root, ctx)


def test_the_students_file_is_kept(graded_class):
    """A notebook the grader had to repair (stripped metadata and a lone surrogate) is kept as it was submitted, and
    one under another name keeps its name."""
    root = graded_class.root
    folder = root / "submitted" / "lone_surrogate" / LESSON
    original = json.loads((folder / f"{LESSON}.ipynb.submitted").read_text())
    assert not any("nbgrader" in cell["metadata"] for cell in original["cells"])
    assert (root / "submitted" / "tampered_notebook" / LESSON / "my-lesson-1.ipynb").is_file()


def test_nothing_was_stolen(graded_class):
    root = graded_class.root
    notebook = nbformat.read(root / "autograded" / "escapes" / LESSON / f"{LESSON}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))
    assert "STOLEN" not in printed
    assert "BEGIN SOLUTION" not in printed and "BEGIN HIDDEN" not in printed


def test_no_connection_left_the_sandbox(graded_class):
    assert graded_class.connections == 0


def test_the_gradebook_is_intact_and_complete(graded_class):
    """Every graded submission is in the gradebook exactly once (a worker was killed mid-way), nothing else is."""
    db = sqlite3.connect(graded_class.root / "gradebook.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT COUNT(*) FROM grade WHERE manual_score = 999").fetchone()[0] == 0
    graded = sorted(key for key, r in graded_class.results.items() if r.status.startswith("graded"))
    recorded = sorted(db.execute("SELECT student.id, assignment.name FROM submitted_assignment JOIN student ON "
                                 "student.id = submitted_assignment.student_id JOIN assignment ON "
                                 "assignment.id = submitted_assignment.assignment_id"))
    assert recorded == graded


def test_regrading_is_idempotent(graded_class):
    """Grade one of the submissions again (the renamed one: its copy under the lesson's name is there now), on this
    machine's own pool this time (the whole batch again would double this test's time): the same grades, nothing
    recorded twice, and grades.csv keeps every other submission's row as it was."""
    root = graded_class.root
    with open(root / "grades.csv") as f:
        before = {(row["student"], row["lesson"]): row for row in csv.DictReader(f)}
    rows = {student: row for (student, lesson), row in before.items() if lesson == LESSON}
    keep = {"tampered_notebook"}
    parked = root / "parked"
    parked.mkdir()
    for folder in list((root / "submitted").iterdir()):
        if folder.name not in keep:
            shutil.move(str(folder), str(parked / folder.name))
    try:
        pipeline.grade(root, cell_timeout=CELL_TIMEOUT, submission_timeout=900, jobs=1, lesson_timeouts=LESSON_TIMEOUTS)
        with open(root / "grades.csv") as f:
            everything = {(row["student"], row["lesson"]): row for row in csv.DictReader(f)}
        again = {student: row for (student, lesson), row in everything.items() if student in keep}
    finally:
        for folder in parked.iterdir():
            shutil.move(str(folder), str(root / "submitted" / folder.name))
        with open(root / "grades.csv", "w", newline="") as f:  # leave the batch's CSV for the tests after this one
            writer = csv.DictWriter(f, fieldnames=list(next(iter(graded_class.rows.values()))))
            writer.writeheader()
            writer.writerows(graded_class.rows.values())
    assert set(again) == keep and set(everything) == set(before)
    assert all(everything[key] == row for key, row in before.items() if key[0] not in keep)
    for name in keep:
        assert {k: v for k, v in again[name].items() if k != "seconds"} == {k: v for k, v in rows[name].items() if k != "seconds"}


def test_reports_plot_where_points_were_lost(graded_class):
    png = grades.report(graded_class.root)
    assert png.stat().st_size > 5000


def test_grading_refuses_without_a_sandbox(tmp_path, monkeypatch):
    shutil.copytree(REPO / "solutions", tmp_path / "solutions")
    monkeypatch.setattr(sandbox, "available", lambda: "bwrap is not installed")
    with pytest.raises(pipeline.SandboxUnavailable, match="--unsandboxed"):
        pipeline.grade(tmp_path)
