"""The graded exercises judge the answer, not its spelling: every right answer in tests/answers.py passes
its exercise's test cell (visible and hidden tests), every wrong one fails it.

The lesson's setup and import cells run once per lesson; each answer then runs in a copy of that namespace,
followed by the exercise's test cell split as grading splits it (graders/judge.py): the visible tests (for a
wrong answer, only their definitions, as a hidden run takes them: graders/hidden_runs.py), the hidden setup and the
collect part in the answer's namespace (the kernel's side), then the judge part in a namespace of its own made from
the prelude cells, the setup and the collected data only (the judge's side). A right answer and the kernel's side run
with the judge's references refused to the answer, as in a hidden run (helpers/refusal.py): no right answer may lose
its points to a refusal.
All in this process (no kernel: a few seconds for a whole lesson). How nbgrader turns a cell into points
(stderr, errors) is tested by test_grading.py.
"""

import contextlib
import io

import nbformat
import pytest

from answers import ANSWERS
from conftest import REPO
from graders import hidden_runs, judge
from helpers import refusal

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
            made[lesson] = namespace
        return dict(made[lesson])

    return get


@pytest.fixture(scope="module")
def judge_namespaces():
    made = {}

    def get(lesson):
        if lesson not in made:
            made[lesson] = judge.prelude(nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4))
        return dict(made[lesson])

    return get


INSTRUCTOR, ANSWER = "<the instructor's cell>", "<the answer cell>"  # the code's file names, as a hidden run tells them


def _refusing(code, namespace, source):
    """exec(code) as a hidden run runs it: references refused to anything but the instructor's `source`."""
    try:
        refusal._refusing_as((frozenset({INSTRUCTOR}), frozenset(hidden_runs._names(source))), exec, code, namespace)
    finally:
        refusal._state = None


def _run_as_graded(source, namespace, judged):
    """The kernel's side in `namespace` (the references refused to the answer), then the judge's side in `judged`."""
    parts = judge.split(source)
    assert parts is not None, "every graded cell's hidden tests are split into setup, collect and judge"
    _refusing(compile(parts["visible"] + "\n" + parts["setup"] + "\n" + parts["collect"], INSTRUCTOR, "exec"), namespace,
              source)
    exec(parts["setup"], judged)
    judged["_got"] = namespace["_got"]
    exec(parts["judge"], judged)


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


def _launches(parts) -> bool:
    """An exercise whose collect part starts processes (its wrong answers are judged as a whole, for time)."""
    return any(word in parts["visible"] + parts["collect"] for word in ("launch(", "xla.run(", "lightning_demo"))


@pytest.mark.parametrize("lesson, exercise, kind, name", CASES, ids=[f"{l}-{e}-{k}-{n}" for l, e, k, n in CASES])
def test_answer_is_judged_right(namespaces, judge_namespaces, lesson, exercise, kind, name):
    """A right answer passes the visible tests and the judge; a wrong one fails. And a wrong answer must fail where
    a student cannot reach: whenever its collect part runs, the judge part alone must reject the data (except for
    exercises that launch processes, where failing anywhere counts: running them twice is too slow)."""
    namespace, judged = namespaces(lesson), judge_namespaces(lesson)
    source = _test_cell(lesson, exercise)
    try:
        _refusing(compile(ANSWERS[lesson][exercise][kind][name], ANSWER, "exec"), namespace, source)
    except Exception:  # noqa: BLE001 - an answer cell that fails (a reference refused): no function, no points
        if kind == "right":
            raise
        return
    with contextlib.redirect_stdout(io.StringIO()):
        if kind == "right":
            _run_as_graded(source, namespace, judged)
        elif _launches(parts := judge.split(source)):
            with pytest.raises(Exception):
                _run_as_graded(source, namespace, judged)
        else:
            collect = parts["setup"] + "\n" + parts["collect"]
            try:  # what a hidden run takes of the visible part: its definitions, without its checks
                _refusing(compile(hidden_runs.tests_part(parts["visible"], collect), INSTRUCTOR, "exec"), namespace, source)
            except Exception:  # noqa: BLE001
                pass
            try:
                _refusing(compile(collect, INSTRUCTOR, "exec"), namespace, source)
            except Exception:  # noqa: BLE001 - the answer crashed on hidden inputs (or was refused): no data, no points
                return
            exec(parts["setup"], judged)
            judged["_got"] = namespace["_got"]
            with pytest.raises(Exception):
                exec(parts["judge"], judged)


def test_the_judge_alone_is_tested_on_enough_wrong_answers():
    """test_answer_is_judged_right makes the judge alone reject the wrong answers of every exercise that
    launches no processes: there must be plenty of them."""
    judged_alone = sum(len(kinds["wrong"]) for lesson, exercises in ANSWERS.items() for exercise, kinds in exercises.items()
                       if not _launches(judge.split(_test_cell(lesson, exercise))))
    assert judged_alone >= 120
