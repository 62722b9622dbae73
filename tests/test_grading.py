"""Grading end to end: a class of submissions, good, blank, wrong, broken and crashing, in one batch."""

import csv
import html
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from graders import pipeline

REPO = Path(__file__).resolve().parent.parent
LESSON = "01-dataparallel"
POINTS = {"split_sizes_tests": 2, "device_samples_tests": 2, "dp_gradients_tests": 3,
          "device0_extra_tests": 3, "portable_checkpoint_tests": 3, "quiz_tests": 2}
FULL = sum(POINTS.values())


def _solution():
    return nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _wrong_quiz(nb):
    cell = _cell(nb, "quiz")
    cell.source = cell.source.replace('"q2": "b"', '"q2": "a"')


def _syntax_error(nb):
    _cell(nb, "device_samples").source = "def device_samples(batch_size, n_devices, device:\n    return []\n"


def _infinite_loop(nb):
    cell = _cell(nb, "split_sizes")
    cell.source = "while True:\n    pass\n" + cell.source


def _deleted_test_cell(nb):
    nb.cells.remove(_cell(nb, "quiz_tests"))


def _kernel_crash(nb):
    cell = _cell(nb, "device_samples")
    cell.source = "import os\nos._exit(1)\n" + cell.source


SUBMISSIONS = {
    "full": None,
    "wrong_quiz": _wrong_quiz,
    "syntax_error": _syntax_error,
    "infinite_loop": _infinite_loop,
    "deleted_test_cell": _deleted_test_cell,
    "kernel_crash": _kernel_crash,
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(REPO / "solutions", root / "solutions")
    for student, edit in SUBMISSIONS.items():
        nb = _solution()
        if edit:
            edit(nb)
        folder = root / "submitted" / student / LESSON
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{LESSON}.ipynb")
    blank = root / "submitted" / "blank" / LESSON
    blank.mkdir(parents=True)
    shutil.copy(REPO / "notebooks" / LESSON / f"{LESSON}.ipynb", blank)
    results = pipeline.grade(root, cell_timeout=20, submission_timeout=600)
    with open(root / "grades.csv") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    return root, {r.student: r for r in results}, rows


def _points(row):
    return {k: float(row[f"{LESSON}:{k}"]) for k in POINTS}


def test_every_submission_has_a_row(graded):
    _, results, rows = graded
    assert set(rows) == set(SUBMISSIONS) | {"blank"}
    assert all(float(row["max_score"]) == FULL for row in rows.values())


def test_solution_scores_full_marks(graded):
    _, _, rows = graded
    assert float(rows["full"]["score"]) == FULL and _points(rows["full"]) == POINTS


def test_untouched_student_notebook_scores_zero(graded):
    _, results, rows = graded
    assert results["blank"].status == "graded" and float(rows["blank"]["score"]) == 0


def test_one_wrong_answer_loses_exactly_its_points(graded):
    _, _, rows = graded
    assert _points(rows["wrong_quiz"]) == {**POINTS, "quiz_tests": 0}


def test_syntax_error_costs_only_that_exercise(graded):
    _, _, rows = graded
    assert _points(rows["syntax_error"]) == {**POINTS, "device_samples_tests": 0}


def test_infinite_loop_times_out_that_cell_only(graded):
    _, _, rows = graded
    assert _points(rows["infinite_loop"]) == {**POINTS, "split_sizes_tests": 0}


def test_deleted_test_cell_is_restored_and_run(graded):
    root, _, rows = graded
    assert _points(rows["deleted_test_cell"]) == POINTS
    restored = nbformat.read(root / "autograded" / "deleted_test_cell" / LESSON / f"{LESSON}.ipynb", as_version=4)
    assert _cell(restored, "quiz_tests")


def test_kernel_crash_is_reported_and_the_batch_goes_on(graded):
    _, results, rows = graded
    assert results["kernel_crash"].status == "not graded: the kernel died"
    assert float(rows["kernel_crash"]["score"]) == 0
    assert results["full"].status == "graded"


def test_feedback_hides_the_hidden_tests(graded):
    root, _, _ = graded
    cells = [c.source for c in _solution().cells]
    regions = [s.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0] for s in cells if "BEGIN HIDDEN" in s]
    public = {line.strip() for s in cells for line in s.split("### BEGIN HIDDEN TESTS")[0].splitlines()}
    hidden = [line.strip() for r in regions for line in r.splitlines() if len(line.strip()) > 15 and line.strip() not in public]
    assert hidden
    for student in ("full", "blank", "wrong_quiz"):
        page = (root / "feedback" / student / LESSON / f"{LESSON}.html").read_text()
        text = html.unescape(re.sub(r"<[^>]+>", "", page))  # the code as a reader sees it
        assert "Hidden tests ran here" in text
        assert 'assert my_split_sizes(10, 3) == [4, 4, 2]' in text, "visible tests stay visible"
        for line in hidden:
            assert line not in text, line
