"""A student's self-check (`make check NOTEBOOK=...`, graders/selfcheck.py): their saved notebook graded exactly as
`make grade` grades it, points per exercise and the feedback page, with nothing of the checkout changed."""

import json
import subprocess
from pathlib import Path

import nbformat
import pytest

from graders import selfcheck

REPO = Path(__file__).resolve().parent.parent
LESSON = "01-dataparallel"


def _with_wrong_quiz(tmp_path: Path) -> Path:
    nb = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    quiz = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "quiz")
    quiz.source = quiz.source.replace('"q1": 1,', '"q1": 2,', 1)
    assert '"q1": 2,' in quiz.source
    path = tmp_path / "renamed by the student.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_self_check_grades_the_saved_notebook_as_the_grader_does(tmp_path):
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    out = tmp_path / "out"
    ran = subprocess.run(["make", "-s", "check", f"NOTEBOOK={_with_wrong_quiz(tmp_path)}"], cwd=REPO,
                         capture_output=True, text=True, timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    report = ran.stdout
    assert f"{LESSON}: graded" in report, report
    assert "FAIL quiz" in report and "ok   split_sizes" in report and "total 13 / 15" in report, report
    page = REPO / "reports" / "self-check" / f"{LESSON}.html"
    assert str(page) in report and page.is_file()
    after = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    assert after == before, "a self-check changes nothing git tracks"


def test_a_self_check_refuses_what_is_not_a_lesson_notebook(tmp_path):
    text = tmp_path / "notes.ipynb"
    text.write_text("not a notebook")
    with pytest.raises(ValueError, match="notebook"):
        selfcheck.check(text)
    empty = tmp_path / "empty.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), empty)
    with pytest.raises(ValueError, match="none of the graded cells"):
        selfcheck.check(empty)
    with pytest.raises(ValueError, match="notebook must be"):
        selfcheck.check(tmp_path / "missing.ipynb")
    assert selfcheck.main([str(text)]) == 2


def test_the_lesson_is_found_by_its_graded_cells_not_its_name(tmp_path):
    renamed = tmp_path / "mine.ipynb"
    renamed.write_text((REPO / "notebooks" / "02-ddp" / "02-ddp.ipynb").read_text())
    assert selfcheck.lesson_of(renamed) == "02-ddp"
    assert json.loads(renamed.read_text())["cells"]


def test_a_cell_checks_its_own_notebook(tmp_path):
    """From a cell of the notebook (helpers.selfcheck.check(), which finds the notebook as JupyterLab names it): the
    same report as `make check`; the released notebook, unsolved, scores nothing."""
    from nbclient import NotebookClient

    mine = tmp_path / "01-dataparallel.ipynb"
    mine.write_text((REPO / "notebooks" / LESSON / f"{LESSON}.ipynb").read_text())
    cell = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("from helpers import selfcheck\nselfcheck.check()")])
    client = NotebookClient(cell, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.km = client.create_kernel_manager()
    with client.setup_kernel(env={**__import__("os").environ, "JPY_SESSION_NAME": str(mine)}):
        client.execute_cell(cell.cells[0], 0)
    report = "".join(o.get("text", "") for o in cell.cells[0].outputs)
    assert f"{LESSON}: graded" in report and "total 0 / 15" in report and "FAIL quiz" in report, report
