"""The graded exercises judge the answer, not its spelling: every right answer in tests/answers.py passes
its exercise's test cell (visible and hidden tests), every wrong one fails it.

The lesson's setup and import cells run once per lesson; each answer then runs in a copy of that namespace,
followed by the exercise's test cell, in this process (no kernel: a few seconds for a whole lesson).
How nbgrader turns a cell into points (stderr, errors) is tested by test_grading.py.
"""

import contextlib
import io

import nbformat
import pytest

from answers import ANSWERS, CONTEXT
from conftest import REPO

CASES = [(lesson, exercise, kind, name) for lesson, exercises in ANSWERS.items() for exercise, kinds in exercises.items()
         for kind in ("right", "wrong") for name in kinds[kind]]


def _cells(lesson):
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"]


@pytest.fixture(scope="module")
def namespaces():
    made = {}

    def get(lesson):
        if lesson not in made:
            namespace = {}
            with contextlib.redirect_stdout(io.StringIO()):
                for cell in _cells(lesson)[:2]:  # the setup cell and the imports
                    exec(cell.source, namespace)
                exec(CONTEXT.get(lesson, ""), namespace)
            made[lesson] = namespace
        return dict(made[lesson])

    return get


def _test_cell(lesson, exercise):
    cells = _cells(lesson)
    index = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == exercise)
    test = cells[index + 1]
    assert test.metadata["nbgrader"]["grade"], f"the cell after {exercise} is its test"
    return test.source


def test_every_exercise_of_the_corpus_has_enough_answers():
    for lesson, exercises in ANSWERS.items():
        for exercise, kinds in exercises.items():
            assert len(kinds["right"]) >= 3 and len(kinds["wrong"]) >= 5, (lesson, exercise)


@pytest.mark.parametrize("lesson, exercise, kind, name", CASES, ids=[f"{l}-{e}-{k}-{n}" for l, e, k, n in CASES])
def test_answer_is_judged_right(namespaces, lesson, exercise, kind, name):
    namespace = namespaces(lesson)
    exec(ANSWERS[lesson][exercise][kind][name], namespace)
    with contextlib.redirect_stdout(io.StringIO()):
        if kind == "right":
            exec(_test_cell(lesson, exercise), namespace)
        else:
            with pytest.raises(Exception):
                exec(_test_cell(lesson, exercise), namespace)
