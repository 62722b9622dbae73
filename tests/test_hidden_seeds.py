"""Hidden inputs are drawn anew for every submission (helpers.grading.hidden_random): no draw may cost a right answer
its points. Every exercise whose hidden tests start no processes runs the solution's answer on many seeds, collect
and judge as grading splits them (tests/test_answers.py runs the answers on the fixed seed); each draw must pass.
(The exercises that launch ranks, XLA or Accelerate processes draw from the same code paths and are left to
test_hidden_grading.py's two gradings: SEEDS launches each would cost minutes.)"""

import contextlib
import io

import pytest

from conftest import REPO
from graders import hidden_runs, judge
from graders.course import lessons
from helpers import grading
from test_answers import _cells, _launches, judge_namespaces, namespaces  # noqa: F401 (fixtures)

SEEDS = range(1, 9)  # besides grading.FIXED_SEED, which test_answers.py and nbval use


def _exercises() -> list[tuple[str, str, str, str]]:
    """(lesson, grade id, answer cell's source, test cell's source) of every judged exercise that launches nothing."""
    found = []
    for lesson in lessons(REPO):
        cells = _cells(lesson)
        for answer, test in zip(cells, cells[1:]):
            parts = judge.split(test.source) if test.metadata.get("nbgrader", {}).get("grade") else None
            if parts and answer.metadata.get("nbgrader", {}).get("solution") and not _launches(parts):
                found.append((lesson, test.metadata["nbgrader"]["grade_id"], answer.source, test.source))
    return found


EXERCISES = _exercises()


def test_most_exercises_are_drawn_on_many_seeds_here():
    assert len(EXERCISES) >= 15


@pytest.mark.parametrize("lesson, grade_id, answer, test", EXERCISES, ids=[f"{l}-{g}" for l, g, _, _ in EXERCISES])
def test_the_solution_passes_every_draw_of_its_hidden_inputs(namespaces, judge_namespaces, lesson, grade_id, answer,
                                                             test):
    parts = judge.split(test)
    collect = parts["setup"] + "\n" + parts["collect"]
    solved = namespaces(lesson)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(answer, solved)
        exec(hidden_runs.tests_part(parts["visible"], collect), solved)
    try:
        for seed in SEEDS:
            grading.use_hidden_seed(seed)
            ran, judged = dict(solved), judge_namespaces(lesson)
            with contextlib.redirect_stdout(io.StringIO()):
                exec(collect, ran)
                exec(parts["setup"], judged)
                judged["_got"] = ran["_got"]
                try:
                    exec(parts["judge"], judged)
                except AssertionError as error:
                    pytest.fail(f"{grade_id}, seed {seed}: the solution fails its hidden tests: {error}")
    finally:
        grading.use_hidden_seed(grading.FIXED_SEED)
